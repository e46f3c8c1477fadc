/*
** vtab_batch.c — dc_batch(cells [, genes]): a batch of cells as CSR blobs
** (module deltacells_batch).
**
**   CREATE VIRTUAL TABLE dc_batch USING deltacells_batch;      -- in the dataset
**   SELECT n_cells, indptr, indices, data FROM dc_batch(?1);
**   SELECT * FROM aux.dc_batch('[5, 3, 5]', '["CD3E", "MS4A1"]');
**
** Schema (one row per call):
**
**   CREATE TABLE x(
**     n_cells INTEGER,   -- cells in the batch (with repeats)
**     n_genes INTEGER,   -- genes of the dataset, or of the panel
**     cell_ids BLOB,     -- int64 LE, the requested ids in the requested order
**     indptr BLOB,       -- int64 LE, n_cells+1 entries, indptr[0] = 0
**     indices BLOB,      -- int32 LE gene indices, sorted within each cell
**     data BLOB,         -- int32 LE counts
**     cells HIDDEN,      -- argument 1: int64 LE blob of cell ids, or a JSON array
**     genes HIDDEN       -- argument 2 (optional): JSON array of gene names, or
**                        --   an int32 LE blob of gene ids; output gene indices are
**                        --   then positions in this panel, other genes dropped
**     obs HIDDEN         -- argument 3 (optional): JSON array of obs column names
**                        --   (stored columns of the cells table, not text)
**     place HIDDEN       -- argument 4 (optional): 1 asks for a placing result
**                        --   (below); 0 or NULL, the usual one
**     ticket HIDDEN      -- read only: an integer that deltacells_ticket_take()
**                        --   (a C function of this library) exchanges for the
**                        --   indptr/indices/data, copied once into the caller's
**                        --   buffers (and converted to the caller's dtype)
**     nnz HIDDEN         -- read only: the batch's nonzeros (length(data) / 4,
**                        --   without making the data blob)
**     cell_nnz HIDDEN    -- read only, with place: int32 LE, each requested
**                        --   cell's nonzeros, in request order (with a gene
**                        --   panel: before it, the room its place needs); NULL when the
**                        --   cells cannot be placed (a repeated cell, a tile of
**                        --   a codec other than rans): ask without place then
**     obs_values HIDDEN  -- read only, with obs: the values of those columns for
**                        --   the batch's cells, in row order, in one blob: m int64
**                        --   formats (0 int64, 1 float64), then m columns of
**                        --   n_cells 8-byte values: category codes (-1 NULL),
**                        --   bools 0/1 (-1 NULL), reals (NaN NULL), ints (as
**                        --   float64 with NaN when the batch holds a NULL)
**   );
**
**   SELECT n_cells, ticket, obs_values FROM dc_batch(?1, NULL, '["cell_type"]');
**
** Obs values come from the same blocks the cells table reads (dc_cells_values in
** vtab_cells.c: seals checked, blocks cached by that table): labels as codes, in
** the same call as the counts, with no per-cell text.
**
** The ticket is how the Python loader avoids Python's sqlite3 copying every
** blob into a fresh bytes object: it selects n_cells, n_genes and ticket, then
** calls deltacells_ticket_take through ctypes with its own (reused) buffers.
** When no row has to be staged, decoded straight or mapped to a panel (the loader's
** shuffled batches), the rows are not gathered in xFilter at all: the cursor keeps
** them as a "pending" result (where each row is in its decoded chunk, references to
** those chunks held), and the ticket copies them once, from the chunks into the
** caller's buffers, converting the values on the way (batch_run_take, on the pool).
** Reading indices or data from SQL gathers them then, into blobs, as before.
** At most TICKET_MAX tickets are outstanding in the process; older ones are
** released.  An unknown (taken, released or made-up) ticket is an error, never
** a memory access.
**
** Placing (place = 1): the loader's shuffled batches each take cells from
** every chunk of a window of tiles, so a window's chunks decoded into the chunk cache and
** then copied row by row into each batch cost a decode and a copy of every value.  With
** place, the call reads the raw bytes of the chunks holding the requested cells (on the
** querying thread, as always) and their per-cell counts (no decoding), and returns
** cell_nnz and a ticket; the caller lays out its batches from cell_nnz and hands the ticket
** to deltacells_ticket_place (ctypes) with one address per cell, which decodes each chunk
** once on the pool, every requested cell straight to its address: no cache entry, no copy.
** The indptr, indices, data and cell_ids columns are NULL then.  With a gene panel, cell_nnz
** is each cell's size before the panel (the room its place needs); each placed row is filtered
** to the panel where it lies, on the thread that placed it while it is in that core's cache,
** and its size after the panel comes back (deltacells_ticket_place's row_nnz); the ticket
** packs the caller's batches too (its seg argument, on the pool).  One pass over each value, where reading
** batch by batch decodes into the cache, counts each row's panel genes, then copies them.
**
** Cells may come in any order and repeat; rows follow the request.  The
** table reads nothing but its own schema's tiles_data, dc_meta and genes, so
** it is SQLITE_VTAB_INNOCUOUS.  It owns no shadow tables (tiles_data belongs
** to `tiles`).
**
** Plans (xBestIndex): the shared plan codec (dc_plan.h): the arguments as exact terms on the
** hidden columns, e.g.
**
**   #6 "cells" = ?1, #7 "genes" = ?2, #8 "obs" = ?3
**
** "scan" (no argument) is chosen only when the query gives no cells; xFilter then
** fails with an error saying so.  An argument that exists but is not usable
** yet (it depends on a later table of a join) makes the plan impossible
** (SQLITE_CONSTRAINT), so SQLite orders the join to supply it.
**
** How a batch is made (all on the querying thread except the marked steps):
**   1. the cells are parsed and checked, mapped to (tile, chunk, cell);
**   2. runs of requested cells that cover a whole chunk in order, and whose
**      chunk is not cached, are "direct": decoded later straight into the
**      output arrays (no panel only); with a panel, cells of tiles whose gene
**      maps hold none of its genes are empty rows, their chunks not read;
**   3. the other cells' chunks are fetched through the reader (cache, else
**      blob reads + decoding on the pool [threads]) in groups that fit the
**      memory budget; with one group the rows are gathered straight from the
**      decoded chunks, otherwise group by group into a staging buffer;
**   4. the output layout is computed, direct chunks decoded into it [threads],
**      other rows copied (and mapped to the panel and sorted) [threads].
** Output blobs are handed to SQLite without a copy (reference-counted
** buffers with their own destructor, so a column read twice stays valid).
** Steps 2-4 and the row kernels are pure C in batch_plan.c (unit-tested in
** tests/c/test_batch_plan.c); this file is the glue around them.  A placing request is read by
** batch_place.c.
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dc_plan.h"
#include "dc_select.h"
#include "batch_plan.h"
#include "batch_ticket.h"

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct batch_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  dc_conn *conn;
  dc_reader *reader;
  dc_panel panel;          /* the last gene panel (ext/select.c) */
} batch_vtab;

