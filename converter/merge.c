/*
** merge.c — cv_merge_into(), the one step of `append` and `merge` (docs/converter.md "append
** and merge"; the commands are in merge_cmd.c): dataset S (ATTACHed as `src`) is added to
** dataset D (`main`, inside a transaction):
**
**   genes  S's genes are matched to D's by name (the k-th repeat of a name in
**          S to the k-th in D); D's gene ids never change, S's other genes get
**          the next ids in S's order.  The genes table is small and is
**          rewritten whole (totals summed, var columns united).
**   tiles  S's tiles follow D's, numbered on, their cells after D's.  When
**          every gene of S keeps its id, a tile's blob is copied as it is (no
**          decoding; only its seal, which binds it to its place, is computed
**          again); otherwise the tile is decoded, its gene ids mapped, and
**          encoded again with D's codec settings.
**   obs    columns matched by name; a new column is NULL for D's cells, a
**          column S lacks is NULL for S's cells; categorical dictionaries are
**          united (D's codes kept); `source` names every cell's input file.
**          D's blocks are kept except its last, partial one, which is encoded
**          again with S's first cells; S's values follow in blocks.
**   meta   n_cells, n_genes, nnz, n_tiles and sources are updated; the dc_meta the
**          columns' types and names need, in merge_meta.c.
*/
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "dc_seal.h"

#include "merge_store.h"

/* Can values of kind `from` join a column of kind `to` without changing it? */
static int cast_ok(int to, int from) {
  if (to == from) return 1;
  if (to == DC_OBS_REAL && (from == DC_OBS_INT || from == DC_OBS_BOOL)) return 1;
  if (to == DC_OBS_INT && from == DC_OBS_BOOL) return 1;
  if (to == DC_OBS_TEXT && from == DC_OBS_CATEGORY) return 1;
  return 0;
}

/* ------------------------------------------------------------ genes */
typedef struct gcol {
  char *name;
  int kind;     /* DC_OBS_INT, REAL or TEXT */
  vals v;
} gcol;

static void gcols_free(gcol *g, int n) {
  for (int i = 0; i < n; i++) { free(g[i].name); cv_vals_free(&g[i].v); }
  free(g);
}

/* every column of schema's genes table, decoded, each block checked against its seal under id
** (they are stored again, sealed anew) */
static int read_genes(sqlite3 *db, const char *schema, const char *path, uint64_t id, int64_t n_genes, gcol **out, int *n_out,
                      cv_err *e) {
  *out = NULL;
  *n_out = 0;
  sqlite3_stmt *st = cv_prep(db, e, "SELECT col, name, kind FROM \"%w\".genes_columns ORDER BY col", schema);
  if (!st) return -1;
  gcol *g = NULL;
  size_t cap = 0;
  int n = 0, rc = 0, r = SQLITE_DONE;
  while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
    if (cv_grow((void **)&g, &cap, (size_t)n + 1, sizeof *g, e)) { rc = -1; break; }
    gcol *x = &g[n++];
    memset(x, 0, sizeof *x);
    int64_t col = sqlite3_column_int64(st, 0);
    const char *nm = (const char *)sqlite3_column_text(st, 1);
    if (!nm) { rc = cv_fail(e, "%s: genes_columns row of col %lld has no name", path, (long long)col); break; }
    x->name = strdup(nm);
    x->kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
    if (!x->name) { rc = cv_fail(e, "out of memory"); break; }
    if (x->kind != DC_OBS_INT && x->kind != DC_OBS_REAL && x->kind != DC_OBS_TEXT) {
      rc = cv_fail(e, "%s: genes column '%s' has an unknown kind", path, x->name);
      break;
    }
    if (col != n - 1) { rc = cv_fail(e, "%s: genes_columns are not numbered 0, 1, ...", path); break; }
    x->v.kind = x->kind;
    char what[300];
    snprintf(what, sizeof what, "%s: genes column '%s'", path, x->name);
    rc = cv_check_genes_seals(db, schema, id, col, x->name, x->kind, path, e) ||
         cv_load_column(db, schema, "genes", col, x->kind, 0, 0, NULL, NULL, &x->v, what, e);
    if (!rc && (int64_t)x->v.n != n_genes)
      rc = cv_fail(e, "%s: genes column '%s' holds %llu values for %lld genes", path, x->name, (unsigned long long)x->v.n,
                   (long long)n_genes);
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, path);   /* not the end: an error */
  sqlite3_finalize(st);
  *out = g;
  *n_out = n;
  if (!rc) rc = cv_check_stray_blocks(db, schema, "genes", path, e);
  if (!rc && (n < 3 || g[0].kind != DC_OBS_TEXT || g[1].kind != DC_OBS_INT || g[2].kind != DC_OBS_INT))
    rc = cv_fail(e, "%s: the genes table lacks name, total_counts, n_cells", path);
  return rc;
}

/* The loaded orig_index column of a genes table (read_genes), or NULL where it has none. */
static const vals *orig_col(const gcol *g, int n) {
  for (int i = 0; i < n; i++) if (g[i].kind == DC_OBS_INT && !strcmp(g[i].name, "orig_index")) return &g[i].v;
  return NULL;
}

static val1 vals_get(const vals *v, uint64_t i) {
  val1 x;
  memset(&x, 0, sizeof x);
  x.kind = v->kind;
  switch (v->kind) {
    case DC_OBS_INT: x.is_null = !v->valid[i]; x.i = v->i64[i]; break;
    case DC_OBS_REAL: x.is_null = isnan(v->f64[i]); x.f = v->f64[i]; break;
    default: x.is_null = !v->text[i]; x.s = v->text[i]; x.len = v->tlen[i]; break;
  }
  return x;
}

/* Genes by (name, k), as cv_genes_join matches them: gene (name, k) of one dataset, the k-th of
** that name in its original order (cv_dataset_gene_reps), is gene (name, k) of the other.  An
** open-addressing table of gene indices hashed by name alone (linear probing, no deletions: every
** gene of the same name lies on the probe path before the first empty slot), so no key string is
** made or copied: a string map with a key per gene was a third of the genes step of merging the
** real files. */
typedef struct gtab {
  uint32_t *slot;          /* gene index + 1; 0: empty */
  uint32_t mask;
  const vals *names;
  const uint32_t *rep;     /* each gene's k */
} gtab;

