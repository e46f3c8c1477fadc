/*
** vtab_expression.c — per-cell expression for SQL users: two modules.
**
**   CREATE VIRTUAL TABLE expression USING deltacells_expression;
**   CREATE VIRTUAL TABLE expression_long USING deltacells_expression_long;
**
** Schemas:
**
**   expression(                  -- one row per cell (cells without counts too)
**     cell_id INTEGER PRIMARY KEY,   -- also the rowid
**     genes BLOB,                    -- int32 LE gene ids of the nonzero counts, ascending
**     counts BLOB                    -- uint32 LE counts (1 .. 2^32-1), parallel to genes
**   )
**   expression_long(             -- one row per nonzero count (sparse long form)
**     cell_id INTEGER,
**     gene_id INTEGER,
**     count INTEGER                  -- rowid = cell_id * n_genes + gene_id
**   )
**
** Both read their schema's tiles_data (through ext/reader.c: blobs read on the
** querying thread, chunks decoded on the pool, decoded chunks cached per
** connection) and nothing else, so they are SQLITE_VTAB_INNOCUOUS; neither
** owns shadow tables.  Rows come in cell_id order (then gene_id).
**
** Plans (xBestIndex): the shared plan codec (dc_plan.h), e.g.
**   #0 "cell_id" IN ?1 prefilter, #1 "gene_id" = ?2 prefilter, ORDER BY cell_id, gene_id
** Terms: cell_id (or the rowid of expression) =, IN, <, <=, >, >=; gene_id (expression_long)
** = and IN.  IN lists are processed all at once (sqlite3_vtab_in).  The tables compute a
** superset of the matching cells and genes (values of any type are coerced the way an
** INTEGER column compares them; a value whose meaning is unclear widens the set), so every
** term is a prefilter (omit = 0) and SQLite re-checks every row: results equal a native
** table's.  The word "ORDER BY cell_id" ("ORDER BY cell_id, gene_id" for expression_long)
** means the ORDER BY is consumed (ascending).
**
** Reading: the candidate cells are walked in ascending order; on entering a
** tile, the chunks holding the remaining candidates of that tile are fetched
** together (decoded in parallel), up to the decode_mb budget at a time.  With
** gene_id terms, a tile that holds none of the genes (its gene map says so, or
** they lie past its genes: dc_reader_tile_may_hold) is passed over undecoded.
*/
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "dc_plan.h"
#include "dc_reader.h"
#include "dc_value.h"

typedef struct expr_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  dc_conn *conn;
  dc_reader *reader;
  int long_form;
} expr_vtab;

typedef struct expr_cursor {
  sqlite3_vtab_cursor base;
  int eof;
  /* candidate cells: a sorted list, or an interval [lo, hi] */
  int64_t *list;
  int64_t n_list, pos;           /* index into list */
  int64_t lo, hi, cur;           /* interval mode when list == NULL */
  int64_t cell;                  /* current cell id */
  /* genes (long form): sorted list or all */
  int32_t *genes;
  int64_t n_genes_list;          /* -1 = all genes */
  int64_t gpos;                  /* long form: position within the current row (or gene list) */
  /* fetched chunks of the current window */
  dc_chunkkey *keys;
  dc_chunk_data **chunks;
  dc_want *want;                 /* per key: the candidates it holds (cells of wcells) */
  uint32_t *wcells;              /* the window's candidates, chunk-relative, by key */
  size_t n_keys, cap_keys, cap_wcells;
  int64_t win_tile;              /* tile of the window, -1 = none */
  int win_list;                  /* the window was fetched for a list of candidates (want) */
  uint64_t win_ns;               /* cache namespace the window was read in */
  /* current row source */
  const dc_chunk_data *d;
  uint32_t d_cell;
  int64_t row_gene, row_count;   /* long form: current entry */
} expr_cursor;

enum { E_CELL, E_GENES, E_COUNTS };
enum { L_CELL, L_GENE, L_COUNT };