typedef struct batch_cursor {
  sqlite3_vtab_cursor base;
  int eof;
  int64_t n_cells, n_genes, nnz;
  void *blob[5];           /* cell_ids, indptr, indices, data, obs_values (refcounted) */
  uint64_t len[5];
  batch_pending *pend;     /* indices and data not gathered yet (blob[2], blob[3] NULL) */
  batch_place *place;      /* a placing result (place = 1) */
  void *cell_nnz;          /* its per-cell counts (rcbuf, int32 x n_cells) */
} batch_cursor;

/* the arguments are the first four hidden columns, in argument order */
enum { COL_NCELLS, COL_NGENES, COL_CELLIDS, COL_INDPTR, COL_INDICES, COL_DATA, COL_CELLS, COL_GENES, COL_OBS,
       COL_PLACE, COL_TICKET, COL_OBSVAL, COL_NNZ, COL_CELLNNZ };

static void cursor_reset(batch_cursor *c) {
  for (int i = 0; i < 5; i++) { rcbuf_unref(c->blob[i]); c->blob[i] = NULL; c->len[i] = 0; }
  batch_pending_unref(c->pend);
  c->pend = NULL;
  batch_place_unref(c->place);
  c->place = NULL;
  rcbuf_unref(c->cell_nnz);
  c->cell_nnz = NULL;
  c->eof = 1;
}

/* ------------------------------------------------ connect / disconnect */
static int batch_init(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab,
                      char **pzErr) {
  if (argc > 3) {
    *pzErr = sqlite3_mprintf("deltacells_batch: takes no arguments");
    return SQLITE_ERROR;
  }
  int rc = sqlite3_declare_vtab(db,
      "CREATE TABLE x(n_cells INTEGER, n_genes INTEGER, cell_ids BLOB, indptr BLOB, indices BLOB,"
      " data BLOB, cells HIDDEN, genes HIDDEN, obs HIDDEN, place HIDDEN, ticket HIDDEN, obs_values HIDDEN,"
      " nnz HIDDEN, cell_nnz HIDDEN)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  batch_vtab *v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->db = db;
  v->conn = aux;
  rc = dc_reader_open(db, v->conn, argv[1], "dc_batch", &v->reader, pzErr);
  if (rc != SQLITE_OK) { sqlite3_free(v); return rc; }
  *ppVtab = &v->base;
  return SQLITE_OK;
}
static int batch_create(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab,
                        char **pzErr) {
  return batch_init(db, aux, argc, argv, ppVtab, pzErr);
}
static int batch_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **ppVtab,
                         char **pzErr) {
  return batch_init(db, aux, argc, argv, ppVtab, pzErr);
}

static int batch_disconnect(sqlite3_vtab *p) {
  batch_vtab *v = (batch_vtab *)p;
  dc_reader_free(v->reader);
  dc_panel_clear(&v->panel);
  sqlite3_free(v);
  return SQLITE_OK;
}

static int batch_destroy(sqlite3_vtab *p) {
  batch_vtab *v = (batch_vtab *)p;
  int refused = dc_drop_check(v->conn, v->reader ? v->reader->schema : "main", "dc_batch");
  if (refused) return refused;
  return batch_disconnect(p);
}

/* ------------------------------------------------ plans */
static const char *const col_names[] = {"n_cells", "n_genes", "cell_ids", "indptr", "indices", "data",
                                       "cells", "genes", "obs", "place", "ticket", "obs_values", "nnz",
                                       "cell_nnz"};
static const char *plan_col_name(void *ctx, int col) { (void)ctx; return col_names[col]; }
static const dc_plan_table plan_table = {(int)(sizeof col_names / sizeof col_names[0]), plan_col_name, NULL, NULL, 0};

/* the argument columns, in argument order */
static const int arg_cols[4] = {COL_CELLS, COL_GENES, COL_OBS, COL_PLACE};

