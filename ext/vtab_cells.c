/*
** vtab_cells.c — the `cells` virtual table: cell metadata (obs), stored by
** column in compressed blocks, queried with constraint pushdown.
**
**   CREATE VIRTUAL TABLE cells USING deltacells_cells;
**
** The dataset declares it (docs/format.md section 1); xCreate and xConnect
** attach to the shadow tables <name>_columns, <name>_dict and <name>_blocks of
** the virtual table's own schema (main or an ATTACHed dataset) and fail with
** a message naming the table if one is missing.  xShadowName lists their
** suffixes, so SQLITE_DBCONFIG_DEFENSIVE makes them read-only to SQL.  The
** `tile` column comes from tiles_data of the same schema (an error without it).
** xDestroy (DROP TABLE) drops the three shadow tables, as FTS5 does.
** Read-only, SQLITE_VTAB_INNOCUOUS (it reads only its own tables).
**
** Schema (columns in this order):
**   cell_id INTEGER   0-based, dense; also the rowid
**   name    TEXT      the obs index (cells_columns row '_index', col 0)
**   tile    INTEGER   the tile holding the cell
**   <obs>   one column per other cells_columns row, in col order, under its
**           own name: category TEXT, int INTEGER, real REAL, bool INTEGER
**           (0/1), text TEXT.  NULL where the stored value is NULL.
**
** Every query returns the rows a native table with the same declared types
** and data returns.  Affinity: a comparison of an INTEGER/REAL column with a
** value applies numeric affinity to the value whatever its own affinity, so
** constraints on numeric columns are evaluated exactly (omit = 1).  For a
** TEXT column the result depends on the affinity of the right-hand side
** (5 against a literal means '5'; against an INTEGER column it means 5),
** which xBestIndex cannot see, so a constraint on a TEXT column is exact
** (omit = 1) only when the answer is the same under every affinity:
** IS [NOT] NULL; = and IN on a category column whose dictionary has no value
** that could read as a number; or a right-hand side that is a literal TEXT,
** BLOB or NULL (sqlite3_vtab_rhs_value).  Otherwise it is a "prefilter": a
** superset of the rows under every affinity is returned and SQLite re-checks
** each (omit = 0).  Constraints with a collation other than BINARY on a TEXT
** column are left to SQLite.  Pruning of blocks by their stored min/max,
** present-codes bitmap and null count never decides a row by itself.
**
** Plan (idxNum, idxStr).  idxNum is the number of xFilter arguments; idxStr
** is printable and names the plan in words (EXPLAIN QUERY PLAN shows it), e.g.
** `#3 "cell_type" = ?1, #5 "n_genes" > ?2, LIMIT ?3`.  Its grammar, encoder and
** parser are in cells_plan.h.  "IN" takes its whole list through sqlite3_vtab_in
** (one xFilter call); "prefilter" marks a superset filter (omit = 0); IS [NOT]
** NULL get an argument only so that they can be omitted (its value is ignored).
** LIMIT and OFFSET are taken only when every other constraint is taken exactly
** and any ORDER BY is consumed.  "ORDER BY cell_id" records that the ORDER BY
** was consumed (rows come in increasing cell_id; an IN list on cell_id is
** sorted).  xFilter rejects an idxStr that does not follow the grammar.
**
** This file is the SQLite glue: metadata loading and validation, connect and
** destroy, reading and checking blobs, and the xBestIndex/xFilter/xNext/xColumn
** calls.  The logic it calls is pure C, unit-tested without SQLite
** (tests/c/test_cells_*.c): cells_plan.c (the plan), cells_filter.c (comparison
** semantics, block pruning, row kernels, value order), cells_ivl.c (cell
** intervals), cells_blocks.c (the decoded-block LRU cache), cells_cost.c (the
** cost model).
**
** Execution: the constraints on cell_id and tile become a sorted list of cell
** intervals; each block (obs_block_cells cells, the same boundaries for
** every column) meeting them is pruned by the stored statistics of the
** constrained columns, then the constrained columns are decoded and filtered
** into a selection of rows.  Other columns are decoded only when xColumn asks
** for them, so only columns the statement uses (colUsed) are ever read.
** Decoded blocks are kept in a cache of the table object (least recently
** used out, a quarter of dc_config('cache_mb'); reference counted, so a
** cursor's block survives eviction), so joins that re-filter a cursor and
** repeated queries skip decoding.  A block of an int or real column used by
** a range or = filter a second time gets its value order (offsets sorted by
** value, cached with it): a selective comparison then costs two binary
** searches instead of a scan.  Blocks are read with one sqlite3_blob handle
** per cursor, moved with sqlite3_blob_reopen.
**
** Bad stored data gives SQLITE_CORRUPT_VTAB with a message naming the column
** and the block ("cells: column 'age' block 3: obs block: checksum mismatch").
*/
#include "dc_ext.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dc_obs.h"
#include "dc_reader.h"
#include "dc_seal.h"
#include "cells_plan.h"
#include "cells_filter.h"
#include "cells_blocks.h"
#include "cells_ivl.h"
#include "cells_cost.h"

/* ------------------------------------------------------------------ types */

#define COL_CELL_ID CELLS_COL_CELL_ID
#define COL_NAME CELLS_COL_NAME
#define COL_TILE CELLS_COL_TILE
#define COL_OBS0 CELLS_COL_OBS0

/* cells_val types are SQLite's own numbers */
_Static_assert(CELLS_V_INTEGER == SQLITE_INTEGER && CELLS_V_FLOAT == SQLITE_FLOAT && CELLS_V_TEXT == SQLITE_TEXT &&
               CELLS_V_BLOB == SQLITE_BLOB && CELLS_V_NULL == SQLITE_NULL, "cells_val types");

/* One stored column (k = 0 is the obs index). */
typedef struct ocol {
  char *name;
  int64_t col;            /* cells_columns.col */
  int kind;               /* DC_OBS_* */
  uint32_t n_categories;
  int64_t null_count;
  int64_t bytes;
  /* category dictionary, loaded on first use (dict.buf and dict.off sqlite3_malloc'd) */
  int dict_loaded;
  cells_dict dict;
  int dict_numeric;       /* some value could read as a number */
} ocol;

typedef struct cells_vtab {
  sqlite3_vtab base;
  dc_conn *conn;
  sqlite3 *db;
  char *zDb, *zName;
  char *zBlocks;          /* "<name>_blocks" */
  int n_ocol;
  ocol *oc;               /* [n_ocol] */
  int loaded;
  unsigned int data_version;  /* SQLITE_FCNTL_DATA_VERSION of zDb when loaded */
  int sealed;             /* format version >= 3: rows carry seals (dc_seal.h) */
  uint64_t dataset_id;    /* the seals' key */
  int64_t n_cells;
  int64_t n_blocks;
  int64_t *blk_first;     /* [n_blocks + 1] */
  cells_bstat *bs;        /* [n_ocol * n_blocks], column major */
  int has_tiles;
  int64_t n_tiles;
  int64_t *tile_first;    /* [n_tiles + 1] */
  cells_bcache cache;     /* decoded blocks (cells_blocks.h) */
  struct cells_vtab *next_tab;   /* the connection's list (dc_conn.cells_tabs) */
} cells_vtab;

typedef struct colcache {
  dc_obs_decoder *dec;    /* scratch of this cursor's decodes */
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
  sqlite3_blob *blob;
  uint8_t *buf; size_t buf_cap;
} cells_cursor;

/* --------------------------------------------------------------- helpers */

static int set_err(sqlite3_vtab *tab, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  sqlite3_free(tab->zErrMsg);
  tab->zErrMsg = m;
  return m ? rc : SQLITE_NOMEM;
}

static int ocol_of(int col) {   /* schema column -> stored column index, or -1 */
  if (col == COL_NAME) return 0;
  if (col >= COL_OBS0) return col - COL_OBS0 + 1;
  return -1;
}

/* the DC_OBS_* kind of a schema column; 0 for cell_id and tile */
static int col_kind(const cells_vtab *p, int col) {
  int k = ocol_of(col);
  return k < 0 ? 0 : p->oc[k].kind;
}

static int col_is_text(const cells_vtab *p, int col) {
  int kind = col_kind(p, col);
  return kind == DC_OBS_CATEGORY || kind == DC_OBS_TEXT;
}

static const char *col_name(const cells_vtab *p, int col) {
  if (col == COL_CELL_ID) return "cell_id";
  if (col == COL_TILE) return "tile";
  if (col == COL_NAME) return "name";
  return p->oc[ocol_of(col)].name;
}
static const char *plan_col_name(void *ctx, int col) { return col_name((const cells_vtab *)ctx, col); }