static int expr_init(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr, int long_form) {
  if (argc > 3) {
    *pzErr = sqlite3_mprintf("%s: takes no arguments", long_form ? "deltacells_expression_long" : "deltacells_expression");
    return SQLITE_ERROR;
  }
  int rc = sqlite3_declare_vtab(db, long_form
      ? "CREATE TABLE x(cell_id INTEGER, gene_id INTEGER, count INTEGER)"
      : "CREATE TABLE x(cell_id INTEGER PRIMARY KEY, genes BLOB, counts BLOB)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  expr_vtab *v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->db = db;
  v->conn = aux;
  v->long_form = long_form;
  rc = dc_reader_open(db, v->conn, argv[1], long_form ? "expression_long" : "expression", &v->reader, pzErr);
  if (rc != SQLITE_OK) { sqlite3_free(v); return rc; }
  *ppVtab = &v->base;
  return SQLITE_OK;
}
static int expr_create(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **pzErr) {
  return expr_init(db, aux, argc, argv, pp, pzErr, 0);
}
static int expr_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **pzErr) {
  return expr_init(db, aux, argc, argv, pp, pzErr, 0);
}
static int exprl_create(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **pzErr) {
  return expr_init(db, aux, argc, argv, pp, pzErr, 1);
}
static int exprl_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **pp, char **pzErr) {
  return expr_init(db, aux, argc, argv, pp, pzErr, 1);
}

static int expr_disconnect(sqlite3_vtab *p) {
  expr_vtab *v = (expr_vtab *)p;
  dc_reader_free(v->reader);
  sqlite3_free(v);
  return SQLITE_OK;
}

static int expr_destroy(sqlite3_vtab *p) {
  expr_vtab *v = (expr_vtab *)p;
  int refused = dc_drop_check(v->conn, v->reader ? v->reader->schema : "main",
                              v->long_form ? "expression_long" : "expression");
  if (refused) return refused;
  return expr_disconnect(p);
}

/* ------------------------------------------------ plans */
static const char *const e_names[] = {"cell_id", "genes", "counts"};
static const char *const l_names[] = {"cell_id", "gene_id", "count"};
static const char *plan_col_name(void *ctx, int col) {
  return (((expr_vtab *)ctx)->long_form ? l_names : e_names)[col];
}
static const dc_plan_word e_words[] = {{"ORDER BY cell_id", 0}};
static const dc_plan_word l_words[] = {{"ORDER BY cell_id, gene_id", 0}};
enum { ITEM_ORDER = 1 };
/* what the table's plans name (dc_plan.h) */
static void plan_table(expr_vtab *v, dc_plan_table *t) {
  t->ncols = 3;
  t->name = plan_col_name;
  t->ctx = v;
  t->words = v->long_form ? l_words : e_words;
  t->nwords = 1;
}