static int batch_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
  int idx[4] = { -1, -1, -1, -1 }, unusable = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (c->iColumn == COL_TICKET && c->op == SQLITE_INDEX_CONSTRAINT_EQ) {
      /* a 5th argument lands on the ticket column: an output, which no batch's ticket equals
      ** yet, so the call returned no row without a word */
      sqlite3_free(p->zErrMsg);
      p->zErrMsg = sqlite3_mprintf("dc_batch takes at most 4 arguments (cells, genes, obs, place); "
                                   "ticket is an output column");
      return SQLITE_ERROR;
    }
    int a = -1;
    for (int k = 0; k < 4; k++) if (c->iColumn == arg_cols[k]) a = k;
    if (a < 0 || c->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
    if (!c->usable) { unusable |= 1 << a; continue; }
    if (idx[a] < 0) idx[a] = i;
  }
  int have = 0;
  for (int a = 0; a < 4; a++) have |= (idx[a] >= 0) << a;
  if (unusable & ~have) return SQLITE_CONSTRAINT;
  if (idx[0] < 0) {
    if (dc_plan_set(info, &plan_table, NULL, 0, 0) != SQLITE_OK) return SQLITE_NOMEM;   /* "scan" */
    info->estimatedCost = 1e12;
    info->estimatedRows = 1;
    return SQLITE_OK;
  }
  dc_plan_item items[4];
  int argn = 0;
  for (int a = 0; a < 4; a++) {
    if (idx[a] < 0) continue;
    info->aConstraintUsage[idx[a]].argvIndex = ++argn;
    info->aConstraintUsage[idx[a]].omit = 1;
    items[argn - 1] = (dc_plan_item){DC_ITEM_TERM, arg_cols[a], DC_OP_EQ, 1, argn - 1};
  }
  if (dc_plan_set(info, &plan_table, items, argn, argn) != SQLITE_OK) return SQLITE_NOMEM;
  info->estimatedCost = 1000;
  info->estimatedRows = 1;
  info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  return SQLITE_OK;
}

/* ------------------------------------------------ argument parsing */

/* The output of n cells and nnz nonzeros against dc_config('batch_mb') and
** SQLite's blob limit; estimate: nnz comes from the tile index (before any
** decoding), else it is exact (or a lower bound, while staging). */
static int check_size(batch_vtab *v, int64_t n, double nnz, int estimate) {
  double bytes = 16.0 * (double)n + 8 + 8 * nnz, mb = bytes / 1048576.0;
  int64_t limit = sqlite3_limit(v->db, SQLITE_LIMIT_LENGTH, -1);
  const char *how = estimate ? "about " : "";
  const char *by = estimate ? " by the tile index" : "";
  if (bytes > (double)v->conn->batch_bytes)
    return dc_err(&v->base.zErrMsg, SQLITE_TOOBIG, NULL, "dc_batch: the batch would be %s%.1f MB (%lld cells, %s%.0f nonzeros%s), over "
                  "dc_config('batch_mb') = %lld: ask for fewer cells (or genes), or raise batch_mb",
                  how, mb, (long long)n, how, nnz, by, (long long)(v->conn->batch_bytes >> 20));
  if ((double)n * 8 + 8 > (double)limit || nnz * 4 > (double)limit)
    return dc_err(&v->base.zErrMsg, SQLITE_TOOBIG, NULL, "dc_batch: a blob of the batch would be %s%.1f MB (%lld cells, %s%.0f nonzeros%s), "
                  "over SQLite's blob limit (SQLITE_LIMIT_LENGTH, %lld bytes): ask for fewer cells", how,
                  ((double)n * 8 + 8 > nnz * 4 ? (double)n * 8 + 8 : nnz * 4) / 1048576.0, (long long)n, how, nnz, by,
                  (long long)limit);
  return SQLITE_OK;
}

/* ------------------------------------------------ the batch */
/* the planner's view of the reader's tile index (batch_plan.h) */
static const dc_chunk_info *chunk_info(void *ctx, uint32_t tile, uint32_t chunk) {
  return &((dc_reader *)ctx)->heads[tile]->hdr.chunk[chunk];
}
typedef struct cache_view { struct dc_cache *cache; uint64_t ns; } cache_view;
static int chunk_cached(void *ctx, uint32_t tile, uint32_t chunk) {
  cache_view *cv = ctx;
  dc_chunk_data *d = dc_cache_get(cv->cache, cv->ns, tile, chunk);
  if (d) dc_chunk_release(d);
  return d != NULL;
}