/* Copies an argument value: numeric affinity for numeric columns (SQLite's own), the text
** form for TEXT columns.  out->s is malloc'd (cells_term_clear frees it). */
static int cval_set(cells_val *out, sqlite3_value *in, int text_col) {
  memset(out, 0, sizeof *out);
  sqlite3_value *d = sqlite3_value_dup(in);
  if (!d) return SQLITE_NOMEM;
  int rc = SQLITE_OK;
  int t = text_col ? sqlite3_value_type(d) : sqlite3_value_numeric_type(d);
  out->t = t;
  if (t == SQLITE_INTEGER) out->i = sqlite3_value_int64(d);
  else if (t == SQLITE_FLOAT) out->f = sqlite3_value_double(d);
  if (t == SQLITE_TEXT || t == SQLITE_BLOB || (text_col && t != SQLITE_NULL)) {
    const void *z = t == SQLITE_BLOB ? sqlite3_value_blob(d) : (const void *)sqlite3_value_text(d);
    int n = sqlite3_value_bytes(d);
    out->s = malloc((size_t)n + 1);
    if (!out->s) rc = SQLITE_NOMEM;
    else {
      if (n) memcpy(out->s, z, (size_t)n);
      out->s[n] = 0;
      out->n = n;
    }
  }
  sqlite3_value_free(d);
  return rc;
}

/* ------------------------------------------------------- metadata loading */

static void vtab_free(cells_vtab *p) {
  if (!p) return;
  if (p->conn) {   /* off the connection's list */
    for (cells_vtab **q = (cells_vtab **)&p->conn->cells_tabs; *q; q = &(*q)->next_tab)
      if (*q == p) { *q = p->next_tab; break; }
  }
  cells_bcache_clear(&p->cache);   /* no cursor is open: frees every block */
  for (int k = 0; k < p->n_ocol; k++) {
    sqlite3_free(p->oc[k].name);
    sqlite3_free((char *)p->oc[k].dict.buf);
    sqlite3_free((uint32_t *)p->oc[k].dict.off);
  }
  if (p->bs) {
    for (int64_t i = 0; i < (int64_t)p->n_ocol * p->n_blocks; i++) {
      sqlite3_free(p->bs[i].mn.s);
      sqlite3_free(p->bs[i].mx.s);
      sqlite3_free(p->bs[i].present);
    }
  }
  sqlite3_free(p->bs);
  sqlite3_free(p->oc);
  sqlite3_free(p->blk_first);
  sqlite3_free(p->tile_first);
  sqlite3_free(p->zDb);
  sqlite3_free(p->zName);
  sqlite3_free(p->zBlocks);
  sqlite3_free(p);
}

static int table_exists(sqlite3 *db, const char *zDb, const char *zTab) {
  return sqlite3_table_column_metadata(db, zDb, zTab, NULL, NULL, NULL, NULL, NULL, NULL) == SQLITE_OK;
}

static int mm_read(sqlite3_stmt *st, int i, int kind, cells_mm *out, int *is_null) {
  memset(out, 0, sizeof *out);
  int t = sqlite3_column_type(st, i);
  *is_null = t == SQLITE_NULL;
  if (t == SQLITE_NULL) return SQLITE_OK;
  if (kind == DC_OBS_TEXT) {
    if (t != SQLITE_TEXT) return SQLITE_CORRUPT_VTAB;
    const unsigned char *z = sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    out->s = sqlite3_malloc64((sqlite3_uint64)n + 1);
    if (!out->s) return SQLITE_NOMEM;
    if (n) memcpy(out->s, z, (size_t)n);
    out->s[n] = 0;
    out->n = n;
    return SQLITE_OK;
  }
  if (t == SQLITE_INTEGER) { out->i = sqlite3_column_int64(st, i); out->f = (double)out->i; return SQLITE_OK; }
  if (t == SQLITE_FLOAT && kind == DC_OBS_REAL) {
    out->real = 1;
    out->f = sqlite3_column_double(st, i);
    if (isnan(out->f)) return SQLITE_CORRUPT_VTAB;
    return SQLITE_OK;
  }
  return SQLITE_CORRUPT_VTAB;
}

/* Frees what cells_load loaded besides the block cache and dictionaries: the blocks'
** statistics and boundaries and the tiles' first cells. */
static void stats_free(cells_vtab *p) {
  if (p->bs) {
    for (int64_t i = 0; i < (int64_t)p->n_ocol * p->n_blocks; i++) {
      sqlite3_free(p->bs[i].mn.s); sqlite3_free(p->bs[i].mx.s); sqlite3_free(p->bs[i].present);
    }
  }
  sqlite3_free(p->bs); p->bs = NULL;
  sqlite3_free(p->blk_first); p->blk_first = NULL;
  sqlite3_free(p->tile_first); p->tile_first = NULL;
  p->n_blocks = 0; p->n_tiles = 0; p->has_tiles = 0;
}