static int expr_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
  expr_vtab *v = (expr_vtab *)p;
  double n_cells = v->reader->loaded ? (double)v->reader->n_cells : 1e6;
  double per_cell = v->long_form ? 1000.0 : 1.0;
  int cell_col = v->long_form ? L_CELL : E_CELL;
  dc_plan_item items[DC_PLAN_MAX_TERMS + 1];
  int n = 0, cell_eq = 0, cell_in = 0, cell_range = 0, gene_eq = 0, gene_in = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (!c->usable) continue;
    int is_cell = c->iColumn == cell_col || (!v->long_form && c->iColumn == -1);
    int is_gene = v->long_form && c->iColumn == L_GENE;
    int op = 0;
    if (n >= DC_PLAN_MAX_TERMS) break;   /* the rest SQLite checks */
    if (is_cell) {
      switch (c->op) {
        case SQLITE_INDEX_CONSTRAINT_EQ:
          if (cell_eq || cell_in) continue;
          if (sqlite3_vtab_in(info, i, -1)) { sqlite3_vtab_in(info, i, 1); op = DC_OP_IN; cell_in = 1; }
          else { op = DC_OP_EQ; cell_eq = 1; }
          break;
        case SQLITE_INDEX_CONSTRAINT_GT: op = DC_OP_GT; cell_range++; break;
        case SQLITE_INDEX_CONSTRAINT_GE: op = DC_OP_GE; cell_range++; break;
        case SQLITE_INDEX_CONSTRAINT_LT: op = DC_OP_LT; cell_range++; break;
        case SQLITE_INDEX_CONSTRAINT_LE: op = DC_OP_LE; cell_range++; break;
        default: continue;
      }
    } else if (is_gene && c->op == SQLITE_INDEX_CONSTRAINT_EQ && !gene_eq && !gene_in) {
      if (sqlite3_vtab_in(info, i, -1)) { sqlite3_vtab_in(info, i, 1); op = DC_OP_IN; gene_in = 1; }
      else { op = DC_OP_EQ; gene_eq = 1; }
    } else {
      continue;
    }
    info->aConstraintUsage[i].argvIndex = ++n;
    info->aConstraintUsage[i].omit = 0;      /* superset + re-check: exact semantics */
    items[n - 1] = (dc_plan_item){DC_ITEM_TERM, is_cell ? cell_col : L_GENE, op, 0, n - 1};
  }
  int n_items = n;
  int order_ok = info->nOrderBy >= 1;
  for (int k = 0; k < info->nOrderBy && order_ok; k++) {
    int col = info->aOrderBy[k].iColumn;
    if (info->aOrderBy[k].desc) order_ok = 0;
    else if (k == 0) order_ok = col == cell_col || (!v->long_form && col == -1);
    else if (k == 1 && v->long_form) order_ok = col == L_GENE;
    else order_ok = 0;
  }
  if (order_ok) {
    items[n_items++] = (dc_plan_item){ITEM_ORDER, -1, 0, 1, -1};
    info->orderByConsumed = 1;
  }
  dc_plan_table pt;
  plan_table(v, &pt);
  if (dc_plan_set(info, &pt, items, n_items, n) != SQLITE_OK) return SQLITE_NOMEM;
  double cells = cell_eq ? 1 : cell_in ? 25 : cell_range ? n_cells / (cell_range > 1 ? 10 : 3) : n_cells;
  double rows = cells * (v->long_form ? ((gene_eq || gene_in) ? 0.3 * (gene_in ? 5 : 1) : per_cell) : 1);
  info->estimatedRows = (sqlite3_int64)(rows < 1 ? 1 : rows);
  info->estimatedCost = 10.0 + cells * 20.0 + rows;     /* decoding dominates */
  if (cell_eq && (!v->long_form || gene_eq)) info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  return SQLITE_OK;
}

/* ------------------------------------------------ values -> candidates */
/* A bound from a range constraint: narrows [lo, hi]; returns 0 if the range
** is empty (NULL operand). Only numeric operands narrow (superset otherwise). */
static int apply_bound(sqlite3_value *v, const char *op, int64_t *lo, int64_t *hi) {
  int t = sqlite3_value_type(v);
  if (t == SQLITE_NULL) return 0;
  if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) return 1;
  double d = sqlite3_value_double(v);
  int64_t x;
  if (t == SQLITE_INTEGER) x = sqlite3_value_int64(v);
  else if (d > 9.2e18) x = INT64_MAX;
  else if (d < -9.2e18) x = INT64_MIN;
  else x = (int64_t)floor(d);
  if (op[0] == '>') {
    int64_t b = x;                  /* superset: cells >= floor(d) */
    if (t == SQLITE_INTEGER && op[1] == 0 && x < INT64_MAX) b = x + 1;
    if (b > *lo) *lo = b;
  } else {
    int64_t b = x;
    if (t == SQLITE_FLOAT && d != floor(d) && x < INT64_MAX) b = x;   /* floor(d) < d */
    if (t == SQLITE_INTEGER && op[1] == 0 && x > INT64_MIN) b = x - 1;
    if (b < *hi) *hi = b;
  }
  return 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Collects the integer candidates of an EQ or IN value into a growing list.
