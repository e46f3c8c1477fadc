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
** is printable and names the plan in words (EXPLAIN QUERY PLAN shows it):
**
**   plan   := "scan" | term ( ", " term )*
**   term   := "#" COL " " QNAME " " OP " ?" ARG [ " prefilter" ]
**           | "LIMIT ?" ARG | "OFFSET ?" ARG | "ORDER BY cell_id"
**   OP     := "=" | "<" | "<=" | ">" | ">=" | "IN" | "IS NULL" | "IS NOT NULL"
**   COL    := the column number in the schema above (decimal)
**   QNAME  := the column name in double quotes ("" for a quote), checked
**   ARG    := 1-based index into xFilter's argv; each used exactly once
**
** "IN" takes its whole list through sqlite3_vtab_in (one xFilter call);
** "prefilter" marks a superset filter (omit = 0); IS [NOT] NULL get an
** argument only so that they can be omitted (its value is ignored).  LIMIT
** and OFFSET are taken only when every other constraint is taken exactly and
** any ORDER BY is consumed.  "ORDER BY cell_id" records that the ORDER BY was
** consumed (rows come in increasing cell_id; an IN list on cell_id is sorted).
** xFilter rejects an idxStr that does not follow this grammar.
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

/* ------------------------------------------------------------------ types */

#define COL_CELL_ID 0
#define COL_NAME 1
#define COL_TILE 2
#define COL_OBS0 3
/* The most constraints one plan pushes down (xBestIndex stops there and leaves the rest to
** SQLite); with LIMIT and OFFSET a plan has at most CELLS_MAX_TERMS + 2 arguments. */
#define CELLS_MAX_TERMS 250

enum { OP_EQ = 1, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_ISNULL, OP_NOTNULL };
static const char *const op_words[] = {"", "=", "<", "<=", ">", ">=", "IN", "IS NULL", "IS NOT NULL"};

/* A stored min or max of a block. */
typedef struct mm {
  int real;       /* numeric: 1 = f, 0 = i */
  int64_t i;
  double f;
  char *s;        /* text */
  int n;
} mm;

typedef struct bstat {
  int64_t null_count;
  int has;        /* min/max present (not every value NULL) */
  mm mn, mx;
  uint8_t *present;
  int present_len;
  int64_t seal;   /* the row's checksum (format version 3) */
  int seal_read;  /* seal loaded (read with the block, not by cells_load: the checksum
                  ** column follows the data blob, so reading it walks the blob's pages) */
  int verified;   /* seal checked against the blob's header */
} bstat;

/* One stored column (k = 0 is the obs index). */
typedef struct ocol {
  char *name;
  int64_t col;            /* cells_columns.col */
  int kind;               /* DC_OBS_* */
  uint32_t n_categories;
  int64_t null_count;
  int64_t bytes;
  /* category dictionary, loaded on first use */
  int dict_loaded;
  char *dict_buf;
  uint32_t *dict_off;     /* n_categories + 1 offsets into dict_buf */
  int dict_numeric;       /* some value could read as a number */
  uint32_t *dict_sorted;  /* codes in byte order of their values (lazily) */
} ocol;

/* A decoded block of one column, shared by the cursors of a table object
** (the table's decoded-block cache).  One allocation: the struct, then the
** arrays blk points to.  Reference counted; least recently used blocks are
** dropped when the cache is over budget (a dropped block still referenced is
** freed by its last release). */
typedef struct dblock {
  struct dblock *prev, *next;   /* LRU list, most recently used first */
  int k;
  int64_t b;
  int n_ref;
  int dropped;
  size_t bytes;
  dc_obs_block blk;
  /* int and real: offsets of the non-NULL values in increasing value order,
  ** built when range filters use the block a second time */
  uint32_t *order;
  uint32_t n_order;
  int range_uses;
} dblock;

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
  bstat *bs;              /* [n_ocol * n_blocks], column major */
  int has_tiles;
  int64_t n_tiles;
  int64_t *tile_first;    /* [n_tiles + 1] */
  dblock **ent;           /* [n_ocol * n_blocks]: cached decoded blocks */
  dblock *lru_head, *lru_tail;
  int64_t cache_bytes;
  struct cells_vtab *next_tab;   /* the connection's list (dc_conn.cells_tabs) */
} cells_vtab;

/* A value of a constraint.  For numeric columns after numeric affinity; for
** TEXT columns as given, with s/n the text form (numbers as SQLite renders
** them, the TEXT affinity). */
typedef struct cval {
  int t;                  /* SQLITE_INTEGER, _FLOAT, _TEXT, _BLOB, _NULL */
  int64_t i;
  double f;
  char *s;
  int n;
} cval;

typedef struct term {
  int col;                /* schema column */
  int op;
  int exact;
  int arg;                /* argv index, 0-based */
  cval *v;
  int nv;
  /* prepared */
  uint8_t *acc;           /* category: [n_categories + 1], index code + 1 */
  int64_t *iset; int niset;   /* numeric IN, integer column */
  double *fset; int nfset;    /* numeric IN, real column */
  cval **tset; int ntset;     /* text IN: sorted text forms */
  int in_has_number;          /* text IN: a number among the values */
  int in_has_le;              /* unused */
} term;

typedef struct ivl { int64_t lo, hi; } ivl;   /* [lo, hi) */

typedef struct colcache {
  dc_obs_decoder *dec;    /* scratch of this cursor's decodes */
  dblock *d;              /* the block in use (a reference), or NULL */
} colcache;

typedef struct cells_cursor {
  sqlite3_vtab_cursor base;
  term *terms; int nterms;
  ivl *iv; int niv;
  int64_t limit, offset_left, emitted;
  int iv_pos;
  int64_t pos;            /* next cell to consider */
  int64_t blk;            /* block of the current selection */
  uint32_t *sel; uint32_t nsel, sel_pos; size_t sel_cap;
  int sel_full;           /* sel is every row of the block, in order */
  uint64_t *bm; size_t bm_cap;   /* a bitmap over the rows of a block */
  int eof;
  int64_t cell;
  int64_t tile_hint;
  colcache *cc;           /* [n_ocol] */
  sqlite3_blob *blob;
  uint8_t *buf; size_t buf_cap;
} cells_cursor;

/* --------------------------------------------------------------- helpers */

static void dblock_free(dblock *d) {
  sqlite3_free(d->order);
  sqlite3_free(d);
}

static void dblock_release(dblock *d) {
  if (d && --d->n_ref == 0 && d->dropped) dblock_free(d);
}

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

static int col_is_text(const cells_vtab *p, int col) {
  int k = ocol_of(col);
  if (k < 0) return 0;
  return p->oc[k].kind == DC_OBS_CATEGORY || p->oc[k].kind == DC_OBS_TEXT;
}

static const char *col_name(const cells_vtab *p, int col) {
  if (col == COL_CELL_ID) return "cell_id";
  if (col == COL_TILE) return "tile";
  if (col == COL_NAME) return "name";
  return p->oc[ocol_of(col)].name;
}

static int bincmp(const char *a, int na, const char *b, int nb) {
  int n = na < nb ? na : nb;
  int c = n ? memcmp(a, b, (size_t)n) : 0;
  if (c) return c < 0 ? -1 : 1;
  return (na > nb) - (na < nb);
}

/* could this text read as a number under numeric affinity, or be a number
** as SQLite renders it ("Inf")?  Errs on the side of yes. */
static int maybe_numeric(const char *s, int n) {
  int i = 0;
  while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) i++;
  if (i >= n) return 0;
  char c = s[i];
  if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.') return 1;
  /* infinity renders as "Inf" (the sign is caught above) */
  if (n - i >= 3 && !memcmp(s + i, "Inf", 3)) {
    for (i += 3; i < n; i++) if (!(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) return 0;
    return 1;
  }
  return 0;
}