/* Loads the blocks' statistics and the tiles (once per table object). */
static int cells_load(cells_vtab *p) {
  if (p->loaded) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  char *sql = NULL;
  int rc = SQLITE_OK;
  int64_t nb = -1;
  if (p->n_ocol == 0 || p->oc[0].col != 0 || strcmp(p->oc[0].name, "_index") != 0 || p->oc[0].kind != DC_OBS_TEXT) {
    rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: %s_columns has no text column '_index' as col 0", p->zName);
    goto done;
  }
  /* the columns' counts, which change when cells are added (the columns themselves are the
  ** table's declared schema: a different set needs a new connection) */
  sql = sqlite3_mprintf("SELECT col, name, kind, n_categories, null_count, bytes FROM \"%w\".\"%w_columns\" ORDER BY col",
                        p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  {
    int k = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      const char *nm = (const char *)sqlite3_column_text(st, 1);
      int kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
      int64_t ncat = sqlite3_column_int64(st, 3);
      if (k >= p->n_ocol || sqlite3_column_int64(st, 0) != p->oc[k].col || !nm || strcmp(nm, p->oc[k].name) != 0 ||
          kind != p->oc[k].kind) {
        k = -1;
        break;
      }
      if (kind == DC_OBS_CATEGORY) {
        if (ncat < 0 || ncat > (int64_t)DC_OBS_MAX_CATEGORIES) {
          rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' has %lld categories", nm, (long long)ncat);
          goto done;
        }
        p->oc[k].n_categories = (uint32_t)ncat;
      }
      p->oc[k].null_count = sqlite3_column_int64(st, 4);
      p->oc[k].bytes = sqlite3_column_int64(st, 5);
      k++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
    if (k != p->n_ocol) {
      rc = set_err(&p->base, SQLITE_SCHEMA, "cells: the obs columns of %s.%s changed since this connection opened it: "
                   "open the dataset again", p->zDb, p->zName);
      goto done;
    }
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  st = NULL;
  sqlite3_free(sql);
  /* blocks per column: all columns have the same count and boundaries */
  sql = sqlite3_mprintf("SELECT col, count(*) FROM \"%w\".\"%w_blocks\" GROUP BY col", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  int ncol_seen = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t col = sqlite3_column_int64(st, 0), cnt = sqlite3_column_int64(st, 1);
    int found = 0;
    for (int k = 0; k < p->n_ocol; k++) if (p->oc[k].col == col) found = 1;
    if (!found) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: %s_blocks has blocks of column %lld, which %s_columns lacks",
                   p->zName, (long long)col, p->zName);
      goto done;
    }
    if (nb >= 0 && cnt != nb) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: columns have different numbers of blocks (%lld and %lld)",
                   (long long)nb, (long long)cnt);
      goto done;
    }
    nb = cnt;
    ncol_seen++;
  }
  if (rc != SQLITE_DONE) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  if (nb < 0) nb = 0;
  if (nb > 0 && ncol_seen != p->n_ocol) {
    rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: %d of the %d columns have no blocks", p->n_ocol - ncol_seen, p->n_ocol);
    goto done;
  }
  if (nb > ((int64_t)1 << 32)) { rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: %lld blocks", (long long)nb); goto done; }
  p->n_blocks = nb;
  p->blk_first = sqlite3_malloc64((sqlite3_uint64)(nb + 1) * sizeof(int64_t));
  p->bs = sqlite3_malloc64((sqlite3_uint64)(nb ? nb : 1) * (sqlite3_uint64)p->n_ocol * sizeof(cells_bstat));
  if (!p->blk_first || !p->bs) { rc = SQLITE_NOMEM; goto done; }
  memset(p->bs, 0, (size_t)(nb ? nb : 1) * (size_t)p->n_ocol * sizeof(cells_bstat));
  p->blk_first[0] = 0;

  {
    char *msg = NULL;
    rc = dc_dataset_seal(p->db, p->zDb, "cells", &p->sealed, &p->dataset_id, &msg);
    if (rc) {
      rc = set_err(&p->base, rc, "%s", msg ? msg : "cells: cannot read dc_meta");
      sqlite3_free(msg);
      goto done;
    }
  }
  /* not the checksum: it follows the data blob in the row, and reading it would read every
  ** column's data (a remote dataset would fetch all of them); block_seal_check reads it */
  sql = sqlite3_mprintf("SELECT id, col, block, first_cell, n_cells, null_count, min, max, present "
                        "FROM \"%w\".\"%w_blocks\" ORDER BY col, block", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  int k = -1;
  int64_t b = 0, cur_col = -1;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(st, 0), col = sqlite3_column_int64(st, 1);
    int64_t blk = sqlite3_column_int64(st, 2), first = sqlite3_column_int64(st, 3);
    int64_t n = sqlite3_column_int64(st, 4), nulls = sqlite3_column_int64(st, 5);
    if (col != cur_col) {
      k = -1;
      for (int j = 0; j < p->n_ocol; j++) if (p->oc[j].col == col) k = j;
      cur_col = col;
      b = 0;
    }
    const char *cname = k >= 0 ? p->oc[k].name : "?";
    if (k < 0 || blk != b || b >= nb) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s': block %lld is out of sequence", cname, (long long)blk);
      goto done;
    }
    if (id != (int64_t)((uint64_t)col << 32 | (uint64_t)blk) || col < 0 || col > 0x7fffffff) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: id %lld is not col*2^32+block",
                   cname, (long long)blk, (long long)id);
      goto done;
    }
    if (n <= 0 || n > (int64_t)DC_OBS_MAX_N || nulls < 0 || nulls > n) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: bad n_cells %lld or null_count %lld",
                   cname, (long long)blk, (long long)n, (long long)nulls);
      goto done;
    }
    if (k == 0) {
      if (first != p->blk_first[b]) {
        rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: first_cell %lld where %lld is expected",
                     cname, (long long)blk, (long long)first, (long long)p->blk_first[b]);
        goto done;
      }
      p->blk_first[b + 1] = first + n;
    } else if (first != p->blk_first[b] || first + n != p->blk_first[b + 1]) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: cells %lld..%lld differ from column '_index'",
                   cname, (long long)blk, (long long)first, (long long)(first + n));
      goto done;
    }
    cells_bstat *s = &p->bs[(int64_t)k * nb + b];
    s->null_count = nulls;
    int mn_null, mx_null;
    int kind = p->oc[k].kind;
    int r1 = mm_read(st, 6, kind, &s->mn, &mn_null);
    int r2 = mm_read(st, 7, kind, &s->mx, &mx_null);
    if (r1 == SQLITE_NOMEM || r2 == SQLITE_NOMEM) { rc = SQLITE_NOMEM; goto done; }
    if (r1 || r2 || mn_null != mx_null || mn_null != (nulls == n)) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: bad min/max", cname, (long long)blk);
      goto done;
    }
    s->has = !mn_null;
    if (kind == DC_OBS_CATEGORY && s->has) {
      if (s->mn.real || s->mx.real || s->mn.i < 0 || s->mx.i < s->mn.i || s->mx.i >= (int64_t)p->oc[k].n_categories) {
        rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: min/max codes out of range", cname, (long long)blk);
        goto done;
      }
      if (sqlite3_column_type(st, 8) == SQLITE_BLOB) {
        int pl = sqlite3_column_bytes(st, 8);
        if (pl > ((int64_t)p->oc[k].n_categories + 7) / 8) {
          rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: present bitmap too long", cname, (long long)blk);
          goto done;
        }
        s->present = sqlite3_malloc(pl > 0 ? pl : 1);
        if (!s->present) { rc = SQLITE_NOMEM; goto done; }
        if (pl) memcpy(s->present, sqlite3_column_blob(st, 8), (size_t)pl);
        s->present_len = pl;
      }
    }
    if (!s->present && sqlite3_column_type(st, 8) != SQLITE_NULL) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: a present bitmap where none belongs "
                   "(only a category block with values has one)", cname, (long long)blk);
      goto done;
    }
    b++;
  }
  if (rc != SQLITE_DONE) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  rc = SQLITE_OK;
  sqlite3_finalize(st); st = NULL;
  sqlite3_free(sql); sql = NULL;
  p->n_cells = p->blk_first[nb];

  /* tiles: a dataset without them has lost its count matrix (a `tile` of NULL
  ** would hide that) */
  if (!table_exists(p->db, p->zDb, "tiles_data")) {
    rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: table %s.tiles_data is missing (dropped?): the dataset has lost "
                 "its count matrix", p->zDb);
    goto done;
  }
  {
    sql = sqlite3_mprintf("SELECT tile, first_cell, n_cells FROM \"%w\".tiles_data ORDER BY tile", p->zDb);
    if (!sql) { rc = SQLITE_NOMEM; goto done; }
    rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
    if (rc) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
    int64_t cap = 64, nt = 0;
    p->tile_first = sqlite3_malloc64((sqlite3_uint64)cap * sizeof(int64_t));
    if (!p->tile_first) { rc = SQLITE_NOMEM; goto done; }
    p->tile_first[0] = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      int64_t t = sqlite3_column_int64(st, 0), first = sqlite3_column_int64(st, 1), n = sqlite3_column_int64(st, 2);
      if (t != nt || first != p->tile_first[nt] || n < 0 || first + n > p->n_cells) {
        rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: tile %lld covers cells %lld..%lld, out of sequence",
                     (long long)t, (long long)first, (long long)(first + n));
        goto done;
      }
      if (nt + 2 > cap) {
        cap *= 2;
        int64_t *q = sqlite3_realloc64(p->tile_first, (sqlite3_uint64)cap * sizeof(int64_t));
        if (!q) { rc = SQLITE_NOMEM; goto done; }
        p->tile_first = q;
      }
      p->tile_first[++nt] = first + n;
    }
    if (rc != SQLITE_DONE) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
    rc = SQLITE_OK;
    if (p->tile_first[nt] != p->n_cells) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: tiles cover %lld cells, the obs columns %lld",
                   (long long)p->tile_first[nt], (long long)p->n_cells);
      goto done;
    }
    p->n_tiles = nt;
    p->has_tiles = 1;
  }
  if (cells_bcache_init(&p->cache, p->n_ocol, nb)) { rc = SQLITE_NOMEM; goto done; }
  p->loaded = 1;
done:
  sqlite3_finalize(st);
  sqlite3_free(sql);
  if (rc && !p->loaded) stats_free(p);   /* leave nothing half loaded */
  return rc;
}

/* Loads the dictionary of category column k. */
static int dict_load(cells_vtab *p, int k) {
  ocol *c = &p->oc[k];
  if (c->dict_loaded) return SQLITE_OK;
  sqlite3_stmt *st = NULL;
  int rc;
  uint64_t cap = 1024, used = 0;
  char *buf = NULL;
  uint32_t *off = NULL;
  if (!p->loaded) return SQLITE_ERROR;   /* cells_load first: it knows whether the data is sealed */
  int64_t want_seal = 0;
  if (p->sealed) {
    char *q = sqlite3_mprintf("SELECT checksum FROM \"%w\".\"%w_columns\" WHERE col = ?1", p->zDb, p->zName);
    if (!q) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v2(p->db, q, -1, &st, NULL);
    sqlite3_free(q);
    if (rc) return set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db));
    sqlite3_bind_int64(st, 1, c->col);
    rc = sqlite3_step(st);
    int ok = rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER;
    if (ok) want_seal = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (!ok) return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s': %s_columns has no checksum (an integer) for it",
                            c->name, p->zName);
  }
  dc_seal ds = {NULL};
  dc_blockplace dpl = {"cells", c->col, c->name, c->kind, (int64_t)c->n_categories, 0, 0, 0, 0};
  if (p->sealed && dc_seal_dict_begin(&ds, p->dataset_id, &dpl)) return SQLITE_NOMEM;
  char *sql = sqlite3_mprintf("SELECT code, value FROM \"%w\".\"%w_dict\" WHERE col = ?1 ORDER BY code", p->zDb, p->zName);
  if (!sql) { rc = SQLITE_NOMEM; goto done; }
  rc = sqlite3_prepare_v2(p->db, sql, -1, &st, NULL);
  if (rc) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  sqlite3_bind_int64(st, 1, c->col);
  buf = sqlite3_malloc64(cap);
  off = sqlite3_malloc64(((sqlite3_uint64)c->n_categories + 1) * sizeof *off);
  if (!buf || !off) { rc = SQLITE_NOMEM; goto done; }
  off[0] = 0;
  uint32_t code = 0;
  int numeric = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_int64(st, 0) != (int64_t)code || code >= c->n_categories) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: dictionary of column '%s': code %lld where %u is expected (of %u)",
                   c->name, (long long)sqlite3_column_int64(st, 0), code, c->n_categories);
      goto done;
    }
    const unsigned char *z = sqlite3_column_text(st, 1);
    int n = sqlite3_column_bytes(st, 1);
    if (!z && sqlite3_column_type(st, 1) != SQLITE_NULL) { rc = SQLITE_NOMEM; goto done; }
    if (used + (uint64_t)n + 1 > cap) {
      while (used + (uint64_t)n + 1 > cap) cap *= 2;
      if (cap > 0xffffffffu) { rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: dictionary of column '%s' is over 4 GiB", c->name); goto done; }
      char *q = sqlite3_realloc64(buf, cap);
      if (!q) { rc = SQLITE_NOMEM; goto done; }
      buf = q;
    }
    if (n) memcpy(buf + used, z, (size_t)n);
    if (p->sealed) dc_seal_bytes(&ds, z, (size_t)n);
    if (cells_maybe_numeric((const char *)z, n)) numeric = 1;
    used += (uint64_t)n;
    buf[used] = 0;   /* a terminator past each value (not counted) */
    off[++code] = (uint32_t)used;
    used++;
    off[code] = (uint32_t)(used - 1);
  }
  if (rc != SQLITE_DONE) { rc = set_err(&p->base, rc, "cells: %s", sqlite3_errmsg(p->db)); goto done; }
  if (code != c->n_categories) {
    rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: dictionary of column '%s' has %u of its %u values", c->name, code, c->n_categories);
    goto done;
  }
  rc = SQLITE_OK;
  if (p->sealed) {
    int64_t got = 0;
    if (dc_seal_end(&ds, &got)) { rc = SQLITE_NOMEM; goto done; }
    if (got != want_seal) {
      rc = set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s': checksum mismatch: its dictionary (%u values in "
                   "%s_dict) or its %s_columns row was changed", c->name, c->n_categories, p->zName, p->zName);
      goto done;
    }
  }
  c->dict.n = c->n_categories;
  c->dict.buf = buf;
  c->dict.off = off;
  c->dict_numeric = numeric;
  c->dict_loaded = 1;
  buf = NULL;
  off = NULL;