** Returns -1 when a value is unclear (the caller then ignores this constraint). */
static int collect(sqlite3_value *v, int is_in, int64_t **list, int64_t *n, int64_t *cap) {
  sqlite3_value *e = NULL;
  int rc = is_in ? sqlite3_vtab_in_first(v, &e) : SQLITE_OK;
  if (!is_in) e = v;
  while (rc == SQLITE_OK && e) {
    int64_t x;
    int k = dc_value_int_eq(e, &x);
    if (k < 0) return -1;
    if (k > 0) {
      if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        int64_t *nl = sqlite3_realloc64(*list, (uint64_t)*cap * sizeof **list);
        if (!nl) return SQLITE_NOMEM;
        *list = nl;
      }
      (*list)[(*n)++] = x;
    }
    if (!is_in) break;
    rc = sqlite3_vtab_in_next(v, &e);
  }
  if (is_in && rc != SQLITE_DONE && rc != SQLITE_OK) return rc;
  return SQLITE_OK;
}

/* Whether window chunk i (of `nnz` nonzeros in the tile) holds the row of its cell cl: a
** chunk decoded in part (fewer nonzeros than the chunk's) holds only its candidates' rows. */
static int window_holds(const expr_cursor *c, size_t i, uint64_t nnz, uint32_t cl) {
  if (c->chunks[i]->nnz == nnz) return 1;
  if (!c->win_list) return 0;
  const dc_want *w = &c->want[i];
  uint32_t lo = 0, hi = w->n;                /* the candidates are ascending */
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (w->cells[mid] < cl) lo = mid + 1; else hi = mid;
  }
  return lo < w->n && w->cells[lo] == cl;
}

static void release_window(expr_cursor *c) {
  for (size_t i = 0; i < c->n_keys; i++) dc_chunk_release(c->chunks[i]);
  c->n_keys = 0;
  c->win_tile = -1;
  c->d = NULL;
}

/* Clears the candidates; the window of decoded chunks stays (a join probes
** one cell per xFilter: neighbouring cells reuse the window). */
static void cursor_clear(expr_cursor *c) {
  sqlite3_free(c->list); c->list = NULL;
  sqlite3_free(c->genes); c->genes = NULL;
  c->n_list = 0; c->pos = 0;
  c->n_genes_list = -1;
  c->eof = 1;
}

/* ------------------------------------------------ walking cells */
/* The next candidate cell at or after the current position (in range of the
** dataset), or -1 at the end. */
static int64_t peek_cell(expr_cursor *c, int64_t n_cells) {
  if (c->list) {
    while (c->pos < c->n_list && (c->list[c->pos] < 0 || c->list[c->pos] >= n_cells)) c->pos++;
    return c->pos < c->n_list ? c->list[c->pos] : -1;
  }
  if (c->cur < 0) c->cur = 0;
  if (c->cur > c->hi || c->cur >= n_cells) return -1;
  return c->cur;
}
static void advance_cell(expr_cursor *c) {
  if (c->list) {
    int64_t was = c->list[c->pos];
    while (c->pos < c->n_list && c->list[c->pos] == was) c->pos++;
  } else {
    c->cur++;
  }
}