/* The obs argument, a JSON array of column names -> cells_columns.col ids. */
static int parse_obs(batch_vtab *v, const char *schema, sqlite3_value *arg, int64_t **cols, int *n, char **err) {
  if (sqlite3_value_type(arg) != SQLITE_TEXT) {
    *err = sqlite3_mprintf("dc_batch: obs must be a JSON array of obs column names");
    return SQLITE_ERROR;
  }
  char *sql = sqlite3_mprintf("SELECT j.value, c.col, c.kind, j.type FROM json_each(?1) j LEFT JOIN \"%w\".cells_columns c"
                              " ON c.name = j.value AND c.col > 0 ORDER BY j.key", schema);
  if (!sql) return SQLITE_NOMEM;
  sqlite3_stmt *st = NULL;
  int rc = sqlite3_prepare_v2(v->db, sql, -1, &st, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    *err = sqlite3_mprintf("dc_batch: obs: %s", sqlite3_errmsg(v->db));
    return rc;
  }
  sqlite3_bind_value(st, 1, arg);
  int64_t *out = NULL;
  int m = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 3);
    if (!type || strcmp(type, "text") != 0) {
      *err = sqlite3_mprintf("dc_batch: obs must be a JSON array of column names (strings)");
      rc = SQLITE_ERROR;
      break;
    }
    if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
      *err = sqlite3_mprintf("dc_batch: obs: no stored obs column '%s' in the cells table", name ? name : "");
      rc = SQLITE_ERROR;
      break;
    }
    const char *kind = (const char *)sqlite3_column_text(st, 2);
    if (kind && strcmp(kind, "text") == 0) {
      *err = sqlite3_mprintf("dc_batch: obs: column '%s' is text; read it from the cells table", name ? name : "");
      rc = SQLITE_ERROR;
      break;
    }
    if (m >= 256) {
      *err = sqlite3_mprintf("dc_batch: obs: more than 256 columns");
      rc = SQLITE_ERROR;
      break;
    }
    int64_t *q = sqlite3_realloc64(out, (uint64_t)(m + 1) * sizeof *out);
    if (!q) { rc = SQLITE_NOMEM; break; }
    out = q;
    out[m++] = sqlite3_column_int64(st, 1);
  }
  if (rc == SQLITE_DONE) rc = SQLITE_OK;
  else if (rc != SQLITE_OK && !*err && rc != SQLITE_NOMEM) *err = sqlite3_mprintf("dc_batch: obs: %s", sqlite3_errmsg(v->db));
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) { sqlite3_free(out); return rc; }
  *cols = out;
  *n = m;
  return SQLITE_OK;
}

/* The work of one dc_batch call: its arrays, owned here and freed by job_free, whichever phase
** failed.  The phases (batch_filter's steps 1-4) fill it in order. */
typedef struct batch_job {
  char *err;                        /* a reader's message (moved to zErrMsg at the end) */
  int64_t *ids, n;                  /* the requested cells */
  int64_t *obs_cols; int n_obs;     /* obs columns asked for */
  const int32_t *map;               /* the gene panel's map, or NULL */
  int64_t out_genes;
  batch_cellref *ref;               /* per row: (tile, chunk, cell) */
  uint8_t *direct;                  /* per row: 1 = row of a direct chunk */
  batch_row *rows;
  batch_run *runs; size_t n_dj;     /* direct runs */
  dc_direct *dj;
  dc_chunkkey *keys; size_t n_keys; /* the other rows' distinct chunks */
  uint32_t *rowkey;                 /* per row: its key */
  dc_chunk_data **chunks;           /* per key: decoded (a reference) */
  uint32_t *group;                  /* per key: its group */
  dc_chunkkey *gkeys; size_t *gslot; dc_chunk_data **gout;   /* one group's fetch */
  uint64_t *which;
  int64_t *off;
  int32_t **stage; size_t n_stage;  /* staged rows (more than one group) */
  int staged;
  int64_t *o_ids, *o_indptr;        /* the output blobs (rcbuf) */
  int32_t *o_idx, *o_val;
  int64_t total;                    /* output nonzeros */
  size_t n_fetched;
  batch_pending *pend;              /* the rows left to the ticket (or to xColumn) */
} batch_job;

static void job_free(batch_job *j) {
  if (j->chunks) for (size_t q = 0; q < j->n_keys; q++) dc_chunk_release(j->chunks[q]);
  for (size_t q = 0; q < j->n_stage; q++) rcbuf_unref(j->stage[q]);
  sqlite3_free(j->group);
  sqlite3_free(j->gkeys);
  sqlite3_free(j->gslot);
  sqlite3_free(j->gout);
  sqlite3_free(j->rowkey);
  sqlite3_free(j->stage);
  sqlite3_free(j->chunks);
  sqlite3_free(j->keys);
  sqlite3_free(j->which);
  sqlite3_free(j->off);
  sqlite3_free(j->rows);
  sqlite3_free(j->dj);
  sqlite3_free(j->runs);
  sqlite3_free(j->direct);
  sqlite3_free(j->ref);
  sqlite3_free(j->ids);
  sqlite3_free(j->obs_cols);
  rcbuf_unref(j->o_ids);
  rcbuf_unref(j->o_indptr);
  rcbuf_unref(j->o_idx);
  rcbuf_unref(j->o_val);
  batch_pending_unref(j->pend);
}

/* The plan's arguments, by hidden column. */
static int batch_args(batch_vtab *v, int idxNum, const char *idxStr, int argc, sqlite3_value **argv,
                      sqlite3_value **cells_arg, sqlite3_value **genes_arg, sqlite3_value **obs_arg,
                      sqlite3_value **place_arg) {
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
  int n_items;
  char why[200] = "";
  if (dc_plan_take(&plan_table, idxNum, idxStr, argc, items, &n_items, why, sizeof why))
    return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "dc_batch: unknown plan %d '%s'%s%s", idxNum, idxStr ? idxStr : "",
                  why[0] ? ": " : "", why);
  for (int i = 0; i < n_items; i++) {
    const dc_plan_item *it = &items[i];
    sqlite3_value **slot = it->col == COL_CELLS ? cells_arg : it->col == COL_GENES ? genes_arg
                         : it->col == COL_OBS ? obs_arg : it->col == COL_PLACE ? place_arg : NULL;
    if (!slot || it->op != DC_OP_EQ || *slot)
      return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "dc_batch: unknown plan '%s': item %d is not an argument", idxStr, i + 1);
    *slot = argv[it->arg];
  }
  if (!*cells_arg)
    return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "dc_batch: missing argument: dc_batch(cells [, genes]) needs the cells, "
                  "a blob of int64 ids or a JSON array");
  return SQLITE_OK;
}