/* exact comparison of an integer and a double, as SQLite compares them */
static int cmp_i_f(int64_t i, double r) {
  if (r < -9223372036854775808.0) return 1;
  if (r >= 9223372036854775808.0) return -1;
  int64_t y = (int64_t)r;
  if (i < y) return -1;
  if (i > y) return 1;
  double s = (double)i;
  if (s < r) return -1;
  if (s > r) return 1;
  return 0;
}

/* lhs (real? f : i) against a numeric cval */
static int cmp_num(int real, int64_t li, double lf, const cval *v) {
  if (v->t == SQLITE_INTEGER) {
    if (!real) return (li > v->i) - (li < v->i);
    return -cmp_i_f(v->i, lf);
  }
  if (!real) return cmp_i_f(li, v->f);
  return (lf > v->f) - (lf < v->f);
}

static int op_holds(int op, int c) {
  switch (op) {
    case OP_EQ: case OP_IN: return c == 0;
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    case OP_GE: return c >= 0;
  }
  return 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static int cmp_cvalp(const void *a, const void *b) {
  const cval *x = *(cval *const *)a, *y = *(cval *const *)b;
  return bincmp(x->s, x->n, y->s, y->n);
}

/* numeric, non-NULL lhs against a numeric-column term */
static int num_match(const term *t, int real, int64_t li, double lf) {
  if (t->op == OP_NOTNULL) return 1;
  if (t->op == OP_ISNULL) return 0;
  if (t->op == OP_IN) {
    if (!real) {
      size_t lo = 0, hi = (size_t)t->niset;
      while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (t->iset[m] < li) lo = m + 1; else hi = m;
      }
      return lo < (size_t)t->niset && t->iset[lo] == li;
    }
    size_t lo = 0, hi = (size_t)t->nfset;
    while (lo < hi) {
      size_t m = (lo + hi) / 2;
      if (t->fset[m] < lf) lo = m + 1; else hi = m;
    }
    return lo < (size_t)t->nfset && t->fset[lo] == lf;
  }
  const cval *v = &t->v[0];
  if (v->t == SQLITE_NULL) return 0;
  if (v->t == SQLITE_TEXT || v->t == SQLITE_BLOB) return t->op == OP_LT || t->op == OP_LE;
  return op_holds(t->op, cmp_num(real, li, lf, v));
}

/* non-NULL text lhs against a text-column term (exact: no affinity on the
** right; prefilter: a superset over every affinity of the right side) */
static int text_match(const term *t, const char *s, int n) {
  if (t->op == OP_NOTNULL) return 1;
  if (t->op == OP_ISNULL) return 0;
  if (t->op == OP_IN) {
    if (!t->exact && t->in_has_number && maybe_numeric(s, n)) return 1;
    int lo = 0, hi = t->ntset;
    while (lo < hi) {
      int m = (lo + hi) / 2;
      if (bincmp(t->tset[m]->s, t->tset[m]->n, s, n) < 0) lo = m + 1; else hi = m;
    }
    return lo < t->ntset && bincmp(t->tset[lo]->s, t->tset[lo]->n, s, n) == 0;
  }
  const cval *v = &t->v[0];
  switch (v->t) {
    case SQLITE_NULL: return 0;
    case SQLITE_BLOB: return t->op == OP_LT || t->op == OP_LE;   /* text < blob */
    case SQLITE_TEXT: {
      int r = op_holds(t->op, bincmp(s, n, v->s, v->n));
      if (!r && !t->exact && (t->op == OP_LT || t->op == OP_LE) && maybe_numeric(s, n)) r = 1;
      return r;
    }
    default: {   /* a number */
      if (!t->exact) {
        if (t->op == OP_GT || t->op == OP_GE) return 1;
        if (maybe_numeric(s, n)) return 1;
      }
      return op_holds(t->op, bincmp(s, n, v->s, v->n));
    }
  }
}

static void cval_clear(cval *v) {
  sqlite3_free(v->s);
  memset(v, 0, sizeof *v);
}