/* Makes sure the chunk of `cell` is in the window; fetches the chunks of the
** tile's remaining candidates when entering a new tile. */
static int load_cell(expr_cursor *c, int64_t cell) {
  expr_vtab *v = (expr_vtab *)c->base.pVtab;
  dc_reader *r = v->reader;
  char *err = NULL;
  int rc = SQLITE_OK;
  int64_t t = dc_reader_tile_of(r, cell);
  const dc_tilehead *h;
  if (t < 0) return dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "%s: cell %lld has no tile", r->what, (long long)cell);
  if ((rc = dc_reader_head(r, (uint32_t)t, &h, &err)) != SQLITE_OK) goto out;
  uint32_t rel = (uint32_t)(cell - r->tiles[t].first_cell);
  uint32_t ch = dc_reader_chunk_of(h, rel);
  if (c->win_tile == t && c->win_ns == r->ns) {
    for (size_t i = 0; i < c->n_keys; i++) {
      if (c->keys[i].chunk == ch) {
        uint32_t cl = rel - h->hdr.chunk[ch].first_cell;
        if (!window_holds(c, i, h->hdr.chunk[ch].nnz, cl)) break;
        c->d = c->chunks[i];
        c->d_cell = cl;
        goto out;
      }
    }
  }
  /* a new window: the chunks of this tile that the remaining candidates need */
  release_window(c);
  if (c->cap_keys < h->hdr.n_chunks) {
    size_t cap = h->hdr.n_chunks ? h->hdr.n_chunks : 1;
    dc_chunkkey *nk = sqlite3_realloc64(c->keys, cap * sizeof *nk);
    if (!nk) { rc = SQLITE_NOMEM; goto out; }
    c->keys = nk;
    dc_want *nw = sqlite3_realloc64(c->want, cap * sizeof *nw);
    if (!nw) { rc = SQLITE_NOMEM; goto out; }
    c->want = nw;
    dc_chunk_data **nc = sqlite3_realloc64(c->chunks, cap * sizeof *nc);
    if (!nc) { rc = SQLITE_NOMEM; goto out; }
    c->chunks = nc;
    c->cap_keys = cap;
  }
  c->win_list = c->list != NULL;
  int64_t tile_end = r->tiles[t].first_cell + r->tiles[t].n_cells;
  int64_t budget = v->conn->work_bytes, bytes = 0;
  uint32_t k = ch;
  size_t nk = 0;
  const dc_want *want = NULL;
  if (c->list) {
    /* the candidates of each chunk go with it: a chunk not cached of which few are wanted
    ** is decoded for those alone (dc_reader_fetch) */
    int64_t end = c->pos;
    while (end < c->n_list && c->list[end] < tile_end) end++;
    if ((size_t)(end - c->pos) > c->cap_wcells) {
      size_t cap = (size_t)(end - c->pos);
      uint32_t *nw = sqlite3_realloc64(c->wcells, cap * sizeof *nw);
      if (!nw) { rc = SQLITE_NOMEM; goto out; }
      c->wcells = nw;
      c->cap_wcells = cap;
    }
    size_t nw = 0;
    for (int64_t p = c->pos; p < end; p++) {
      uint32_t tr = (uint32_t)(c->list[p] - r->tiles[t].first_cell);
      uint32_t cc = dc_reader_chunk_of(h, tr);
      if (!nk || c->keys[nk - 1].chunk != cc) {
        int64_t b = (int64_t)h->hdr.chunk[cc].nnz * 8;
        if (nk && bytes + b > budget) break;
        bytes += b;
        c->keys[nk].tile = (uint32_t)t; c->keys[nk].chunk = cc;
        c->want[nk].cells = c->wcells + nw;
        c->want[nk].n = 0;
        nk++;
      }
      c->wcells[nw++] = tr - h->hdr.chunk[cc].first_cell;
      c->want[nk - 1].n++;
    }
    want = c->want;
  } else {
    int64_t last = c->hi < tile_end - 1 ? c->hi : tile_end - 1;
    uint32_t kl = dc_reader_chunk_of(h, (uint32_t)(last - r->tiles[t].first_cell));
    for (; k <= kl; k++) {
      int64_t b = (int64_t)h->hdr.chunk[k].nnz * 8;
      if (nk && bytes + b > budget) break;
      bytes += b;
      c->keys[nk].tile = (uint32_t)t; c->keys[nk].chunk = k; nk++;
    }
  }
  rc = dc_reader_fetch(r, c->keys, nk, c->chunks, 1, want, &err);
  dc_reader_end(r);
  if (rc != SQLITE_OK) goto out;
  c->n_keys = nk;
  c->win_tile = t;
  c->win_ns = r->ns;
  c->d = c->chunks[0];
  c->d_cell = rel - h->hdr.chunk[ch].first_cell;