/* 1. cells -> (tile, chunk, cell), the size checked against batch_mb before anything is
** decoded; 2. direct runs: whole chunks requested in order, not cached, no panel. */
static int map_cells(batch_vtab *v, batch_job *j, struct dc_cache *cache) {
  dc_reader *r = v->reader;
  int64_t n = j->n;
  int rc;
  j->ref = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *j->ref);
  j->direct = sqlite3_malloc64((uint64_t)(n ? n : 1));
  j->rows = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *j->rows);
  j->o_ids = rcbuf_new(v->conn->bufpool, (uint64_t)n * 8);
  j->o_indptr = rcbuf_new(v->conn->bufpool, ((uint64_t)n + 1) * 8);
  if (!j->ref || !j->direct || !j->rows || !j->o_ids || !j->o_indptr) return SQLITE_NOMEM;
  memset(j->direct, 0, (size_t)(n ? n : 1));
  memset(j->rows, 0, (size_t)(n ? n : 1) * sizeof *j->rows);
  memcpy(j->o_ids, j->ids, (size_t)n * 8);
  if ((rc = batch_locate(r, j->ids, n, j->ref, &j->err)) != SQLITE_OK) return rc;
  /* with a gene panel, the rows of tiles whose gene maps show none of its genes (tiles of inputs
  ** with other genes, or holding only genes below the panel's: appended later) are empty (n_out
  ** 0, zeroed above) and their chunks are never read */
  if (j->map && (rc = batch_mark_empty(r, j->ref, n, v->panel.ids, v->panel.size, j->direct, &j->err)) != SQLITE_OK)
    return rc;
  double est_nnz = 0;   /* the output's nonzeros as the tile index predicts them */
  for (int64_t i = 0; i < n; i++) {
    if (j->direct[i] == BATCH_ROW_EMPTY) continue;
    const dc_chunk_info *ci = &r->heads[j->ref[i].tile]->hdr.chunk[j->ref[i].chunk];
    double mean = (double)ci->nnz / (double)ci->n_cells;
    est_nnz += j->map && mean > (double)j->out_genes ? (double)j->out_genes : mean;
  }
  /* refused before anything is decoded: over batch_mb, or a blob over SQLite's limit */
  if ((rc = check_size(v, n, est_nnz, 1)) != SQLITE_OK) return rc;
  cache_view cv = {cache, r->ns};
  if (!j->map) {
    j->runs = sqlite3_malloc64((uint64_t)(n / 2 + 1) * sizeof *j->runs);
    if (!j->runs) return SQLITE_NOMEM;
    j->n_dj = batch_find_direct(j->ids, j->ref, n, chunk_info, r, cache ? chunk_cached : NULL, &cv, j->direct, j->rows,
                                j->runs);
  }
  return SQLITE_OK;
}