static const char *gname(const vals *v, uint64_t i) { return v->text[i] ? v->text[i] : ""; }

static uint32_t hash_name(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
  return h ^ (h >> 15);
}

static void gtab_free(gtab *t) {
  free(t->slot);
  memset(t, 0, sizeof *t);
}

/* every gene of names in t, with its k (rep) */
static int gtab_build(gtab *t, const vals *names, const uint32_t *rep, cv_err *e) {
  memset(t, 0, sizeof *t);
  uint64_t cap = 64;
  while (cap < 2 * names->n + 2) cap *= 2;
  if (cap > 0x80000000ull) return cv_fail(e, "too many genes (%llu)", (unsigned long long)names->n);
  t->slot = calloc((size_t)cap, sizeof *t->slot);
  if (!t->slot) return cv_fail(e, "out of memory");
  t->mask = (uint32_t)(cap - 1);
  t->names = names;
  t->rep = rep;
  for (uint64_t i = 0; i < names->n; i++) {
    uint32_t j = hash_name(gname(names, i)) & t->mask;
    while (t->slot[j]) j = (j + 1) & t->mask;
    t->slot[j] = (uint32_t)i + 1;
  }
  return 0;
}

/* the gene of t with name nm and repeat number k, or -1 */
static int64_t gtab_find(const gtab *t, const char *nm, uint32_t k) {
  for (uint32_t j = hash_name(nm) & t->mask; t->slot[j]; j = (j + 1) & t->mask) {
    uint32_t g = t->slot[j] - 1;
    if (t->rep[g] == k && !strcmp(gname(t->names, g), nm)) return g;
  }
  return -1;
}

/* sigma: S's gene j -> its id in the merged dataset (D's id of the same (name, k), else the next
** new id from *next, in S's order) */
static int gene_map(const vals *dnames, const uint32_t *drep, const vals *snames, const uint32_t *srep, uint32_t *sigma,
                    uint32_t *next, cv_err *e) {
  gtab dt;
  if (gtab_build(&dt, dnames, drep, e)) return -1;
  for (uint64_t j = 0; j < snames->n; j++) {
    int64_t g = gtab_find(&dt, gname(snames, j), srep[j]);
    sigma[j] = g >= 0 ? (uint32_t)g : (*next)++;
  }
  gtab_free(&dt);
  return 0;
}

