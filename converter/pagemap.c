/*
** pagemap.c — where each tile's pages lie in the file (DC_TILES_PAGES, dc_format.h): written by
** the commands that write tiles (convert, merge, append), read by the Python fetch-ahead of a
** remote dataset, which then asks the store for a tile's leaf page and overflow pages in one
** round trip instead of two (docs/format.md, tiles_data_pages).  A hint only: a reader that finds
** it missing or wrong reads the same bytes, with more requests.
*/
#include <stdlib.h>
#include <string.h>
#include "dc_format.h"
#include "inspect.h"        /* cv_q_int */
#include "merge_store.h"

typedef struct {
  int64_t leaf, first, last, pages;
} pm_row;

/* SQLite's dbstat table lists every page of tiles_data depth-first, in key order: each leaf page
** ("/ccc/": path, pageno, ncell), then each of its cells' overflow pages ("/ccc/kkk+nnnnnn": cell
** kkk of the leaf, in hex).  Row i of the table (in tile order) is cell i - (the cells of the
** leaves before) of its leaf. */
int cv_write_pagemap(sqlite3 *db, cv_err *e) {
  if (cv_exec(db, "DROP TABLE IF EXISTS main." DC_TILES_PAGES, e)) return -1;
  int64_t n = cv_q_int(db, "SELECT count(*) FROM main." DC_TILES_DATA, -1);
  if (n < 0) return cv_sql_fail(db, e, "the page map (" DC_TILES_DATA ")");
  if (n == 0) return 0;
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT path, pageno, pagetype, ncell FROM dbstat('main') WHERE name = '" DC_TILES_DATA "'",
                         -1, &st, NULL) != SQLITE_OK) {
    /* an SQLite built without dbstat (SQLITE_ENABLE_DBSTAT_VTAB): no map; the dataset reads the same */
    int none = strstr(sqlite3_errmsg(db), "no such table") != NULL;
    sqlite3_finalize(st);
    return none ? 0 : cv_sql_fail(db, e, "the page map (dbstat)");
  }
  pm_row *rows = cv_calloc((size_t)n, sizeof *rows, e);
  if (!rows) { sqlite3_finalize(st); return -1; }
  int64_t base = 0, leaf = 0, leaf_cells = 0, fail = 0;
  size_t leaf_len = 0;
  int r;
  while ((r = sqlite3_step(st)) == SQLITE_ROW) {
    const char *path = (const char *)sqlite3_column_text(st, 0), *type = (const char *)sqlite3_column_text(st, 2);
    int64_t pg = sqlite3_column_int64(st, 1);
    if (!path || !type) continue;
    if (!strcmp(type, "leaf")) {
      base += leaf_cells;
      leaf = pg;
      leaf_cells = sqlite3_column_int64(st, 3);
      leaf_len = strlen(path);
      for (int64_t k = base; k < base + leaf_cells && k < n; k++) rows[k].leaf = pg;
    } else if (!strcmp(type, "overflow") && leaf) {
      const char *plus = strchr(path, '+');
      if (!plus || (size_t)(plus - path) <= leaf_len) { fail = 1; break; }
      int64_t k = base + strtoll(path + leaf_len, NULL, 16);
      if (k < 0 || k >= n) { fail = 1; break; }
      pm_row *x = &rows[k];
      if (!x->pages || pg < x->first) x->first = pg;
      if (!x->pages || pg > x->last) x->last = pg;
      x->pages++;
    }
  }
  if (r != SQLITE_DONE && !fail) {
    sqlite3_finalize(st);
    free(rows);
    return cv_sql_fail(db, e, "the page map (dbstat)");
  }
  sqlite3_finalize(st);
  if (fail || base + leaf_cells != n) {   /* not the layout described above: no map rather than a wrong one */
    free(rows);
    return 0;
  }
  int rc = cv_exec(db, "CREATE TABLE main." DC_TILES_PAGES "(" DC_TILES_PAGES_COLUMNS ")", e);
  sqlite3_stmt *tiles = rc ? NULL : cv_prep(db, e, "SELECT tile FROM main." DC_TILES_DATA " ORDER BY tile");
  sqlite3_stmt *ins = tiles ? cv_prep(db, e, "INSERT INTO main." DC_TILES_PAGES " VALUES(?,?,?,?,?)") : NULL;
  if (!ins) rc = -1;
  for (int64_t k = 0; !rc && k < n; k++) {
    if (sqlite3_step(tiles) != SQLITE_ROW) { rc = cv_sql_fail(db, e, "the page map"); break; }
    sqlite3_bind_int64(ins, 1, sqlite3_column_int64(tiles, 0));
    sqlite3_bind_int64(ins, 2, rows[k].leaf);
    sqlite3_bind_int64(ins, 3, rows[k].first);
    sqlite3_bind_int64(ins, 4, rows[k].last);
    sqlite3_bind_int64(ins, 5, rows[k].pages);
    if (sqlite3_step(ins) != SQLITE_DONE) rc = cv_sql_fail(db, e, "the page map");
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  sqlite3_finalize(tiles);
  free(rows);
  return rc ? rc : cv_pagemap_still(db, e);
}

/* The map's row of tile -1 holds (as its leaf) the schema_version the map was written under: a
** VACUUM, which moves pages, or any schema change since, makes the two differ, and a reader then
** leaves the map unused.  A command that changes the schema without moving the tiles' pages
** (annotate, append's bump) says so here, after its last schema change. */
int cv_pagemap_still(sqlite3 *db, cv_err *e) {
  int64_t have = cv_q_int(db, "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '" DC_TILES_PAGES "'", -1);
  if (have < 0) return cv_sql_fail(db, e, "the page map (sqlite_schema)");
  if (!have) return 0;
  int64_t v = cv_q_int(db, "PRAGMA main.schema_version", -1);
  if (v < 0) return cv_sql_fail(db, e, "the page map (PRAGMA schema_version)");
  sqlite3_stmt *st = cv_prep(db, e, "INSERT OR REPLACE INTO main." DC_TILES_PAGES " VALUES(-1, %lld, 0, 0, 0)", (long long)v);
  if (!st) return -1;
  int r = sqlite3_step(st);
  sqlite3_finalize(st);
  return r == SQLITE_DONE ? 0 : cv_sql_fail(db, e, "the page map");
}

int cv_pagemap_state(sqlite3 *db, int64_t *held) {
  *held = -1;
  if (cv_q_int(db, "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '" DC_TILES_PAGES "'", 0) <= 0)
    return -1;
  *held = cv_q_int(db, "SELECT leaf FROM main." DC_TILES_PAGES " WHERE tile = -1", -1);
  return *held >= 0 && *held == cv_q_int(db, "PRAGMA main.schema_version", -2) ? 1 : 0;
}