/* 3. the other rows: distinct chunks, fetched group by group (each group's decoded size fits
** decode_mb; with more than one group, each group's rows are staged and its chunks let go). */
static int fetch_groups(batch_vtab *v, batch_job *j, dc_pool *pool, struct dc_cache *cache) {
  dc_reader *r = v->reader;
  int64_t n = j->n;
  int rc;
  j->keys = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *j->keys);
  j->which = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *j->which);
  if (!j->keys || !j->which) return SQLITE_NOMEM;
  j->rowkey = sqlite3_malloc64((uint64_t)(n ? n : 1) * sizeof *j->rowkey);
  if (!j->rowkey) return SQLITE_NOMEM;
  j->n_keys = batch_chunk_keys(j->ref, j->direct, n, j->keys, j->rowkey);
  size_t nk = j->n_keys ? j->n_keys : 1;
  j->chunks = sqlite3_malloc64((uint64_t)nk * sizeof *j->chunks);
  j->group = sqlite3_malloc64((uint64_t)nk * sizeof *j->group);
  j->gkeys = sqlite3_malloc64((uint64_t)nk * sizeof *j->gkeys);
  j->gslot = sqlite3_malloc64((uint64_t)nk * sizeof *j->gslot);
  j->gout = sqlite3_malloc64((uint64_t)nk * sizeof *j->gout);
  j->off = sqlite3_malloc64(((uint64_t)n + 1) * sizeof *j->off);
  if (!j->chunks || !j->group || !j->gkeys || !j->gslot || !j->gout || !j->off) return SQLITE_NOMEM;
  memset(j->chunks, 0, nk * sizeof *j->chunks);
  /* chunks already cached cost no decoding memory: they join group 0; the
  ** others are split into groups whose decoded size fits decode_mb */
  if (cache)
    for (size_t q = 0; q < j->n_keys; q++) j->chunks[q] = dc_cache_get(cache, r->ns, j->keys[q].tile, j->keys[q].chunk);
  uint32_t n_groups = batch_groups(j->keys, j->n_keys, j->chunks, chunk_info, r, v->conn->work_bytes, j->group);
  j->staged = n_groups > 1;
  double staged_nnz = 0;
  for (uint32_t gi = 0; gi < n_groups; gi++) {
    /* decode this group's missing chunks (in parallel) */
    size_t ng = 0;
    for (size_t q = 0; q < j->n_keys; q++)
      if (j->group[q] == gi && !j->chunks[q]) { j->gkeys[ng] = j->keys[q]; j->gslot[ng] = q; ng++; }
    if ((rc = dc_reader_fetch(r, j->gkeys, ng, j->gout, 0, NULL, &j->err)) != SQLITE_OK) return rc;
    j->n_fetched += ng;
    for (size_t q = 0; q < ng; q++) j->chunks[j->gslot[q]] = j->gout[q];
    /* rows of this group */
    size_t nw = 0;
    for (int64_t i = 0; i < n; i++) {
      if (j->direct[i] || j->group[j->rowkey[i]] != gi) continue;
      const dc_chunk_data *d = j->chunks[j->rowkey[i]];
      if (j->ref[i].cell >= d->n_cells)
        return dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "dc_batch: tile %u chunk %u: too few cells", j->ref[i].tile,
                      j->ref[i].chunk);
      j->rows[i].idx = d->indices + d->indptr[j->ref[i].cell];
      j->rows[i].val = d->values + d->indptr[j->ref[i].cell];
      j->rows[i].n_in = (uint32_t)(d->indptr[j->ref[i].cell + 1] - d->indptr[j->ref[i].cell]);
      j->which[nw++] = (uint64_t)i;
    }
    batch_kernel k = {.rows = j->rows, .which = j->which, .n = nw, .map = j->map, .bits = v->panel.bits,
                      .panel_size = v->panel.size, .n_genes = r->n_genes, .sorted = v->panel.sorted};
    batch_run_kernel(pool, &k, BATCH_COUNT);
    if (k.bad)
      return dc_err(&v->base.zErrMsg, SQLITE_CORRUPT_VTAB, NULL, "dc_batch: a decoded gene index is out of range (a chunk of tile %u "
                    "is corrupt)", nw ? j->ref[j->which[0]].tile : 0);
    if (j->staged) {
      /* copy this group's rows into a staging buffer, then let the chunks go */
      int64_t total = 0;
      for (size_t q = 0; q < nw; q++) { j->off[j->which[q]] = total; total += j->rows[j->which[q]].n_out; }
      staged_nnz += (double)total;   /* staged rows are the output's: never more than batch_mb */
      if ((rc = check_size(v, n, staged_nnz, 0)) != SQLITE_OK) return rc;
      int32_t **ns = sqlite3_realloc64(j->stage, (j->n_stage + 1) * sizeof *j->stage);
      if (!ns) return SQLITE_NOMEM;
      j->stage = ns;
      j->stage[j->n_stage] = rcbuf_new(v->conn->bufpool, (uint64_t)total * 8);
      if (!j->stage[j->n_stage]) return SQLITE_NOMEM;
      int32_t *si = j->stage[j->n_stage], *sv = j->stage[j->n_stage] + total;
      j->n_stage++;
      k.dst_off = j->off; k.dst_idx = si; k.dst_val = sv;
      batch_run_kernel(pool, &k, BATCH_FILL);
      if (k.bad) return SQLITE_NOMEM;
      for (size_t q = 0; q < nw; q++) {
        batch_row *rw = &j->rows[j->which[q]];
        rw->idx = si + j->off[j->which[q]];
        rw->val = sv + j->off[j->which[q]];
        rw->n_in = (uint32_t)rw->n_out;
      }
      for (size_t q = 0; q < j->n_keys; q++)
        if (j->group[q] == gi) { dc_chunk_release(j->chunks[q]); j->chunks[q] = NULL; }
    }
  }
  return SQLITE_OK;
}

/* 4. the output's layout, the direct chunks decoded straight into it, the other rows copied;
** t[0..1]: when the direct decodes started and ended. */
static int assemble(batch_vtab *v, batch_job *j, dc_pool *pool, int64_t *t) {
  dc_reader *r = v->reader;
  int64_t n = j->n;
  int rc;
  j->total = batch_layout(n, j->direct, j->rows, j->ref, chunk_info, r, j->runs, j->off, j->o_indptr);
  if ((rc = check_size(v, n, (double)j->total, 0)) != SQLITE_OK) return rc;
  if (!j->n_dj && !j->staged && !j->map) {
    /* every row is a row of a decoded chunk, copied as it is: left to the ticket */
    batch_pending *p = sqlite3_malloc64(sizeof *p);
    if (!p) return SQLITE_NOMEM;
    *p = (batch_pending){1, v->conn, n, j->total, j->rows, j->off, j->chunks, j->n_keys};
    j->rows = NULL; j->off = NULL; j->chunks = NULL; j->n_keys = 0;
    j->pend = p;
    t[0] = t[1] = now_ns();
    return SQLITE_OK;
  }
  j->o_idx = rcbuf_new(v->conn->bufpool, (uint64_t)j->total * 4);
  j->o_val = rcbuf_new(v->conn->bufpool, (uint64_t)j->total * 4);
  if (!j->o_idx || !j->o_val) return SQLITE_NOMEM;
  if (j->n_dj) {
    j->dj = sqlite3_malloc64((uint64_t)j->n_dj * sizeof *j->dj);
    if (!j->dj) return SQLITE_NOMEM;
  }
  for (size_t q = 0; q < j->n_dj; q++) {
    memset(&j->dj[q], 0, sizeof j->dj[q]);
    j->dj[q].tile = j->runs[q].tile;
    j->dj[q].chunk = j->runs[q].chunk;
    j->dj[q].row0 = j->runs[q].row0;
    j->dj[q].out_base = j->runs[q].out_base;
    j->dj[q].indptr_out = j->o_indptr;
    j->dj[q].indices_out = j->o_idx;
    j->dj[q].values_out = j->o_val;
  }
  t[0] = now_ns();
  if ((rc = dc_reader_decode_into(r, j->dj, j->n_dj, &j->err)) != SQLITE_OK) return rc;
  t[1] = now_ns();
  size_t nw = 0;
  for (int64_t i = 0; i < n; i++) if (!j->direct[i]) j->which[nw++] = (uint64_t)i;
  batch_kernel k = {.rows = j->rows, .which = j->which, .n = nw, .map = j->staged ? NULL : j->map, .bits = v->panel.bits,
                    .panel_size = v->panel.size, .n_genes = r->n_genes, .sorted = v->panel.sorted, .dst_off = j->off,
                    .dst_idx = j->o_idx, .dst_val = j->o_val};
  batch_run_kernel(pool, &k, BATCH_FILL);
  return k.bad ? SQLITE_NOMEM : SQLITE_OK;
}