/* by (orig[i], i): the order cv_gene_repeats counts in */
static const int64_t *orig_ctx;
static int cmp_by_orig(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  if (orig_ctx[x] != orig_ctx[y]) return orig_ctx[x] < orig_ctx[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ tiles */
/* One tile of S being encoded again: its blob (copied off the statement on the calling
** thread), then its encoding, made on a pool thread. */
typedef struct rtile {
  int64_t t, fc, nc, nz;
  uint8_t *blob;
  size_t len, cap;
  uint8_t *enc;
  size_t elen;
  int rc;
  cv_err err;
} rtile;

/* A pool thread's scratch, reused from tile to tile: the decoded tile and the sort's keys. */
typedef struct rscratch {
  dc_decoder *dec;
  int64_t *indptr;
  int32_t *idx, *val;
  uint64_t *ka, *kb;      /* cv_sort_row's keys */
  size_t cap_c, cap_n, cap_k;
} rscratch;

typedef struct rjob {
  rtile *slot;
  const int *order;       /* the batch's slots, most nonzeros first (the pool takes them in turn) */
  rscratch *sc;           /* per pool thread */
  const uint32_t *sigma;
  uint32_t n_genes;
  int n, nt;              /* the batch's tiles; the pool's threads */
  dc_encode_opts eo;
  const char *path;
} rjob;

/* pool item k: a tile decoded, its genes mapped and sorted, and encoded (no SQLite here) */
static void reencode_one(void *arg, size_t k, int tid) {
  rjob *j = arg;
  rtile *s = &j->slot[j->order[k]];
  rscratch *x = &j->sc[tid];
  cv_err *e = &s->err;
  dc_error de;
  memset(&de, 0, sizeof de);
  s->rc = -1;
  size_t c1 = x->cap_c, c2 = x->cap_n, c3 = x->cap_n;
  if ((!x->dec && !(x->dec = dc_decoder_new())) ||
      cv_grow((void **)&x->indptr, &c1, (size_t)s->nc + 1, sizeof *x->indptr, e) ||
      cv_grow((void **)&x->idx, &c2, (size_t)s->nz + 1, sizeof *x->idx, e) ||
      cv_grow((void **)&x->val, &c3, (size_t)s->nz + 1, sizeof *x->val, e)) {
    if (!x->dec) cv_fail(e, "out of memory");
    return;
  }
  x->cap_c = c1;
  x->cap_n = c2 < c3 ? c2 : c3;
  dc_out out = {x->indptr, x->idx, x->val, 0};
  if (dc_tile_decode(x->dec, s->blob, s->len, &out, &de) != DC_OK) {
    cv_fail(e, "%s: tile %lld: %s", j->path, (long long)s->t, de.msg);
    return;
  }
  /* each cell's genes in the merged order (the decoder's indptr: from 0, increasing) */
  if (cv_sort_rows((const uint64_t *)x->indptr, (uint32_t *)x->idx, (uint32_t *)x->val, 0, (uint64_t)s->nc, j->sigma,
                   j->n_genes, &x->ka, &x->kb, &x->cap_k, e))
    return;
  dc_csr csr = {(uint32_t)s->nc, j->n_genes, (const uint64_t *)x->indptr, (const uint32_t *)x->idx, (const uint32_t *)x->val};
  /* the encoder's threads: one while every thread has a tile; the last round's tiles (the
  ** smallest) share the threads the finished ones left */
  dc_encode_opts eo = j->eo;
  int full = j->n - j->n % j->nt;
  eo.threads = (int)k < full ? 1 : j->nt / (j->n - full);
  if (dc_tile_encode(&csr, &eo, &s->enc, &s->elen, &de) != DC_OK) {
    cv_fail(e, "%s: encoding tile %lld again: %s", j->path, (long long)s->t, de.msg);
    return;
  }
  s->rc = 0;
}

/* S's tiles re-encoded with its genes mapped by sigma (n_genes: the merged count).  The
** calling thread reads the blobs (SQLite stays on it) and writes the results in order; a
** batch of tiles (up to RE_PER_THREAD per thread, and RE_BATCH_NNZ nonzeros per thread
** unless one tile has more) is decoded and encoded on a pool, a tile per thread at a time,
** the largest first.  The last round's tiles, fewer than the threads, spread their chunks
** over the threads left.  Memory: a decoded tile per thread, and the batch's blobs and
** encodings (about a byte per nonzero).  DELTACELLS_MERGE_BATCH_NNZ sets the nonzeros of a
** batch (the tests make batches of one tile). */
enum { RE_PER_THREAD = 4 };
#define RE_BATCH_NNZ ((int64_t)1 << 24)
static int reencode_tiles(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, const uint32_t *sigma, uint32_t n_genes,
                          int threads, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e, "SELECT tile, first_cell, n_cells, nnz, chunks, data, checksum FROM src.tiles_data ORDER BY tile");
  if (!st) return -1;
  int nt = threads > 0 ? threads : cv_ncores();
  if (nt < 1) nt = 1;
  int ns = nt * RE_PER_THREAD;
  if ((int64_t)ns > S->n_tiles) ns = S->n_tiles > 0 ? (int)S->n_tiles : 1;
  dc_tile_hdr *h = malloc(sizeof *h);
  rtile *slot = calloc((size_t)ns, sizeof *slot);
  int *order = calloc((size_t)ns, sizeof *order);
  rscratch *sc = calloc((size_t)nt, sizeof *sc);
  dc_pool *pool = nt > 1 ? dc_pool_new(nt) : NULL;
  int rc = h && slot && order && sc && (nt == 1 || pool) ? 0 : cv_fail(e, "out of memory"), r = SQLITE_ROW;
  rjob job = {slot, order, sc, sigma, n_genes, 0, nt, {0}, S->path};
  dc_encode_opts_default(&job.eo);
  job.eo.codec = dc_codec_from_name(D->codec) ? dc_codec_from_name(D->codec) : job.eo.codec;
  job.eo.level = (int)D->level;
  job.eo.n_chunks = (uint32_t)D->chunks;
  job.eo.chunk_cells = (uint32_t)D->chunk_cells;
  int pending = 0;            /* the statement's row is the next batch's first tile */
  int64_t budget = RE_BATCH_NNZ * nt;
  const char *bv = getenv("DELTACELLS_MERGE_BATCH_NNZ");
  if (bv && atoll(bv) > 0) budget = atoll(bv);
  while (!rc && r == SQLITE_ROW) {
    int n = 0;
    int64_t bnz = 0;
    while (n < ns) {   /* a batch, read here */
      if (!pending && (r = sqlite3_step(st)) != SQLITE_ROW) break;
      pending = 0;
      int64_t nz = sqlite3_column_int64(st, 3);
      if (n > 0 && bnz + nz > budget) { pending = 1; break; }
      bnz += nz;
      rtile *s = &slot[n];
      s->t = sqlite3_column_int64(st, 0);
      s->fc = sqlite3_column_int64(st, 1);
      s->nc = sqlite3_column_int64(st, 2);
      s->nz = nz;
      int64_t ch = sqlite3_column_int64(st, 4);
      const uint8_t *blob = sqlite3_column_blob(st, 5);
      size_t len = (size_t)sqlite3_column_bytes(st, 5);
      dc_error de;
      memset(&de, 0, sizeof de);
      if (!blob || dc_tile_parse(blob, len, h, &de) != DC_OK) { rc = cv_fail(e, "%s: tile %lld: %s", S->path, (long long)s->t, de.msg); break; }
      int64_t seal = 0;
      if (dc_seal_tile(S->id, s->t, s->fc, s->nc, s->nz, ch, len, blob, (size_t)h->hdr_len, &seal)) { rc = cv_fail(e, "out of memory"); break; }
      if (seal != sqlite3_column_int64(st, 6) || (int64_t)h->n_cells != s->nc || (int64_t)h->nnz != s->nz) {
        rc = cv_fail(e, "%s: tile %lld: its seal does not match (the tile and its place were not written together)", S->path, (long long)s->t);
        break;
      }
      if (cv_grow((void **)&s->blob, &s->cap, len ? len : 1, 1, e)) { rc = -1; break; }
      memcpy(s->blob, blob, len);
      s->len = len;
      n++;
    }
    if (rc || n == 0) break;
    job.n = n;
    for (int k = 0; k < n; k++) {   /* most nonzeros first */
      int x = k;
      while (x > 0 && slot[order[x - 1]].nz < slot[k].nz) { order[x] = order[x - 1]; x--; }
      order[x] = k;
    }
    dc_pool_for_tid(n > 1 ? pool : NULL, (size_t)n, reencode_one, &job);
    for (int k = 0; k < n && !rc; k++) {   /* in tile order */
      rtile *s = &slot[k];
      dc_error de;
      memset(&de, 0, sizeof de);
      if (s->rc) { memcpy(e, &s->err, sizeof *e); rc = -1; }
      else if (dc_tile_parse(s->enc, s->elen, h, &de) != DC_OK)
        rc = cv_fail(e, "tile %lld: the encoder made a tile its own parser rejects: %s", (long long)s->t, de.msg);
      else rc = dsw_tile(w, D->n_tiles + s->t, D->n_cells + s->fc, s->nc, s->nz, h->n_chunks, s->enc, s->elen, e);
    }
    for (int k = 0; k < n; k++) {
      free(slot[k].enc);
      slot[k].enc = NULL;
    }
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, S->path);
  sqlite3_finalize(st);
  dc_pool_free(pool);
  for (int k = 0; slot && k < ns; k++) {
    free(slot[k].blob);
    free(slot[k].enc);
  }
  for (int k = 0; sc && k < nt; k++) {
    dc_decoder_free(sc[k].dec);
    free(sc[k].indptr); free(sc[k].idx); free(sc[k].val); free(sc[k].ka); free(sc[k].kb);
  }
  free(sc);
  free(slot);
  free(order);
  free(h);
  return rc;
}

/* ------------------------------------------------------------ cv_merge_into */
static int find_col(const dcol *c, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(c[i].name, name)) return i;
  return -1;
}