/* copies an argument value: numeric affinity for numeric columns, the text
** form for TEXT columns */
static int cval_set(cval *out, sqlite3_value *in, int text_col) {
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
    out->s = sqlite3_malloc64((sqlite3_uint64)n + 1);
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
  for (dblock *d = p->lru_head, *nx; d; d = nx) { nx = d->next; dblock_free(d); }
  sqlite3_free(p->ent);
  for (int k = 0; k < p->n_ocol; k++) {
    sqlite3_free(p->oc[k].name);
    sqlite3_free(p->oc[k].dict_buf);
    sqlite3_free(p->oc[k].dict_off);
    sqlite3_free(p->oc[k].dict_sorted);
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

static int mm_read(sqlite3_stmt *st, int i, int kind, mm *out, int *is_null) {
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
  p->bs = sqlite3_malloc64((sqlite3_uint64)(nb ? nb : 1) * (sqlite3_uint64)p->n_ocol * sizeof(bstat));
  if (!p->blk_first || !p->bs) { rc = SQLITE_NOMEM; goto done; }
  memset(p->bs, 0, (size_t)(nb ? nb : 1) * (size_t)p->n_ocol * sizeof(bstat));
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
    bstat *s = &p->bs[(int64_t)k * nb + b];
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
  p->ent = sqlite3_malloc64((sqlite3_uint64)(nb ? nb : 1) * (sqlite3_uint64)p->n_ocol * sizeof(dblock *));
  if (!p->ent) { rc = SQLITE_NOMEM; goto done; }
  memset(p->ent, 0, (size_t)(nb ? nb : 1) * (size_t)p->n_ocol * sizeof(dblock *));
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
    if (maybe_numeric((const char *)z, n)) numeric = 1;
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
  c->dict_buf = buf;
  c->dict_off = off;
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

/* value of code i: dict_buf + start(i), length len(i).  Values are stored
** each followed by one NUL: start(0) = 0, start(i) = off[i] + 1. */
static inline const char *dict_str(const ocol *c, uint32_t i, int *n) {
  uint32_t s = i ? c->dict_off[i] + 1 : 0;
  *n = (int)(c->dict_off[i + 1] - s);
  return c->dict_buf + s;
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

/* rows of a block meeting (op, value) estimated from its statistics, for a
** numeric column; value is a numeric cval */
static double est_block_num(const bstat *s, int64_t n, int op, const cval *v) {
  if (!s->has) return 0;
  double nn = (double)(n - s->null_count);
  double lo = s->mn.real ? s->mn.f : (double)s->mn.i, hi = s->mx.real ? s->mx.f : (double)s->mx.i;
  double x = v->t == SQLITE_INTEGER ? (double)v->i : v->f;
  if (op == OP_EQ) {
    if (x < lo || x > hi) return 0;
    double span = hi - lo;
    return span <= 0 ? nn : nn / (span + 1 < 100 ? span + 1 : 100);
  }
  double frac = hi > lo ? (x - lo) / (hi - lo) : (x >= lo ? 1 : 0);
  if (frac < 0) frac = 0;
  if (frac > 1) frac = 1;
  return (op == OP_LT || op == OP_LE) ? nn * frac : nn * (1 - frac);
}

static int cellsBestIndex(sqlite3_vtab *tab, sqlite3_index_info *info) {
  cells_vtab *p = (cells_vtab *)tab;
  /* bad metadata is reported by xOpen as SQLITE_CORRUPT (an error here would
  ** reach the user as a plain SQLITE_ERROR); plan without statistics */
  int rc = cells_load(p);
  if (rc == SQLITE_NOMEM) return rc;
  if (rc) { sqlite3_free(tab->zErrMsg); tab->zErrMsg = NULL; }
  sqlite3_str *s = sqlite3_str_new(p->db);
  int nargs = 0, all_exact = 1, unused = 0, n_terms = 0;
  int i_limit = -1, i_offset = -1;
  double N = p->loaded ? (double)p->n_cells : 1e6, rows = N, scan = N;
  int unique = 0, n_filter_cols = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->op == SQLITE_INDEX_CONSTRAINT_LIMIT) { if (c->usable) i_limit = i; continue; }
    if (c->op == SQLITE_INDEX_CONSTRAINT_OFFSET) { if (c->usable) i_offset = i; continue; }
    int op = 0;
    switch (c->op) {
      case SQLITE_INDEX_CONSTRAINT_EQ: op = OP_EQ; break;
      case SQLITE_INDEX_CONSTRAINT_LT: op = OP_LT; break;
      case SQLITE_INDEX_CONSTRAINT_LE: op = OP_LE; break;
      case SQLITE_INDEX_CONSTRAINT_GT: op = OP_GT; break;
      case SQLITE_INDEX_CONSTRAINT_GE: op = OP_GE; break;
      case SQLITE_INDEX_CONSTRAINT_ISNULL: op = OP_ISNULL; break;
      case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: op = OP_NOTNULL; break;
    }
    /* past CELLS_MAX_TERMS, SQLite checks the rest of the terms itself */
    if (!op || !c->usable || nargs >= CELLS_MAX_TERMS) { unused = 1; continue; }
    int col = c->iColumn < 0 ? COL_CELL_ID : c->iColumn;
    int text = col_is_text(p, col);
    if (text) {
      const char *coll = sqlite3_vtab_collation(info, i);
      if (coll && sqlite3_stricmp(coll, "BINARY") != 0) { unused = 1; continue; }
    }
    if (op == OP_EQ && sqlite3_vtab_in(info, i, -1)) {
      sqlite3_vtab_in(info, i, 1);
      op = OP_IN;
    }
    sqlite3_value *rhs = NULL;
    if (op != OP_IN && op != OP_ISNULL && op != OP_NOTNULL && sqlite3_vtab_rhs_value(info, i, &rhs) != SQLITE_OK) rhs = NULL;
    int k = ocol_of(col);
    int exact = 1;
    if (text && op != OP_ISNULL && op != OP_NOTNULL) {
      exact = 0;
      if ((op == OP_EQ || op == OP_IN) && p->oc[k].kind == DC_OBS_CATEGORY) {
        rc = dict_load(p, k);
        if (rc == SQLITE_NOMEM) { sqlite3_free(sqlite3_str_finish(s)); return rc; }
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
    if (n_terms++) sqlite3_str_appendall(s, ", ");
    sqlite3_str_appendf(s, "#%d \"%w\" %s ?%d%s", col, col_name(p, col), op_words[op], nargs, exact ? "" : " prefilter");

    /* estimates */
    double sel = 1.0;
    cval v;
    memset(&v, 0, sizeof v);
    int have_v = 0;
    if (rhs && !text) {
      if (cval_set(&v, rhs, 0) == SQLITE_OK && (v.t == SQLITE_INTEGER || v.t == SQLITE_FLOAT)) have_v = 1;
    }
    if (col == COL_CELL_ID) {
      if (op == OP_EQ) { sel = N > 0 ? 1.0 / N : 1; unique = 1; scan = scan < 64 ? scan : 64; }
      else if (op == OP_IN) { sel = N > 0 ? 20.0 / N : 1; scan = scan < 64 * 20 ? scan : 64 * 20; }
      else if (op == OP_ISNULL) sel = 0;
      else if (op != OP_NOTNULL) {
        double f = 0.3;
        if (have_v && N > 0) {
          double x = v.t == SQLITE_INTEGER ? (double)v.i : v.f;
          f = (op == OP_LT || op == OP_LE) ? x / N : 1 - x / N;
          if (f < 0) f = 0;
          if (f > 1) f = 1;
        }
        sel = f;
        scan *= f > 0.001 ? f : 0.001;
      }
    } else if (col == COL_TILE) {
      double nt = p->n_tiles > 0 ? (double)p->n_tiles : 1;
      if (op == OP_EQ) { sel = 1 / nt; scan *= sel; }
      else if (op == OP_IN) { sel = 3 / nt < 1 ? 3 / nt : 1; scan *= sel; }
      else if (op == OP_ISNULL) sel = p->has_tiles ? 0 : 1;
      else if (op != OP_NOTNULL) { sel = 0.3; scan *= sel; }
    } else {
      ocol *oc = &p->oc[k];
      n_filter_cols++;
      double nulls = N > 0 ? (double)oc->null_count / N : 0;
      if (nulls > 1) nulls = 1;
      if (op == OP_ISNULL) sel = nulls;
      else if (op == OP_NOTNULL) sel = 1 - nulls;
      else if (oc->kind == DC_OBS_CATEGORY) {
        double ncat = oc->n_categories ? (double)oc->n_categories : 1;
        sel = (1 - nulls) / ncat;
        if (op == OP_IN) sel *= 3;
        else if (op != OP_EQ) sel = 0.3;
        else if (rhs && sqlite3_value_type(rhs) == SQLITE_TEXT && oc->dict_loaded && N > 0) {
          /* the code of the value, and the blocks that hold it */
          const char *z = (const char *)sqlite3_value_text(rhs);
          int zn = sqlite3_value_bytes(rhs);
          int64_t code = -1;
          for (uint32_t q = 0; q < oc->n_categories; q++) {
            int dn;
            const char *d = dict_str(oc, q, &dn);
            if (bincmp(d, dn, z, zn) == 0) { code = q; break; }
          }
          double est = 0;
          for (int64_t b = 0; code >= 0 && b < p->n_blocks; b++) {
            const bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
            int64_t bn = p->blk_first[b + 1] - p->blk_first[b];
            if (!bs->has || code < bs->mn.i || code > bs->mx.i) continue;
            if (bs->present) {
              if (code / 8 >= bs->present_len || !((bs->present[code / 8] >> (code % 8)) & 1)) continue;
              int pc = 0;
              for (int j = 0; j < bs->present_len; j++) pc += __builtin_popcount(bs->present[j]);
              est += (double)(bn - bs->null_count) / (pc ? pc : 1);
            } else {
              est += (double)(bn - bs->null_count) / (double)(bs->mx.i - bs->mn.i + 1);
            }
          }
          sel = est / N;
        }
      } else if (oc->kind == DC_OBS_TEXT) {
        sel = op == OP_EQ ? (N > 0 ? 1 / N : 1) : op == OP_IN ? (N > 0 ? 5 / N : 1) : 0.3;
      } else if (oc->kind == DC_OBS_BOOL) {
        sel = (1 - nulls) * (op == OP_EQ || op == OP_IN ? 0.5 : 0.5);
      } else {
        sel = (1 - nulls) * (op == OP_EQ ? 0.01 : op == OP_IN ? 0.03 : 0.3);
        if (have_v && N > 0 && op != OP_IN) {
          double est = 0;
          for (int64_t b = 0; b < p->n_blocks; b++)
            est += est_block_num(&p->bs[(int64_t)k * p->n_blocks + b], p->blk_first[b + 1] - p->blk_first[b], op, &v);
          sel = est / N;
        }
      }
    }
    cval_clear(&v);
    rows *= sel;
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
    if (n_terms++) sqlite3_str_appendall(s, ", ");
    sqlite3_str_appendall(s, "ORDER BY cell_id");
  }
  if (i_limit >= 0 && all_exact && !unused && (info->nOrderBy == 0 || ordered)) {
    info->aConstraintUsage[i_limit].argvIndex = ++nargs;
    info->aConstraintUsage[i_limit].omit = 1;
    if (n_terms++) sqlite3_str_appendall(s, ", ");
    sqlite3_str_appendf(s, "LIMIT ?%d", nargs);
    if (i_offset >= 0) {
      info->aConstraintUsage[i_offset].argvIndex = ++nargs;
      info->aConstraintUsage[i_offset].omit = 1;
      sqlite3_str_appendf(s, ", OFFSET ?%d", nargs);
    }
  }
  if (n_terms == 0) sqlite3_str_appendall(s, "scan");
  char *z = sqlite3_str_finish(s);
  if (!z) return SQLITE_NOMEM;
  if (rows < 1) rows = 1;
  if (scan < 1) scan = 1;
  int used_cols = 0;
  for (int b = 0; b < 64; b++) if ((info->colUsed >> b) & 1) used_cols++;
  info->idxNum = nargs;
  info->idxStr = z;
  info->needToFreeIdxStr = 1;
  info->estimatedRows = (sqlite3_int64)rows;
  /* decoding the scanned cells of each filtered column, then a row cost */
  info->estimatedCost = scan * 0.02 * (n_filter_cols + (unique ? 0 : 1)) + rows * (1.0 + 0.2 * used_cols) + 10;
  if (unique) info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
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
  for (int i = 0; i < c->nterms; i++) {
    term *t = &c->terms[i];
    for (int j = 0; j < t->nv; j++) cval_clear(&t->v[j]);
    sqlite3_free(t->v);
    sqlite3_free(t->acc);
    sqlite3_free(t->iset);
    sqlite3_free(t->fset);
    sqlite3_free(t->tset);
  }
  sqlite3_free(c->terms);
  c->terms = NULL;
  c->nterms = 0;
  sqlite3_free(c->iv);
  c->iv = NULL;
  c->niv = 0;
}

static int cellsClose(sqlite3_vtab_cursor *cur) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  terms_free(c);
  for (int k = 0; k < p->n_ocol; k++) {
    dc_obs_decoder_free(c->cc[k].dec);
    dblock_release(c->cc[k].d);
  }
  sqlite3_free(c->cc);
  if (c->blob) sqlite3_blob_close(c->blob);
  sqlite3_free(c->buf);
  sqlite3_free(c->sel);
  sqlite3_free(c->bm);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* the cache's budget: a quarter of the connection's cache_mb (dc_config) */
static int64_t cache_budget(const cells_vtab *p) {
  return p->conn ? p->conn->cache_bytes / 4 : (int64_t)64 << 20;
}

static void cache_drop(cells_vtab *p, dblock *d) {
  if (d->prev) d->prev->next = d->next; else p->lru_head = d->next;
  if (d->next) d->next->prev = d->prev; else p->lru_tail = d->prev;
  d->prev = d->next = NULL;
  p->ent[(int64_t)d->k * p->n_blocks + d->b] = NULL;
  p->cache_bytes -= (int64_t)d->bytes;
  if (d->n_ref == 0) dblock_free(d); else d->dropped = 1;
}

static void cache_fit(cells_vtab *p, int64_t budget) {
  while (p->cache_bytes > budget && p->lru_tail) cache_drop(p, p->lru_tail);
}

/* Forgets what cells_load loaded and every cached block (the data changed under the
** table: another connection or this one wrote to the dataset).  Blocks that a cursor
** still references are freed by their last release. */
static void cells_unload(cells_vtab *p) {
  if (!p->loaded) return;
  cache_fit(p, -1);
  sqlite3_free(p->ent); p->ent = NULL;
  for (int k = 0; k < p->n_ocol; k++) {
    ocol *oc = &p->oc[k];
    sqlite3_free(oc->dict_buf); oc->dict_buf = NULL;
    sqlite3_free(oc->dict_off); oc->dict_off = NULL;
    sqlite3_free(oc->dict_sorted); oc->dict_sorted = NULL;
    oc->dict_loaded = 0;
    oc->dict_numeric = 0;
  }
  stats_free(p);
  p->loaded = 0;
}

/* A copy of a decoded block in one allocation, with one reference. */
static dblock *dblock_new(int k, int64_t b, const dc_obs_block *src) {
  size_t n = src->n;
  size_t a = 0, len;
  switch (src->kind) {
    case DC_OBS_CATEGORY: a = n * 4; break;
    case DC_OBS_INT: case DC_OBS_BOOL: a = n * 8 + n; break;
    case DC_OBS_REAL: a = n * 8; break;
    case DC_OBS_TEXT: a = (n + 1) * 8 + n + (size_t)src->text_off[n]; break;
  }
  len = (sizeof(dblock) + 15) / 16 * 16 + a;
  dblock *d = sqlite3_malloc64(len);
  if (!d) return NULL;
  memset(d, 0, sizeof *d);
  d->k = k;
  d->b = b;
  d->n_ref = 1;
  d->bytes = len;
  d->blk = *src;
  uint8_t *q = (uint8_t *)d + (sizeof(dblock) + 15) / 16 * 16;
  switch (src->kind) {
    case DC_OBS_CATEGORY:
      memcpy(q, src->codes, n * 4); d->blk.codes = (const int32_t *)q; break;
    case DC_OBS_INT: case DC_OBS_BOOL:
      memcpy(q, src->i64, n * 8); d->blk.i64 = (const int64_t *)q;
      memcpy(q + n * 8, src->valid, n); d->blk.valid = q + n * 8; break;
    case DC_OBS_REAL:
      memcpy(q, src->f64, n * 8); d->blk.f64 = (const double *)q; break;
    case DC_OBS_TEXT:
      memcpy(q, src->text_off, (n + 1) * 8); d->blk.text_off = (const uint64_t *)q;
      memcpy(q + (n + 1) * 8, src->valid, n); d->blk.valid = q + (n + 1) * 8;
      if (src->text_off[n]) memcpy(q + (n + 1) * 8 + n, src->text, (size_t)src->text_off[n]);
      d->blk.text = (const char *)q + (n + 1) * 8 + n;
      break;
  }
  return d;
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
  bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
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
    const mm *m[2] = {&bs->mn, &bs->mx};
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
static int col_block(cells_cursor *c, int k, int64_t b, const dc_obs_block **out) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  colcache *cc = &c->cc[k];
  ocol *oc = &p->oc[k];
  if (cc->d && cc->d->b == b) { *out = &cc->d->blk; return SQLITE_OK; }
  int rc;
  if (oc->kind == DC_OBS_CATEGORY) {
    rc = dict_load(p, k);
    if (rc) return rc;
  }
  dblock *d = p->ent[(int64_t)k * p->n_blocks + b];
  if (d) {
    d->n_ref++;
    if (d != p->lru_head) {   /* to the front */
      d->prev->next = d->next;
      if (d->next) d->next->prev = d->prev; else p->lru_tail = d->prev;
      d->prev = NULL;
      d->next = p->lru_head;
      p->lru_head->prev = d;
      p->lru_head = d;
    }
    dblock_release(cc->d);
    cc->d = d;
    *out = &d->blk;
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
  const bstat *bs = &p->bs[(int64_t)k * p->n_blocks + b];
  if ((int64_t)blk.null_count != bs->null_count)
    return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: %u NULLs where the block row says %lld",
                   oc->name, (long long)b, blk.null_count, (long long)bs->null_count);
  if (oc->kind == DC_OBS_CATEGORY && ex.n_categories == 0 && ex.n != blk.null_count)
    return set_err(&p->base, SQLITE_CORRUPT_VTAB, "cells: column '%s' block %lld: codes without categories", oc->name, (long long)b);
  d = dblock_new(k, b, &blk);
  if (!d) return SQLITE_NOMEM;
  int64_t budget = cache_budget(p);
  if ((int64_t)d->bytes <= budget) {
    cache_fit(p, budget - (int64_t)d->bytes);
    d->next = p->lru_head;
    if (p->lru_head) p->lru_head->prev = d; else p->lru_tail = d;
    p->lru_head = d;
    p->ent[(int64_t)k * p->n_blocks + b] = d;
    p->cache_bytes += (int64_t)d->bytes;
  } else {
    d->dropped = 1;   /* used by this cursor only */
  }
  dblock_release(cc->d);
  cc->d = d;
  *out = &d->blk;
  return SQLITE_OK;
}

/* ------------------------------------------------------------- filtering */

/* Prepares term t (values copied already): acceptance table of a category
** column, sorted sets of an IN list. */
static int term_prepare(cells_vtab *p, term *t) {
  int k = ocol_of(t->col);
  int text = col_is_text(p, t->col);
  if (t->op == OP_IN) {
    if (text) {
      t->tset = sqlite3_malloc64(((sqlite3_uint64)t->nv + 1) * sizeof(cval *));
      if (!t->tset) return SQLITE_NOMEM;
      for (int j = 0; j < t->nv; j++) {
        cval *v = &t->v[j];
        if (v->t == SQLITE_NULL || v->t == SQLITE_BLOB) continue;   /* never equal to text */
        if (v->t != SQLITE_TEXT) t->in_has_number = 1;
        t->tset[t->ntset++] = v;
      }
      qsort(t->tset, (size_t)t->ntset, sizeof(cval *), cmp_cvalp);
    } else {
      int real = k >= 0 && p->oc[k].kind == DC_OBS_REAL;
      if (real) {
        t->fset = sqlite3_malloc64(((sqlite3_uint64)t->nv + 1) * sizeof(double));
        if (!t->fset) return SQLITE_NOMEM;
        for (int j = 0; j < t->nv; j++) {
          cval *v = &t->v[j];
          if (v->t == SQLITE_FLOAT) t->fset[t->nfset++] = v->f;
          else if (v->t == SQLITE_INTEGER && cmp_i_f(v->i, (double)v->i) == 0) t->fset[t->nfset++] = (double)v->i;
        }
        qsort(t->fset, (size_t)t->nfset, sizeof(double), cmp_dbl);
      } else {
        t->iset = sqlite3_malloc64(((sqlite3_uint64)t->nv + 1) * sizeof(int64_t));
        if (!t->iset) return SQLITE_NOMEM;
        for (int j = 0; j < t->nv; j++) {
          cval *v = &t->v[j];
          if (v->t == SQLITE_INTEGER) t->iset[t->niset++] = v->i;
          else if (v->t == SQLITE_FLOAT && v->f >= -9223372036854775808.0 && v->f < 9223372036854775808.0 &&
                   cmp_i_f((int64_t)v->f, v->f) == 0)
            t->iset[t->niset++] = (int64_t)v->f;
        }
        qsort(t->iset, (size_t)t->niset, sizeof(int64_t), cmp_i64);
      }
    }
  }
  if (k >= 0 && p->oc[k].kind == DC_OBS_CATEGORY) {
    ocol *oc = &p->oc[k];
    int rc = dict_load(p, k);
    if (rc) return rc;
    t->acc = sqlite3_malloc64((sqlite3_uint64)oc->n_categories + 1);
    if (!t->acc) return SQLITE_NOMEM;
    t->acc[0] = t->op == OP_ISNULL;
    int eq_text = (t->op == OP_EQ && t->v[0].t == SQLITE_TEXT);
    if (eq_text && oc->n_categories > 64) {
      /* one value: find its code(s) without comparing every entry twice */
      memset(t->acc + 1, 0, oc->n_categories);
      for (uint32_t q = 0; q < oc->n_categories; q++) {
        int dn;
        const char *d = dict_str(oc, q, &dn);
        if (dn == t->v[0].n && (dn == 0 || memcmp(d, t->v[0].s, (size_t)dn) == 0)) t->acc[q + 1] = 1;
      }
    } else {
      for (uint32_t q = 0; q < oc->n_categories; q++) {
        int dn;
        const char *d = dict_str(oc, q, &dn);
        t->acc[q + 1] = (uint8_t)text_match(t, d, dn);
      }
    }
  }
  return SQLITE_OK;
}

/* Whether a block whose min compares cmn and max compares cmx (<0, 0, >0) with
** the constraint's value can hold a row satisfying `op`. */
static int minmax_may_match(int op, int cmn, int cmx) {
  switch (op) {
    case OP_EQ: return cmn <= 0 && cmx >= 0;
    case OP_LT: return cmn < 0;
    case OP_LE: return cmn <= 0;
    case OP_GT: return cmx > 0;
    case OP_GE: return cmx >= 0;
  }
  return 1;
}

/* can block b hold a row meeting term t?  (statistics only) */
static int block_may_match(cells_vtab *p, const term *t, int64_t b) {
  int k = ocol_of(t->col);
  if (k < 0) return 1;
  const bstat *s = &p->bs[(int64_t)k * p->n_blocks + b];
  int64_t n = p->blk_first[b + 1] - p->blk_first[b];
  if (t->op == OP_ISNULL) return s->null_count > 0;
  if (!s->has) return 0;            /* every value NULL */
  if (t->op == OP_NOTNULL) return 1;
  (void)n;
  const ocol *oc = &p->oc[k];
  switch (oc->kind) {
    case DC_OBS_CATEGORY: {
      if (s->present) {
        for (int j = 0; j < s->present_len; j++) {
          uint8_t m = s->present[j];
          while (m) {
            int bit = __builtin_ctz(m);
            uint32_t code = (uint32_t)j * 8 + (uint32_t)bit;
            if (code < oc->n_categories && t->acc[code + 1]) return 1;
            m &= (uint8_t)(m - 1);
          }
        }
        return 0;
      }
      for (int64_t code = s->mn.i; code <= s->mx.i; code++)
        if (t->acc[code + 1]) return 1;
      return 0;
    }
    case DC_OBS_TEXT: {
      if (!t->exact) return 1;
      if (t->op == OP_IN) {
        for (int j = 0; j < t->ntset; j++)
          if (bincmp(t->tset[j]->s, t->tset[j]->n, s->mn.s, s->mn.n) >= 0 &&
              bincmp(t->tset[j]->s, t->tset[j]->n, s->mx.s, s->mx.n) <= 0) return 1;
        return 0;
      }
      const cval *v = &t->v[0];
      if (v->t == SQLITE_NULL) return 0;
      if (v->t == SQLITE_BLOB) return t->op == OP_LT || t->op == OP_LE;
      int cmn = bincmp(s->mn.s, s->mn.n, v->s, v->n), cmx = bincmp(s->mx.s, s->mx.n, v->s, v->n);
      return minmax_may_match(t->op, cmn, cmx);
    }
    default: {   /* int, bool, real: numeric */
      if (t->op == OP_IN) {
        if (oc->kind == DC_OBS_REAL) {
          for (int j = 0; j < t->nfset; j++) {
            cval v = {SQLITE_FLOAT, 0, t->fset[j], NULL, 0};
            if (cmp_num(s->mn.real, s->mn.i, s->mn.f, &v) <= 0 && cmp_num(s->mx.real, s->mx.i, s->mx.f, &v) >= 0) return 1;
          }
        } else {
          for (int j = 0; j < t->niset; j++) {
            cval v = {SQLITE_INTEGER, t->iset[j], 0, NULL, 0};
            if (cmp_num(s->mn.real, s->mn.i, s->mn.f, &v) <= 0 && cmp_num(s->mx.real, s->mx.i, s->mx.f, &v) >= 0) return 1;
          }
        }
        return 0;
      }
      const cval *v = &t->v[0];
      if (v->t == SQLITE_NULL) return 0;
      if (v->t == SQLITE_TEXT || v->t == SQLITE_BLOB) return t->op == OP_LT || t->op == OP_LE;
      int cmn = cmp_num(s->mn.real, s->mn.i, s->mn.f, v), cmx = cmp_num(s->mx.real, s->mx.i, s->mx.f, v);
      return minmax_may_match(t->op, cmn, cmx);
    }
  }
}

typedef struct ord_item { union { int64_t i; double f; } v; uint32_t r; } ord_item;
static int cmp_ord_i(const void *a, const void *b) {
  const ord_item *x = a, *y = b;
  if (x->v.i != y->v.i) return x->v.i < y->v.i ? -1 : 1;
  return (x->r > y->r) - (x->r < y->r);
}
static int cmp_ord_f(const void *a, const void *b) {
  const ord_item *x = a, *y = b;
  if (x->v.f != y->v.f) return x->v.f < y->v.f ? -1 : 1;
  return (x->r > y->r) - (x->r < y->r);
}

/* builds d->order (int or real block); SQLITE_NOMEM or SQLITE_OK */
static int build_order(cells_vtab *p, dblock *d) {
  const dc_obs_block *b = &d->blk;
  int real = b->kind == DC_OBS_REAL;
  ord_item *it = sqlite3_malloc64((sqlite3_uint64)(b->n ? b->n : 1) * sizeof *it);
  uint32_t *ord = sqlite3_malloc64((sqlite3_uint64)(b->n ? b->n : 1) * sizeof *ord);
  if (!it || !ord) { sqlite3_free(it); sqlite3_free(ord); return SQLITE_NOMEM; }
  uint32_t m = 0;
  for (uint32_t r = 0; r < b->n; r++) {
    if (real) { if (!isnan(b->f64[r])) { it[m].v.f = b->f64[r]; it[m++].r = r; } }
    else if (b->valid[r]) { it[m].v.i = b->i64[r]; it[m++].r = r; }
  }
  qsort(it, m, sizeof *it, real ? cmp_ord_f : cmp_ord_i);
  for (uint32_t j = 0; j < m; j++) ord[j] = it[j].r;
  sqlite3_free(it);
  d->order = ord;
  d->n_order = m;
  d->bytes += (size_t)b->n * sizeof *ord;
  if (!d->dropped) p->cache_bytes += (int64_t)b->n * (int64_t)sizeof *ord;
  return SQLITE_OK;
}

/* first j in [0, n_order) whose value v has cmp(v, rhs) > strict-1, i.e.
** cmp >= 0 (strict = 0) or cmp > 0 (strict = 1) */
static uint32_t order_bound(const dblock *d, const cval *v, int strict) {
  int real = d->blk.kind == DC_OBS_REAL;
  uint32_t lo = 0, hi = d->n_order;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2, r = d->order[mid];
    int c = real ? cmp_num(1, 0, d->blk.f64[r], v) : cmp_num(0, d->blk.i64[r], 0, v);
    if (strict ? c > 0 : c >= 0) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/* A selective comparison on an int or real column through the block's value
** order: marks the matching rows in a bitmap and keeps those.  Returns 1 if
** it filtered, 0 to leave it to the scan, or -1 on out-of-memory. */
static int filter_by_order(cells_cursor *c, const term *t, dblock *d) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  const cval *v = &t->v[0];
  if (t->op == OP_IN || t->op == OP_ISNULL || t->op == OP_NOTNULL) return 0;
  if (v->t != SQLITE_INTEGER && v->t != SQLITE_FLOAT) return 0;
  if (!d->order) {
    if (++d->range_uses < 2) return 0;
    if (build_order(p, d) != SQLITE_OK) return -1;
  }
  uint32_t a = 0, z = d->n_order;
  switch (t->op) {
    case OP_LT: z = order_bound(d, v, 0); break;
    case OP_LE: z = order_bound(d, v, 1); break;
    case OP_GT: a = order_bound(d, v, 1); break;
    case OP_GE: a = order_bound(d, v, 0); break;
    case OP_EQ: a = order_bound(d, v, 0); z = order_bound(d, v, 1); break;
  }
  if (z < a) z = a;
  if ((uint64_t)(z - a) * 8 > c->nsel) return 0;   /* not selective: scan */
  size_t words = ((size_t)d->blk.n + 63) / 64;
  if (words > c->bm_cap) {
    uint64_t *q = sqlite3_realloc64(c->bm, words * sizeof *q);
    if (!q) return -1;
    c->bm = q;
    c->bm_cap = words;
  }
  memset(c->bm, 0, words * sizeof *c->bm);
  for (uint32_t j = a; j < z; j++) c->bm[d->order[j] >> 6] |= (uint64_t)1 << (d->order[j] & 63);
  uint32_t m = 0;
  if (c->sel_full) {
    for (size_t w = 0; w < words; w++) {
      uint64_t x = c->bm[w];
      while (x) { c->sel[m++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(x)); x &= x - 1; }
    }
  } else {
    for (uint32_t j = 0; j < c->nsel; j++) {
      uint32_t r = c->sel[j];
      c->sel[m] = r;
      m += (c->bm[r >> 6] >> (r & 63)) & 1;
    }
  }
  c->nsel = m;
  c->sel_full = 0;
  return 1;
}

/* keeps the rows of the selection that meet term t */
static int filter_block(cells_cursor *c, const term *t, int64_t b) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  int k = ocol_of(t->col);
  const dc_obs_block *blk;
  int rc = col_block(c, k, b, &blk);
  if (rc) return rc;
  if (p->oc[k].kind == DC_OBS_INT || p->oc[k].kind == DC_OBS_REAL) {
    int r = filter_by_order(c, t, c->cc[k].d);
    if (r < 0) return SQLITE_NOMEM;
    if (r) return SQLITE_OK;
  }
  c->sel_full = 0;
  uint32_t *sel = c->sel, n = c->nsel, m = 0;
  switch (p->oc[k].kind) {
    case DC_OBS_CATEGORY: {
      const uint8_t *acc = t->acc;
      const int32_t *codes = blk->codes;
      for (uint32_t j = 0; j < n; j++) {
        uint32_t r = sel[j];
        sel[m] = r;
        m += acc[codes[r] + 1];
      }
      break;
    }
    case DC_OBS_INT: case DC_OBS_BOOL: {
      const int64_t *x = blk->i64;
      const uint8_t *valid = blk->valid;
      if (t->op == OP_ISNULL) { for (uint32_t j = 0; j < n; j++) { sel[m] = sel[j]; m += !valid[sel[j]]; } break; }
      if (t->op == OP_NOTNULL) { for (uint32_t j = 0; j < n; j++) { sel[m] = sel[j]; m += valid[sel[j]]; } break; }
      if (t->op == OP_EQ && t->v[0].t == SQLITE_INTEGER) {
        int64_t want = t->v[0].i;
        for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += valid[r] && x[r] == want; }
        break;
      }
      for (uint32_t j = 0; j < n; j++) {
        uint32_t r = sel[j];
        sel[m] = r;
        m += valid[r] && num_match(t, 0, x[r], 0);
      }
      break;
    }
    case DC_OBS_REAL: {
      const double *x = blk->f64;
      if (t->op == OP_ISNULL) { for (uint32_t j = 0; j < n; j++) { sel[m] = sel[j]; m += isnan(x[sel[j]]) != 0; } break; }
      if (t->op == OP_NOTNULL) { for (uint32_t j = 0; j < n; j++) { sel[m] = sel[j]; m += !isnan(x[sel[j]]); } break; }
      if (t->op != OP_IN && t->v[0].t == SQLITE_FLOAT) {
        double w = t->v[0].f;
        switch (t->op) {   /* NaN (NULL) fails every comparison */
          case OP_EQ: for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += x[r] == w; } break;
          case OP_LT: for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += x[r] < w; } break;
          case OP_LE: for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += x[r] <= w; } break;
          case OP_GT: for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += x[r] > w; } break;
          case OP_GE: for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += x[r] >= w; } break;
        }
        break;
      }
      for (uint32_t j = 0; j < n; j++) {
        uint32_t r = sel[j];
        sel[m] = r;
        m += !isnan(x[r]) && num_match(t, 1, 0, x[r]);
      }
      break;
    }
    case DC_OBS_TEXT: {
      const uint8_t *valid = blk->valid;
      for (uint32_t j = 0; j < n; j++) {
        uint32_t r = sel[j];
        sel[m] = r;
        if (t->op == OP_ISNULL) m += !valid[r];
        else if (valid[r]) m += text_match(t, blk->text + blk->text_off[r], (int)(blk->text_off[r + 1] - blk->text_off[r]));
      }
      break;
    }
  }
  c->nsel = m;
  return SQLITE_OK;
}