static int batch_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr, int argc,
                        sqlite3_value **argv) {
  batch_cursor *c = (batch_cursor *)cur;
  batch_vtab *v = (batch_vtab *)cur->pVtab;
  dc_reader *r = v->reader;
  batch_job job, *j = &job;
  memset(j, 0, sizeof *j);
  int64_t t0 = now_ns(), t1 = 0, t23[2] = {0, 0};
  cursor_reset(c);
  sqlite3_value *cells_arg = NULL, *genes_arg = NULL, *obs_arg = NULL, *place_arg = NULL;
  int rc = batch_args(v, idxNum, idxStr, argc, argv, &cells_arg, &genes_arg, &obs_arg, &place_arg);
  if (rc != SQLITE_OK) return rc;
  int place = 0;
  if (place_arg && sqlite3_value_type(place_arg) != SQLITE_NULL) {
    sqlite3_int64 pv = sqlite3_value_int64(place_arg);
    if (sqlite3_value_type(place_arg) != SQLITE_INTEGER || (pv != 0 && pv != 1))
      return dc_err(&v->base.zErrMsg, SQLITE_ERROR, NULL, "dc_batch: place (argument 4) must be 0 or 1");
    place = (int)pv;
  }

  if ((rc = dc_reader_begin(r, &j->err)) != SQLITE_OK) goto done;
  if ((rc = dc_parse_cells(r, cells_arg, "dc_batch", &j->ids, &j->n, &j->err)) != SQLITE_OK) goto done;
  j->out_genes = r->n_genes;
  if (genes_arg && sqlite3_value_type(genes_arg) != SQLITE_NULL) {
    if ((rc = dc_panel_parse(&v->panel, v->db, r, genes_arg, "dc_batch", &j->err)) != SQLITE_OK) goto done;
    j->map = v->panel.map;
    j->out_genes = v->panel.size;
  }
  if (obs_arg && sqlite3_value_type(obs_arg) != SQLITE_NULL) {
    if ((rc = parse_obs(v, r->schema, obs_arg, &j->obs_cols, &j->n_obs, &j->err)) != SQLITE_OK) goto done;
  }
  dc_pool *pool = dc_conn_pool(v->conn);
  if (!pool) { rc = SQLITE_NOMEM; goto done; }
  struct dc_cache *cache = dc_conn_cache(v->conn);

  if (place) {
    t1 = now_ns();
    if ((rc = batch_place_read(r, v->conn, pool, j->ids, j->n, j->map ? v->panel.ids : NULL, j->map ? v->panel.size : 0,
                               &c->place, &j->err)) != SQLITE_OK)
      goto done;
    if (c->place && j->map &&
        (rc = batch_place_panel(c->place, v->panel.map, v->panel.size, v->panel.sorted, r->n_genes)) != SQLITE_OK)
      goto done;
    t23[0] = t23[1] = now_ns();
    if (c->place) {
      int32_t *cn = rcbuf_new(v->conn->bufpool, (uint64_t)j->n * 4 + 4);
      if (!cn) { rc = SQLITE_NOMEM; goto done; }
      for (int64_t i = 0; i < j->n; i++) cn[i] = (int32_t)c->place->nnz[i];
      c->cell_nnz = cn;
      j->total = c->place->total;
      j->n_fetched = c->place->n_keys;
    }
  } else {
    if ((rc = map_cells(v, j, cache)) != SQLITE_OK) goto done;          /* 1, 2 */
    t1 = now_ns();
    if ((rc = fetch_groups(v, j, pool, cache)) != SQLITE_OK) goto done;  /* 3 */
    if ((rc = assemble(v, j, pool, t23)) != SQLITE_OK) goto done;        /* 4 */
  }
  int64_t n = j->n;
  if (j->n_obs) {
    uint64_t ob = (uint64_t)j->n_obs * 8 * ((uint64_t)n + 1);
    int64_t *o = rcbuf_new(v->conn->bufpool, ob);
    if (!o) { rc = SQLITE_NOMEM; goto done; }
    dc_reader_end(r);   /* the cells table reads with its own blob handle */
    rc = dc_cells_values(v->conn, v->db, r->schema, j->obs_cols, j->n_obs, j->ids, n, o + j->n_obs, o, &j->err);
    if (rc != SQLITE_OK) { rcbuf_unref(o); goto done; }
    c->blob[4] = o;
    c->len[4] = ob;
  }
  c->n_cells = n;
  c->n_genes = j->out_genes;
  c->blob[0] = j->o_ids; c->len[0] = (uint64_t)n * 8; j->o_ids = NULL;
  c->blob[1] = j->o_indptr; c->len[1] = ((uint64_t)n + 1) * 8; j->o_indptr = NULL;
  c->blob[2] = j->o_idx; c->len[2] = (uint64_t)j->total * 4; j->o_idx = NULL;
  c->blob[3] = j->o_val; c->len[3] = (uint64_t)j->total * 4; j->o_val = NULL;
  c->pend = j->pend; j->pend = NULL;
  c->nnz = j->total;
  c->eof = 0;
  {
    dc_conn *cn = v->conn;
    cn->last_ns[0] = t1 - t0; cn->last_ns[1] = t23[0] - t1; cn->last_ns[2] = t23[1] - t23[0];
    cn->last_ns[3] = now_ns() - t23[1];
    cn->last_cells = n; cn->last_nnz = j->total;
    cn->last_direct_chunks = (int64_t)j->n_dj; cn->last_fetched_chunks = (int64_t)j->n_fetched;
  }

done:
  dc_reader_end(r);
  if (j->err) {
    sqlite3_free(v->base.zErrMsg);
    v->base.zErrMsg = j->err;
  }
  job_free(j);
  return rc;
}