/* a name no column of an array has (ignoring case, as SQLite does): NAME, NAME_1, ...; name_of
** gives the name of element i */
static char *unique_name(const void *arr, int n, const char *(*name_of)(const void *, int), const char *name) {
  size_t l = strlen(name) + 24;
  char *r = malloc(l);
  if (!r) return NULL;
  snprintf(r, l, "%s", name);
  for (int k = 1;; k++) {
    int clash = 0;
    for (int i = 0; i < n && !clash; i++) clash = !strcasecmp(name_of(arr, i), r);
    if (!clash) return r;
    snprintf(r, l, "%s_%d", name, k);
  }
}
static const char *dcol_name(const void *a, int i) { return ((const dcol *)a)[i].name; }
static const char *gcol_name(const void *a, int i) { return ((const gcol *)a)[i].name; }
static char *unique_col(const dcol *c, int n, const char *name) { return unique_name(c, n, dcol_name, name); }

/* S's column `old` is stored as `nw` (its name differs from one of D's but for case, and SQLite
** does not tell them apart): the dc_meta entries merged from S under `old` (read before the
** columns were united) follow it, and obs_names / var_names give it its name in the files back. */
static int meta_rename_col(sqlite3 *db, int var, const char *old, const char *nw, cv_err *e) {
  fprintf(stderr, "deltacells: note: %s column '%s' is stored as '%s' (the name is taken but for case; "
          "export and to_anndata give it its name back)\n", var ? "var" : "obs", old, nw);
  const char *names = var ? "var_names" : "obs_names";
  char *sql[4] = {
      sqlite3_mprintf("UPDATE main.dc_meta SET value = (SELECT json_group_object(CASE WHEN key = %Q THEN %Q ELSE key END,"
                      " CASE WHEN type IN ('object', 'array') THEN json(value) ELSE value END) FROM json_each(dc_meta.value))"
                      " WHERE key IN %s", old, nw, var ? DSW_META_VAR_OBJECTS : DSW_META_OBS_OBJECTS),
      sqlite3_mprintf("INSERT OR IGNORE INTO main.dc_meta(key, value) VALUES(%Q, '{}')", names),
      sqlite3_mprintf("UPDATE main.dc_meta SET value = (SELECT json_group_object(k, v) FROM (SELECT key AS k, value AS v"
                      " FROM json_each(dc_meta.value) UNION ALL SELECT %Q, %Q WHERE NOT EXISTS"
                      " (SELECT 1 FROM json_each(dc_meta.value) WHERE key = %Q))) WHERE key = %Q", nw, old, nw, names),
      var ? NULL   /* var has no array naming columns */
          : sqlite3_mprintf("UPDATE main.dc_meta SET value = (SELECT json_group_array(CASE WHEN value = %Q THEN %Q ELSE value END)"
                            " FROM json_each(dc_meta.value)) WHERE key = 'obs_ordered'", old, nw)};
  int rc = 0, n_sql = var ? 3 : 4;
  for (int k = 0; k < n_sql; k++) {
    if (!rc && !sql[k]) rc = cv_fail(e, "out of memory");
    if (!rc && sqlite3_exec(db, sql[k], NULL, NULL, NULL) != SQLITE_OK) rc = cv_fail(e, "dc_meta.%s: %s", names, sqlite3_errmsg(db));
    sqlite3_free(sql[k]);
  }
  return rc;
}

/* each cell's source (codes into labels, added as needed) from a dataset's dc_meta sources */
static int sources_codes(sqlite3 *db, const dsinfo *m, char ***labels, int64_t *nl, cv_map *lm, vals *dst, cv_err *e) {
  /* the label convert gave the input (its base name, or the shortest unique path ending); older
  ** datasets have only the file's path */
  sqlite3_stmt *st = cv_prep(db, e, "SELECT coalesce(json_extract(value, '$.source'), json_extract(value, '$.file')), "
                                  "json_extract(value, '$.first_cell'), "
                                  "json_extract(value, '$.n_cells') FROM json_each(%Q) ORDER BY key", m->sources);
  if (!st) return -1;
  uint64_t start = dst->n;
  int rc = 0, r = SQLITE_DONE;
  while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
    const char *f = (const char *)sqlite3_column_text(st, 0);
    int64_t fc = sqlite3_column_int64(st, 1), nc = sqlite3_column_int64(st, 2);
    int32_t code;
    if (!f || fc != (int64_t)(dst->n - start) || nc < 0) { rc = cv_fail(e, "%s: dc_meta.sources does not cover the cells in order", m->path); break; }
    rc = cv_add_label(labels, nl, lm, f, &code, e);
    for (int64_t i = 0; i < nc && !rc; i++) {
      val1 x = {DC_OBS_CATEGORY, 0, code, 0, NULL, 0};
      rc = cv_vals_push(dst, &x, e);
    }
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, m->path);
  sqlite3_finalize(st);
  if (!rc && (int64_t)(dst->n - start) != m->n_cells)
    rc = cv_fail(e, "%s: dc_meta.sources covers %llu cells of %lld", m->path, (unsigned long long)(dst->n - start), (long long)m->n_cells);
  return rc;
}