done:
  if (ds.st) { int64_t unused; dc_seal_end(&ds, &unused); }
  sqlite3_finalize(st);
  sqlite3_free(sql);
  sqlite3_free(buf);
  sqlite3_free(off);
  return rc;
}


/* ---------------------------------------------------- create / connect */

static const char *kind_sql_type(int kind) {
  switch (kind) {
    case DC_OBS_INT: case DC_OBS_BOOL: return "INTEGER";
    case DC_OBS_REAL: return "REAL";
    default: return "TEXT";
  }
}

static int cellsConnect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ppVtab, char **pzErr) {
  cells_vtab *p = NULL;
  sqlite3_stmt *st = NULL;
  sqlite3_str *decl = NULL;
  char *sql = NULL, *zCols = NULL;
  int rc = SQLITE_OK;
  *ppVtab = NULL;
  if (argc > 3) {
    *pzErr = sqlite3_mprintf("deltacells_cells takes no arguments");
    return SQLITE_ERROR;
  }
  const char *zDb = argv[1], *zName = argv[2];
  static const char *const sfx[] = {"columns", "dict", "blocks"};
  for (int i = 0; i < 3; i++) {
    char *t = sqlite3_mprintf("%s_%s", zName, sfx[i]);
    if (!t) return SQLITE_NOMEM;
    int ok = table_exists(db, zDb, t);
    if (!ok) *pzErr = sqlite3_mprintf("cells: table %s.%s is missing: not a deltacells dataset (or written by an older version)", zDb, t);
    sqlite3_free(t);
    if (!ok) return SQLITE_ERROR;
  }
  p = sqlite3_malloc(sizeof *p);
  if (!p) return SQLITE_NOMEM;
  memset(p, 0, sizeof *p);
  p->db = db;
  p->conn = (dc_conn *)aux;
  p->zDb = sqlite3_mprintf("%s", zDb);
  p->zName = sqlite3_mprintf("%s", zName);
  p->zBlocks = sqlite3_mprintf("%s_blocks", zName);
  if (!p->zDb || !p->zName || !p->zBlocks) { rc = SQLITE_NOMEM; goto fail; }

  sql = sqlite3_mprintf("SELECT col, name, kind, n_categories, null_count, bytes FROM \"%w\".\"%w_columns\" ORDER BY col", zDb, zName);
  if (!sql) { rc = SQLITE_NOMEM; goto fail; }
  rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
  if (rc) { *pzErr = sqlite3_mprintf("cells: %s", sqlite3_errmsg(db)); goto fail; }
  int cap = 16;
  p->oc = sqlite3_malloc64((sqlite3_uint64)cap * sizeof(ocol));
  if (!p->oc) { rc = SQLITE_NOMEM; goto fail; }
  decl = sqlite3_str_new(db);
  sqlite3_str_appendall(decl, "CREATE TABLE x(cell_id INTEGER, name TEXT, tile INTEGER");
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (p->n_ocol == cap) {
      cap *= 2;
      ocol *q = sqlite3_realloc64(p->oc, (sqlite3_uint64)cap * sizeof(ocol));
      if (!q) { rc = SQLITE_NOMEM; goto fail; }
      p->oc = q;
    }
    ocol *c = &p->oc[p->n_ocol];
    memset(c, 0, sizeof *c);
    c->col = sqlite3_column_int64(st, 0);
    const char *nm = (const char *)sqlite3_column_text(st, 1);
    const char *kd = (const char *)sqlite3_column_text(st, 2);
    c->kind = dc_obs_kind_from_name(kd);
    int64_t ncat = sqlite3_column_int64(st, 3);
    c->null_count = sqlite3_column_int64(st, 4);
    c->bytes = sqlite3_column_int64(st, 5);
    c->name = sqlite3_mprintf("%s", nm ? nm : "");
    if (!c->name) { rc = SQLITE_NOMEM; goto fail; }
    p->n_ocol++;
    if (!nm || !c->kind) {
      *pzErr = sqlite3_mprintf("cells: %s_columns: column %lld has kind '%s', not category, int, real, bool or text",
                               zName, (long long)c->col, kd ? kd : "NULL");
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
    if (c->kind == DC_OBS_CATEGORY) {
      if (ncat < 0 || ncat > (int64_t)DC_OBS_MAX_CATEGORIES) {
        *pzErr = sqlite3_mprintf("cells: column '%s' has %lld categories", c->name, (long long)ncat);
        rc = SQLITE_CORRUPT_VTAB;
        goto fail;
      }
      c->n_categories = (uint32_t)ncat;
    }
    if (p->n_ocol == 1) continue;   /* col 0, '_index', is `name` */
    if (!sqlite3_stricmp(nm, "cell_id") || !sqlite3_stricmp(nm, "name") || !sqlite3_stricmp(nm, "tile")) {
      *pzErr = sqlite3_mprintf("cells: obs column '%s' clashes with a built-in column of the cells table", nm);
      rc = SQLITE_ERROR;
      goto fail;
    }
    sqlite3_str_appendf(decl, ", \"%w\" %s", nm, kind_sql_type(c->kind));
  }
  if (rc != SQLITE_DONE) { *pzErr = sqlite3_mprintf("cells: %s", sqlite3_errmsg(db)); goto fail; }
  sqlite3_str_appendall(decl, ")");
  zCols = sqlite3_str_finish(decl);
  decl = NULL;
  if (!zCols) { rc = SQLITE_NOMEM; goto fail; }
  rc = sqlite3_declare_vtab(db, zCols);
  if (rc) { *pzErr = sqlite3_mprintf("cells: cannot declare the columns (%s): %s", sqlite3_errmsg(db), zCols); goto fail; }
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  sqlite3_finalize(st);
  sqlite3_free(sql);
  sqlite3_free(zCols);
  if (p->conn) { p->next_tab = p->conn->cells_tabs; p->conn->cells_tabs = p; }
  *ppVtab = &p->base;
  return SQLITE_OK;
fail:
  sqlite3_finalize(st);
  sqlite3_free(sql);
  sqlite3_free(zCols);
  if (decl) sqlite3_free(sqlite3_str_finish(decl));
  vtab_free(p);
  return rc == SQLITE_OK ? SQLITE_ERROR : rc;
}

static int cellsDisconnect(sqlite3_vtab *tab) {
  vtab_free((cells_vtab *)tab);
  return SQLITE_OK;
}

static int cellsDestroy(sqlite3_vtab *tab) {
  cells_vtab *p = (cells_vtab *)tab;
  int refused = dc_drop_check(p->conn, p->zDb, p->zName);
  if (refused) return refused;
  char *sql = sqlite3_mprintf("DROP TABLE IF EXISTS \"%w\".\"%w_blocks\";"
                              "DROP TABLE IF EXISTS \"%w\".\"%w_dict\";"
                              "DROP TABLE IF EXISTS \"%w\".\"%w_columns\";",
                              p->zDb, p->zName, p->zDb, p->zName, p->zDb, p->zName);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_exec(p->db, sql, NULL, NULL, NULL);
  sqlite3_free(sql);
  if (rc == SQLITE_OK) vtab_free(p);
  return rc;
}

