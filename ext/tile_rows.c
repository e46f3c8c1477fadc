/*
** tile_rows.c — the rows of tiles_data in tile order, each checked by tile_check.c's row rule
** (tile_rows.h): the tile index's one loader, for reader.c and `deltacells verify`.  SQLite
** glue, on the calling thread.
*/
#include <string.h>
#include "dc_ext.h"
#include "dc_format.h"
#include "tile_check.h"
#include "tile_rows.h"

int dc_tilerows_open(sqlite3 *db, const char *schema, int flags, dc_tilerows *it) {
  memset(it, 0, sizeof *it);
  it->flags = flags;
  /* the checksum only when asked: it follows the data blob in the row, and reading it walks
  ** every page of every tile (a remote dataset would fetch them all) */
  char *sql = sqlite3_mprintf("SELECT tile, first_cell, n_cells, nnz, chunks%s%s FROM \"%w\"." DC_TILES_DATA
                              "%s ORDER BY tile", flags & DC_ROWS_DATA ? ", data" : ", NULL",
                              flags & DC_ROWS_SEAL ? ", checksum" : "", schema,
                              flags & DC_ROWS_INDEXED ? " INDEXED BY \"" DC_TILES_INDEX "\"" : "");
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(db, sql, -1, &it->st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) { sqlite3_finalize(it->st); it->st = NULL; }
  return rc;
}

int dc_tilerows_next(dc_tilerows *it, dc_tilerow *row) {
  int rc = sqlite3_step(it->st);
  if (rc != SQLITE_ROW) return rc;
  sqlite3_stmt *st = it->st;
  memset(row, 0, sizeof *row);
  row->index = it->n++;
  row->expect_first = it->next_cell;
  row->tile = sqlite3_column_int64(st, 0);
  row->first_cell = sqlite3_column_int64(st, 1);
  row->n_cells = sqlite3_column_int64(st, 2);
  row->nnz = sqlite3_column_int64(st, 3);
  row->chunks = sqlite3_column_int64(st, 4);
  if (it->flags & DC_ROWS_DATA) {
    row->data = sqlite3_column_blob(st, 5);
    row->len = (size_t)sqlite3_column_bytes(st, 5);
  }
  if (it->flags & DC_ROWS_SEAL) {
    row->has_seal = sqlite3_column_type(st, 6) == SQLITE_INTEGER;
    row->seal = row->has_seal ? sqlite3_column_int64(st, 6) : 0;
  }
  /* 'x' in first_cell reads as 0 (tile 0's value), and the tiles table showed it as it is */
  row->typed = 1;
  for (int c = 0; c <= 4; c++) row->typed &= sqlite3_column_type(st, c) == SQLITE_INTEGER;
  row->ok = row->typed && dc_tilerow_ok(row->index, row->expect_first, row->tile, row->first_cell, row->n_cells, row->nnz,
                                   row->chunks);
  row->sizes_ok = row->ok || dc_tilerow_ok(row->tile, row->first_cell, row->tile, row->first_cell, row->n_cells,
                                           row->nnz, row->chunks);
  it->next_cell = row->first_cell + (row->n_cells > 0 ? row->n_cells : 0);
  return SQLITE_ROW;
}

void dc_tilerows_close(dc_tilerows *it) {
  sqlite3_finalize(it->st);
  it->st = NULL;
}