static int merge_obs(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, cv_err *e) {
  dcol *dc = NULL, *sc = NULL;
  int nd = 0, ns = 0, rc = -1, n_all = 0;
  vals v;
  memset(&v, 0, sizeof v);
  int32_t *remap = NULL;
  cv_map lm = {0};
  if (cv_read_cols(db, "main", D->path, D->id, &dc, &nd, e) || cv_read_cols(db, "src", S->path, S->id, &sc, &ns, e)) goto done;
  int64_t B = D->obs_block, b0 = D->n_cells / B, p0 = b0 * B;
  int d_src = D->n_sources >= 2 ? find_col(dc, nd, "source") : -1;
  int s_src = S->n_sources >= 2 ? find_col(sc, ns, "source") : -1;
  if (d_src >= 0 && dc[d_src].kind != DC_OBS_CATEGORY) d_src = -1;
  if (s_src >= 0 && sc[s_src].kind != DC_OBS_CATEGORY) s_src = -1;
  int64_t next_col = 0;
  for (int i = 0; i < nd; i++) if (dc[i].col >= next_col) next_col = dc[i].col + 1;
  n_all = nd;  /* names taken, for new columns */
  /* D's columns: S's values appended */
  for (int i = 0; i < nd; i++) {
    dcol *c = &dc[i];
    int j = i == d_src ? -2 : find_col(sc, ns, c->name);
    if (j >= 0 && j == s_src && i != d_src) j = -1;   /* S's source column only joins D's source column */
    /* S's kind is wider (int into real, bool into int, category into text): D's column is
    ** stored again whole in S's kind, as convert would have stored the two together */
    int widen = j >= 0 && !cast_ok(c->kind, sc[j].kind) && cast_ok(sc[j].kind, c->kind);
    if (j >= 0 && !cast_ok(c->kind, sc[j].kind) && !widen)
      { cv_fail(e, "obs column '%s': %s holds %s values, %s holds %s; they cannot join (convert the files together, "
                "or rename the column)", c->name, D->label ? D->label : D->path, cv_obs_kind_label(c->kind),
                S->label ? S->label : S->path, cv_obs_kind_label(sc[j].kind)); goto done; }
    int64_t cb0 = widen ? 0 : b0, cp0 = widen ? 0 : p0;
    int64_t old_ncat = c->ncat;
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    for (int64_t k = 0; c->kind == DC_OBS_CATEGORY && !widen && k < c->ncat; k++)
      if (!cv_map_ref(&lm, c->labels[k]) && cv_map_put(&lm, c->labels[k], (uint32_t)k, e)) goto done;
    cv_vals_free(&v);
    v.kind = widen ? sc[j].kind : c->kind;
    char what[300];
    snprintf(what, sizeof what, "%s: obs column '%s'", D->path, c->name);
    if (cp0 < D->n_cells && (cv_check_block_seals(db, "main", D->id, c, cb0, D->path, e) ||
        cv_load_column(db, "main", "cells", c->col, c->kind, (uint32_t)c->ncat, cb0, c->labels, NULL, &v, what, e))) goto done;
    if ((int64_t)v.n != D->n_cells - cp0) { cv_fail(e, "%s: its last block holds %llu cells, not %lld", what, (unsigned long long)v.n, (long long)(D->n_cells - cp0)); goto done; }
    if (widen) {   /* from here on the column is of S's kind (a category's labels and dictionary go) */
      if (c->kind == DC_OBS_CATEGORY) {
        sqlite3_stmt *dd = cv_prep(db, e, "DELETE FROM main.cells_dict WHERE col = %lld", (long long)c->col);
        int ddr = dd ? sqlite3_step(dd) : SQLITE_ERROR;
        sqlite3_finalize(dd);
        if (ddr != SQLITE_DONE) { if (dd) cv_sql_fail(db, e, "cells_dict"); goto done; }
        for (int64_t k = 0; k < c->ncat; k++) free(c->labels[k]);
        free(c->labels);
        c->labels = NULL;
        c->ncat = old_ncat = 0;
      }
      c->kind = sc[j].kind;
    }
    if (j == -2) {  /* D's source column: S's sources */
      if (s_src >= 0) j = s_src;
      else if (sources_codes(db, S, &c->labels, &c->ncat, &lm, &v, e)) goto done;
    }
    if (j >= 0) {
      free(remap);
      remap = calloc((size_t)sc[j].ncat + 1, sizeof *remap);
      if (!remap) { cv_fail(e, "out of memory"); goto done; }
      if (c->kind == DC_OBS_CATEGORY)
        for (int64_t k = 0; k < sc[j].ncat; k++)
          if (cv_add_label(&c->labels, &c->ncat, &lm, sc[j].labels[k], &remap[k], e)) goto done;
      snprintf(what, sizeof what, "%s: obs column '%s'", S->path, sc[j].name);
      if (cv_check_block_seals(db, "src", S->id, &sc[j], 0, S->path, e) ||
          cv_load_column(db, "src", "cells", sc[j].col, sc[j].kind, (uint32_t)sc[j].ncat, 0, sc[j].labels, remap, &v, what, e)) goto done;
    } else if (j == -1) {
      for (int64_t k = 0; k < S->n_cells; k++) if (cv_vals_null(&v, e)) goto done;
    }
    if ((int64_t)v.n != D->n_cells - cp0 + S->n_cells) { cv_fail(e, "%s: obs column '%s' does not hold one value per cell", S->path, c->name); goto done; }
    sqlite3_stmt *del = cv_prep(db, e, "DELETE FROM main.cells_blocks WHERE col = %lld AND block >= %lld", (long long)c->col, (long long)cb0);
    if (!del) goto done;
    int dr = sqlite3_step(del);
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { cv_sql_fail(db, e, "cells_blocks"); goto done; }
    if (c->ncat != old_ncat && cv_reseal_blocks(db, w->dataset_id, old_ncat, w->dataset_id, c->col, c->name, c->kind, c->ncat, e)) goto done;
    if (cv_write_blocks(w, c->col, c->name, c->ncat, cp0, &v, B, e)) goto done;
    if (c->ncat != old_ncat && cv_write_dict_rows(db, c->col, c->labels, old_ncat, c->ncat, e)) goto done;
    if (cv_write_column_row(db, w->dataset_id, c->col, c->name, c->kind, c->labels, c->ncat, e)) goto done;
  }
  /* S's new columns (and a source column when D has none): every block written */
  for (int j = 0; j <= ns; j++) {
    int is_src = j == ns;
    if (is_src ? d_src >= 0 : (j == s_src || find_col(dc, n_all, sc[j].name) >= 0)) continue;
    dcol nc;
    memset(&nc, 0, sizeof nc);
    nc.kind = is_src ? DC_OBS_CATEGORY : sc[j].kind;
    nc.col = next_col++;
    nc.name = unique_col(dc, n_all, is_src ? "source" : sc[j].name);
    if (!nc.name) { cv_fail(e, "out of memory"); goto done; }
    if (!is_src && strcmp(nc.name, sc[j].name) && meta_rename_col(db, 0, sc[j].name, nc.name, e)) { free(nc.name); goto done; }
    dcol *grown = realloc(dc, (size_t)(n_all + 1) * sizeof *dc);
    if (!grown) { free(nc.name); cv_fail(e, "out of memory"); goto done; }
    dc = grown;
    dc[n_all++] = nc;
    dcol *c = &dc[n_all - 1];
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    cv_vals_free(&v);
    v.kind = c->kind;
    if (is_src) {
      if (sources_codes(db, D, &c->labels, &c->ncat, &lm, &v, e)) goto done;
    } else {
      for (int64_t k = 0; k < D->n_cells; k++) if (cv_vals_null(&v, e)) goto done;
    }
    int sj = is_src ? s_src : j;
    if (is_src && sj < 0) {
      if (sources_codes(db, S, &c->labels, &c->ncat, &lm, &v, e)) goto done;
    } else {
      free(remap);
      remap = calloc((size_t)sc[sj].ncat + 1, sizeof *remap);
      if (!remap) { cv_fail(e, "out of memory"); goto done; }
      for (int64_t k = 0; c->kind == DC_OBS_CATEGORY && k < sc[sj].ncat; k++)
        if (cv_add_label(&c->labels, &c->ncat, &lm, sc[sj].labels[k], &remap[k], e)) goto done;
      char what[300];
      snprintf(what, sizeof what, "%s: obs column '%s'", S->path, sc[sj].name);
      if (cv_check_block_seals(db, "src", S->id, &sc[sj], 0, S->path, e) ||
          cv_load_column(db, "src", "cells", sc[sj].col, sc[sj].kind, (uint32_t)sc[sj].ncat, 0, sc[sj].labels, remap, &v, what, e)) goto done;
    }
    if ((int64_t)v.n != D->n_cells + S->n_cells) { cv_fail(e, "%s: obs column '%s' does not hold one value per cell", S->path, c->name); goto done; }
    if (cv_write_blocks(w, c->col, c->name, c->ncat, 0, &v, B, e)) goto done;
    if (cv_write_dict_rows(db, c->col, c->labels, 0, c->ncat, e)) goto done;
    if (cv_write_column_row(db, w->dataset_id, c->col, c->name, c->kind, c->labels, c->ncat, e)) goto done;
  }
  rc = 0;
done:
  cv_vals_free(&v);
  free(remap);
  cv_map_free(&lm);
  cv_dcols_free(dc, n_all > nd ? n_all : nd);
  cv_dcols_free(sc, ns);
  return rc;
}