/* ------------------------------------------------ cursor */
static int batch_open(sqlite3_vtab *p, sqlite3_vtab_cursor **ppCur) {
  (void)p;
  batch_cursor *c = sqlite3_malloc64(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->eof = 1;
  *ppCur = &c->base;
  return SQLITE_OK;
}
static int batch_close(sqlite3_vtab_cursor *cur) {
  cursor_reset((batch_cursor *)cur);
  sqlite3_free(cur);
  return SQLITE_OK;
}
static int batch_next(sqlite3_vtab_cursor *cur) {
  cursor_reset((batch_cursor *)cur);
  return SQLITE_OK;
}
static int batch_eof(sqlite3_vtab_cursor *cur) { return ((batch_cursor *)cur)->eof; }

/* ------------------------------------------------ pending rows */
/* Gathers a pending result's rows into the cursor's indices and data blobs (a query that
** reads them from SQL). */
static int pending_gather(batch_cursor *c, batch_vtab *v) {
  batch_pending *p = c->pend;
  int32_t *idx = rcbuf_new(v->conn->bufpool, (uint64_t)p->total * 4);
  int32_t *val = rcbuf_new(v->conn->bufpool, (uint64_t)p->total * 4);
  if (!idx || !val) { rcbuf_unref(idx); rcbuf_unref(val); return SQLITE_NOMEM; }
  batch_take t = { p->rows, p->n, p->off, idx, val, BATCH_KIND_U32, 0, 0 };
  batch_run_take(dc_conn_pool(v->conn), &t);
  c->blob[2] = idx; c->len[2] = (uint64_t)p->total * 4;
  c->blob[3] = val; c->len[3] = (uint64_t)p->total * 4;
  return SQLITE_OK;
}

static int batch_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i) {
  batch_cursor *c = (batch_cursor *)cur;
  switch (i) {
    case COL_TICKET: {
      if (c->place) {
        uint64_t id = batch_ticket_issue_place(c->place);
        if (!id) { sqlite3_result_error_nomem(ctx); break; }
        sqlite3_result_int64(ctx, (sqlite3_int64)id);
        break;
      }
      if (!c->blob[1]) { sqlite3_result_null(ctx); break; }
      uint64_t id = batch_ticket_issue(c->n_cells, c->nnz, c->blob[1], c->blob[2], c->blob[3], c->pend);
      if (!id) { sqlite3_result_error_nomem(ctx); break; }
      sqlite3_result_int64(ctx, (sqlite3_int64)id);
      break;
    }
    case COL_NCELLS: sqlite3_result_int64(ctx, c->n_cells); break;
    case COL_NGENES: sqlite3_result_int64(ctx, c->n_genes); break;
    case COL_NNZ: sqlite3_result_int64(ctx, c->nnz); break;
    case COL_CELLIDS: case COL_INDPTR: case COL_INDICES: case COL_DATA: {
      if ((i == COL_INDICES || i == COL_DATA) && c->pend && !c->blob[2]) {
        if (pending_gather(c, (batch_vtab *)cur->pVtab) != SQLITE_OK) { sqlite3_result_error_nomem(ctx); break; }
      }
      void *b = c->blob[i - COL_CELLIDS];
      if (!b) { sqlite3_result_null(ctx); break; }
      rcbuf_ref(b);    /* SQLite owns one reference; released by rcbuf_unref */
      sqlite3_result_blob64(ctx, b, c->len[i - COL_CELLIDS], rcbuf_unref);
      break;
    }
    case COL_CELLNNZ:
      if (!c->cell_nnz) { sqlite3_result_null(ctx); break; }
      rcbuf_ref(c->cell_nnz);
      sqlite3_result_blob64(ctx, c->cell_nnz, (uint64_t)c->n_cells * 4, rcbuf_unref);
      break;
    case COL_OBSVAL:
      if (!c->blob[4]) { sqlite3_result_null(ctx); break; }
      rcbuf_ref(c->blob[4]);
      sqlite3_result_blob64(ctx, c->blob[4], c->len[4], rcbuf_unref);
      break;
    default: sqlite3_result_null(ctx); break;   /* hidden argument columns */
  }
  return SQLITE_OK;
}
static int batch_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  (void)cur;
  *pRowid = 1;
  return SQLITE_OK;
}

static sqlite3_module batch_module = {
  3,
  batch_create, batch_connect, batch_best_index, batch_disconnect, batch_destroy,
  batch_open, batch_close, batch_filter, batch_next, batch_eof, batch_column, batch_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL,
  NULL               /* no shadow tables */
};

int dc_register_batch(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_batch", &batch_module, conn, dc_conn_unref);
}
