/*
** cells_vtab.h — what the two SQLite-glue files of the `cells` table share: the table and
** cursor objects and the calls between them.
**
**   ext/vtab_cells.c   the module: connect/destroy, xBestIndex, xFilter, xNext, xColumn,
**                      dc_cells_values (obs values for dc_batch)
**   ext/cells_store.c  the stored data: the obs statistics taken from the connection's dataset
**                      object (dc_obsstats.h, loaded by reader_obs.c), blocks read through blob
**                      handles, seal-checked, decoded, cached
**
** The logic both call is pure C (no SQLite): cells_plan.h, cells_filter.h, cells_ivl.h,
** cells_blocks.h, cells_cost.h.  Not a public header: only these two files include it.
*/
#ifndef CELLS_VTAB_H
#define CELLS_VTAB_H
#include "dc_ext.h"
#include <stdint.h>
#include "dc_obs.h"
#include "cells_plan.h"
#include "cells_filter.h"
#include "cells_blocks.h"
#include "cells_ivl.h"
#include "cells_cost.h"
#include "dc_obsstats.h"


#define COL_CELL_ID CELLS_COL_CELL_ID
#define COL_NAME CELLS_COL_NAME
#define COL_TILE CELLS_COL_TILE
#define COL_OBS0 CELLS_COL_OBS0

/* cells_val types are SQLite's own numbers */
_Static_assert(CELLS_V_INTEGER == SQLITE_INTEGER && CELLS_V_FLOAT == SQLITE_FLOAT && CELLS_V_TEXT == SQLITE_TEXT &&
               CELLS_V_BLOB == SQLITE_BLOB && CELLS_V_NULL == SQLITE_NULL, "cells_val types");

/* One declared column (k = 0 is the obs index): its name, col and kind are the table's
** schema (read at connect); its counts are those of the current obs statistics. */
typedef struct ocol {
  char *name;
  int64_t col;            /* cells_columns.col */
  int kind;               /* DC_OBS_* */
  uint32_t n_categories;
  int64_t null_count;
  int64_t bytes;
} ocol;

typedef struct cells_vtab {
  sqlite3_vtab base;
  dc_conn *conn;
  sqlite3 *db;
  char *zDb, *zName;
  char *zBlocks;          /* "<name>_blocks" */
  int n_ocol;
  ocol *oc;               /* [n_ocol] */
  /* A view of the connection's dataset object of zDb (reader.c, dc_reader.h): the tile index
  ** and the obs statistics (dc_obsstats.h), both loaded there once per data version; `cells`
  ** loads neither itself.  Valid while loaded (cells_load .. the next cells_refresh). */
  struct dc_reader *rd;
  int loaded;
  dc_obsstats *st;        /* the obs statistics of this table (rd's index owns them) */
  uint64_t st_gen;        /* st->gen */
  dc_obscol *cs;          /* st->col: counts and dictionaries of the columns */
  int sealed;             /* format version >= 3: rows carry seals (dc_seal.h) */
  uint64_t dataset_id;    /* the seals' key */
  int64_t n_cells;
  int64_t n_blocks;
  int64_t *blk_first;     /* [n_blocks + 1] */
  cells_bstat *bs;        /* [n_ocol * n_blocks], column major */
  int has_tiles;
  int64_t n_tiles;
  const int64_t *tile_first;  /* [n_tiles + 1]: the tiles' first cells */
  cells_bcache *cache;    /* decoded blocks (cells_blocks.h), st's */
  struct cells_vtab *next_tab;   /* the connection's list (dc_conn.cells_tabs) */
} cells_vtab;

typedef struct colcache {
  cells_dblock *d;        /* the block in use (a reference), or NULL */
} colcache;

typedef struct cells_cursor {
  sqlite3_vtab_cursor base;
  cells_term *terms; int nterms;
  cells_ivl *iv; int niv;
  int64_t limit, offset_left, emitted;
  int iv_pos;
  int64_t pos;            /* next cell to consider */
  int64_t blk;            /* block of the current selection */
  cells_sel sel;          /* the selected rows of block blk */
  uint32_t sel_pos;
  int eof;
  int64_t cell;
  int64_t tile_hint;
  colcache *cc;           /* [n_ocol] */
  uint64_t gen;           /* the obs statistics' gen its blocks in use (cc[k].d) are of */
  sqlite3_blob *blob;
} cells_cursor;


static inline int ocol_of(int col) {   /* schema column -> stored column index, or -1 */
  if (col == COL_NAME) return 0;
  if (col >= COL_OBS0) return col - COL_OBS0 + 1;
  return -1;
}

/* the DC_OBS_* kind of a schema column; 0 for cell_id and tile */
static inline int col_kind(const cells_vtab *p, int col) {
  int k = ocol_of(col);
  return k < 0 ? 0 : p->oc[k].kind;
}

static inline int col_is_text(const cells_vtab *p, int col) {
  int kind = col_kind(p, col);
  return kind == DC_OBS_CATEGORY || kind == DC_OBS_TEXT;
}

static inline const char *col_name(const cells_vtab *p, int col) {
  if (col == COL_CELL_ID) return "cell_id";
  if (col == COL_TILE) return "tile";
  if (col == COL_NAME) return "name";
  return p->oc[ocol_of(col)].name;
}

/* ------------------------------------------------- cells_store.c */

/* Whether table zDb.zTab exists. */
int cells_table_exists(sqlite3 *db, const char *zDb, const char *zTab);
/* Takes the tile index and the obs statistics from the connection's dataset object (loaded
** there once per data version) and checks the statistics' columns against the declared
** ones (once; again after the data changed). */
int cells_load(cells_vtab *p);
/* Inside a statement: takes the current ones again when the data changed since (a blocks in
** use of another load let go). */
int cells_refresh(cells_vtab *p, cells_cursor *c);
/* Loads and checks the dictionary of category column k (once per load of the statistics). */
int cells_dict_load(cells_vtab *p, int k);
/* Checks the seal of block b of column k before its statistics are trusted (reads the head
** of its blob through c's handle). */
int cells_block_seal_verify(cells_cursor *c, int k, int64_t b);
/* Block b of column k decoded, as c's block in use of that column (cached by the table). */
int cells_col_block(cells_cursor *c, int k, int64_t b, cells_dblock **out);

/* ------------------------------------------------- vtab_cells.c */
/* the module's xOpen and xClose (cells_values.c opens a cursor of its own) */
int cells_open(sqlite3_vtab *tab, sqlite3_vtab_cursor **pp);
int cells_close(sqlite3_vtab_cursor *cur);
#endif