/* appended: S (append's scratch dataset) was converted with D's genes as its genes 0 .. nD-1
** (cv_opts.fixed_genes, matched by (name, k) in D's original order), its new genes after */
static int merge_genes(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, int keep_ok, int appended, uint32_t **sigma_out,
                       uint32_t *n_out, int *identity, cv_err *e) {
  gcol *dg = NULL, *sg = NULL, *mg = NULL;
  int nd = 0, ns = 0, nm = 0, rc = -1;
  int *keep = NULL;
  uint32_t *sigma = NULL, *from_s = NULL, *drep = NULL, *srep = NULL, *by = NULL, next = (uint32_t)D->n_genes;
  int64_t *sorig = NULL;
  if (read_genes(db, "main", D->path, D->genes_id, D->n_genes, &dg, &nd, e) || read_genes(db, "src", S->path, S->id, S->n_genes, &sg, &ns, e)) goto done;
  sigma = malloc(((size_t)S->n_genes + 1) * sizeof *sigma);
  if (!sigma) { cv_fail(e, "out of memory"); goto done; }
  if (appended) {
    if (S->n_genes < D->n_genes) { cv_fail(e, "internal: the appended files have fewer genes than the dataset"); goto done; }
    for (int64_t j = 0; j < S->n_genes; j++) {
      if (j < D->n_genes && strcmp(gname(&dg[0].v, (uint64_t)j), gname(&sg[0].v, (uint64_t)j))) {
        cv_fail(e, "internal: appended gene %lld is not the dataset's", (long long)j);
        goto done;
      }
      sigma[j] = (uint32_t)j;
    }
    next = (uint32_t)S->n_genes;
  } else {
    drep = malloc(((size_t)D->n_genes + 1) * sizeof *drep);
    srep = malloc(((size_t)S->n_genes + 1) * sizeof *srep);
    if (!drep || !srep) { cv_fail(e, "out of memory"); goto done; }
    if (cv_dataset_gene_reps(db, "main", D->path, &dg[0].v, orig_col(dg, nd), drep, e) ||
        cv_dataset_gene_reps(db, "src", S->path, &sg[0].v, orig_col(sg, ns), srep, e) ||
        gene_map(&dg[0].v, drep, &sg[0].v, srep, sigma, &next, e))
      goto done;
  }
  *identity = 1;
  for (int64_t j = 0; j < S->n_genes; j++) if (sigma[j] != (uint32_t)j) *identity = 0;
  uint32_t N = next, NDg = (uint32_t)D->n_genes;
  {   /* few of S's genes in D: most likely another species, or ids against symbols (as convert warns) */
    uint64_t own = 0, shared = 0;
    for (int64_t j = 0; j < S->n_genes; j++) {
      /* append: S holds every gene of D; those with no cell in the files count as not theirs */
      if (appended && j < (int64_t)NDg && sg[2].v.i64[j] == 0) continue;
      own++;
      shared += sigma[j] < NDg;
    }
    if (own && NDg && (double)shared < 0.5 * (double)own)
      fprintf(stderr, "deltacells: warning: %s shares few genes with %s: %llu of its %llu genes (%.1f%%) are in the "
              "dataset, the others are added as new genes.  Different species, or genes named differently (symbols vs "
              "Ensembl ids: give append the --gene-key the dataset was converted with)?\n", S->label ? S->label : S->path,
              D->path, (unsigned long long)shared, (unsigned long long)own, 100.0 * (double)shared / (double)own);
  }
  from_s = malloc(((size_t)(N - NDg) + 1) * sizeof *from_s);
  if (!from_s) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t j = 0; j < S->n_genes; j++) if (sigma[j] >= NDg) from_s[sigma[j] - NDg] = (uint32_t)j;
  /* merged columns: D's, then S's var columns D lacks */
  mg = calloc((size_t)(nd + ns) + 1, sizeof *mg);
  keep = calloc((size_t)(nd + ns) + 1, sizeof *keep);   /* merged col -> D's stored blocks still right */
  if (!mg || !keep) { free(keep); keep = NULL; cv_fail(e, "out of memory"); goto done; }
  for (int i = 0; i < nd + ns; i++) {
    gcol *dcx = i < nd ? &dg[i] : NULL, *scx = NULL;
    if (i >= nd) {
      if (i - nd < 3) continue;
      int dup = 0;
      for (int k = 0; k < nd; k++) dup |= !strcmp(dg[k].name, sg[i - nd].name);
      if (dup) continue;
      scx = &sg[i - nd];
    } else if (i < 3) scx = &sg[i];
    else for (int k = 3; k < ns; k++) if (!strcmp(sg[k].name, dcx->name)) scx = &sg[k];
    keep[nm] = keep_ok && dcx && N == NDg && i >= 3 && (!scx || scx->kind == dcx->kind);
    gcol *m = &mg[nm];
    /* a column of S alone is named apart from D's (and the earlier ones) but for case */
    m->name = dcx ? strdup(dcx->name) : unique_name(mg, nm, gcol_name, scx->name);
    nm++;
    if (!m->name) { cv_fail(e, "out of memory"); goto done; }
    if (!dcx && strcmp(m->name, scx->name) && meta_rename_col(db, 1, scx->name, m->name, e)) goto done;
    m->kind = dcx ? dcx->kind : scx->kind;
    if (dcx && scx && dcx->kind == DC_OBS_INT && scx->kind == DC_OBS_REAL) m->kind = DC_OBS_REAL;
    m->v.kind = m->kind;
    if (cv_vals_reserve(&m->v, N + 1, e)) goto done;
    if (m->kind == DC_OBS_TEXT && (!dcx || dcx->kind == DC_OBS_TEXT) && (!scx || scx->kind == DC_OBS_TEXT)) {
      /* text moves: each source value goes to one merged gene (from_s is one to one), and the
      ** sources are freed unread after this (a copy per value was a sixth of this step) */
      for (uint32_t g = 0; g < N; g++) {
        vals *src = g < NDg ? (dcx ? &dcx->v : NULL) : (scx ? &scx->v : NULL);
        uint64_t j = g < NDg ? g : from_s[g - NDg];
        m->v.text[g] = src ? src->text[j] : NULL;
        m->v.tlen[g] = src ? src->tlen[j] : 0;
        if (src) src->text[j] = NULL;
      }
      m->v.n = N;
      continue;
    }
    for (uint32_t g = 0; g < N; g++) {
      val1 x;
      memset(&x, 0, sizeof x);
      x.is_null = 1;
      if (g < NDg && dcx) x = vals_get(&dcx->v, g);
      else if (g >= NDg && scx) x = vals_get(&scx->v, from_s[g - NDg]);
      if (cv_vals_push(&m->v, &x, e)) goto done;
    }
    if (i == 1 || i == 2)  /* total_counts, n_cells: summed */
      for (int64_t j = 0; j < S->n_genes; j++)
        if (sigma[j] < NDg) m->v.i64[sigma[j]] += sg[i].v.i64[j];
    if (dcx && m->kind == DC_OBS_INT && N > NDg && !strcmp(dcx->name, "orig_index")) {
      /* the original order of the union, as convert of D's and S's inputs numbers it: D's genes,
      ** then S's new genes in S's original order (its gene_id order if it records none) */
      int64_t base = NDg;
      for (uint32_t g = 0; g < NDg; g++) if (dcx->v.valid[g] && dcx->v.i64[g] >= base) base = dcx->v.i64[g] + 1;
      by = malloc(((size_t)(N - NDg) + 1) * sizeof *by);
      sorig = malloc(((size_t)(N - NDg) + 1) * sizeof *sorig);
      if (!by || !sorig) { cv_fail(e, "out of memory"); goto done; }
      for (uint32_t p = 0; p < N - NDg; p++) {
        uint32_t j = from_s[p];
        by[p] = p;
        sorig[p] = !scx ? (int64_t)j : scx->v.valid[j] ? scx->v.i64[j] : INT64_MAX;
      }
      orig_ctx = sorig;
      qsort(by, N - NDg, sizeof *by, cmp_by_orig);
      for (uint32_t r = 0; r < N - NDg; r++) {
        m->v.i64[NDg + by[r]] = base + r;
        m->v.valid[NDg + by[r]] = 1;
      }
    }
  }
  int ordered = 1;  /* still numbered by decreasing total counts? */
  for (uint32_t g = 1; g < N; g++) if (mg[1].v.i64[g] > mg[1].v.i64[g - 1]) ordered = 0;
  if (dsw_meta_text(w, "gene_numbering", ordered ? "total_counts" : "stable", e)) goto done;
  /* the columns that changed are written again (a column whose values are the same keeps its blocks and seals) */
  for (int i = 0; i < nm; i++) {
    if (keep[i]) continue;
    sqlite3_stmt *del = cv_prep(db, e, "DELETE FROM main.genes_blocks WHERE col = %d", i);
    int dr = del ? sqlite3_step(del) : SQLITE_ERROR;
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { if (del) cv_sql_fail(db, e, "genes_blocks"); goto done; }
    del = cv_prep(db, e, "DELETE FROM main.genes_columns WHERE col = %d", i);
    dr = del ? sqlite3_step(del) : SQLITE_ERROR;
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { if (del) cv_sql_fail(db, e, "genes_columns"); goto done; }
    dc_obs_values ov = cv_vals_slice(&mg[i].v, 0, N, 0);
    if (dsw_genes_column(w, i, mg[i].name, &ov, (uint32_t)D->genes_block, NULL, e)) goto done;
  }
  *sigma_out = sigma;
  sigma = NULL;
  *n_out = N;
  rc = 0;
