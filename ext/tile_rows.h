/*
** tile_rows.h — reading the rows of tiles_data (ext/tile_rows.c): the one query of the tile
** index, in tile order, with tile_check.c's row rule applied to each row.  Used by reader.c
** (the dataset object's load) and by `deltacells verify` (converter/verify.c, which also asks
** for each blob and checksum), so the loading and the rules are written once; each caller
** words its own errors.  Plain <sqlite3.h> types: the converter includes it too.
*/
#ifndef TILE_ROWS_H
#define TILE_ROWS_H
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

#define DC_ROWS_DATA 1          /* also read each tile's blob */
#define DC_ROWS_SEAL 2          /* also read each row's checksum */
#define DC_ROWS_INDEXED 4       /* through the covering index DC_TILES_INDEX (dc_format.h): an error
                                   when it does not exist; with DC_ROWS_SEAL, no blob page is read */

typedef struct dc_tilerows {
  sqlite3_stmt *st;
  int flags;
  int64_t n;                    /* rows read so far */
  int64_t next_cell;            /* the cell the next row should start at */
} dc_tilerows;

typedef struct dc_tilerow {
  int64_t index;                /* its place in tile order: 0, 1, 2, ... */
  int64_t expect_first;         /* the cell it should start at (after the rows before it) */
  int64_t tile, first_cell, n_cells, nnz, chunks;
  int ok;                       /* dc_tilerow_ok: numbered and placed after the rows before it */
  int sizes_ok;                 /* its sizes alone are possible (dc_tilerow_ok of the row by itself) */
  int typed;                    /* tile, first_cell, n_cells, nnz and chunks are stored as integers */
  const uint8_t *data;          /* DC_ROWS_DATA: the blob, valid until the next row */
  size_t len;
  int has_seal;                 /* DC_ROWS_SEAL: the checksum is an integer */
  int64_t seal;
} dc_tilerow;

/* Prepares the query of schema's tiles_data (flags: DC_ROWS_*); an SQLite error code (the
** message in sqlite3_errmsg(db)) when the table cannot be read. */
int dc_tilerows_open(sqlite3 *db, const char *schema, int flags, dc_tilerows *it);
/* The next row: SQLITE_ROW with *row filled, SQLITE_DONE, or an SQLite error code.  The next
** row is expected to start where this one ends (where it says it starts, if it is not ok). */
int dc_tilerows_next(dc_tilerows *it, dc_tilerow *row);
void dc_tilerows_close(dc_tilerows *it);
#endif