out:
  if (err) { sqlite3_free(v->base.zErrMsg); v->base.zErrMsg = err; }
  return rc;
}

/* long form: finds the next (gene, count) of the current row at or after
** gpos; returns 1 if found. */
static int long_seek(expr_cursor *c) {
  const dc_chunk_data *d = c->d;
  int64_t a = d->indptr[c->d_cell], b = d->indptr[c->d_cell + 1];
  if (c->n_genes_list < 0) {
    if (a + c->gpos >= b) return 0;
    c->row_gene = d->indices[a + c->gpos];
    c->row_count = (uint32_t)d->values[a + c->gpos];
    return 1;
  }
  while (c->gpos < c->n_genes_list) {
    int32_t g = c->genes[c->gpos];
    int64_t lo = a, hi = b;                 /* binary search in the sorted row */
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      if (d->indices[mid] < g) lo = mid + 1; else hi = mid;
    }
    if (lo < b && d->indices[lo] == g) {
      c->row_gene = g;
      c->row_count = (uint32_t)d->values[lo];
      return 1;
    }
    c->gpos++;
  }
  return 0;
}

/* long form with a gene list: 1 when the tile of `cell` (not the window's) holds none of the
** genes, as its gene map says; the candidates then move past the tile. */
static int skip_tile(expr_cursor *c, int64_t cell, int *skipped) {
  expr_vtab *v = (expr_vtab *)c->base.pVtab;
  dc_reader *r = v->reader;
  *skipped = 0;
  int64_t t = dc_reader_tile_of(r, cell);
  if (!v->long_form || c->n_genes_list < 0 || t < 0 || t == c->win_tile) return SQLITE_OK;
  char *err = NULL;
  int may = 1, rc = dc_reader_tile_may_hold(r, (uint32_t)t, c->genes, c->n_genes_list, &may, &err);
  if (err) { sqlite3_free(v->base.zErrMsg); v->base.zErrMsg = err; }
  if (rc != SQLITE_OK || may) return rc;
  int64_t end = r->tiles[t].first_cell + r->tiles[t].n_cells;
  if (c->list) while (c->pos < c->n_list && c->list[c->pos] < end) c->pos++;
  else c->cur = end;
  *skipped = 1;
  return SQLITE_OK;
}

/* Moves to the next row at or after the current candidate. */
static int settle(expr_cursor *c) {
  expr_vtab *v = (expr_vtab *)c->base.pVtab;
  int64_t n_cells = v->reader->n_cells;
  for (;;) {
    int64_t cell = peek_cell(c, n_cells);
    if (cell < 0) { c->eof = 1; return SQLITE_OK; }
    if (c->cell != cell || !c->d) {
      int skipped, rc = skip_tile(c, cell, &skipped);
      if (rc != SQLITE_OK) return rc;
      if (skipped) continue;
      rc = load_cell(c, cell);
      if (rc != SQLITE_OK) return rc;
      c->cell = cell;
      c->gpos = 0;
    }
    if (!v->long_form || long_seek(c)) return SQLITE_OK;
    advance_cell(c);
    c->d = NULL;
  }
}


