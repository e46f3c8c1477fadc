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
** `#3 "cell_type" = ?1, #5 "n_genes" > ?2, LIMIT ?3`, in the grammar of every table's
** plans (the shared codec, dc_plan.h; cells' words in cells_plan.h).  "IN" takes its whole list through sqlite3_vtab_in
** (one xFilter call); "prefilter" marks a superset filter (omit = 0); IS [NOT]
** NULL get an argument only so that they can be omitted (its value is ignored).
** LIMIT and OFFSET are taken only when every other constraint is taken exactly
** and any ORDER BY is consumed.  "ORDER BY cell_id" records that the ORDER BY
** was consumed (rows come in increasing cell_id; an IN list on cell_id is
** sorted).  xFilter rejects an idxStr that does not follow the grammar.
**
** This file is the module's SQLite glue: connect and destroy, xBestIndex,
** xFilter, xNext, xColumn (dc_cells_values, obs values for dc_batch: cells_values.c).  cells_store.c
** (also glue; cells_vtab.h is their shared header) takes the obs statistics and
** dictionaries from the connection's dataset object (reader_obs.c loads and validates them
** once per data version) and reads, checks and caches the blocks.
** The logic both call is pure C, unit-tested without SQLite
** (tests/c/test_cells_*.c, test_plan.c): dc_plan.c (the plan codec), cells_filter.c (comparison
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
** Decoded blocks are kept in a cache of the obs statistics (least recently
** used out, a quarter of dc_config('cache_mb'); reference counted, so a
** cursor's block survives eviction), so joins that re-filter a cursor and
** repeated queries skip decoding.  A block of an int or real column that a
** range or = filter meets in a second visit (a later query, or a join that
** filters again; not the second term of one visit, as x BETWEEN a AND b has)
** gets its value order (offsets sorted by value, radix sort, cached with it):
** a selective comparison then costs two binary searches instead of a scan.
** Blocks are read with one sqlite3_blob handle per cursor, moved with
** sqlite3_blob_reopen.
**
** Bad stored data gives SQLITE_CORRUPT_VTAB with a message naming the column
** and the block ("cells: column 'age' block 3: obs block: checksum mismatch").
*/
#include "cells_vtab.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dc_reader.h"
#include "dc_value.h"

/* --------------------------------------------------------------- helpers */

static const char *plan_col_name(void *ctx, int col) { return col_name((const cells_vtab *)ctx, col); }
static const dc_plan_word plan_words[] = CELLS_PLAN_WORDS;
/* what cells' plans name (dc_plan.h) */
static void plan_table(cells_vtab *p, dc_plan_table *t) {
  t->ncols = COL_OBS0 + p->n_ocol - 1;   /* name is stored column 0 */
  t->name = plan_col_name;
  t->ctx = p;
  t->words = plan_words;
  t->nwords = (int)(sizeof plan_words / sizeof plan_words[0]);
}

/* Copies an argument value: numeric affinity for numeric columns (SQLite's own), the text
** form for TEXT columns.  out->s is malloc'd (cells_term_clear frees it). */
static int cval_set(cells_val *out, sqlite3_value *in, int text_col) {
  memset(out, 0, sizeof *out);
  int t;
  if (text_col) {
    t = sqlite3_value_type(in);
    if (t == SQLITE_INTEGER) out->i = sqlite3_value_int64(in);
    else if (t == SQLITE_FLOAT) out->f = sqlite3_value_double(in);
  } else {
    t = dc_value_numeric(in, &out->i, &out->f);   /* SQLite's affinity, as `expression` applies it */
    if (t < 0) return SQLITE_NOMEM;
  }
  out->t = t;
  if (!(t == SQLITE_TEXT || t == SQLITE_BLOB || (text_col && t != SQLITE_NULL))) return SQLITE_OK;
  sqlite3_value *d = sqlite3_value_dup(in);   /* the text form of a copy: in keeps its type */
  if (!d) return SQLITE_NOMEM;
  int rc = SQLITE_OK;
  const void *z = t == SQLITE_BLOB ? sqlite3_value_blob(d) : (const void *)sqlite3_value_text(d);
  int n = sqlite3_value_bytes(d);
  out->s = malloc((size_t)n + 1);
  if (!out->s) rc = SQLITE_NOMEM;
  else {
    if (n) memcpy(out->s, z, (size_t)n);
    out->s[n] = 0;
    out->n = n;
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
  for (int k = 0; k < p->n_ocol; k++) sqlite3_free(p->oc[k].name);
  sqlite3_free(p->oc);
  dc_reader_free(p->rd);   /* the statistics and their blocks are the dataset object's */
  sqlite3_free(p->zDb);
  sqlite3_free(p->zName);
  sqlite3_free(p->zBlocks);
  sqlite3_free(p);
}

/* ---------------------------------------------------- create / connect */

static const char *kind_sql_type(int kind) {
  switch (kind) {
    case DC_OBS_INT: case DC_OBS_BOOL: return "INTEGER";
    case DC_OBS_REAL: return "REAL";
    default: return "TEXT";
  }
}

static int cells_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
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
    int ok = cells_table_exists(db, zDb, t);
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
    if (!nm) {
      *pzErr = sqlite3_mprintf("cells: %s_columns: column %lld has no name", zName, (long long)c->col);
      rc = SQLITE_CORRUPT_VTAB;
      goto fail;
    }
    if (!c->kind) {
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

static int cells_disconnect(sqlite3_vtab *tab) {
  vtab_free((cells_vtab *)tab);
  return SQLITE_OK;
}

static int cells_destroy(sqlite3_vtab *tab) {
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

static int cells_shadow_name(const char *zName) {
  return !sqlite3_stricmp(zName, "columns") || !sqlite3_stricmp(zName, "dict") || !sqlite3_stricmp(zName, "blocks");
}

/* ------------------------------------------------------------ best index */

/* Plans the query: each usable term becomes a plan item (cells_plan.h), its estimate is
** added to the cost model (cells_cost.h). */
static int cells_best_index(sqlite3_vtab *tab, sqlite3_index_info *info) {
  cells_vtab *p = (cells_vtab *)tab;
  /* bad metadata is reported by xOpen as SQLITE_CORRUPT (an error here would
  ** reach the user as a plain SQLITE_ERROR); plan without statistics */
  int rc = cells_load(p);
  if (rc == SQLITE_NOMEM) return rc;
  if (rc) { sqlite3_free(tab->zErrMsg); tab->zErrMsg = NULL; }
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
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
      case SQLITE_INDEX_CONSTRAINT_EQ: op = DC_OP_EQ; break;
      case SQLITE_INDEX_CONSTRAINT_LT: op = DC_OP_LT; break;
      case SQLITE_INDEX_CONSTRAINT_LE: op = DC_OP_LE; break;
      case SQLITE_INDEX_CONSTRAINT_GT: op = DC_OP_GT; break;
      case SQLITE_INDEX_CONSTRAINT_GE: op = DC_OP_GE; break;
      case SQLITE_INDEX_CONSTRAINT_ISNULL: op = DC_OP_ISNULL; break;
      case SQLITE_INDEX_CONSTRAINT_ISNOTNULL: op = DC_OP_NOTNULL; break;
    }
    /* past DC_PLAN_MAX_TERMS, SQLite checks the rest of the terms itself */
    if (!op || !c->usable || nargs >= DC_PLAN_MAX_TERMS) { unused = 1; continue; }
    int col = c->iColumn < 0 ? COL_CELL_ID : c->iColumn;
    int text = col_is_text(p, col);
    if (text) {
      const char *coll = sqlite3_vtab_collation(info, i);
      if (coll && sqlite3_stricmp(coll, "BINARY") != 0) { unused = 1; continue; }
    }
    if (op == DC_OP_EQ && sqlite3_vtab_in(info, i, -1)) {
      sqlite3_vtab_in(info, i, 1);
      op = DC_OP_IN;
    }
    sqlite3_value *rhs = NULL;
    if (op != DC_OP_IN && op != DC_OP_ISNULL && op != DC_OP_NOTNULL && sqlite3_vtab_rhs_value(info, i, &rhs) != SQLITE_OK)
      rhs = NULL;
    int k = ocol_of(col);
    int exact = 1;
    if (text && op != DC_OP_ISNULL && op != DC_OP_NOTNULL) {
      exact = 0;
      if ((op == DC_OP_EQ || op == DC_OP_IN) && p->oc[k].kind == DC_OBS_CATEGORY) {
        rc = cells_dict_load(p, k);
        if (rc == SQLITE_NOMEM) return rc;
        if (rc) { sqlite3_free(tab->zErrMsg); tab->zErrMsg = NULL; }   /* xFilter reports it */
        else if (!p->cs[k].dict_numeric) exact = 1;
      }
      if (!exact && rhs) {
        int t = sqlite3_value_type(rhs);
        if (t == SQLITE_TEXT || t == SQLITE_BLOB || t == SQLITE_NULL) exact = 1;
      }
    }
    info->aConstraintUsage[i].argvIndex = ++nargs;
    info->aConstraintUsage[i].omit = (unsigned char)exact;
    if (!exact) all_exact = 0;
    items[n_items++] = (dc_plan_item){CELLS_ITEM_TERM, col, op, exact, nargs - 1};

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
      ec.dict = p->loaded && p->cs[k].dict_loaded ? &p->cs[k].dict : NULL;
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
    items[n_items++] = (dc_plan_item){CELLS_ITEM_ORDER, -1, 0, 1, -1};
  }
  if (i_limit >= 0 && all_exact && !unused && (info->nOrderBy == 0 || ordered)) {
    info->aConstraintUsage[i_limit].argvIndex = ++nargs;
    info->aConstraintUsage[i_limit].omit = 1;
    items[n_items++] = (dc_plan_item){CELLS_ITEM_LIMIT, -1, 0, 1, nargs - 1};
    if (i_offset >= 0) {
      info->aConstraintUsage[i_offset].argvIndex = ++nargs;
      info->aConstraintUsage[i_offset].omit = 1;
      items[n_items++] = (dc_plan_item){CELLS_ITEM_OFFSET, -1, 0, 1, nargs - 1};
    }
  }
  dc_plan_table pt;
  plan_table(p, &pt);
  if (dc_plan_set(info, &pt, items, n_items, nargs) != SQLITE_OK) return SQLITE_NOMEM;
  int used_cols = 0;
  for (int b = 0; b < 64; b++) if ((info->colUsed >> b) & 1) used_cols++;
  info->estimatedRows = (sqlite3_int64)cells_est_rows(&est);
  info->estimatedCost = cells_est_cost(&est, used_cols);
  if (est.unique) info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  return SQLITE_OK;
}

/* --------------------------------------------------------------- cursor */

int cells_open(sqlite3_vtab *tab, sqlite3_vtab_cursor **pp) {
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

int cells_close(sqlite3_vtab_cursor *cur) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  terms_free(c);
  for (int k = 0; k < p->n_ocol; k++) cells_dblock_release(c->cc[k].d);
  sqlite3_free(c->cc);
  if (c->blob) sqlite3_blob_close(c->blob);
  cells_sel_free(&c->sel);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* ------------------------------------------------------------- filtering */

/* Prepares term t (values copied already): its column's kind, and its dictionary for a
** category column. */
static int term_prepare(cells_vtab *p, cells_term *t) {
  int k = ocol_of(t->col);
  t->kind = col_kind(p, t->col);
  if (t->kind == DC_OBS_CATEGORY) {
    int rc = cells_dict_load(p, k);
    if (rc) return rc;
  }
  return cells_term_prepare(t, t->kind == DC_OBS_CATEGORY ? &p->cs[k].dict : NULL) ? SQLITE_NOMEM : SQLITE_OK;
}

/* keeps the rows of the selection that meet term t (a term on a stored column) in this
** visit of block b (cells_filter_block) */
static int filter_block(cells_cursor *c, const cells_term *t, int64_t b, uint64_t visit) {
  cells_vtab *p = (cells_vtab *)c->base.pVtab;
  cells_dblock *d;
  int rc = cells_col_block(c, ocol_of(t->col), b, &d);
  if (rc) return rc;
  return cells_filter_block(t, d, p->cache, &c->sel, visit) ? SQLITE_NOMEM : SQLITE_OK;
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
      if (k >= 0 && (rc = cells_block_seal_verify(c, k, b)) != SQLITE_OK) return rc;
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
      /* a block wholly inside one interval is every row: no list to write (cells_sel) */
      int64_t from = c->pos > bstart ? c->pos : bstart;
      c->sel.full = from == bstart && c->iv[c->iv_pos].lo <= bstart && c->iv[c->iv_pos].hi >= bend;
      if (c->sel.full) c->sel.n = (uint32_t)(bend - bstart);
      else {
        c->sel.n = cells_ivl_rows(c->iv, c->niv, c->iv_pos, c->pos, bstart, bend, c->sel.idx);
        c->sel.full = c->sel.n == (uint32_t)(bend - bstart);
      }
      const uint64_t visit = ++p->cache->visits;
      for (int i = 0; i < c->nterms && c->sel.n; i++) {
        if (ocol_of(c->terms[i].col) < 0) continue;
        rc = filter_block(c, &c->terms[i], b, visit);
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
  c->cell = p->blk_first[c->blk] + cells_sel_row(&c->sel, c->sel_pos);
  return SQLITE_OK;
}

/* the values of term t from its argument a: a list (IN, through sqlite3_vtab_in), none
** (IS [NOT] NULL: one NULL), or one value */
static int term_values(cells_vtab *p, cells_term *t, sqlite3_value *a) {
  int text = col_is_text(p, t->col);
  if (t->op == DC_OP_IN) {
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
  if (t->op == DC_OP_ISNULL || t->op == DC_OP_NOTNULL) { t->v[0].t = SQLITE_NULL; return SQLITE_OK; }
  return cval_set(t->v, a, text);
}

static int cells_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc, sqlite3_value **argv) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  int rc = SQLITE_OK;
  terms_free(c);
  c->eof = 1;
  c->limit = -1;
  c->offset_left = 0;
  c->emitted = 0;
  c->sel.n = c->sel_pos = 0;
  if (idxNum != argc || !idxStr) return dc_err(&p->base.zErrMsg, SQLITE_ERROR, NULL, "cells: unknown plan");
  rc = cells_refresh(p, c);
  if (rc) return rc;
  if (argc < 0 || argc > DC_PLAN_MAX_ARGS)   /* xBestIndex never plans more (terms + LIMIT, OFFSET) */
    return dc_err(&p->base.zErrMsg, SQLITE_ERROR, NULL, "cells: plan with %d arguments", argc);
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
  int n_items;
  char why[200];
  dc_plan_table pt;
  plan_table(p, &pt);
  if (dc_plan_parse(&pt, idxStr, argc, items, DC_PLAN_MAX_ITEMS, &n_items, why, sizeof why))
    return dc_err(&p->base.zErrMsg, SQLITE_ERROR, NULL, "cells: unknown plan '%s': %s", idxStr, why);
  c->terms = sqlite3_malloc64(((sqlite3_uint64)argc + 1) * sizeof(cells_term));
  if (!c->terms) return SQLITE_NOMEM;
  for (int i = 0; i < n_items; i++) {
    const dc_plan_item *it = &items[i];
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

static int cells_next(sqlite3_vtab_cursor *cur) {
  cells_cursor *c = (cells_cursor *)cur;
  cells_vtab *p = (cells_vtab *)cur->pVtab;
  c->emitted++;
  if (c->limit >= 0 && c->emitted >= c->limit) { c->eof = 1; return SQLITE_OK; }
  if (++c->sel_pos < c->sel.n) {
    c->cell = p->blk_first[c->blk] + cells_sel_row(&c->sel, c->sel_pos);
    return SQLITE_OK;
  }
  return advance_block(c);
}

static int cells_eof(sqlite3_vtab_cursor *cur) {
  return ((cells_cursor *)cur)->eof;
}

static int cells_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int col) {
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
    int rc = cells_col_block(c, k, c->blk, &d);
    if (rc) return rc;
  }
  const dc_obs_block *b = &d->blk;
  uint32_t r = (uint32_t)(c->cell - p->blk_first[c->blk]);
  switch (p->oc[k].kind) {
    case DC_OBS_CATEGORY: {
      int32_t code = b->codes[r];
      if (code >= 0) {
        int n;
        const char *s = cells_dict_str(&p->cs[k].dict, (uint32_t)code, &n);
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

static int cells_rowid(sqlite3_vtab_cursor *cur, sqlite_int64 *pRowid) {
  *pRowid = ((cells_cursor *)cur)->cell;
  return SQLITE_OK;
}

static sqlite3_module cells_module = {
  3,                  /* iVersion: xShadowName */
  cells_connect,       /* xCreate: attaches to the tables the converter wrote */
  cells_connect,
  cells_best_index,
  cells_disconnect,
  cells_destroy,
  cells_open,
  cells_close,
  cells_filter,
  cells_next,
  cells_eof,
  cells_column,
  cells_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, /* xUpdate .. xRename: read-only */
  NULL, NULL, NULL,   /* xSavepoint, xRelease, xRollbackTo */
  cells_shadow_name
};

int dc_register_cells(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_cells", &cells_module, conn, dc_conn_unref);
}