static int64_t block_of(const cells_vtab *p, int64_t cell) {
  int64_t lo = 0, hi = p->n_blocks - 1;
  while (lo < hi) {
    int64_t m = (lo + hi + 1) / 2;
    if (p->blk_first[m] <= cell) lo = m; else hi = m - 1;
  }
  return lo;
}

/* Moves to the next block with selected rows (or EOF). */
static int advance_block(cells_cursor *c) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  int rc;
  for (;;) {
    while (c->iv_pos < c->niv && c->pos >= c->iv[c->iv_pos].hi) c->iv_pos++;
    if (c->iv_pos >= c->niv) { c->eof = 1; return SQLITE_OK; }
    if (c->pos < c->iv[c->iv_pos].lo) c->pos = c->iv[c->iv_pos].lo;
    int64_t b = block_of(p, c->pos);
    int64_t bstart = p->blk_first[b], bend = p->blk_first[b + 1];
    int ok = 1;
    for (int i = 0; i < c->nterms; i++) {   /* statistics are trusted once sealed */
      int k = ocol_of(c->terms[i].col);
      if (k >= 0 && (rc = block_seal_verify(c, k, b)) != SQLITE_OK) return rc;
    }
    for (int i = 0; i < c->nterms && ok; i++) ok = block_may_match(p, &c->terms[i], b);
    if (ok) {
      /* rows of the intervals within this block */
      size_t need = (size_t)(bend - bstart);
      if (need > c->sel_cap) {
        uint32_t *q = sqlite3_realloc64(c->sel, need * sizeof(uint32_t));
        if (!q) return SQLITE_NOMEM;
        c->sel = q;
        c->sel_cap = need;
      }
      uint32_t m = 0;
      for (int j = c->iv_pos; j < c->niv && c->iv[j].lo < bend; j++) {
        int64_t lo = c->iv[j].lo > c->pos ? c->iv[j].lo : c->pos;
        int64_t hi = c->iv[j].hi < bend ? c->iv[j].hi : bend;
        for (int64_t x = lo; x < hi; x++) c->sel[m++] = (uint32_t)(x - bstart);
      }
      c->nsel = m;
      c->sel_full = m == (uint32_t)(bend - bstart);
      for (int i = 0; i < c->nterms && c->nsel; i++) {
        if (ocol_of(c->terms[i].col) < 0) continue;
        rc = filter_block(c, &c->terms[i], b);
        if (rc) return rc;
      }
    } else {
      c->nsel = 0;
    }
    c->pos = bend;
    if (c->nsel && c->offset_left > 0) {
      if ((int64_t)c->nsel <= c->offset_left) { c->offset_left -= c->nsel; c->nsel = 0; }
      else { c->sel_pos = (uint32_t)c->offset_left; c->offset_left = 0; c->blk = b; break; }
    }
    if (c->nsel) { c->sel_pos = 0; c->blk = b; break; }
  }
  c->cell = p->blk_first[c->blk] + c->sel[c->sel_pos];
  return SQLITE_OK;
}