static int cellsShadowName(const char *zName) {
  return !sqlite3_stricmp(zName, "columns") || !sqlite3_stricmp(zName, "dict") || !sqlite3_stricmp(zName, "blocks");
}

/* ------------------------------------------------------------ best index */

/* Plans the query: each usable term becomes a plan item (cells_plan.h), its estimate is
** added to the cost model (cells_cost.h). */
static int cellsBestIndex(sqlite3_vtab *tab, sqlite3_index_info *info) {
  cells_vtab *p = (cells_vtab *)tab;
  /* bad metadata is reported by xOpen as SQLITE_CORRUPT (an error here would
  ** reach the user as a plain SQLITE_ERROR); plan without statistics */
  int rc = cells_load(p);
  if (rc == SQLITE_NOMEM) return rc;
  if (rc) { sqlite3_free(tab->zErrMsg); tab->zErrMsg = NULL; }
  cells_plan_item items[CELLS_MAX_ARGS + 1];
  int n_items = 0, nargs = 0, all_exact = 1, unused = 0;
  int i_limit = -1, i_offset = -1;
  cells_est_table tb = {p->loaded ? (double)p->n_cells : 1e6, p->n_blocks, p->blk_first, p->n_tiles, p->has_tiles};
  cells_est est;
  cells_est_init(&est, &tb);
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT) { if (c->usable) i_limit = i; continue; }
    if (c->op == SQLITE_INDEX_CONSTRAINT_OFFSET) { if (c->usable) i_offset = i; continue; }
    int op = 0;
    switch (c->op) {
      case SQLITE_INDEX_CONSTRAINT_EQ: op = CELLS_OP_EQ; break;
      case SQLITE_INDEX_CONSTRAINT_LT: op = CELLS_OP_LT; break;
      case SQLITE_INDEX_CONSTRAINT_LE: op = CELLS_OP_LE; break;
      case SQLITE_INDEX_CONSTRAINT_GT: op = CELLS_OP_GT; break;
      case SQLITE_INDEX_CONSTRAINT_GE: op = CELLS_OP_GE; break;
      case SQLITE_INDEX_CONSTRAINT_ISNULL: op = CELLS_OP_ISNULL; break;
      case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: op = CELLS_OP_NOTNULL; break;
    }
    /* past CELLS_MAX_TERMS, SQLite checks the rest of the terms itself */
    if (!op || !c->usable || nargs >= CELLS_MAX_TERMS) { unused = 1; continue; }
    int col = c->iColumn < 0 ? COL_CELL_ID : c->iColumn;
    int text = col_is_text(p, col);
    if (text) {
      const char *coll = sqlite3_vtab_collation(info, i);
      if (coll && sqlite3_stricmp(coll, "BINARY") != 0) { unused = 1; continue; }
    }
    if (op == CELLS_OP_EQ && sqlite3_vtab_in(info, i, -1)) {
      sqlite3_vtab_in(info, i, 1);
      op = CELLS_OP_IN;
    }
    sqlite3_value *rhs = NULL;
    if (op != CELLS_OP_IN && op != CELLS_OP_ISNULL && op != CELLS_OP_NOTNULL && sqlite3_vtab_rhs_value(info, i, &rhs) != SQLITE_OK)
      rhs = NULL;
    int k = ocol_of(col);
    int exact = 1;
    if (text && op != CELLS_OP_ISNULL && op != CELLS_OP_NOTNULL) {
      exact = 0;
      if ((op == CELLS_OP_EQ || op == CELLS_OP_IN) && p->oc[k].kind == DC_OBS_CATEGORY) {
        rc = dict_load(p, k);
        if (rc == SQLITE_NOMEM) return rc;
        if (rc) { sqlite3_free(tab->zErrMsg); tab->zErrMsg = NULL; }   /* xFilter reports it */
        else if (!p->oc[k].dict_numeric) exact = 1;
      }
      if (!exact && rhs) {
        int t = sqlite3_value_type(rhs);
        if (t == SQLITE_TEXT || t == SQLITE_BLOB || t == SQLITE_NULL) exact = 1;
      }
    }
    info->aConstraintUsage[i].argvIndex = ++nargs;
    info->aConstraintUsage[i].omit = (unsigned char)exact;
    if (!exact) all_exact = 0;
    items[n_items++] = (cells_plan_item){CELLS_ITEM_TERM, col, op, exact, nargs - 1};

    /* estimates */
    cells_val v;
    memset(&v, 0, sizeof v);
    int have_v = 0;
    if (rhs && !text) {
      if (cval_set(&v, rhs, 0) == SQLITE_OK && (v.t == SQLITE_INTEGER || v.t == SQLITE_FLOAT)) have_v = 1;
    }
    cells_est_col ec;
    if (k >= 0) {
      const ocol *oc = &p->oc[k];
      ec.kind = oc->kind;
      ec.n_categories = oc->n_categories;
      ec.null_count = oc->null_count;
      ec.bs = p->loaded ? &p->bs[(int64_t)k * p->n_blocks] : NULL;
      ec.dict = oc->dict_loaded ? &oc->dict : NULL;
    }
    const char *ztext = NULL;
    int ztext_n = 0;
    if (rhs && sqlite3_value_type(rhs) == SQLITE_TEXT) {
      ztext = (const char *)sqlite3_value_text(rhs);
      ztext_n = sqlite3_value_bytes(rhs);
    }
    cells_est_term(&est, &tb, col, k >= 0 ? &ec : NULL, op, have_v ? &v : NULL, ztext, ztext_n);
    free(v.s);
  }

  /* ORDER BY: rows come in increasing cell_id (and so increasing tile) */
  int ordered = info->nOrderBy > 0;
  for (int i = 0; i < info->nOrderBy && ordered; i++) {
    const struct sqlite3_index_orderby *o = &info->aOrderBy[i];
    int col = o->iColumn < 0 ? COL_CELL_ID : o->iColumn;
    if (o->desc) ordered = 0;
    else if (col == COL_CELL_ID) break;
    else if (col != COL_TILE) ordered = 0;
  }
  if (ordered) {
    info->orderByConsumed = 1;
    items[n_items++] = (cells_plan_item){CELLS_ITEM_ORDER, -1, 0, 1, -1};
  }
  if (i_limit >= 0 && all_exact && !unused && (info->nOrderBy == 0 || ordered)) {
    info->aConstraintUsage[i_limit].argvIndex = ++nargs;
    info->aConstraintUsage[i_limit].omit = 1;
    items[n_items++] = (cells_plan_item){CELLS_ITEM_LIMIT, -1, 0, 1, nargs - 1};
    if (i_offset >= 0) {
      info->aConstraintUsage[i_offset].argvIndex = ++nargs;
      info->aConstraintUsage[i_offset].omit = 1;
      items[n_items++] = (cells_plan_item){CELLS_ITEM_OFFSET, -1, 0, 1, nargs - 1};
    }
  }
  size_t len = cells_plan_format(items, n_items, plan_col_name, p, NULL, 0);
  char *z = sqlite3_malloc64((sqlite3_uint64)len + 1);
  if (!z) return SQLITE_NOMEM;
  cells_plan_format(items, n_items, plan_col_name, p, z, len + 1);
  int used_cols = 0;
  for (int b = 0; b < 64; b++) if ((info->colUsed >> b) & 1) used_cols++;
  info->idxNum = nargs;
  info->idxStr = z;
  info->needToFreeIdxStr = 1;
  info->estimatedRows = (sqlite3_int64)cells_est_rows(&est);
  info->estimatedCost = cells_est_cost(&est, used_cols);
  if (est.unique) info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  return SQLITE_OK;
}

/* --------------------------------------------------------------- cursor */