/* list[0, before) and list[before, n) are two value lists from two constraints:
** keeps their intersection (in the second list's order) at the front and
** returns its length. */
static int64_t intersect_tail(int64_t *list, int64_t before, int64_t n) {
  if (before > 1) qsort(list, (size_t)before, sizeof *list, cmp_i64);
  int64_t m = 0;
  for (int64_t i = before; i < n; i++)
    if (before && bsearch(&list[i], list, (size_t)before, sizeof *list, cmp_i64)) list[before + m++] = list[i];
  if (m) memmove(list, list + before, (size_t)m * sizeof *list);
  return m;
}
static int expr_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc, sqlite3_value **argv) {
  expr_cursor *c = (expr_cursor *)cur;
  expr_vtab *v = (expr_vtab *)cur->pVtab;
  char *err = NULL;
  int rc;
  cursor_clear(c);
  c->cell = -1;
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
  int n_items;
  char why[200];
  dc_plan_table pt;
  plan_table(v, &pt);
  if (dc_plan_take(&pt, idxNum, idxStr, argc, items, &n_items, why, sizeof why))
    return why[0] ? dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "%s: unknown plan '%s': %s", v->reader->what, idxStr, why)
                  : dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "%s: unknown plan", v->reader->what);
  if ((rc = dc_reader_begin(v->reader, &err)) != SQLITE_OK) {
    sqlite3_free(v->base.zErrMsg); v->base.zErrMsg = err;
    return rc;
  }
  int64_t lo = 0, hi = INT64_MAX, n_list = 0, cap = 0, g_n = 0, g_cap = 0;
  int64_t *list = NULL, *glist = NULL;
  int have_list = 0, have_genes = 0, empty = 0;
  int cell_col = v->long_form ? L_CELL : E_CELL;
  rc = SQLITE_OK;
  for (int i = 0; i < n_items && rc == SQLITE_OK; i++) {
    const dc_plan_item *it = &items[i];
    if (it->kind == ITEM_ORDER) continue;
    sqlite3_value *val = argv[it->arg];
    int is_list = it->op == DC_OP_EQ || it->op == DC_OP_IN;
    if (it->col == cell_col && is_list) {
      int64_t before = n_list;
      int k = collect(val, it->op == DC_OP_IN, &list, &n_list, &cap);
      if (k < 0) { n_list = before; continue; }       /* unclear: do not narrow */
      if (k != SQLITE_OK) { rc = k; break; }
      if (have_list) n_list = intersect_tail(list, before, n_list);   /* two cell lists (rare) */
      have_list = 1;
    } else if (v->long_form && it->col == L_GENE && is_list) {
      int64_t before = g_n;
      int k = collect(val, it->op == DC_OP_IN, &glist, &g_n, &g_cap);
      if (k < 0) { g_n = before; continue; }
      if (k != SQLITE_OK) { rc = k; break; }
      if (have_genes) g_n = intersect_tail(glist, before, g_n);
      have_genes = 1;
    } else if (it->col == cell_col && (it->op == DC_OP_GT || it->op == DC_OP_GE || it->op == DC_OP_LT ||
                                       it->op == DC_OP_LE)) {
      if (!apply_bound(val, dc_op_word(it->op), &lo, &hi)) empty = 1;
    } else {
      rc = dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "%s: unknown plan '%s': item %d is not a term this table takes", v->reader->what,
                  idxStr, i + 1);
    }
  }
  if (rc != SQLITE_OK) { sqlite3_free(list); sqlite3_free(glist); return rc; }
  if (have_list) {
    if (n_list > 1) qsort(list, (size_t)n_list, sizeof *list, cmp_i64);
    int64_t m = 0;
    for (int64_t i = 0; i < n_list; i++)
      if (list[i] >= lo && list[i] <= hi && (m == 0 || list[m - 1] != list[i])) list[m++] = list[i];
    n_list = m;
    c->list = list ? list : sqlite3_malloc64(8);
    if (!c->list) return SQLITE_NOMEM;
    c->n_list = n_list;
    list = NULL;
  }
  sqlite3_free(list);
  if (have_genes) {
    if (g_n > 1) qsort(glist, (size_t)g_n, sizeof *glist, cmp_i64);
    c->genes = sqlite3_malloc64((uint64_t)(g_n ? g_n : 1) * sizeof *c->genes);
    if (!c->genes) { sqlite3_free(glist); return SQLITE_NOMEM; }
    int64_t m = 0;
    for (int64_t i = 0; i < g_n; i++)
      if (glist[i] >= 0 && glist[i] < v->reader->n_genes && (m == 0 || c->genes[m - 1] != glist[i]))
        c->genes[m++] = (int32_t)glist[i];
    c->n_genes_list = m;
    if (m == 0) empty = 1;
  }
  sqlite3_free(glist);
  c->lo = lo; c->hi = hi; c->cur = lo;
  c->eof = 0;
  if (empty) { c->eof = 1; return SQLITE_OK; }
  rc = settle(c);
  dc_reader_end(v->reader);
  return rc;
}

