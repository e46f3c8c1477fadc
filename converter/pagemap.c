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

static int cmp_pg(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* dc_meta `catalogue_pages` (docs/format.md): {"schema_version": v, "runs": [[first, last], ...]},
** the pages a reader reads when it opens the dataset, at most DC_CATALOGUE_RUNS runs of them: every
** page of every table and index but the tiles table's (a tile's pages are its own, and the tile
** index is read from the covering index tiles_data_meta; walking the table would read every
** tile's pages again) and the obs blocks' overflow pages (their b-tree pages are in).  A remote
** reader asks for them all at once when it connects (one round trip, not one per b-tree it meets;
** deltacells.connect).  A hint, as the map: v is the schema_version it holds for. */
enum { DC_CATALOGUE_RUNS = 32 };
static int write_catalogue(sqlite3 *db, int64_t version, cv_err *e) {
  sqlite3_stmt *names = cv_prep(db, e, "SELECT name FROM main.sqlite_schema WHERE rootpage > 0");
  sqlite3_stmt *pg = names ? cv_prep(db, e, "SELECT pageno, pagetype FROM dbstat('main') WHERE name = ?1") : NULL;
  if (!pg) { sqlite3_finalize(names); return -1; }
  int64_t *pages = NULL, n = 0, cap = 0;
  int rc = 0;
  while (!rc && sqlite3_step(names) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(names, 0);
    if (!name || !strcmp(name, DC_TILES_DATA)) continue;
    int blocks = !strcmp(name, "cells_blocks");
    sqlite3_bind_text(pg, 1, name, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(pg) == SQLITE_ROW) {
      const char *type = (const char *)sqlite3_column_text(pg, 1);
      if (!type || (blocks && !strcmp(type, "overflow"))) continue;
      if (n == cap) {
        int64_t *x = realloc(pages, sizeof *pages * (size_t)(cap = cap ? 2 * cap : 256));
        if (!x) { rc = cv_fail(e, "out of memory"); break; }
        pages = x;
      }
      pages[n++] = sqlite3_column_int64(pg, 0);
    }
    sqlite3_reset(pg);
  }
  sqlite3_finalize(pg);
  sqlite3_finalize(names);
  if (rc) { free(pages); return rc; }
  /* runs of pages, then the nearest runs joined until at most DC_CATALOGUE_RUNS are left */
  if (n > 1) qsort(pages, (size_t)n, sizeof *pages, cmp_pg);
  int64_t (*run)[2] = n ? malloc(sizeof *run * (size_t)n) : NULL;
  int64_t nr = 0;
  if (n && !run) { free(pages); return cv_fail(e, "out of memory"); }
  for (int64_t i = 0; i < n; i++) {
    if (nr && pages[i] <= run[nr - 1][1] + 1) { if (pages[i] > run[nr - 1][1]) run[nr - 1][1] = pages[i]; }
    else { run[nr][0] = run[nr][1] = pages[i]; nr++; }
  }
  free(pages);
  while (nr > DC_CATALOGUE_RUNS) {
    int64_t best = 1;
    for (int64_t i = 2; i < nr; i++)
      if (run[i][0] - run[i - 1][1] < run[best][0] - run[best - 1][1]) best = i;
    run[best - 1][1] = run[best][1];
    memmove(run + best, run + best + 1, sizeof *run * (size_t)(nr - best - 1));
    nr--;
  }
  sqlite3_str *j = sqlite3_str_new(db);
  sqlite3_str_appendf(j, "{\"schema_version\": %lld, \"runs\": [", (long long)version);
  for (int64_t i = 0; i < nr; i++)
    sqlite3_str_appendf(j, "%s[%lld, %lld]", i ? ", " : "", (long long)run[i][0], (long long)run[i][1]);
  sqlite3_str_appendall(j, "]}");
  free(run);
  char *json = sqlite3_str_finish(j);
  if (!json) return cv_fail(e, "out of memory");
  sqlite3_stmt *ins = cv_prep(db, e, "INSERT OR REPLACE INTO main.dc_meta(key, value) VALUES('catalogue_pages', %Q)", json);
  sqlite3_free(json);
  if (!ins) return -1;
  int r = sqlite3_step(ins);
  sqlite3_finalize(ins);
  return r == SQLITE_DONE ? 0 : cv_sql_fail(db, e, "dc_meta catalogue_pages");
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
  if (r != SQLITE_DONE) return cv_sql_fail(db, e, "the page map");
  return write_catalogue(db, v, e);
}

int cv_pagemap_state(sqlite3 *db, int64_t *held) {
  *held = -1;
  if (cv_q_int(db, "SELECT count(*) FROM main.sqlite_schema WHERE type = 'table' AND name = '" DC_TILES_PAGES "'", 0) <= 0)
    return -1;
  *held = cv_q_int(db, "SELECT leaf FROM main." DC_TILES_PAGES " WHERE tile = -1", -1);
  return *held >= 0 && *held == cv_q_int(db, "PRAGMA main.schema_version", -2) ? 1 : 0;
}