static int cellsOpen(sqlite3_vtab *tab, sqlite3_vtab_cursor **pp) {
  cells_vtab *p = (cells_vtab *)tab;
  int rc = cells_load(p);
  if (rc) return rc;
  cells_cursor *c = sqlite3_malloc(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->cc = sqlite3_malloc64((sqlite3_uint64)p->n_ocol * sizeof(colcache));
  if (!c->cc) { sqlite3_free(c); return SQLITE_NOMEM; }
  memset(c->cc, 0, (size_t)p->n_ocol * sizeof(colcache));
  c->eof = 1;
  *pp = &c->base;
  return SQLITE_OK;
}

static void terms_free(cells_cursor *c) {
  for (int i = 0; i < c->nterms; i++) cells_term_clear(&c->terms[i]);
  sqlite3_free(c->terms);
  c->terms = NULL;
  c->nterms = 0;
  free(c->iv);
  c->iv = NULL;
  c->niv = 0;
}

static int cellsClose(sqlite3_vtab_cursor *cur) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  terms_free(c);
  for (int k = 0; k < p->n_ocol; k++) {
    dc_obs_decoder_free(c->cc[k].dec);
    cells_dblock_release(c->cc[k].d);
  }
  sqlite3_free(c->cc);
  if (c->blob) sqlite3_blob_close(c->blob);
  sqlite3_free(c->buf);
  cells_sel_free(&c->sel);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* the cache's budget: a quarter of the connection's cache_mb (dc_config) */
static int64_t cache_budget(const cells_vtab *p) {
  return p->conn ? p->conn->cache_bytes / 4 : (int64_t)64 << 20;
}

/* Forgets what cells_load loaded and every cached block (the data changed under the
** table: another connection or this one wrote to the dataset).  Blocks that a cursor
** still references are freed by their last release. */
static void cells_unload(cells_vtab *p) {
  if (!p->loaded) return;
  cells_bcache_clear(&p->cache);
  for (int k = 0; k < p->n_ocol; k++) {
    ocol *oc = &p->oc[k];
    sqlite3_free((char *)oc->dict.buf);
    sqlite3_free((uint32_t *)oc->dict.off);
    memset(&oc->dict, 0, sizeof oc->dict);
    oc->dict_loaded = 0;
    oc->dict_numeric = 0;
  }
  stats_free(p);
  p->loaded = 0;
}

/* Moves the cursor's blob handle to block b of stored column k. */
static int blob_to(cells_cursor *c, int k, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  ocol *oc = &p->oc[k];
  sqlite3_int64 rowid = (sqlite3_int64)((uint64_t)oc->col << 32 | (uint64_t)b);
  int rc;
  if (c->blob) {
    rc = sqlite3_blob_reopen(c->blob, rowid);
    if (rc) { sqlite3_blob_close(c->blob); c->blob = NULL; }
  } else {
    rc = sqlite3_blob_open(p->db, p->zDb, p->zBlocks, "data", rowid, 0, &c->blob);
    if (rc) c->blob = NULL;
  }
  if (rc == SQLITE_NOMEM) return rc;
  if (rc) return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: cannot read its data (%s)",
                         oc->name, (long long)b, sqlite3_errmsg(p->db));
  return SQLITE_OK;
}

/* Checks the seal of block b of stored column k (format version 3): its
** row's place and statistics with the first bytes of its blob (head, of a
** blob of blob_len bytes).  Statistics are used only once checked. */
static int block_seal_check(cells_vtab *p, int k, int64_t b, const uint8_t *head, uint64_t blob_len) {
  cells_bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if (!p->sealed || bs->verified) return SQLITE_OK;
  const ocol *oc = &p->oc[k];
  if (!bs->seal_read) {
    sqlite3_stmt *st = NULL;
    char *q = sqlite3_mprintf("SELECT checksum FROM \"%w\".\"%w_blocks\" WHERE id = ?1", p->zDb, p->zName);
    if (!q) return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(p->db, q, -1, &st, NULL);
    sqlite3_free(q);
    if (rc == SQLITE_OK) {
      sqlite3_bind_int64(st, 1, (int64_t)((uint64_t)oc->col << 32 | (uint64_t)b));
      rc = sqlite3_step(st);
      if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_INTEGER) {
        bs->seal = sqlite3_column_int64(st, 0);
        bs->seal_read = 1;
        rc = SQLITE_OK;
      } else if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
        sqlite3_finalize(st);
        return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: no checksum (an integer)",
                       oc->name, (long long)b);
      }
    }
    if (rc != SQLITE_OK) {
      rc = set_err(&p->base, rc, "cells: column '%s' block %lld: reading its checksum: %s", oc->name, (long long)b,
                   sqlite3_errmsg(p->db));
      sqlite3_finalize(st);
      return rc;
    }
    sqlite3_finalize(st);
  }
  dc_blockplace pl = {"cells", oc->col, oc->name, oc->kind, oc->kind == DC_OBS_CATEGORY ? (int64_t)oc->n_categories : -1,
                      b, p->blk_first[b], p->blk_first[b + 1] - p->blk_first[b], bs->null_count};
  dc_sealval v[3];
  memset(v, 0, sizeof v);
  if (bs->has) {
    const cells_mm *m[2] = {&bs->mn, &bs->mx};
    for (int j = 0; j < 2; j++) {
      if (oc->kind == DC_OBS_TEXT) { v[j].type = DC_SV_TEXT; v[j].p = m[j]->s; v[j].n = (size_t)m[j]->n; }
      else if (m[j]->real) { v[j].type = DC_SV_REAL; v[j].f = m[j]->f; }
      else { v[j].type = DC_SV_INT; v[j].i = m[j]->i; }
    }
  }
  if (bs->present) { v[2].type = DC_SV_BLOB; v[2].p = bs->present; v[2].n = (size_t)bs->present_len; }
  int64_t seal = 0;
  if (dc_seal_block(p->dataset_id, &pl, &v[0], &v[1], &v[2], blob_len, head, &seal)) return SQLITE_NOMEM;
  if (seal != bs->seal)
    return set_err(&p->base, SQLITE_CORRUPT_VTAB,
                   "cells: column '%s' block %lld: checksum mismatch: its data, its statistics (null count, min, max, "
                   "present) and its place (column %lld, cells %lld..%lld) were not written together "
                   "(moved, swapped, copied or edited)", oc->name, (long long)b, (long long)oc->col,
                   (long long)p->blk_first[b], (long long)p->blk_first[b + 1] - 1);
  bs->verified = 1;
  return SQLITE_OK;
}

/* The same, reading only the head of the blob (before its statistics prune). */
static int block_seal_verify(cells_cursor *c, int k, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  if (!p->sealed || p->bs[(int64_t)k * p->n_blocks + b].verified) return SQLITE_OK;
  int rc = blob_to(c, k, b);
  if (rc) return rc;
  uint8_t head[DC_SEAL_OBS_HEAD];
  int len = sqlite3_blob_bytes(c->blob);
  int n = len < DC_SEAL_OBS_HEAD ? len : DC_SEAL_OBS_HEAD;
  rc = n ? sqlite3_blob_read(c->blob, head, n, 0) : SQLITE_OK;
  if (rc) return set_err(&p->base, rc, "cells: column '%s' block %lld: %s", p->oc[k].name, (long long)b, sqlite3_errmsg(p->db));
  return block_seal_check(p, k, b, head, (uint64_t)len);
}

/* Block b of stored column k, decoded: from the table's cache, or read
** through the cursor's blob handle, decoded, checked, and cached. */
static int col_block(cells_cursor *c, int k, int64_t b, cells_dblock **out) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  colcache *cc = &c->cc[k];
  ocol *oc = &p->oc[k];
  if (cc->d && cc->d->b == b) { *out = cc->d; return SQLITE_OK; }
  int rc;
  if (oc->kind == DC_OBS_CATEGORY) {
    rc = dict_load(p, k);
    if (rc) return rc;
  }
  cells_dblock *d = cells_bcache_get(&p->cache, k, b);
  if (d) {
    cells_dblock_release(cc->d);
    cc->d = d;
    *out = d;
    return SQLITE_OK;
  }
  if (!cc->dec) {
    cc->dec = dc_obs_decoder_new();
    if (!cc->dec) return SQLITE_NOMEM;
  }
  if ((rc = blob_to(c, k, b)) != SQLITE_OK) return rc;
  int len = sqlite3_blob_bytes(c->blob);
  if ((size_t)len > c->buf_cap) {
    size_t cap = (size_t)len + (size_t)len / 4 + 64;
    uint8_t *q = sqlite3_realloc64(c->buf, cap);
    if (!q) return SQLITE_NOMEM;
    c->buf = q;
    c->buf_cap = cap;
  }
  rc = len ? sqlite3_blob_read(c->blob, c->buf, len, 0) : SQLITE_OK;
  if (rc) return set_err(&p->base, rc, "cells: column '%s' block %lld: %s", oc->name, (long long)b, sqlite3_errmsg(p->db));
  if ((rc = block_seal_check(p, k, b, c->buf, (uint64_t)len)) != SQLITE_OK) return rc;
  dc_obs_expect ex;
  ex.kind = oc->kind;
  ex.n = (uint32_t)(p->blk_first[b + 1] - p->blk_first[b]);
  ex.n_categories = oc->n_categories;
  dc_error err;
  dc_obs_block blk;
  int drc = dc_obs_decode(cc->dec, c->buf, (size_t)len, &ex, &blk, &err);
  if (drc == DC_ENOMEM) return SQLITE_NOMEM;
  if (drc) return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: %s", oc->name, (long long)b, err.msg);
  const cells_bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if ((int64_t)blk.null_count != bs->null_count)
    return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: %u NULLs where the block row says %lld",
                   oc->name, (long long)b, blk.null_count, (long long)bs->null_count);
  if (oc->kind == DC_OBS_CATEGORY && ex.n_categories == 0 && ex.n != blk.null_count)
    return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: codes without categories", oc->name, (long long)b);
  d = cells_bcache_put(&p->cache, k, b, &blk, cache_budget(p));
  if (!d) return SQLITE_NOMEM;
  cells_dblock_release(cc->d);
  cc->d = d;
  *out = d;
  return SQLITE_OK;
}