/* integer interval [lo, hi) within [0, n) of x with x OP v (v numeric) */
static void int_interval(int op, const cval *v, int64_t n, int64_t *lo, int64_t *hi) {
  double r;
  if (v->t == SQLITE_INTEGER) r = v->i < -1 ? -1.0 : v->i > n + 1 ? (double)(n + 1) : (double)v->i;
  else r = v->f < -1 ? -1.0 : v->f > (double)(n + 1) ? (double)(n + 1) : v->f;
  double fl = floor(r), ce = ceil(r);
  *lo = 0; *hi = n;
  switch (op) {
    case OP_EQ: if (fl == r) { *lo = (int64_t)r; *hi = (int64_t)r + 1; } else { *lo = *hi = 0; } break;
    case OP_LT: *hi = (int64_t)ce; break;
    case OP_LE: *hi = (int64_t)fl + 1; break;
    case OP_GT: *lo = (int64_t)fl + 1; break;
    case OP_GE: *lo = (int64_t)ce; break;
  }
  if (*lo < 0) *lo = 0;
  if (*hi > n) *hi = n;
  if (*hi < *lo) *hi = *lo;
}

/* the intervals a cell_id or tile term allows, sorted and disjoint */
static int term_intervals(cells_vtab *p, const term *t, ivl **out, int *nout) {
  int is_tile = t->col == COL_TILE;
  int64_t n = is_tile ? p->n_tiles : p->n_cells;
  ivl *v = NULL;
  int nv = 0;
  if (is_tile && !p->has_tiles) {
    /* tile is NULL everywhere: only IS NULL holds */
    v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    if (t->op == OP_ISNULL) { v[0].lo = 0; v[0].hi = p->n_cells; nv = 1; }
    *out = v; *nout = nv;
    return SQLITE_OK;
  }
  if (t->op == OP_IN) {
    v = sqlite3_malloc64(((sqlite3_uint64)t->niset + 1) * sizeof *v);
    if (!v) return SQLITE_NOMEM;
    for (int j = 0; j < t->niset; j++) {
      int64_t x = t->iset[j];
      if (x < 0 || x >= n) continue;
      if (nv && v[nv - 1].hi == x + 1) continue;       /* duplicate */
      if (nv && v[nv - 1].hi == x) { v[nv - 1].hi = x + 1; continue; }
      v[nv].lo = x; v[nv].hi = x + 1; nv++;
    }
  } else {
    v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    const cval *x = &t->v[0];
    int64_t lo = 0, hi = 0;
    if (t->op == OP_NOTNULL) { lo = 0; hi = n; }
    else if (t->op == OP_ISNULL || x->t == SQLITE_NULL) { lo = hi = 0; }
    else if (x->t == SQLITE_TEXT || x->t == SQLITE_BLOB) {   /* a number < text < blob */
      if (t->op == OP_LT || t->op == OP_LE) { lo = 0; hi = n; }
    } else {
      int_interval(t->op, x, n, &lo, &hi);
    }
    if (hi > lo) { v[0].lo = lo; v[0].hi = hi; nv = 1; }
  }
  if (is_tile) {
    for (int j = 0; j < nv; j++) { v[j].lo = p->tile_first[v[j].lo]; v[j].hi = p->tile_first[v[j].hi]; }
    int m = 0;   /* drop empty tiles, merge neighbours */
    for (int j = 0; j < nv; j++) {
      if (v[j].hi <= v[j].lo) continue;
      if (m && v[m - 1].hi == v[j].lo) v[m - 1].hi = v[j].hi;
      else v[m++] = v[j];
    }
    nv = m;
  }
  *out = v;
  *nout = nv;
  return SQLITE_OK;
}