done:
  gcols_free(dg, nd);
  gcols_free(sg, ns);
  gcols_free(mg, nm);
  free(keep);
  free(sigma);
  free(from_s);
  free(drep);
  free(srep);
  free(by);
  free(sorig);
  return rc;
}

/* Adds dataset spath to main (in the caller's transaction, which then detaches `src`); D is updated. */
int cv_merge_into(sqlite3 *db, dsinfo *D, const char *spath, const char *slabel, int keep_ok, int tiles_in, int threads,
                  int *reencoded, cv_err *e) {
  dsinfo S;
  memset(&S, 0, sizeof S);
  dsw w;
  memset(&w, 0, sizeof w);
  uint32_t *sigma = NULL, N = 0;
  int identity = 0, rc = -1;
  sqlite3_stmt *st = cv_prep(db, e, "ATTACH %Q AS src", spath);
  if (!st) return -1;
  int ar = sqlite3_step(st);
  sqlite3_finalize(st);
  if (ar != SQLITE_DONE) return cv_sql_fail(db, e, spath);
  if (cv_read_meta(db, "src", spath, &S, e)) goto done;
  S.label = slabel;
  if (strcmp(S.codec, D->codec) != 0 && !reencoded) {
    cv_fail(e, "%s: codec %s, %s: codec %s", spath, S.codec, D->path, D->codec);
    goto done;
  }
  if (dsw_over(&w, db, D->out ? D->out : D->path, D->id, e)) goto done;
  /* the genes table is written again at zstd level 3, not convert's 19: merging the real files
  ** (2 + 3, 62,025 genes; perf) its blocks take 401 KB instead of 384 KB at level 9 (+0.15% of
  ** the dataset) and 0.11 s instead of 0.17 s, a quarter of such a merge (level 1: 432 KB, 0.09 s) */
  w.genes_level = 3;
  /* and the obs blocks it writes (the first dataset's last block, joined by the second's cells,
  ** and all of the second's) at level 3, not convert's 9: an append, which encodes that last
  ** block again each time, spent 0.053-0.059 s of its 0.28 s in it at level 9 and 0.029-0.033 s
  ** at level 3 (9 generated files of 3,000 cells appended, 10 obs columns); converting each real
  ** file with its obs at level 3 instead of 9 made them 0.2-9% larger (mudan: 12.7 KB against
  ** 11.7 KB, its X 1.49 MB) */
  w.obs_level = 3;
  double tg = cv_now();
  if (cv_merge_meta(db, &w, e)) goto done;   /* before merge_genes and merge_obs rewrite the columns */
  if (merge_genes(db, &w, D, &S, keep_ok, tiles_in, &sigma, &N, &identity, e)) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: genes %.3f s\n", cv_now() - tg);
  tg = cv_now();
  if (tiles_in) {   /* append: the converter wrote S's tiles into main already */
    if (!identity) { cv_fail(e, "internal: appended genes did not keep their ids"); goto done; }
    sqlite3_stmt *q = cv_prep(db, e, "SELECT count(*), coalesce(sum(nnz), 0), coalesce(min(tile), -1), coalesce(sum(n_cells), 0) "
                                   "FROM main.tiles_data WHERE tile >= %lld", (long long)D->n_tiles);
    if (!q) goto done;
    int ok = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) == S.n_tiles && sqlite3_column_int64(q, 1) == S.nnz &&
             sqlite3_column_int64(q, 3) == S.n_cells;
    sqlite3_finalize(q);
    if (!ok) { cv_fail(e, "internal: the appended tiles do not add up to %lld cells, %lld nonzeros", (long long)S.n_cells, (long long)S.nnz); goto done; }
  } else if (identity && strcmp(S.codec, D->codec) == 0) {
    if (cv_copy_tiles(db, "src", spath, S.id, D->id, D->n_tiles, D->n_cells, e)) goto done;
  } else {
    if (reencoded) *reencoded += (int)S.n_tiles;
    if (reencode_tiles(db, &w, D, &S, sigma, N, threads, e)) goto done;
  }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: tiles %.3f s\n", cv_now() - tg);
  tg = cv_now();
  if (merge_obs(db, &w, D, &S, e)) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: obs %.3f s\n", cv_now() - tg);
  /* dc_meta */
  st = cv_prep(db, e,
             "SELECT json_group_array(json(v)) FROM (SELECT 0 AS a, key AS k, value AS v FROM json_each(?1) UNION ALL "
             "SELECT 1, key, json_set(value, '$.first_cell', json_extract(value, '$.first_cell') + ?2, '$.first_tile', "
             "json_extract(value, '$.first_tile') + ?3) FROM json_each(?4) ORDER BY a, k)");
  if (!st) goto done;
  sqlite3_bind_text(st, 1, D->sources, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st, 2, D->n_cells);
  sqlite3_bind_int64(st, 3, D->n_tiles);
  sqlite3_bind_text(st, 4, S.sources, -1, SQLITE_STATIC);
  char *src = sqlite3_step(st) == SQLITE_ROW ? strdup((const char *)sqlite3_column_text(st, 0)) : NULL;
  sqlite3_finalize(st);
  if (!src) { cv_fail(e, "dc_meta.sources: %s", sqlite3_errmsg(db)); goto done; }
  free(D->sources);
  D->sources = src;
  D->n_sources += S.n_sources;
  D->n_cells += S.n_cells;
  D->n_tiles += S.n_tiles;
  D->nnz += S.nnz;
  D->n_genes = N;
  if (dsw_meta_int(&w, "n_cells", D->n_cells, e) || dsw_meta_int(&w, "n_genes", D->n_genes, e) ||
      dsw_meta_int(&w, "nnz", D->nnz, e) || dsw_meta_int(&w, "n_tiles", D->n_tiles, e) ||
      dsw_meta_text(&w, "sources", D->sources, e))
    goto done;
  D->genes_id = D->id;   /* merge_genes wrote the genes table again, sealed under D's id */
  rc = 0;
done:
  dsw_over_end(&w);
  free(sigma);
  free(S.sources);
  return rc;   /* src stays attached: DETACH is refused inside the transaction that read it */
}