/* ------------------------------------------------------------- filtering */

/* Prepares term t (values copied already): its column's kind, and its dictionary for a
** category column. */
static int term_prepare(cells_vtab *p, cells_term *t) {
  int k = ocol_of(t->col);
  t->kind = col_kind(p, t->col);
  if (t->kind == DC_OBS_CATEGORY) {
    int rc = dict_load(p, k);
    if (rc) return rc;
  }
  return cells_term_prepare(t, t->kind == DC_OBS_CATEGORY ? &p->oc[k].dict : NULL) ? SQLITE_NOMEM : SQLITE_OK;
}

/* keeps the rows of the selection that meet term t (a term on a stored column) */
static int filter_block(cells_cursor *c, const cells_term *t, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  cells_dblock *d;
  int rc = col_block(c, ocol_of(t->col), b, &d);
  if (rc) return rc;
  return cells_filter_block(t, d, &p->cache, &c->sel) ? SQLITE_NOMEM : SQLITE_OK;
}

/* Moves to the next block with selected rows (or EOF). */
static int advance_block(cells_cursor *c) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  int rc;
  for (;;) {
    while (c->iv_pos < c->niv && c->pos >= c->iv[c->iv_pos].hi) c->iv_pos++;
    if (c->iv_pos >= c->niv) { c->eof = 1; return SQLITE_OK; }
    if (c->pos < c->iv[c->iv_pos].lo) c->pos = c->iv[c->iv_pos].lo;
    int64_t b = dc_last_le(p->blk_first, p->n_blocks, c->pos);
    int64_t bstart = p->blk_first[b], bend = p->blk_first[b + 1];
    int ok = 1;
    for (int i = 0; i < c->nterms; i++) {   /* statistics are trusted once sealed */
      int k = ocol_of(c->terms[i].col);
      if (k >= 0 && (rc = block_seal_verify(c, k, b)) != SQLITE_OK) return rc;
    }
    for (int i = 0; i < c->nterms && ok; i++) {
      const cells_term *t = &c->terms[i];
      int k = ocol_of(t->col);
      if (k >= 0) ok = cells_block_may_match(t, p->oc[k].n_categories, &p->bs[(int64_t)k * p->n_blocks + b]);
    }
    if (ok) {
      /* rows of the intervals within this block */
      size_t need = (size_t)(bend - bstart);
      if (need > c->sel.cap) {
        uint32_t *q = realloc(c->sel.idx, need * sizeof(uint32_t));
        if (!q) return SQLITE_NOMEM;
        c->sel.idx = q;
        c->sel.cap = need;
      }
      c->sel.n = cells_ivl_rows(c->iv, c->niv, c->iv_pos, c->pos, bstart, bend, c->sel.idx);
      c->sel.full = c->sel.n == (uint32_t)(bend - bstart);
      for (int i = 0; i < c->nterms && c->sel.n; i++) {
        if (ocol_of(c->terms[i].col) < 0) continue;
        rc = filter_block(c, &c->terms[i], b);
        if (rc) return rc;
      }
    } else {
      c->sel.n = 0;
    }
    c->pos = bend;
    if (c->sel.n && c->offset_left > 0) {
      if ((int64_t)c->sel.n <= c->offset_left) { c->offset_left -= c->sel.n; c->sel.n = 0; }
      else { c->sel_pos = (uint32_t)c->offset_left; c->offset_left = 0; c->blk = b; break; }
    }
    if (c->sel.n) { c->sel_pos = 0; c->blk = b; break; }
  }
  c->cell = p->blk_first[c->blk] + c->sel.idx[c->sel_pos];
  return SQLITE_OK;
}

/* Inside a statement's read transaction: reloads what cells_load loaded if the data changed
** since (without a data version, every time); c's blocks in use are let go first. */
static int cells_refresh(cells_vtab *p, cells_cursor *c) {
  unsigned int dv = 0;
  int have = sqlite3_file_control(p->db, p->zDb, SQLITE_FCNTL_DATA_VERSION, &dv) == SQLITE_OK;
  if (p->loaded && (!have || dv != p->data_version)) {
    for (int k = 0; k < p->n_ocol; k++) { cells_dblock_release(c->cc[k].d); c->cc[k].d = NULL; }
    cells_unload(p);
  }
  int rc = cells_load(p);
  if (rc == SQLITE_OK) p->data_version = dv;
  return rc;
}

/* the values of term t from its argument a: a list (IN, through sqlite3_vtab_in), none
** (IS [NOT] NULL: one NULL), or one value */
static int term_values(cells_vtab *p, cells_term *t, sqlite3_value *a) {
  int text = col_is_text(p, t->col);
  if (t->op == CELLS_OP_IN) {
    sqlite3_value *v;
    int cap = 8, rc;
    t->v = malloc((size_t)cap * sizeof(cells_val));
    if (!t->v) return SQLITE_NOMEM;
    for (rc = sqlite3_vtab_in_first(a, &v); rc == SQLITE_OK && v; rc = sqlite3_vtab_in_next(a, &v)) {
      if (t->nv == cap) {
        cap *= 2;
        cells_val *q = realloc(t->v, (size_t)cap * sizeof(cells_val));
        if (!q) return SQLITE_NOMEM;
        t->v = q;
      }
      rc = cval_set(&t->v[t->nv], v, text);
      if (rc) return rc;
      t->nv++;
    }
    return rc == SQLITE_DONE || rc == SQLITE_OK ? SQLITE_OK : rc;
  }
  t->v = calloc(1, sizeof(cells_val));
  if (!t->v) return SQLITE_NOMEM;
  t->nv = 1;
  if (t->op == CELLS_OP_ISNULL || t->op == CELLS_OP_NOTNULL) { t->v[0].t = SQLITE_NULL; return SQLITE_OK; }
  return cval_set(t->v, a, text);
}

static int cellsFilter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc, sqlite3_value **argv) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  int rc = SQLITE_OK;
  terms_free(c);
  c->eof = 1;
  c->limit = -1;
  c->offset_left = 0;
  c->emitted = 0;
  c->sel.n = c->sel_pos = 0;
  if (idxNum != argc || !idxStr) return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan");
  rc = cells_refresh(p, c);
  if (rc) return rc;
  if (argc < 0 || argc > CELLS_MAX_ARGS)   /* xBestIndex never plans more (terms + LIMIT, OFFSET) */
    return set_err(&p->base, SQLITE_ERROR, "cells: plan with %d arguments", argc);
  cells_plan_item items[CELLS_MAX_ARGS + 1];
  int n_items;
  char why[200];
  if (cells_plan_parse(idxStr, argc, COL_OBS0 + p->n_ocol - 1, plan_col_name, p, items, argc + 1, &n_items, why,
                       sizeof why))
    return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan '%s': %s", idxStr, why);
  c->terms = sqlite3_malloc64(((sqlite3_uint64)argc + 1) * sizeof(cells_term));
  if (!c->terms) return SQLITE_NOMEM;
  for (int i = 0; i < n_items; i++) {
    const cells_plan_item *it = &items[i];
    if (it->kind == CELLS_ITEM_LIMIT || it->kind == CELLS_ITEM_OFFSET) {
      sqlite3_value *v = argv[it->arg];
      int64_t x = sqlite3_value_numeric_type(v) == SQLITE_INTEGER ? sqlite3_value_int64(v) : (int64_t)sqlite3_value_double(v);
      if (it->kind == CELLS_ITEM_LIMIT) c->limit = x < 0 ? -1 : x;
      else c->offset_left = x < 0 ? 0 : x;
      continue;
    }
    if (it->kind != CELLS_ITEM_TERM) continue;
    cells_term *t = &c->terms[c->nterms++];
    memset(t, 0, sizeof *t);
    t->col = it->col;
    t->op = it->op;
    t->exact = it->exact;
    t->arg = it->arg;
    if ((rc = term_values(p, t, argv[it->arg])) != SQLITE_OK) return rc;
    if ((rc = term_prepare(p, t)) != SQLITE_OK) return rc;
  }
  /* cells allowed by cell_id and tile */
  c->iv = malloc(sizeof(cells_ivl));
  if (!c->iv) return SQLITE_NOMEM;
  c->iv[0].lo = 0;
  c->iv[0].hi = p->n_cells;
  c->niv = p->n_cells > 0;
  for (int i = 0; i < c->nterms && c->niv; i++) {
    const cells_term *t = &c->terms[i];
    if (t->col != COL_CELL_ID && t->col != COL_TILE) continue;
    cells_ivl *v;
    int nv;
    if (cells_term_intervals(t, t->col == COL_TILE, p->n_cells, p->tile_first, p->n_tiles, p->has_tiles, &v, &nv))
      return SQLITE_NOMEM;
    rc = cells_ivl_intersect(&c->iv, &c->niv, v, nv) ? SQLITE_NOMEM : SQLITE_OK;
    free(v);
    if (rc) return rc;
  }
  c->iv_pos = 0;
  c->pos = 0;
  c->eof = 0;
  if (c->limit == 0) { c->eof = 1; return SQLITE_OK; }
  return advance_block(c);
}