/* c->iv := c->iv ∩ (b, nb); both sorted and disjoint */
static int intersect(cells_cursor *c, const ivl *b, int nb) {
  ivl *r = sqlite3_malloc64(((sqlite3_uint64)c->niv + (sqlite3_uint64)nb + 1) * sizeof *r);
  if (!r) return SQLITE_NOMEM;
  int i = 0, j = 0, m = 0;
  while (i < c->niv && j < nb) {
    int64_t lo = c->iv[i].lo > b[j].lo ? c->iv[i].lo : b[j].lo;
    int64_t hi = c->iv[i].hi < b[j].hi ? c->iv[i].hi : b[j].hi;
    if (lo < hi) { r[m].lo = lo; r[m].hi = hi; m++; }
    if (c->iv[i].hi < b[j].hi) i++; else j++;
  }
  sqlite3_free(c->iv);
  c->iv = r;
  c->niv = m;
  return SQLITE_OK;
}

/* parses one term of idxStr at *pz; returns 0 on success */
static int parse_term(cells_vtab *p, const char **pz, term *t, int *kind, int nargs) {
  const char *z = *pz;
  *kind = 0;
  memset(t, 0, sizeof *t);
  if (!strncmp(z, "LIMIT ?", 7) || !strncmp(z, "OFFSET ?", 8)) {
    *kind = z[0] == 'L' ? 2 : 3;
    z += z[0] == 'L' ? 7 : 8;
  } else if (!strncmp(z, "ORDER BY cell_id", 16)) {
    *kind = 4;
    *pz = z + 16;
    return 0;
  } else {
    if (*z++ != '#') return 1;
    char *end;
    long col = strtol(z, &end, 10);
    if (end == z || col < 0 || col >= COL_OBS0 + p->n_ocol - 1) return 1;
    z = end;
    if (*z++ != ' ' || *z++ != '"') return 1;
    /* the quoted name must be the column's */
    const char *nm = col_name(p, (int)col);
    for (;;) {
      if (*z == 0) return 1;
      if (*z == '"') {
        if (z[1] == '"') { if (*nm++ != '"') return 1; z += 2; continue; }
        z++;
        break;
      }
      if (*nm++ != *z++) return 1;
    }
    if (*nm) return 1;
    if (*z++ != ' ') return 1;
    int op = 0;
    for (int o = OP_NOTNULL; o >= OP_EQ; o--) {   /* longest words first */
      size_t l = strlen(op_words[o]);
      if (!strncmp(z, op_words[o], l) && z[l] == ' ') { op = o; z += l; break; }
    }
    if (!op || strncmp(z, " ?", 2)) return 1;
    z += 2;
    t->col = (int)col;
    t->op = op;
    t->exact = 1;
    *kind = 1;
  }
  char *end;
  long a = strtol(z, &end, 10);
  if (end == z || a < 1 || a > nargs) return 1;
  z = end;
  if (*kind == 1 && !strncmp(z, " prefilter", 10)) { t->exact = 0; z += 10; }
  t->arg = (int)a - 1;
  *pz = z;
  return 0;
}