static int expr_next(sqlite3_vtab_cursor *cur) {
  expr_cursor *c = (expr_cursor *)cur;
  expr_vtab *v = (expr_vtab *)cur->pVtab;
  if (v->long_form) {
    c->gpos++;
    if (long_seek(c)) return SQLITE_OK;
  }
  advance_cell(c);
  c->d = NULL;
  int rc = settle(c);
  dc_reader_end(v->reader);
  return rc;
}

static int expr_open(sqlite3_vtab *p, sqlite3_vtab_cursor **ppCur) {
  (void)p;
  expr_cursor *c = sqlite3_malloc64(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->eof = 1;
  c->win_tile = -1;
  c->n_genes_list = -1;
  *ppCur = &c->base;
  return SQLITE_OK;
}
static int expr_close(sqlite3_vtab_cursor *cur) {
  expr_cursor *c = (expr_cursor *)cur;
  cursor_clear(c);
  release_window(c);
  sqlite3_free(c->keys);
  sqlite3_free(c->chunks);
  sqlite3_free(c->want);
  sqlite3_free(c->wcells);
  sqlite3_free(c);
  return SQLITE_OK;
}
static int expr_eof(sqlite3_vtab_cursor *cur) { return ((expr_cursor *)cur)->eof; }

static int expr_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i) {
  expr_cursor *c = (expr_cursor *)cur;
  expr_vtab *v = (expr_vtab *)cur->pVtab;
  if (v->long_form) {
    switch (i) {
      case L_CELL: sqlite3_result_int64(ctx, c->cell); break;
      case L_GENE: sqlite3_result_int64(ctx, c->row_gene); break;
      case L_COUNT: sqlite3_result_int64(ctx, c->row_count); break;
    }
    return SQLITE_OK;
  }
  const dc_chunk_data *d = c->d;
  int64_t a = d->indptr[c->d_cell], b = d->indptr[c->d_cell + 1];
  switch (i) {
    case E_CELL: sqlite3_result_int64(ctx, c->cell); break;
    case E_GENES: sqlite3_result_blob64(ctx, d->indices + a, (uint64_t)(b - a) * 4, SQLITE_TRANSIENT); break;
    case E_COUNTS: sqlite3_result_blob64(ctx, d->values + a, (uint64_t)(b - a) * 4, SQLITE_TRANSIENT); break;
  }
  return SQLITE_OK;
}

static int expr_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  expr_cursor *c = (expr_cursor *)cur;
  expr_vtab *v = (expr_vtab *)cur->pVtab;
  *pRowid = v->long_form ? c->cell * v->reader->n_genes + c->row_gene : c->cell;
  return SQLITE_OK;
}

static sqlite3_module expr_module = {
  3, expr_create, expr_connect, expr_best_index, expr_disconnect, expr_destroy,
  expr_open, expr_close, expr_filter, expr_next, expr_eof, expr_column, expr_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};
static sqlite3_module exprl_module = {
  3, exprl_create, exprl_connect, expr_best_index, expr_disconnect, expr_destroy,
  expr_open, expr_close, expr_filter, expr_next, expr_eof, expr_column, expr_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
};

int dc_register_expression(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  int rc = sqlite3_create_module_v2(db, "deltacells_expression", &expr_module, conn, dc_conn_unref);
  if (rc != SQLITE_OK) return rc;
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_expression_long", &exprl_module, conn, dc_conn_unref);
}