static int cellsNext(sqlite3_vtab_cursor *cur) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  c->emitted++;
  if (c->limit >= 0 && c->emitted >= c->limit) { c->eof = 1; return SQLITE_OK; }
  if (++c->sel_pos < c->sel.n) {
    c->cell = p->blk_first[c->blk] + c->sel.idx[c->sel_pos];
    return SQLITE_OK;
  }
  return advance_block(c);
}

static int cellsEof(sqlite3_vtab_cursor *cur) {
  return ((cells_cursor *)cur)->eof;
}

static int cellsColumn(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  if (col == COL_CELL_ID) { sqlite3_result_int64(ctx, c->cell); return SQLITE_OK; }
  if (col == COL_TILE) {
    if (!p->has_tiles) return SQLITE_OK;
    int64_t t = c->tile_hint;
    if (t < 0 || t >= p->n_tiles || c->cell < p->tile_first[t] || c->cell >= p->tile_first[t + 1]) {
      t = dc_last_le(p->tile_first, p->n_tiles, c->cell);   /* skips empty tiles */
      c->tile_hint = t;
    }
    sqlite3_result_int64(ctx, t);
    return SQLITE_OK;
  }
  int k = ocol_of(col);
  if (k < 0 || k >= p->n_ocol) return SQLITE_OK;
  cells_dblock *d = c->cc[k].d;   /* the block in use, most calls */
  if (!d || d->b != c->blk) {
    int rc = col_block(c, k, c->blk, &d);
    if (rc) return rc;
  }
  const dc_obs_block *b = &d->blk;
  uint32_t r = (uint32_t)(c->cell - p->blk_first[c->blk]);
  switch (p->oc[k].kind) {
    case DC_OBS_CATEGORY: {
      int32_t code = b->codes[r];
      if (code >= 0) {
        int n;
        const char *s = cells_dict_str(&p->oc[k].dict, (uint32_t)code, &n);
        sqlite3_result_text(ctx, s, n, SQLITE_STATIC);
      }
      break;
    }
    case DC_OBS_INT: case DC_OBS_BOOL:
      if (b->valid[r]) sqlite3_result_int64(ctx, b->i64[r]);
      break;
    case DC_OBS_REAL:
      /* a native REAL column stores -0.0 as the integer 0, so it reads back as 0.0 */
      if (!isnan(b->f64[r])) sqlite3_result_double(ctx, b->f64[r] == 0 ? 0.0 : b->f64[r]);
      break;
    case DC_OBS_TEXT:
      if (b->valid[r])
        sqlite3_result_text64(ctx, b->text + b->text_off[r], b->text_off[r + 1] - b->text_off[r], SQLITE_TRANSIENT, SQLITE_UTF8);
      break;
  }
  return SQLITE_OK;
}

static int cellsRowid(sqlite3_vtab_cursor *cur, sqlite_int64 *pRowid) {
  *pRowid = ((cells_cursor *)cur)->cell;
  return SQLITE_OK;
}

/* ------------------------------------------------------ values for dc_batch */

static cells_vtab *find_tab(dc_conn *conn, const char *zDb) {
  for (cells_vtab *p = conn->cells_tabs; p; p = p->next_tab)
    if (sqlite3_stricmp(p->zDb, zDb) == 0 && sqlite3_stricmp(p->zName, "cells") == 0) return p;
  return NULL;
}

int dc_cells_values(dc_conn *conn, sqlite3 *db, const char *zDb, const int64_t *cols, int m,
                    const int64_t *ids, int64_t n, void *out, int64_t *fmt, char **pzErr) {
  cells_vtab *p = find_tab(conn, zDb);
  if (!p) {   /* not used yet on this connection: let SQLite connect it */
    char *sql = sqlite3_mprintf("SELECT 1 FROM \"%w\".cells LIMIT 0", zDb);
    sqlite3_stmt *st = NULL;
    if (!sql) return SQLITE_NOMEM;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    sqlite3_free(sql);
    if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : sqlite3_errcode(db);
    if (rc != SQLITE_OK) *pzErr = sqlite3_mprintf("dc_batch: obs: cannot read the cells table of schema %s: %s", zDb,
                                                  sqlite3_errmsg(db));
    sqlite3_finalize(st);
    if (rc != SQLITE_OK) return rc;
    p = find_tab(conn, zDb);
    if (!p) {
      *pzErr = sqlite3_mprintf("dc_batch: obs: schema %s has no deltacells cells table", zDb);
      return SQLITE_ERROR;
    }
  }
  sqlite3_vtab_cursor *cur = NULL;
  int rc = cellsOpen(&p->base, &cur);
  if (rc) {
    if (p->base.zErrMsg) { *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg); }
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = NULL;
    return rc;
  }
  cur->pVtab = &p->base;
  cells_cursor *c = (cells_cursor *)cur;
  if ((rc = cells_refresh(p, c)) != SQLITE_OK) {   /* the data may have changed since the last query */
    if (p->base.zErrMsg) *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg);
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = NULL;
  }
  for (int j = 0; j < m && rc == SQLITE_OK; j++) {
    int k = -1;
    for (int q = 0; q < p->n_ocol; q++) if (p->oc[q].col == cols[j]) { k = q; break; }
    if (k < 0 || p->oc[k].kind == DC_OBS_TEXT) {
      *pzErr = sqlite3_mprintf("dc_batch: obs: column %lld is %s", (long long)cols[j],
                               k < 0 ? "not a stored obs column" : "text (read it from the cells table)");
      rc = SQLITE_ERROR;
      break;
    }
    int kind = p->oc[k].kind;
    int64_t *oi = (int64_t *)out + (size_t)j * (size_t)n;
    double *of = (double *)out + (size_t)j * (size_t)n;
    int64_t b = -1, lo = 0, hi = 0, nulls = 0;
    const dc_obs_block *blk = NULL;
    cells_dblock *d = NULL;
    fmt[j] = kind == DC_OBS_REAL;
    for (int pass = 0; pass < 2 && rc == SQLITE_OK; pass++) {
      if (pass == 1) {   /* ints: as float64 with NaN when the batch holds a NULL */
        if (kind != DC_OBS_INT || nulls == 0) break;
        fmt[j] = 1;
      }
      for (int64_t i = 0; i < n; i++) {
        int64_t cell = ids[i];
        if (cell < 0 || cell >= p->n_cells) {
          *pzErr = sqlite3_mprintf("dc_batch: obs: no cell %lld", (long long)cell);
          rc = SQLITE_ERROR;
          break;
        }
        if (b < 0 || cell < lo || cell >= hi) {
          b = dc_last_le(p->blk_first, p->n_blocks, cell);
          lo = p->blk_first[b];
          hi = p->blk_first[b + 1];
          if ((rc = col_block(c, k, b, &d)) != SQLITE_OK) {
            if (p->base.zErrMsg) *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg);
            sqlite3_free(p->base.zErrMsg);
            p->base.zErrMsg = NULL;
            break;
          }
          blk = &d->blk;
        }
        uint32_t r = (uint32_t)(cell - lo);
        switch (kind) {
          case DC_OBS_CATEGORY: oi[i] = blk->codes[r]; break;
          case DC_OBS_BOOL: oi[i] = blk->valid[r] ? blk->i64[r] : -1; break;
          case DC_OBS_REAL: of[i] = blk->f64[r]; break;
          default:
            if (fmt[j]) of[i] = blk->valid[r] ? (double)blk->i64[r] : NAN;
            else { oi[i] = blk->i64[r]; nulls += !blk->valid[r]; }
            break;
        }
      }
    }
  }
  cellsClose(cur);
  return rc;
}

static sqlite3_module cells_module = {
  3,                  /* iVersion: xShadowName */
  cellsConnect,       /* xCreate: attaches to the tables the converter wrote */
  cellsConnect,
  cellsBestIndex,
  cellsDisconnect,
  cellsDestroy,
  cellsOpen,
  cellsClose,
  cellsFilter,
  cellsNext,
  cellsEof,
  cellsColumn,
  cellsRowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, /* xUpdate .. xRename: read-only */
  NULL, NULL, NULL,   /* xSavepoint, xRelease, xRollbackTo */
  cellsShadowName
};

int dc_register_cells(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_cells", &cells_module, conn, dc_conn_unref);
}