/* Inside a statement's read transaction: reloads what cells_load loaded if the data changed
** since (without a data version, every time); c's blocks in use are let go first. */
static int cells_refresh(cells_vtab *p, cells_cursor *c) {
  unsigned int dv = 0;
  int have = sqlite3_file_control(p->db, p->zDb, SQLITE_FCNTL_DATA_VERSION, &dv) == SQLITE_OK;
  if (p->loaded && (!have || dv != p->data_version)) {
    for (int k = 0; k < p->n_ocol; k++) { dblock_release(c->cc[k].d); c->cc[k].d = NULL; }
    cells_unload(p);
  }
  int rc = cells_load(p);
  if (rc == SQLITE_OK) p->data_version = dv;
  return rc;
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
  c->nsel = c->sel_pos = 0;
  if (idxNum != argc || !idxStr) return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan");
  rc = cells_refresh(p, c);
  if (rc) return rc;
  uint8_t used[CELLS_MAX_TERMS + 2];
  memset(used, 0, sizeof used);
  if (argc < 0 || argc > CELLS_MAX_TERMS + 2)   /* xBestIndex never plans more (terms + LIMIT, OFFSET) */
    return set_err(&p->base, SQLITE_ERROR, "cells: plan with %d arguments", argc);
  c->terms = sqlite3_malloc64(((sqlite3_uint64)argc + 1) * sizeof(term));
  if (!c->terms) return SQLITE_NOMEM;
  /* parse */
  const char *z = idxStr;
  if (!strcmp(z, "scan")) z += 4;
  while (*z) {
    term t;
    int kind;
    if (parse_term(p, &z, &t, &kind, argc) || (kind != 4 && used[t.arg]++))
      return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan '%s'", idxStr);
    if (*z) {
      if (strncmp(z, ", ", 2)) return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan '%s'", idxStr);
      z += 2;
    }
    if (kind == 2 || kind == 3) {
      sqlite3_value *v = argv[t.arg];
      int64_t x = sqlite3_value_numeric_type(v) == SQLITE_INTEGER ? sqlite3_value_int64(v) : (int64_t)sqlite3_value_double(v);
      if (kind == 2) c->limit = x < 0 ? -1 : x;
      else c->offset_left = x < 0 ? 0 : x;
      continue;
    }
    if (kind != 1) continue;
    int text = col_is_text(p, t.col);
    term *tt = &c->terms[c->nterms++];
    *tt = t;
    if (t.op == OP_IN) {
      sqlite3_value *v;
      int cap = 8;
      tt->v = sqlite3_malloc64((sqlite3_uint64)cap * sizeof(cval));
      if (!tt->v) return SQLITE_NOMEM;
      for (rc = sqlite3_vtab_in_first(argv[t.arg], &v); rc == SQLITE_OK && v; rc = sqlite3_vtab_in_next(argv[t.arg], &v)) {
        if (tt->nv == cap) {
          cap *= 2;
          cval *q = sqlite3_realloc64(tt->v, (sqlite3_uint64)cap * sizeof(cval));
          if (!q) return SQLITE_NOMEM;
          tt->v = q;
        }
        rc = cval_set(&tt->v[tt->nv], v, text);
        if (rc) return rc;
        tt->nv++;
      }
      if (rc != SQLITE_DONE && rc != SQLITE_OK) return rc;
      rc = SQLITE_OK;
    } else {
      tt->v = sqlite3_malloc(sizeof(cval));
      if (!tt->v) return SQLITE_NOMEM;
      tt->nv = 1;
      if (t.op == OP_ISNULL || t.op == OP_NOTNULL) memset(tt->v, 0, sizeof(cval));
      else {
        rc = cval_set(tt->v, argv[t.arg], text);
        if (rc) return rc;
      }
    }
    rc = term_prepare(p, tt);
    if (rc) return rc;
  }
  for (int i = 0; i < argc; i++)
    if (!used[i]) return set_err(&p->base, SQLITE_ERROR, "cells: unknown plan '%s'", idxStr);
  /* cells allowed by cell_id and tile */
  c->iv = sqlite3_malloc(sizeof(ivl));
  if (!c->iv) return SQLITE_NOMEM;
  c->iv[0].lo = 0;
  c->iv[0].hi = p->n_cells;
  c->niv = p->n_cells > 0;
  for (int i = 0; i < c->nterms && c->niv; i++) {
    term *t = &c->terms[i];
    if (t->col != COL_CELL_ID && t->col != COL_TILE) continue;
    ivl *v;
    int nv;
    rc = term_intervals(p, t, &v, &nv);
    if (rc) return rc;
    rc = intersect(c, v, nv);
    sqlite3_free(v);
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
  if (++c->sel_pos < c->nsel) {
    c->cell = p->blk_first[c->blk] + c->sel[c->sel_pos];
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
      int64_t lo = 0, hi = p->n_tiles - 1;
      while (lo < hi) {   /* the last tile starting at or before the cell (skips empty tiles) */
        int64_t m = (lo + hi + 1) / 2;
        if (p->tile_first[m] <= c->cell) lo = m; else hi = m - 1;
      }
      t = lo;
      c->tile_hint = t;
    }
    sqlite3_result_int64(ctx, t);
    return SQLITE_OK;
  }
  int k = ocol_of(col);
  if (k < 0 || k >= p->n_ocol) return SQLITE_OK;
  const dc_obs_block *b;
  int rc = col_block(c, k, c->blk, &b);
  if (rc) return rc;
  uint32_t r = (uint32_t)(c->cell - p->blk_first[c->blk]);
  switch (p->oc[k].kind) {
    case DC_OBS_CATEGORY: {
      int32_t code = b->codes[r];
      if (code >= 0) {
        int n;
        const char *s = dict_str(&p->oc[k], (uint32_t)code, &n);
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
          b = block_of(p, cell);
          lo = p->blk_first[b];
          hi = p->blk_first[b + 1];
          if ((rc = col_block(c, k, b, &blk)) != SQLITE_OK) {
            if (p->base.zErrMsg) *pzErr = sqlite3_mprintf("dc_batch: obs: %s", p->base.zErrMsg);
            sqlite3_free(p->base.zErrMsg);
            p->base.zErrMsg = NULL;
            break;
          }
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
