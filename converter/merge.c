/*
** merge.c — datasets that change (docs/converter.md "append and merge").
**
** Both commands go through one step, merge_into(): dataset S (ATTACHed as
** `src`) is added to dataset D (`main`, inside a transaction):
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
**   meta   n_cells, n_genes, nnz, n_tiles and sources are updated.
**
** append: the inputs are first converted into a temporary dataset beside D
** with D's codec settings and D's genes given their ids (cv_opts.fixed_genes),
** so that every new tile is encoded once and copied; then merge_into() runs
** in one transaction on D (rollback journal: a crash leaves the old dataset,
** which the next read-write open restores).
** merge: A is copied to a temporary file beside the output, given a fresh
** dataset id (every seal computed again), every other dataset is merged into
** it, and it is renamed into place.
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

/* ------------------------------------------------------------ SQL helpers */
static int sql_fail(sqlite3 *db, cv_err *e, const char *what) {
  return cv_fail(e, "%s: %s", what, sqlite3_errmsg(db));
}

static int xexec(sqlite3 *db, const char *sql, cv_err *e) {
  char *m = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &m) != SQLITE_OK) {
    int r = cv_fail(e, "%.80s: %s", sql, m ? m : sqlite3_errmsg(db));
    sqlite3_free(m);
    return r;
  }
  return 0;
}

static sqlite3_stmt *xprep(sqlite3 *db, cv_err *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *sql = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  sqlite3_stmt *st = NULL;
  if (!sql) { cv_fail(e, "out of memory"); return NULL; }
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    cv_fail(e, "%.100s: %s", sql, sqlite3_errmsg(db));
    st = NULL;
  }
  sqlite3_free(sql);
  return st;
}

/* ------------------------------------------------------------ dataset meta */
typedef struct dsinfo {
  const char *path;
  int64_t version, n_cells, n_genes, nnz, n_tiles, level, chunks, tile_cells, obs_block, genes_block;
  char codec[32];
  uint64_t id;
  char *sources;           /* JSON array */
  int n_sources;
} dsinfo;

static int meta_get(sqlite3 *db, const char *schema, const char *key, sqlite3_stmt **out, cv_err *e) {
  sqlite3_stmt *st = xprep(db, e, "SELECT value FROM \"%w\".dc_meta WHERE key = %Q", schema, key);
  if (!st) return -1;
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    return 1;
  }
  *out = st;
  return 0;
}

static int read_meta(sqlite3 *db, const char *schema, const char *path, dsinfo *m, cv_err *e) {
  memset(m, 0, sizeof *m);
  m->path = path;
  struct { const char *k; int64_t *v; int need; } ints[] = {
      {"format_version", &m->version, 1}, {"n_cells", &m->n_cells, 1}, {"n_genes", &m->n_genes, 1},
      {"nnz", &m->nnz, 1}, {"n_tiles", &m->n_tiles, 1}, {"level", &m->level, 0}, {"chunks", &m->chunks, 0},
      {"tile_cells", &m->tile_cells, 0}, {"obs_block_cells", &m->obs_block, 0}, {"genes_block", &m->genes_block, 0}};
  for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
    sqlite3_stmt *st = NULL;
    int r = meta_get(db, schema, ints[i].k, &st, e);
    if (r < 0) return cv_prefix(e, "%s", path);
    if (r > 0) {
      if (ints[i].need) return cv_fail(e, "%s: not a deltacells dataset (dc_meta has no %s)", path, ints[i].k);
      continue;
    }
    *ints[i].v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  if (m->version != DC_FORMAT_VERSION)
    return cv_fail(e, "%s: format version %lld; append and merge write version %d only (convert it again with this "
                   "build)", path, (long long)m->version, DC_FORMAT_VERSION);
  if (!m->chunks) m->chunks = 8;
  if (!m->tile_cells) m->tile_cells = 10000;
  if (!m->obs_block) m->obs_block = 65536;
  if (!m->genes_block) m->genes_block = DC_GENES_BLOCK;
  if (m->obs_block <= 0 || m->obs_block > DC_OBS_MAX_N || m->genes_block <= 0 || m->genes_block > DC_OBS_MAX_N)
    return cv_fail(e, "%s: dc_meta has impossible block sizes", path);
  sqlite3_stmt *st = NULL;
  if (meta_get(db, schema, "codec", &st, e) == 0) {
    snprintf(m->codec, sizeof m->codec, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
  } else snprintf(m->codec, sizeof m->codec, "rans");
  if (meta_get(db, schema, "dataset_id", &st, e) != 0) return cv_fail(e, "%s: dc_meta has no dataset_id", path);
  const char *hex = (const char *)sqlite3_column_text(st, 0);
  int bad = !hex || dc_seal_parse_id(hex, strlen(hex), &m->id) != 0;
  sqlite3_finalize(st);
  if (bad) return cv_fail(e, "%s: dc_meta.dataset_id is not 16 hex digits", path);
  if (meta_get(db, schema, "sources", &st, e) == 0) {
    const char *s = (const char *)sqlite3_column_text(st, 0);
    m->sources = strdup(s ? s : "[]");
    sqlite3_finalize(st);
  } else m->sources = strdup("[]");
  if (!m->sources) return cv_fail(e, "out of memory");
  st = xprep(db, e, "SELECT json_array_length(%Q)", m->sources);
  if (!st) return -1;
  if (sqlite3_step(st) == SQLITE_ROW) m->n_sources = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return 0;
}

/* ------------------------------------------------------------ column values */
/* The values of one column, of one kind, growing. */
typedef struct vals {
  int kind;
  uint64_t n, cap;
  int32_t *codes;
  int64_t *i64;
  uint8_t *valid;
  double *f64;
  int8_t *b8;
  char **text;
  uint32_t *tlen;
} vals;

static void vals_free(vals *v) {
  if (v->text) for (uint64_t i = 0; i < v->n; i++) free(v->text[i]);
  free(v->codes); free(v->i64); free(v->valid); free(v->f64); free(v->b8); free(v->text); free(v->tlen);
  int k = v->kind;
  memset(v, 0, sizeof *v);
  v->kind = k;
}

static int vals_reserve(vals *v, uint64_t need, cv_err *e) {
  if (need <= v->cap) return 0;
  uint64_t c = v->cap ? v->cap : 1024;
  while (c < need) c *= 2;
#define GROW(p) do { void *q = realloc(p, c * sizeof *(p)); if (!q) return cv_fail(e, "out of memory"); p = q; } while (0)
  switch (v->kind) {
    case DC_OBS_CATEGORY: GROW(v->codes); break;
    case DC_OBS_INT: GROW(v->i64); GROW(v->valid); break;
    case DC_OBS_REAL: GROW(v->f64); break;
    case DC_OBS_BOOL: GROW(v->b8); break;
    default: GROW(v->text); GROW(v->tlen); break;
  }
#undef GROW
  v->cap = c;
  return 0;
}

static int vals_null(vals *v, cv_err *e) {
  if (vals_reserve(v, v->n + 1, e)) return -1;
  uint64_t i = v->n++;
  switch (v->kind) {
    case DC_OBS_CATEGORY: v->codes[i] = -1; break;
    case DC_OBS_INT: v->i64[i] = 0; v->valid[i] = 0; break;
    case DC_OBS_REAL: v->f64[i] = NAN; break;
    case DC_OBS_BOOL: v->b8[i] = -1; break;
    default: v->text[i] = NULL; v->tlen[i] = 0; break;
  }
  return 0;
}

/* One value, given as the typed parts a source has; NULL when is_null. */
typedef struct val1 {
  int kind, is_null;
  int64_t i;         /* int, bool, category code (already in the target's codes) */
  double f;
  const char *s;     /* text, or a category's label */
  uint32_t len;
} val1;

static char *fmt_num(const val1 *x, uint32_t *len) {
  char buf[64];
  if (x->kind == DC_OBS_REAL) snprintf(buf, sizeof buf, "%.17g", x->f);
  else if (x->kind == DC_OBS_BOOL) snprintf(buf, sizeof buf, "%s", x->i ? "True" : "False");
  else snprintf(buf, sizeof buf, "%lld", (long long)x->i);
  *len = (uint32_t)strlen(buf);
  return strdup(buf);
}

/* Appends x to v, cast to v's kind (the casts check_cast allows). */
static int vals_push(vals *v, const val1 *x, cv_err *e) {
  if (x->is_null || (x->kind == DC_OBS_TEXT && v->kind != DC_OBS_TEXT)) return vals_null(v, e);
  if (vals_reserve(v, v->n + 1, e)) return -1;
  uint64_t i = v->n;
  switch (v->kind) {
    case DC_OBS_CATEGORY: v->codes[i] = (int32_t)x->i; break;
    case DC_OBS_INT:
      if (x->kind == DC_OBS_REAL) {
        if (x->f != floor(x->f) || fabs(x->f) > 9e15) return vals_null(v, e);
        v->i64[i] = (int64_t)x->f;
      } else v->i64[i] = x->i;
      v->valid[i] = 1;
      break;
    case DC_OBS_REAL: v->f64[i] = x->kind == DC_OBS_REAL ? x->f : (double)x->i; break;
    case DC_OBS_BOOL: v->b8[i] = x->i ? 1 : 0; break;
    default:
      if (x->kind == DC_OBS_TEXT || x->kind == DC_OBS_CATEGORY) {
        v->text[i] = malloc((size_t)x->len + 1);
        if (!v->text[i]) return cv_fail(e, "out of memory");
        memcpy(v->text[i], x->s, x->len);
        v->text[i][x->len] = 0;
        v->tlen[i] = x->len;
      } else {
        v->text[i] = fmt_num(x, &v->tlen[i]);
        if (!v->text[i]) return cv_fail(e, "out of memory");
      }
      break;
  }
  v->n++;
  return 0;
}

/* The value i of a decoded block as a val1 (labels: its dictionary). */
static val1 block_val(const dc_obs_block *b, uint32_t i, char *const *labels) {
  val1 x;
  memset(&x, 0, sizeof x);
  x.kind = b->kind;
  switch (b->kind) {
    case DC_OBS_CATEGORY:
      x.is_null = b->codes[i] < 0;
      x.i = b->codes[i];
      if (!x.is_null && labels) { x.s = labels[b->codes[i]]; x.len = (uint32_t)strlen(x.s); }
      break;
    case DC_OBS_INT: case DC_OBS_BOOL: x.is_null = !b->valid[i]; x.i = b->i64[i]; break;
    case DC_OBS_REAL: x.is_null = isnan(b->f64[i]); x.f = b->f64[i]; break;
    default:
      x.is_null = !b->valid[i];
      x.s = b->text + b->text_off[i];
      x.len = (uint32_t)(b->text_off[i + 1] - b->text_off[i]);
      break;
  }
  return x;
}

/* values [off, off+k) of v as the encoder takes them */
static dc_obs_values vals_slice(const vals *v, uint64_t off, uint32_t k, uint32_t n_categories) {
  dc_obs_values o;
  memset(&o, 0, sizeof o);
  o.kind = v->kind;
  o.n = k;
  o.n_categories = n_categories;
  if (v->codes) o.codes = v->codes + off;
  if (v->i64) o.i64 = v->i64 + off;
  if (v->valid) o.valid = v->valid + off;
  if (v->f64) o.f64 = v->f64 + off;
  if (v->b8) o.b8 = v->b8 + off;
  if (v->text) o.text = (const char *const *)(v->text + off);
  if (v->tlen) o.text_len = v->tlen + off;
  return o;
}

/* Appends every value of a stored column (cells or genes, blocks from block b0) to dst,
** cast; a category's codes go through remap (NULL: unchanged) and labels. */
static int load_column(sqlite3 *db, const char *schema, const char *table, int64_t col, int kind, uint32_t n_cat,
                       int64_t b0, char *const *labels, const int32_t *remap, vals *dst, const char *what, cv_err *e) {
  int genes = !strcmp(table, "genes");
  sqlite3_stmt *st = xprep(db, e, "SELECT block, %s, data FROM \"%w\".%s_blocks WHERE col = %lld AND block >= %lld ORDER BY block",
                           genes ? "n_genes" : "n_cells", schema, table, (long long)col, (long long)b0);
  if (!st) return -1;
  dc_obs_decoder *d = dc_obs_decoder_new();
  int rc = d ? 0 : cv_fail(e, "out of memory"), r;
  while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
    dc_obs_expect ex = {kind, (uint32_t)sqlite3_column_int64(st, 1), n_cat};
    dc_obs_block b;
    dc_error de;
    memset(&de, 0, sizeof de);
    const uint8_t *p = sqlite3_column_blob(st, 2);
    size_t len = (size_t)sqlite3_column_bytes(st, 2);
    if (dc_obs_decode(d, p, len, &ex, &b, &de) != DC_OK) {
      rc = cv_fail(e, "%s: block %lld: %s", what, (long long)sqlite3_column_int64(st, 0), de.msg);
      break;
    }
    if (vals_reserve(dst, dst->n + b.n, e)) { rc = -1; break; }
    for (uint32_t i = 0; i < b.n && !rc; i++) {
      val1 x = block_val(&b, i, labels);
      if (kind == DC_OBS_CATEGORY && !x.is_null && remap) x.i = remap[x.i];
      rc = vals_push(dst, &x, e);
    }
  }
  if (!rc && r != SQLITE_DONE) rc = sql_fail(db, e, what);
  dc_obs_decoder_free(d);
  sqlite3_finalize(st);
  return rc;
}

/* ------------------------------------------------------------ seals */
typedef struct seal_fn_ctx { uint64_t old_id, new_id; } seal_fn_ctx;

/* cv_reseal_tile(old_tile, old_first, new_tile, new_first, n_cells, nnz, chunks, data, checksum):
** checks the row's seal under the old dataset id and returns its seal at its new place. */
static void fn_reseal_tile(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  seal_fn_ctx *c = sqlite3_user_data(ctx);
  const uint8_t *blob = sqlite3_value_blob(argv[7]);
  size_t len = (size_t)sqlite3_value_bytes(argv[7]);
  int64_t t0 = sqlite3_value_int64(argv[0]), f0 = sqlite3_value_int64(argv[1]);
  int64_t t1 = sqlite3_value_int64(argv[2]), f1 = sqlite3_value_int64(argv[3]);
  int64_t nc = sqlite3_value_int64(argv[4]), nz = sqlite3_value_int64(argv[5]), ch = sqlite3_value_int64(argv[6]);
  dc_tile_hdr *h = malloc(sizeof *h);
  dc_error de;
  memset(&de, 0, sizeof de);
  if (!h) { sqlite3_result_error_nomem(ctx); return; }
  if (!blob || dc_tile_parse(blob, len, h, &de) != DC_OK) {
    char *m = sqlite3_mprintf("tile %lld: %s", (long long)t0, blob ? de.msg : "no data");
    sqlite3_result_error(ctx, m, -1);
    sqlite3_free(m);
    free(h);
    return;
  }
  int64_t old = 0, neu = 0;
  int r = dc_seal_tile(c->old_id, t0, f0, nc, nz, ch, len, blob, (size_t)h->hdr_len, &old) ||
          dc_seal_tile(c->new_id, t1, f1, nc, nz, ch, len, blob, (size_t)h->hdr_len, &neu);
  free(h);
  if (r) { sqlite3_result_error_nomem(ctx); return; }
  if (old != sqlite3_value_int64(argv[8])) {
    char *m = sqlite3_mprintf("tile %lld: its seal does not match (the tile and its place were not written together)",
                              (long long)t0);
    sqlite3_result_error(ctx, m, -1);
    sqlite3_free(m);
    return;
  }
  sqlite3_result_int64(ctx, neu);
}

/* Seals every block of main's obs column col again, keyed by new_id (after
** its n_categories, or the dataset id, changed).  old_id: checks each first. */
static int reseal_blocks(sqlite3 *db, uint64_t old_id, int64_t old_ncat, uint64_t new_id, int64_t col, const char *name,
                         int kind, int64_t ncat, cv_err *e) {
  sqlite3_stmt *q = xprep(db, e, "SELECT id, block, first_cell, n_cells, null_count, min, max, present, "
                                 "substr(data, 1, %d), length(data), checksum FROM main.cells_blocks WHERE col = %lld",
                          DC_SEAL_OBS_HEAD, (long long)col);
  sqlite3_stmt *u = q ? xprep(db, e, "UPDATE main.cells_blocks SET checksum = ?1 WHERE id = ?2") : NULL;
  int rc = q && u ? 0 : -1, r = SQLITE_DONE;
  while (!rc && (r = sqlite3_step(q)) == SQLITE_ROW) {
    dc_blockplace pl = {"cells", col, name, kind, ncat, sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2),
                        sqlite3_column_int64(q, 3), sqlite3_column_int64(q, 4)};
    dc_sealval mn = cv_sealval_of_column(q, 5), mx = cv_sealval_of_column(q, 6), pr = cv_sealval_of_column(q, 7);
    const uint8_t *head = sqlite3_column_blob(q, 8);
    uint64_t len = (uint64_t)sqlite3_column_int64(q, 9);
    int64_t old = 0, neu = 0;
    dc_blockplace po = pl;
    po.n_categories = old_ncat;
    if (dc_seal_block(old_id, &po, &mn, &mx, &pr, len, head, &old) || dc_seal_block(new_id, &pl, &mn, &mx, &pr, len, head, &neu)) {
      rc = cv_fail(e, "out of memory");
      break;
    }
    if (old != sqlite3_column_int64(q, 10)) {
      rc = cv_fail(e, "obs column '%s', block %lld: its seal does not match (the block and its place were not written "
                   "together); run `deltacells verify`", name, (long long)pl.block);
      break;
    }
    sqlite3_bind_int64(u, 1, neu);
    sqlite3_bind_int64(u, 2, sqlite3_column_int64(q, 0));
    if (sqlite3_step(u) != SQLITE_DONE) { rc = sql_fail(db, e, "cells_blocks"); break; }
    sqlite3_reset(u);
  }
  if (!rc && r != SQLITE_DONE) rc = sql_fail(db, e, "cells_blocks");
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  return rc;
}

/* ------------------------------------------------------------ obs blocks */
static void bind_stat(sqlite3_stmt *s, int i, int kind, const dc_obs_stats *st, int max) {
  if (!st->has_minmax) { sqlite3_bind_null(s, i); return; }
  if (kind == DC_OBS_REAL) sqlite3_bind_double(s, i, max ? st->max_f : st->min_f);
  else if (kind == DC_OBS_TEXT)
    sqlite3_bind_text(s, i, max ? st->max_s : st->min_s, (int)(max ? st->max_len : st->min_len), SQLITE_TRANSIENT);
  else sqlite3_bind_int64(s, i, max ? st->max_i : st->min_i);
}

/* Writes (or replaces) block b of main's column col: values [off, off+k) of v. */
static int write_block(dsw *w, int64_t col, const char *name, int64_t ncat, int64_t b, int64_t first, const vals *v,
                       uint64_t off, uint32_t k, cv_err *e) {
  dc_obs_values ov = vals_slice(v, off, k, ncat > 0 ? (uint32_t)ncat : 0);
  dc_obs_stats st;
  memset(&st, 0, sizeof st);
  dc_error de;
  memset(&de, 0, sizeof de);
  uint8_t *blob = NULL;
  size_t len = 0;
  if (dc_obs_encode(&ov, 0, &blob, &len, &st, &de) != DC_OK) {
    dc_obs_stats_clear(&st);
    return cv_fail(e, "obs column '%s', block %lld: %s", name, (long long)b, de.msg);
  }
  sqlite3_stmt *s = dsw_block_stmt(w);
  sqlite3_bind_int64(s, 1, (col << 32) + b);
  sqlite3_bind_int64(s, 2, col);
  sqlite3_bind_int64(s, 3, b);
  sqlite3_bind_int64(s, 4, first);
  sqlite3_bind_int64(s, 5, k);
  sqlite3_bind_int64(s, 6, st.null_count);
  bind_stat(s, 7, v->kind, &st, 0);
  bind_stat(s, 8, v->kind, &st, 1);
  if (st.present) sqlite3_bind_blob64(s, 9, st.present, st.present_len, SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, 9);
  sqlite3_bind_blob64(s, 10, blob, len, SQLITE_STATIC);
  dc_blockplace pl = {"cells", col, name, v->kind, v->kind == DC_OBS_CATEGORY ? ncat : -1, b, first, k, st.null_count};
  dc_sealval mn = cv_sealval_of_stat(v->kind, &st, 0), mx = cv_sealval_of_stat(v->kind, &st, 1), pr;
  memset(&pr, 0, sizeof pr);
  if (st.present) { pr.type = DC_SV_BLOB; pr.p = st.present; pr.n = st.present_len; }
  int64_t seal = 0;
  int rc = dc_seal_block(w->dataset_id, &pl, &mn, &mx, &pr, len, blob, &seal) ? cv_fail(e, "out of memory") : 0;
  sqlite3_bind_int64(s, 11, seal);
  if (!rc) rc = dsw_block_step(w, e);
  dc_obs_stats_clear(&st);
  free(blob);
  return rc;
}

/* cells_dict rows [from, ncat) of column col: labels[from .. ncat-1] */
static int write_dict_rows(sqlite3 *db, int64_t col, char *const *labels, int64_t from, int64_t ncat, cv_err *e) {
  sqlite3_stmt *ins = xprep(db, e, "INSERT INTO main.cells_dict VALUES(?1, ?2, ?3)");
  if (!ins) return -1;
  for (int64_t k = from; k < ncat; k++) {
    sqlite3_bind_int64(ins, 1, col);
    sqlite3_bind_int64(ins, 2, k);
    sqlite3_bind_text(ins, 3, labels[k], -1, SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) { sqlite3_finalize(ins); return sql_fail(db, e, "cells_dict"); }
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  return 0;
}

/* cells_columns' row of col, from its blocks and dictionary (checksum: the dictionary's seal) */
static int write_column_row(sqlite3 *db, uint64_t id, int64_t col, const char *name, int kind, char *const *labels,
                            int64_t ncat, cv_err *e) {
  dc_blockplace pl = {"cells", col, name, kind, kind == DC_OBS_CATEGORY ? ncat : -1, 0, 0, 0, 0};
  dc_seal ds;
  dc_seal_dict_begin(&ds, id, &pl);
  int64_t dbytes = 0;
  for (int64_t k = 0; kind == DC_OBS_CATEGORY && k < ncat; k++) {
    size_t l = strlen(labels[k]);
    dc_seal_bytes(&ds, labels[k], l);
    dbytes += (int64_t)l;
  }
  int64_t dseal = 0;
  if (dc_seal_end(&ds, &dseal)) return cv_fail(e, "out of memory");
  sqlite3_stmt *st = xprep(db, e,
                           "INSERT OR REPLACE INTO main.cells_columns(col, name, kind, n_categories, null_count, bytes, checksum) "
                           "SELECT ?1, ?2, ?3, ?4, coalesce(sum(null_count), 0), "
                           "coalesce(sum(length(data) + coalesce(length(present), 0)), 0) + ?5, ?6 "
                           "FROM main.cells_blocks WHERE col = ?1");
  if (!st) return -1;
  sqlite3_bind_int64(st, 1, col);
  sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(st, 3, dc_obs_kind_name(kind), -1, SQLITE_STATIC);
  if (kind == DC_OBS_CATEGORY) sqlite3_bind_int64(st, 4, ncat);
  else sqlite3_bind_null(st, 4);
  sqlite3_bind_int64(st, 5, dbytes);
  sqlite3_bind_int64(st, 6, dseal);
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : sql_fail(db, e, "cells_columns");
  sqlite3_finalize(st);
  return rc;
}

/* ------------------------------------------------------------ obs columns of a dataset */
typedef struct dcol {
  int64_t col;
  char *name;
  int kind;
  int64_t ncat;
  char **labels;
} dcol;

static void dcols_free(dcol *c, int n) {
  for (int i = 0; i < n; i++) {
    free(c[i].name);
    if (c[i].labels) for (int64_t k = 0; k < c[i].ncat; k++) free(c[i].labels[k]);
    free(c[i].labels);
  }
  free(c);
}

static int read_cols(sqlite3 *db, const char *schema, const char *path, dcol **out, int *n_out, cv_err *e) {
  *out = NULL;
  *n_out = 0;
  sqlite3_stmt *st = xprep(db, e, "SELECT col, name, kind, coalesce(n_categories, 0) FROM \"%w\".cells_columns ORDER BY col",
                           schema);
  if (!st) return -1;
  dcol *c = NULL;
  int n = 0, rc = 0, r;
  size_t cap = 0;
  while ((r = sqlite3_step(st)) == SQLITE_ROW) {
    if (cv_grow((void **)&c, &cap, (size_t)n + 1, sizeof *c, e)) { rc = -1; break; }
    dcol *x = &c[n++];
    memset(x, 0, sizeof *x);
    x->col = sqlite3_column_int64(st, 0);
    x->name = strdup((const char *)sqlite3_column_text(st, 1));
    x->kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
    x->ncat = sqlite3_column_int64(st, 3);
    if (!x->name) { rc = cv_fail(e, "out of memory"); break; }
    if (!x->kind) { rc = cv_fail(e, "%s: obs column '%s' has an unknown kind", path, x->name); break; }
    if (x->kind == DC_OBS_CATEGORY) {
      x->labels = calloc((size_t)x->ncat + 1, sizeof *x->labels);
      sqlite3_stmt *d = xprep(db, e, "SELECT code, value FROM \"%w\".cells_dict WHERE col = %lld ORDER BY code", schema,
                              (long long)x->col);
      if (!x->labels || !d) { sqlite3_finalize(d); rc = -1; break; }
      int64_t k = 0;
      while (sqlite3_step(d) == SQLITE_ROW && k < x->ncat) {
        if (sqlite3_column_int64(d, 0) != k) break;
        x->labels[k++] = strdup((const char *)sqlite3_column_text(d, 1));
      }
      sqlite3_finalize(d);
      if (k != x->ncat) { x->ncat = k; rc = cv_fail(e, "%s: obs column '%s': its dictionary is incomplete", path, x->name); break; }
    }
  }
  if (!rc && r != SQLITE_DONE) rc = sql_fail(db, e, path);
  sqlite3_finalize(st);
  *out = c;
  *n_out = n;
  return rc;
}

static const char *kind_label(int k) { return dc_obs_kind_name(k) ? dc_obs_kind_name(k) : "?"; }

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
  for (int i = 0; i < n; i++) { free(g[i].name); vals_free(&g[i].v); }
  free(g);
}

/* every column of schema's genes table, decoded */
static int read_genes(sqlite3 *db, const char *schema, const char *path, int64_t n_genes, gcol **out, int *n_out, cv_err *e) {
  *out = NULL;
  *n_out = 0;
  sqlite3_stmt *st = xprep(db, e, "SELECT col, name, kind FROM \"%w\".genes_columns ORDER BY col", schema);
  if (!st) return -1;
  gcol *g = NULL;
  size_t cap = 0;
  int n = 0, rc = 0;
  while (!rc && sqlite3_step(st) == SQLITE_ROW) {
    if (cv_grow((void **)&g, &cap, (size_t)n + 1, sizeof *g, e)) { rc = -1; break; }
    gcol *x = &g[n++];
    memset(x, 0, sizeof *x);
    int64_t col = sqlite3_column_int64(st, 0);
    x->name = strdup((const char *)sqlite3_column_text(st, 1));
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
    rc = load_column(db, schema, "genes", col, x->kind, 0, 0, NULL, NULL, &x->v, what, e);
    if (!rc && (int64_t)x->v.n != n_genes)
      rc = cv_fail(e, "%s: genes column '%s' holds %llu values for %lld genes", path, x->name, (unsigned long long)x->v.n,
                   (long long)n_genes);
  }
  sqlite3_finalize(st);
  *out = g;
  *n_out = n;
  if (!rc && (n < 3 || g[0].kind != DC_OBS_TEXT || g[1].kind != DC_OBS_INT || g[2].kind != DC_OBS_INT))
    rc = cv_fail(e, "%s: the genes table lacks name, total_counts, n_cells", path);
  return rc;
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

/* Gene keys as genes_join makes them: the k-th repeat of a name gets "\x01k". */
static int gene_keys(const vals *names, cv_map *keys, uint32_t *map_to, const cv_map *lookup, uint32_t *next, cv_err *e) {
  cv_map occ = {0};
  int rc = 0;
  for (uint64_t i = 0; i < names->n && !rc; i++) {
    const char *nm = names->text[i] ? names->text[i] : "";
    uint32_t k = 0, *seen = cv_map_ref(&occ, nm);
    if (seen) k = ++*seen;
    else if (cv_map_put(&occ, nm, 0, e)) { rc = -1; break; }
    size_t kl = strlen(nm) + 16;
    char *key = malloc(kl);
    if (!key) { rc = cv_fail(e, "out of memory"); break; }
    if (k) snprintf(key, kl, "%s\x01%u", nm, k);
    else snprintf(key, kl, "%s", nm);
    if (keys) rc = cv_map_put(keys, key, (uint32_t)i, e);
    else {
      uint32_t id;
      map_to[i] = cv_map_get(lookup, key, &id) ? id : (*next)++;
    }
    free(key);
  }
  cv_map_free(&occ);
  return rc;
}

/* ------------------------------------------------------------ tiles */
typedef struct pairsort { uint32_t g, v; } pairsort;
static int cmp_pair(const void *a, const void *b) {
  uint32_t x = ((const pairsort *)a)->g, y = ((const pairsort *)b)->g;
  return x < y ? -1 : x > y;
}

/* S's tiles re-encoded with its genes mapped by sigma (n_genes: the merged count) */
static int reencode_tiles(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, const uint32_t *sigma, uint32_t n_genes,
                          int threads, cv_err *e) {
  sqlite3_stmt *st = xprep(db, e, "SELECT tile, first_cell, n_cells, nnz, chunks, data, checksum FROM src.tiles_data ORDER BY tile");
  if (!st) return -1;
  dc_decoder *dec = dc_decoder_new();
  dc_tile_hdr *h = malloc(sizeof *h);
  int64_t *indptr = NULL;
  int32_t *idx = NULL, *val = NULL;
  pairsort *ps = NULL;
  size_t cap_c = 0, cap_n = 0, cap_p = 0;
  int rc = dec && h ? 0 : cv_fail(e, "out of memory"), r = SQLITE_DONE;
  dc_encode_opts eo;
  dc_encode_opts_default(&eo);
  eo.codec = dc_codec_from_name(D->codec) ? dc_codec_from_name(D->codec) : eo.codec;
  eo.level = (int)D->level;
  eo.n_chunks = (uint32_t)D->chunks;
  eo.threads = threads;
  while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t t = sqlite3_column_int64(st, 0), fc = sqlite3_column_int64(st, 1), nc = sqlite3_column_int64(st, 2);
    int64_t nz = sqlite3_column_int64(st, 3), ch = sqlite3_column_int64(st, 4);
    const uint8_t *blob = sqlite3_column_blob(st, 5);
    size_t len = (size_t)sqlite3_column_bytes(st, 5);
    dc_error de;
    memset(&de, 0, sizeof de);
    if (!blob || dc_tile_parse(blob, len, h, &de) != DC_OK) { rc = cv_fail(e, "%s: tile %lld: %s", S->path, (long long)t, de.msg); break; }
    int64_t seal = 0;
    if (dc_seal_tile(S->id, t, fc, nc, nz, ch, len, blob, (size_t)h->hdr_len, &seal)) { rc = cv_fail(e, "out of memory"); break; }
    if (seal != sqlite3_column_int64(st, 6) || (int64_t)h->n_cells != nc || (int64_t)h->nnz != nz) {
      rc = cv_fail(e, "%s: tile %lld: its seal does not match (the tile and its place were not written together)", S->path, (long long)t);
      break;
    }
    size_t c1 = cap_c, c2 = cap_n, c3 = cap_n, c4 = cap_p;
    if (cv_grow((void **)&indptr, &c1, (size_t)nc + 1, sizeof *indptr, e) || cv_grow((void **)&idx, &c2, (size_t)nz + 1, sizeof *idx, e) ||
        cv_grow((void **)&val, &c3, (size_t)nz + 1, sizeof *val, e)) { rc = -1; break; }
    cap_c = c1;
    cap_n = c2 < c3 ? c2 : c3;
    dc_out out = {indptr, idx, val, 0};
    if (dc_tile_decode(dec, blob, len, &out, &de) != DC_OK) { rc = cv_fail(e, "%s: tile %lld: %s", S->path, (long long)t, de.msg); break; }
    for (int64_t c = 0; c < nc; c++) {
      int64_t a = indptr[c], n = indptr[c + 1] - a;
      if (cv_grow((void **)&ps, &c4, (size_t)n + 1, sizeof *ps, e)) { rc = -1; break; }
      cap_p = c4;
      for (int64_t k = 0; k < n; k++) { ps[k].g = sigma[idx[a + k]]; ps[k].v = (uint32_t)val[a + k]; }
      qsort(ps, (size_t)n, sizeof *ps, cmp_pair);
      for (int64_t k = 0; k < n; k++) { idx[a + k] = (int32_t)ps[k].g; val[a + k] = (int32_t)ps[k].v; }
    }
    if (rc) break;
    dc_csr csr = {(uint32_t)nc, n_genes, (const uint64_t *)indptr, (const uint32_t *)idx, (const uint32_t *)val};
    uint8_t *enc = NULL;
    size_t elen = 0;
    if (dc_tile_encode(&csr, &eo, &enc, &elen, &de) != DC_OK) { rc = cv_fail(e, "%s: encoding tile %lld again: %s", S->path, (long long)t, de.msg); break; }
    if (dc_tile_parse(enc, elen, h, &de) != DC_OK) rc = cv_fail(e, "tile %lld: the encoder made a tile its own parser rejects: %s", (long long)t, de.msg);
    else rc = dsw_tile(w, D->n_tiles + t, D->n_cells + fc, nc, nz, h->n_chunks, enc, elen, e);
    free(enc);
  }
  if (!rc && r != SQLITE_DONE) rc = sql_fail(db, e, S->path);
  sqlite3_finalize(st);
  dc_decoder_free(dec);
  free(h); free(indptr); free(idx); free(val); free(ps);
  return rc;
}

/* ------------------------------------------------------------ merge_into */
/* A writer (dataset.h) over main of an open connection, for its insert helpers. */
static int dsw_over(dsw *w, sqlite3 *db, uint64_t id, cv_err *e) {
  memset(w, 0, sizeof *w);
  w->db = db;
  w->lock_fd = -1;
  w->dataset_id = id;
  if (!(w->ins_tile = xprep(db, e, "INSERT INTO main.tiles_data VALUES(?,?,?,?,?,?,?)")) ||
      !(w->ins_block = xprep(db, e, "INSERT OR REPLACE INTO main.cells_blocks VALUES(?,?,?,?,?,?,?,?,?,?,?)")) ||
      !(w->ins_gblock = xprep(db, e, "INSERT INTO main.genes_blocks VALUES(?,?,?,?,?,?,?)")) ||
      !(w->ins_gcol = xprep(db, e, "INSERT INTO main.genes_columns VALUES(?,?,?,?,?)")) ||
      !(w->ins_meta = xprep(db, e, "INSERT OR REPLACE INTO main.dc_meta VALUES(?,?)")))
    return -1;
  return 0;
}

static void dsw_over_end(dsw *w) {
  sqlite3_stmt **sts[] = {&w->ins_tile, &w->ins_block, &w->ins_dict, &w->ins_col, &w->ins_gblock, &w->ins_gcol, &w->ins_meta};
  for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) {
    sqlite3_finalize(*sts[i]);
    *sts[i] = NULL;
  }
}

static int find_col(const dcol *c, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(c[i].name, name)) return i;
  return -1;
}

/* a name no column of c has (ignoring case, as SQLite does): NAME, NAME_1, ... */
static char *unique_col(const dcol *c, int n, const char *name) {
  size_t l = strlen(name) + 24;
  char *r = malloc(l);
  if (!r) return NULL;
  snprintf(r, l, "%s", name);
  for (int k = 1;; k++) {
    int clash = 0;
    for (int i = 0; i < n && !clash; i++) clash = !strcasecmp(c[i].name, r);
    if (!clash) return r;
    snprintf(r, l, "%s_%d", name, k);
  }
}

static int add_label(char ***labels, int64_t *n, cv_map *m, const char *s, int32_t *code, cv_err *e) {
  uint32_t c;
  if (cv_map_get(m, s, &c)) { *code = (int32_t)c; return 0; }
  char **nl = realloc(*labels, (size_t)(*n + 2) * sizeof **labels);
  if (!nl) return cv_fail(e, "out of memory");
  *labels = nl;
  nl[*n] = strdup(s);
  if (!nl[*n] || cv_map_put(m, s, (uint32_t)*n, e)) return cv_fail(e, "out of memory");
  *code = (int32_t)(*n)++;
  return 0;
}

/* each cell's source (codes into labels, added as needed) from a dataset's dc_meta sources */
static int sources_codes(sqlite3 *db, const dsinfo *m, char ***labels, int64_t *nl, cv_map *lm, vals *dst, cv_err *e) {
  /* the label convert gave the input (its base name, or the shortest unique path ending); older
  ** datasets have only the file's path */
  sqlite3_stmt *st = xprep(db, e, "SELECT coalesce(json_extract(value, '$.source'), json_extract(value, '$.file')), "
                                  "json_extract(value, '$.first_cell'), "
                                  "json_extract(value, '$.n_cells') FROM json_each(%Q) ORDER BY key", m->sources);
  if (!st) return -1;
  uint64_t start = dst->n;
  int rc = 0;
  while (!rc && sqlite3_step(st) == SQLITE_ROW) {
    const char *f = (const char *)sqlite3_column_text(st, 0);
    int64_t fc = sqlite3_column_int64(st, 1), nc = sqlite3_column_int64(st, 2);
    int32_t code;
    if (!f || fc != (int64_t)(dst->n - start) || nc < 0) { rc = cv_fail(e, "%s: dc_meta.sources does not cover the cells in order", m->path); break; }
    rc = add_label(labels, nl, lm, f, &code, e);
    for (int64_t i = 0; i < nc && !rc; i++) {
      val1 x = {DC_OBS_CATEGORY, 0, code, 0, NULL, 0};
      rc = vals_push(dst, &x, e);
    }
  }
  sqlite3_finalize(st);
  if (!rc && (int64_t)(dst->n - start) != m->n_cells)
    rc = cv_fail(e, "%s: dc_meta.sources covers %llu cells of %lld", m->path, (unsigned long long)(dst->n - start), (long long)m->n_cells);
  return rc;
}

/* writes vals v (the cells first .. first + v.n - 1, first a block boundary) as blocks of col */
static int write_blocks(dsw *w, int64_t col, const char *name, int64_t ncat, int64_t first, const vals *v, int64_t B, cv_err *e) {
  for (uint64_t off = 0; off < v->n; off += (uint64_t)B) {
    uint32_t k = v->n - off < (uint64_t)B ? (uint32_t)(v->n - off) : (uint32_t)B;
    int64_t f = first + (int64_t)off;
    if (cv_check_interrupt(e) || write_block(w, col, name, ncat, f / B, f, v, off, k, e)) return -1;
  }
  return 0;
}

static int merge_obs(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, cv_err *e) {
  dcol *dc = NULL, *sc = NULL;
  int nd = 0, ns = 0, rc = -1, n_all = 0;
  vals v;
  memset(&v, 0, sizeof v);
  int32_t *remap = NULL;
  cv_map lm = {0};
  if (read_cols(db, "main", D->path, &dc, &nd, e) || read_cols(db, "src", S->path, &sc, &ns, e)) goto done;
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
    if (j >= 0 && !cast_ok(c->kind, sc[j].kind))
      { cv_fail(e, "obs column '%s': %s holds %s values, %s holds %s; they cannot join without changing the stored "
                "column (convert the files together, or rename the column)", c->name, D->path, kind_label(c->kind), S->path,
                kind_label(sc[j].kind)); goto done; }
    int64_t old_ncat = c->ncat;
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    for (int64_t k = 0; c->kind == DC_OBS_CATEGORY && k < c->ncat; k++)
      if (!cv_map_ref(&lm, c->labels[k]) && cv_map_put(&lm, c->labels[k], (uint32_t)k, e)) goto done;
    vals_free(&v);
    v.kind = c->kind;
    char what[300];
    snprintf(what, sizeof what, "%s: obs column '%s'", D->path, c->name);
    if (p0 < D->n_cells &&
        load_column(db, "main", "cells", c->col, c->kind, (uint32_t)c->ncat, b0, c->labels, NULL, &v, what, e)) goto done;
    if ((int64_t)v.n != D->n_cells - p0) { cv_fail(e, "%s: its last block holds %llu cells, not %lld", what, (unsigned long long)v.n, (long long)(D->n_cells - p0)); goto done; }
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
          if (add_label(&c->labels, &c->ncat, &lm, sc[j].labels[k], &remap[k], e)) goto done;
      snprintf(what, sizeof what, "%s: obs column '%s'", S->path, sc[j].name);
      if (load_column(db, "src", "cells", sc[j].col, sc[j].kind, (uint32_t)sc[j].ncat, 0, sc[j].labels, remap, &v, what, e)) goto done;
    } else if (j == -1) {
      for (int64_t k = 0; k < S->n_cells; k++) if (vals_null(&v, e)) goto done;
    }
    if ((int64_t)v.n != D->n_cells - p0 + S->n_cells) { cv_fail(e, "%s: obs column '%s' does not hold one value per cell", S->path, c->name); goto done; }
    sqlite3_stmt *del = xprep(db, e, "DELETE FROM main.cells_blocks WHERE col = %lld AND block >= %lld", (long long)c->col, (long long)b0);
    if (!del) goto done;
    int dr = sqlite3_step(del);
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { sql_fail(db, e, "cells_blocks"); goto done; }
    if (c->ncat != old_ncat && reseal_blocks(db, w->dataset_id, old_ncat, w->dataset_id, c->col, c->name, c->kind, c->ncat, e)) goto done;
    if (write_blocks(w, c->col, c->name, c->ncat, p0, &v, B, e)) goto done;
    if (c->ncat != old_ncat && write_dict_rows(db, c->col, c->labels, old_ncat, c->ncat, e)) goto done;
    if (write_column_row(db, w->dataset_id, c->col, c->name, c->kind, c->labels, c->ncat, e)) goto done;
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
    dcol *grown = realloc(dc, (size_t)(n_all + 1) * sizeof *dc);
    if (!grown) { free(nc.name); cv_fail(e, "out of memory"); goto done; }
    dc = grown;
    dc[n_all++] = nc;
    dcol *c = &dc[n_all - 1];
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    vals_free(&v);
    v.kind = c->kind;
    if (is_src) {
      if (sources_codes(db, D, &c->labels, &c->ncat, &lm, &v, e)) goto done;
    } else {
      for (int64_t k = 0; k < D->n_cells; k++) if (vals_null(&v, e)) goto done;
    }
    int sj = is_src ? s_src : j;
    if (is_src && sj < 0) {
      if (sources_codes(db, S, &c->labels, &c->ncat, &lm, &v, e)) goto done;
    } else {
      free(remap);
      remap = calloc((size_t)sc[sj].ncat + 1, sizeof *remap);
      if (!remap) { cv_fail(e, "out of memory"); goto done; }
      for (int64_t k = 0; c->kind == DC_OBS_CATEGORY && k < sc[sj].ncat; k++)
        if (add_label(&c->labels, &c->ncat, &lm, sc[sj].labels[k], &remap[k], e)) goto done;
      char what[300];
      snprintf(what, sizeof what, "%s: obs column '%s'", S->path, sc[sj].name);
      if (load_column(db, "src", "cells", sc[sj].col, sc[sj].kind, (uint32_t)sc[sj].ncat, 0, sc[sj].labels, remap, &v, what, e)) goto done;
    }
    if ((int64_t)v.n != D->n_cells + S->n_cells) { cv_fail(e, "%s: obs column '%s' does not hold one value per cell", S->path, c->name); goto done; }
    if (write_blocks(w, c->col, c->name, c->ncat, 0, &v, B, e)) goto done;
    if (write_dict_rows(db, c->col, c->labels, 0, c->ncat, e)) goto done;
    if (write_column_row(db, w->dataset_id, c->col, c->name, c->kind, c->labels, c->ncat, e)) goto done;
  }
  rc = 0;
done:
  vals_free(&v);
  free(remap);
  cv_map_free(&lm);
  dcols_free(dc, n_all > nd ? n_all : nd);
  dcols_free(sc, ns);
  return rc;
}

static int merge_genes(sqlite3 *db, dsw *w, const dsinfo *D, const dsinfo *S, int keep_ok, uint32_t **sigma_out,
                       uint32_t *n_out, int *identity, cv_err *e) {
  gcol *dg = NULL, *sg = NULL, *mg = NULL;
  int nd = 0, ns = 0, nm = 0, rc = -1;
  cv_map dkeys = {0};
  int *keep = NULL;
  uint32_t *sigma = NULL, *from_s = NULL, next = (uint32_t)D->n_genes;
  if (read_genes(db, "main", D->path, D->n_genes, &dg, &nd, e) || read_genes(db, "src", S->path, S->n_genes, &sg, &ns, e)) goto done;
  sigma = malloc(((size_t)S->n_genes + 1) * sizeof *sigma);
  if (!sigma) { cv_fail(e, "out of memory"); goto done; }
  if (gene_keys(&dg[0].v, &dkeys, NULL, NULL, NULL, e) || gene_keys(&sg[0].v, NULL, sigma, &dkeys, &next, e)) goto done;
  *identity = 1;
  for (int64_t j = 0; j < S->n_genes; j++) if (sigma[j] != (uint32_t)j) *identity = 0;
  uint32_t N = next, NDg = (uint32_t)D->n_genes;
  from_s = malloc(((size_t)(N - NDg) + 1) * sizeof *from_s);
  if (!from_s) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t j = 0; j < S->n_genes; j++) if (sigma[j] >= NDg) from_s[sigma[j] - NDg] = (uint32_t)j;
  /* merged columns: D's, then S's var columns D lacks */
  mg = calloc((size_t)(nd + ns) + 1, sizeof *mg);
  keep = calloc((size_t)(nd + ns) + 1, sizeof *keep);   /* merged col -> D's stored blocks still right */
  if (!mg || !keep) { free(keep); keep = NULL; cv_fail(e, "out of memory"); goto done; }
  for (int i = 0; i < nd + ns; i++) {
    const gcol *dcx = i < nd ? &dg[i] : NULL, *scx = NULL;
    if (i >= nd) {
      if (i - nd < 3) continue;
      int dup = 0;
      for (int k = 0; k < nd; k++) dup |= !strcmp(dg[k].name, sg[i - nd].name);
      if (dup) continue;
      scx = &sg[i - nd];
    } else if (i < 3) scx = &sg[i];
    else for (int k = 3; k < ns; k++) if (!strcmp(sg[k].name, dcx->name)) scx = &sg[k];
    keep[nm] = keep_ok && dcx && N == NDg && i >= 3 && (!scx || scx->kind == dcx->kind);
    gcol *m = &mg[nm++];
    m->name = strdup(dcx ? dcx->name : scx->name);
    if (!m->name) { cv_fail(e, "out of memory"); goto done; }
    m->kind = dcx ? dcx->kind : scx->kind;
    if (dcx && scx && dcx->kind == DC_OBS_INT && scx->kind == DC_OBS_REAL) m->kind = DC_OBS_REAL;
    m->v.kind = m->kind;
    if (vals_reserve(&m->v, N + 1, e)) goto done;
    for (uint32_t g = 0; g < N; g++) {
      val1 x;
      memset(&x, 0, sizeof x);
      x.is_null = 1;
      if (g < NDg && dcx) x = vals_get(&dcx->v, g);
      else if (g >= NDg && scx) x = vals_get(&scx->v, from_s[g - NDg]);
      if (vals_push(&m->v, &x, e)) goto done;
    }
    if (i == 1 || i == 2)  /* total_counts, n_cells: summed */
      for (int64_t j = 0; j < S->n_genes; j++)
        if (sigma[j] < NDg) m->v.i64[sigma[j]] += sg[i].v.i64[j];
  }
  int ordered = 1;  /* still numbered by decreasing total counts? */
  for (uint32_t g = 1; g < N; g++) if (mg[1].v.i64[g] > mg[1].v.i64[g - 1]) ordered = 0;
  if (dsw_meta_text(w, "gene_numbering", ordered ? "total_counts" : "stable", e)) goto done;
  /* the columns that changed are written again (a column whose values are the same keeps its blocks and seals) */
  for (int i = 0; i < nm; i++) {
    if (keep[i]) continue;
    sqlite3_stmt *del = xprep(db, e, "DELETE FROM main.genes_blocks WHERE col = %d", i);
    int dr = del ? sqlite3_step(del) : SQLITE_ERROR;
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { if (del) sql_fail(db, e, "genes_blocks"); goto done; }
    del = xprep(db, e, "DELETE FROM main.genes_columns WHERE col = %d", i);
    dr = del ? sqlite3_step(del) : SQLITE_ERROR;
    sqlite3_finalize(del);
    if (dr != SQLITE_DONE) { if (del) sql_fail(db, e, "genes_columns"); goto done; }
    dc_obs_values ov = vals_slice(&mg[i].v, 0, N, 0);
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
  cv_map_free(&dkeys);
  free(sigma);
  free(from_s);
  return rc;
}

/* Adds dataset spath to main (in the caller's transaction, which then detaches `src`); D is updated. */
static int merge_into(sqlite3 *db, dsinfo *D, const char *spath, int keep_ok, int tiles_in, int threads, int *reencoded,
                      cv_err *e) {
  dsinfo S;
  memset(&S, 0, sizeof S);
  dsw w;
  memset(&w, 0, sizeof w);
  uint32_t *sigma = NULL, N = 0;
  int identity = 0, rc = -1;
  sqlite3_stmt *st = xprep(db, e, "ATTACH %Q AS src", spath);
  if (!st) return -1;
  int ar = sqlite3_step(st);
  sqlite3_finalize(st);
  if (ar != SQLITE_DONE) return sql_fail(db, e, spath);
  if (read_meta(db, "src", spath, &S, e)) goto done;
  if (strcmp(S.codec, D->codec) != 0 && !reencoded) {
    cv_fail(e, "%s: codec %s, %s: codec %s", spath, S.codec, D->path, D->codec);
    goto done;
  }
  if (dsw_over(&w, db, D->id, e)) goto done;
  /* the genes table is written again at zstd level 9, not convert's 19: on the five real files
  ** merged, its blocks are 8% larger (357 KB instead of 331 KB, of an 11 MB dataset) and the
  ** merge takes 0.35 CPU-s instead of 0.57 */
  w.genes_level = 9;
  double tg = cv_now();
  if (merge_genes(db, &w, D, &S, keep_ok, &sigma, &N, &identity, e)) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: genes %.3f s\n", cv_now() - tg);
  tg = cv_now();
  if (tiles_in) {   /* append: the converter wrote S's tiles into main already */
    if (!identity) { cv_fail(e, "internal: appended genes did not keep their ids"); goto done; }
    sqlite3_stmt *q = xprep(db, e, "SELECT count(*), coalesce(sum(nnz), 0), coalesce(min(tile), -1), coalesce(sum(n_cells), 0) "
                                   "FROM main.tiles_data WHERE tile >= %lld", (long long)D->n_tiles);
    if (!q) goto done;
    int ok = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int64(q, 0) == S.n_tiles && sqlite3_column_int64(q, 1) == S.nnz &&
             sqlite3_column_int64(q, 3) == S.n_cells;
    sqlite3_finalize(q);
    if (!ok) { cv_fail(e, "internal: the appended tiles do not add up to %lld cells, %lld nonzeros", (long long)S.n_cells, (long long)S.nnz); goto done; }
  } else if (identity && strcmp(S.codec, D->codec) == 0) {
    seal_fn_ctx fc = {S.id, D->id};
    if (sqlite3_create_function(db, "cv_reseal_tile", 9, SQLITE_UTF8, &fc, fn_reseal_tile, NULL, NULL) != SQLITE_OK) {
      sql_fail(db, e, "cv_reseal_tile");
      goto done;
    }
    char *m = NULL;
    char *sql = sqlite3_mprintf(
        "INSERT INTO main.tiles_data SELECT tile + %lld, first_cell + %lld, n_cells, nnz, chunks, data, "
        "cv_reseal_tile(tile, first_cell, tile + %lld, first_cell + %lld, n_cells, nnz, chunks, data, checksum) "
        "FROM src.tiles_data ORDER BY tile",
        (long long)D->n_tiles, (long long)D->n_cells, (long long)D->n_tiles, (long long)D->n_cells);
    int r = sql ? sqlite3_exec(db, sql, NULL, NULL, &m) : SQLITE_NOMEM;
    sqlite3_free(sql);
    if (r != SQLITE_OK) {
      cv_fail(e, "%s: copying tiles: %s", spath, m ? m : sqlite3_errmsg(db));
      sqlite3_free(m);
      goto done;
    }
  } else {
    if (reencoded) *reencoded += (int)S.n_tiles;
    if (reencode_tiles(db, &w, D, &S, sigma, N, threads, e)) goto done;
  }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: tiles %.3f s\n", cv_now() - tg);
  tg = cv_now();
  if (merge_obs(db, &w, D, &S, e)) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: obs %.3f s\n", cv_now() - tg);
  /* dc_meta */
  st = xprep(db, e,
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
  rc = 0;
done:
  dsw_over_end(&w);
  free(sigma);
  free(S.sources);
  return rc;   /* src stays attached: DETACH is refused inside the transaction that read it */
}

/* ------------------------------------------------------------ append */
static char *temp_beside(const char *path, int *fd_out, cv_err *e) {
  char *a = strdup(path), *b = strdup(path);
  size_t n = strlen(path) + 64;
  char *t = malloc(n);
  if (!a || !b || !t) { free(a); free(b); free(t); cv_fail(e, "out of memory"); return NULL; }
  snprintf(t, n, "%s/.%s.tmp-XXXXXX", dirname(a), basename(b));
  free(a);
  free(b);
  int fd = mkstemp(t);
  if (fd < 0) { cv_fail(e, "%s: cannot create a temporary file beside it: %s", path, strerror(errno)); free(t); return NULL; }
  flock(fd, LOCK_EX);
  *fd_out = fd;
  return t;
}

static void unlink_db(const char *p) {
  if (!p) return;
  unlink(p);
  size_t n = strlen(p) + 16;
  char *j = malloc(n);
  if (!j) return;
  snprintf(j, n, "%s-journal", p);
  unlink(j);
  snprintf(j, n, "%s-wal", p);
  unlink(j);
  free(j);
}

int cv_append(const cv_append_opts *o, cv_err *e) {
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  char *tpath = NULL, **names = NULL;
  int tfd = -1, rc = -1, in_tx = 0;
  int64_t n_names = 0;
  double t0 = cv_now();
  struct stat st;
  if (stat(o->dataset, &st) != 0) return cv_fail(e, "%s: %s", o->dataset, strerror(errno));
  if (!S_ISREG(st.st_mode)) return cv_fail(e, "%s: not a file", o->dataset);
  for (int f = 0; f < o->n_inputs; f++) {
    struct stat a;
    if (stat(o->inputs[f], &a) == 0 && a.st_dev == st.st_dev && a.st_ino == st.st_ino)
      return cv_fail(e, "%s: is the dataset itself", o->inputs[f]);
  }
  dsw_remove_stale(o->dataset);
  if (sqlite3_open_v2(o->dataset, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: %s", o->dataset, db ? sqlite3_errmsg(db) : "cannot open");
    goto done;
  }
  sqlite3_busy_timeout(db, 60000);
  /* the write lock first: no other writer can change the genes read below */
  if (xexec(db, "BEGIN IMMEDIATE", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 1;
  if (read_meta(db, "main", o->dataset, &D, e)) goto done;
  {
    vals nv;
    memset(&nv, 0, sizeof nv);
    nv.kind = DC_OBS_TEXT;
    char what[300];
    snprintf(what, sizeof what, "%s: genes column 'name'", o->dataset);
    if (load_column(db, "main", "genes", 0, DC_OBS_TEXT, 0, 0, NULL, NULL, &nv, what, e)) { vals_free(&nv); goto done; }
    if ((int64_t)nv.n != D.n_genes) { vals_free(&nv); cv_fail(e, "%s: genes holds %llu names for %lld genes", o->dataset, (unsigned long long)nv.n, (long long)D.n_genes); goto done; }
    for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) { nv.text[i] = strdup(""); }
    names = nv.text;
    n_names = (int64_t)nv.n;
    nv.text = NULL;
    free(nv.tlen);
  }
  /* the scratch dataset: one name per dataset (only the holder of the write lock gets here), of
  ** the form the next writer's stale-file cleanup knows, like the converter's own temporary file */
  {
    char *a = strdup(o->dataset), *b = strdup(o->dataset);
    size_t n = strlen(o->dataset) + 32;
    tpath = malloc(n);
    if (!a || !b || !tpath) { free(a); free(b); cv_fail(e, "out of memory"); goto done; }
    snprintf(tpath, n, "%s/.%s.tmp-append", dirname(a), basename(b));
    free(a);
    free(b);
    dsw_remove_stale(tpath);   /* the converter's temporary files of a killed append */
    tfd = open(tpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (tfd < 0) { cv_fail(e, "%s: cannot create a file beside it: %s", o->dataset, strerror(errno)); free(tpath); tpath = NULL; goto done; }
    flock(tfd, LOCK_EX);
  }
  cv_opts co;
  memset(&co, 0, sizeof co);
  co.inputs = o->inputs;
  co.n_inputs = o->n_inputs;
  co.out = tpath;
  co.layer = o->layer;
  co.raw = o->raw;
  co.gene_key = o->gene_key;
  co.threads = o->threads;
  co.tile_cells = (uint32_t)D.tile_cells;
  co.chunks = (uint32_t)D.chunks;
  co.codec = dc_codec_from_name(D.codec);
  co.level = (int)D.level;
  co.level_set = D.level != 0;
  co.genes_block = (uint32_t)D.genes_block;
  co.force = 1;
  co.quiet = 1;
  co.fixed_genes = (const char *const *)names;
  co.n_fixed_genes = (uint32_t)n_names;
  co.genes_level = 1;
  co.no_sync = 1;       /* a scratch file: only the dataset's own commit needs to reach the disk */   /* read once by merge_into, which writes the dataset's genes table */
  if (!co.codec) { cv_fail(e, "%s: unknown codec '%s'", o->dataset, D.codec); goto done; }
  /* the new tiles go straight into the dataset (inside its transaction), numbered on */
  dsw tw;
  if (dsw_over(&tw, db, D.id, e)) { dsw_over_end(&tw); goto done; }
  co.tiles_to = &tw;
  co.tile_base = D.n_tiles;
  co.cell_base = D.n_cells;
  double tc = cv_now();
  int cr = cv_convert(&co, e);
  dsw_over_end(&tw);
  if (cr) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: convert %.3f s\n", cv_now() - tc);
  tc = cv_now();
  int64_t c0 = D.n_cells, g0 = D.n_genes;
  int reenc = 0;
  if (merge_into(db, &D, tpath, 1, 1, o->threads, &reenc, e)) goto done;
  if (reenc) { cv_fail(e, "internal: appended tiles were encoded twice"); goto done; }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: merge %.3f s\n", cv_now() - tc);
  tc = cv_now();
  if (cv_check_interrupt(e)) goto done;
  /* a schema change (a table made and dropped): other connections then declare the virtual tables again,
  ** so that `cells` shows the new obs columns there too */
  if (xexec(db, "CREATE TABLE main.dc_append_schema_bump(x); DROP TABLE main.dc_append_schema_bump;", e)) goto done;
  if (xexec(db, "COMMIT", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 0;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: commit %.3f s\n", cv_now() - tc);
  if (!o->quiet)
    printf("%s: appended %lld cells (%lld new genes) from %d file%s; now %lld cells x %lld genes, %lld nonzeros in %lld "
           "tiles; %.1f s\n", o->dataset, (long long)(D.n_cells - c0), (long long)(D.n_genes - g0), o->n_inputs,
           o->n_inputs == 1 ? "" : "s", (long long)D.n_cells, (long long)D.n_genes, (long long)D.nnz,
           (long long)D.n_tiles, cv_now() - t0);
  rc = 0;
done:
  if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  if (db) sqlite3_close(db);
  unlink_db(tpath);
  if (tfd >= 0) close(tfd);
  free(tpath);
  if (names) for (int64_t i = 0; i < n_names; i++) free(names[i]);
  free(names);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ merge */
static int copy_file(const char *from, int to_fd, cv_err *e) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0) return cv_fail(e, "%s: %s", from, strerror(errno));
  char *buf = malloc(1 << 20);
  int rc = buf ? 0 : cv_fail(e, "out of memory");
  ssize_t n;
  while (!rc && (n = read(in, buf, 1 << 20)) != 0) {
    if (n < 0) { rc = cv_fail(e, "%s: %s", from, strerror(errno)); break; }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to_fd, buf + off, (size_t)(n - off));
      if (w <= 0) { rc = cv_fail(e, "writing a copy of %s: %s", from, strerror(errno)); break; }
      off += w;
    }
  }
  free(buf);
  close(in);
  return rc;
}

int cv_merge(const cv_merge_opts *o, cv_err *e) {
  struct stat st;
  if (stat(o->out, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return cv_fail(e, "%s: is a directory", o->out);
    if (!o->force) return cv_fail(e, "%s: exists (use --force to replace it)", o->out);
    for (int i = 0; i < o->n_inputs; i++) {
      struct stat a;
      if (stat(o->inputs[i], &a) == 0 && a.st_dev == st.st_dev && a.st_ino == st.st_ino)
        return cv_fail(e, "%s: the output would replace an input", o->out);
    }
  }
  for (int i = 0; i < o->n_inputs; i++)
    if (stat(o->inputs[i], &st) != 0) return cv_fail(e, "%s: %s", o->inputs[i], strerror(errno));
  double t0 = cv_now();
  dsw_remove_stale(o->out);
  int fd = -1, rc = -1, reenc = 0;
  char *tmp = temp_beside(o->out, &fd, e);
  if (!tmp) return -1;
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  dcol *cols = NULL;
  int nc = 0;
  if (copy_file(o->inputs[0], fd, e)) goto done;
  if (sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) { cv_fail(e, "%s: cannot open a copy", o->inputs[0]); goto done; }
  if (xexec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384; BEGIN", e)) goto done;
  if (read_meta(db, "main", o->inputs[0], &D, e)) goto done;
  /* a fresh dataset id: every seal of the copy again (each checked under the old id first) */
  uint64_t old = D.id;
  if (dc_seal_new_id(&D.id) != 0) { cv_fail(e, "no random dataset id: %s", strerror(errno)); goto done; }
  {
    seal_fn_ctx fc = {old, D.id};
    char hex[17], *m = NULL;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)D.id);
    if (sqlite3_create_function(db, "cv_reseal_tile", 9, SQLITE_UTF8, &fc, fn_reseal_tile, NULL, NULL) != SQLITE_OK) { sql_fail(db, e, "function"); goto done; }
    if (sqlite3_exec(db, "UPDATE tiles_data SET checksum = cv_reseal_tile(tile, first_cell, tile, first_cell, n_cells, nnz, "
                         "chunks, data, checksum)", NULL, NULL, &m) != SQLITE_OK) {
      cv_fail(e, "%s: %s", o->inputs[0], m ? m : sqlite3_errmsg(db));
      sqlite3_free(m);
      goto done;
    }
    if (read_cols(db, "main", o->inputs[0], &cols, &nc, e)) goto done;
    for (int i = 0; i < nc; i++)
      if (reseal_blocks(db, old, cols[i].kind == DC_OBS_CATEGORY ? cols[i].ncat : -1, D.id, cols[i].col, cols[i].name, cols[i].kind, cols[i].kind == DC_OBS_CATEGORY ? cols[i].ncat : -1, e) ||
          write_column_row(db, D.id, cols[i].col, cols[i].name, cols[i].kind, cols[i].labels, cols[i].ncat, e))
        goto done;
    sqlite3_stmt *u = xprep(db, e, "UPDATE dc_meta SET value = %Q WHERE key = 'dataset_id'", hex);
    if (!u) goto done;
    int r = sqlite3_step(u);
    sqlite3_finalize(u);
    if (r != SQLITE_DONE) { sql_fail(db, e, "dc_meta"); goto done; }
  }
  for (int i = 1; i < o->n_inputs; i++)  /* the copy is thrown away on any failure: a transaction each */
    if (merge_into(db, &D, o->inputs[i], i > 1, 0, o->threads, &reenc, e) || xexec(db, "COMMIT; DETACH src", e) ||
        (i + 1 < o->n_inputs && xexec(db, "BEGIN", e)))
      goto done;
  if (sqlite3_close(db) != SQLITE_OK) { cv_fail(e, "%s: close", tmp); db = NULL; goto done; }
  db = NULL;
  if (fsync(fd) != 0) { cv_fail(e, "%s: fsync: %s", tmp, strerror(errno)); goto done; }
  if (o->force ? rename(tmp, o->out) != 0 : renameat2(AT_FDCWD, tmp, AT_FDCWD, o->out, RENAME_NOREPLACE) != 0) {
    cv_fail(e, "%s: %s", o->out, errno == EEXIST ? "exists (use --force to replace it)" : strerror(errno));
    goto done;
  }
  free(tmp);
  tmp = NULL;
  if (!o->quiet)
    printf("%s: %lld cells x %lld genes, %lld nonzeros in %lld tiles from %d datasets (%d tiles decoded and encoded again "
           "for their gene ids, the others copied); %.1f s\n", o->out, (long long)D.n_cells, (long long)D.n_genes,
           (long long)D.nnz, (long long)D.n_tiles, o->n_inputs, reenc, cv_now() - t0);
  rc = 0;
done:
  dcols_free(cols, nc);
  if (db) sqlite3_close(db);
  unlink_db(tmp);
  free(tmp);
  if (fd >= 0) close(fd);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ annotate */
/* A CSV table in memory: fields of each record (RFC 4180: quotes, "" inside quotes, CRLF). */
typedef struct csvtab {
  char *buf;
  size_t n_rec, cap_rec;
  char ***rec;        /* rec[r][c]: NUL-terminated field */
  uint32_t *n_fld;
  int64_t *line;      /* the line the record starts on (1-based) */
} csvtab;

static void csv_free(csvtab *t) {
  for (size_t r = 0; r < t->n_rec; r++) free(t->rec[r]);
  free(t->rec); free(t->n_fld); free(t->line); free(t->buf);
  memset(t, 0, sizeof *t);
}

static int csv_read(const char *path, csvtab *t, cv_err *e) {
  memset(t, 0, sizeof *t);
  FILE *f = fopen(path, "rb");
  if (!f) return cv_fail(e, "%s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0, k;
  char *b = malloc(cap + 1);
  while (b && (k = fread(b + n, 1, cap - n, f)) > 0) {
    n += k;
    if (n == cap) { char *nb = realloc(b, cap * 2 + 1); if (!nb) { free(b); b = NULL; break; } b = nb; cap *= 2; }
  }
  int err = ferror(f);
  fclose(f);
  if (!b) return cv_fail(e, "%s: out of memory", path);
  if (err) { free(b); return cv_fail(e, "%s: read error", path); }
  b[n] = 0;
  t->buf = b;
  size_t i = 0;
  int64_t line = 1;
  if (n >= 3 && (unsigned char)b[0] == 0xEF && (unsigned char)b[1] == 0xBB && (unsigned char)b[2] == 0xBF) i = 3;  /* BOM */
  while (i < n) {
    int64_t start_line = line;
    char **fl = NULL;
    size_t nf = 0, fcap = 0;
    for (;;) {  /* one field */
      char *out = b + i, *w = out;
      if (i < n && b[i] == '"') {
        i++;
        for (;;) {
          if (i >= n) { free(fl); return cv_fail(e, "%s: line %lld: a quoted field is not closed before the end of the file", path, (long long)start_line); }
          if (b[i] == '"') {
            if (i + 1 < n && b[i + 1] == '"') { *w++ = '"'; i += 2; continue; }
            i++;
            break;
          }
          if (b[i] == '\n') line++;
          *w++ = b[i++];
        }
        if (i < n && b[i] != ',' && b[i] != '\n' && b[i] != '\r') {
          free(fl);
          return cv_fail(e, "%s: line %lld: text after a closing quote (a quote inside a quoted field is written \"\")", path, (long long)line);
        }
      } else {
        while (i < n && b[i] != ',' && b[i] != '\n' && b[i] != '\r') {
          if (b[i] == '"') { free(fl); return cv_fail(e, "%s: line %lld: a quote inside an unquoted field", path, (long long)line); }
          *w++ = b[i++];
        }
      }
      char sep = i < n ? b[i] : '\n';
      *w = 0;   /* overwrites the separator or the quote, both already read */
      if (cv_grow((void **)&fl, &fcap, nf + 1, sizeof *fl, e)) { free(fl); return -1; }
      fl[nf++] = out;
      if (!cv_utf8_valid(out, strlen(out))) { free(fl); return cv_fail(e, "%s: line %lld: field %zu is not UTF-8 text", path, (long long)line, nf); }
      if (sep == ',') { i++; continue; }
      if (i < n) i++;   /* the '\r' or '\n' (overwritten by the NUL above) */
      if (sep == '\r' && i < n && b[i] == '\n') i++;
      line++;
      break;
    }
    if (nf == 1 && !fl[0][0]) { free(fl); continue; }   /* an empty line */
    size_t c1 = t->cap_rec, c2 = t->cap_rec, c3 = t->cap_rec;
    if (cv_grow((void **)&t->rec, &c1, t->n_rec + 1, sizeof *t->rec, e) || cv_grow((void **)&t->n_fld, &c2, t->n_rec + 1, sizeof *t->n_fld, e) ||
        cv_grow((void **)&t->line, &c3, t->n_rec + 1, sizeof *t->line, e)) { free(fl); return -1; }
    t->cap_rec = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
    t->rec[t->n_rec] = fl;
    t->n_fld[t->n_rec] = (uint32_t)nf;
    t->line[t->n_rec++] = start_line;
  }
  if (!t->n_rec) return cv_fail(e, "%s: empty (a header row is needed: the key column, then the columns to add)", path);
  for (size_t r = 1; r < t->n_rec; r++)
    if (t->n_fld[r] != t->n_fld[0])
      return cv_fail(e, "%s: line %lld: %u fields, the header has %u", path, (long long)t->line[r], t->n_fld[r], t->n_fld[0]);
  return 0;
}

static int is_na(const char *s) {
  return !*s || !strcmp(s, "NA") || !strcmp(s, "NaN") || !strcmp(s, "nan") || !strcmp(s, "null") || !strcmp(s, "NULL") ||
         !strcmp(s, "None") || !strcmp(s, "<NA>");
}

static int parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (end == s || *end || errno) return 0;
  *v = x;
  return 1;
}

static int parse_f64(const char *s, double *v) {
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (end == s || *end || (errno && fabs(x) > 1)) return 0;
  *v = x;
  return 1;
}

static int parse_bool(const char *s, int *v) {
  if (!strcmp(s, "True") || !strcmp(s, "true") || !strcmp(s, "TRUE")) { *v = 1; return 1; }
  if (!strcmp(s, "False") || !strcmp(s, "false") || !strcmp(s, "FALSE")) { *v = 0; return 1; }
  return 0;
}

int cv_annotate(const cv_annotate_opts *o, cv_err *e) {
  static const char *const reserved[] = {"_index", "cell_id", "name", "tile", NULL};
  csvtab t;
  memset(&t, 0, sizeof t);
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  dcol *cols = NULL;
  int ncols = 0, rc = -1, in_tx = 0;
  int64_t *row_of = NULL;   /* cell -> CSV record, -1 */
  int *kinds = NULL;
  vals v;
  memset(&v, 0, sizeof v);
  cv_map names = {0}, lm = {0};
  char **labels = NULL;
  int64_t nl = 0;
  dsw w;
  memset(&w, 0, sizeof w);
  int by_id = !strcmp(o->key, "cell_id");
  if (!by_id && strcmp(o->key, "name") != 0) return cv_fail(e, "--key: '%s' is neither name nor cell_id", o->key);
  if (csv_read(o->table, &t, e)) goto done;
  uint32_t nf = t.n_fld[0], kc = 0;
  char **hdr = t.rec[0];
  for (uint32_t c = 0; c < nf; c++)
    if (!strcmp(hdr[c], o->key)) kc = c;
  if (nf < 2) { cv_fail(e, "%s: line %lld: one column only; the table needs the key column and at least one column to add", o->table, (long long)t.line[0]); goto done; }
  for (uint32_t c = 0; c < nf; c++) {
    if (c == kc) continue;
    if (!hdr[c][0]) { cv_fail(e, "%s: line %lld: column %u has no name", o->table, (long long)t.line[0], c + 1); goto done; }
    for (int r = 0; reserved[r]; r++)
      if (!strcasecmp(hdr[c], reserved[r])) { cv_fail(e, "%s: column '%s' is one of the cells table's own columns (_index, cell_id, name, tile); rename it", o->table, hdr[c]); goto done; }
    for (uint32_t d = 0; d < c; d++)
      if (d != kc && !strcasecmp(hdr[c], hdr[d])) { cv_fail(e, "%s: columns '%s' and '%s' have the same name (SQLite ignores case)", o->table, hdr[d], hdr[c]); goto done; }
  }
  if (sqlite3_open_v2(o->dataset, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) { cv_fail(e, "%s: %s", o->dataset, db ? sqlite3_errmsg(db) : "cannot open"); goto done; }
  sqlite3_busy_timeout(db, 60000);
  if (xexec(db, "BEGIN IMMEDIATE", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 1;
  if (read_meta(db, "main", o->dataset, &D, e) || read_cols(db, "main", o->dataset, &cols, &ncols, e)) goto done;
  /* the cell of every record */
  int64_t N = D.n_cells, B = D.obs_block;
  row_of = malloc(((size_t)N + 1) * sizeof *row_of);
  if (!row_of) { cv_fail(e, "out of memory"); goto done; }
  for (int64_t i = 0; i < N; i++) row_of[i] = -1;
  if (!by_id) {
    vals nv;
    memset(&nv, 0, sizeof nv);
    nv.kind = DC_OBS_TEXT;
    char what[300];
    snprintf(what, sizeof what, "%s: obs column '_index'", o->dataset);
    if (load_column(db, "main", "cells", 0, DC_OBS_TEXT, 0, 0, NULL, NULL, &nv, what, e)) { vals_free(&nv); goto done; }
    for (uint64_t i = 0; i < nv.n; i++) {
      const char *nm = nv.text[i] ? nv.text[i] : "";
      uint32_t *p = cv_map_ref(&names, nm);
      if (p) *p = UINT32_MAX;  /* a name several cells have */
      else if (cv_map_put(&names, nm, (uint32_t)i, e)) { vals_free(&nv); goto done; }
    }
    vals_free(&nv);
  }
  int64_t unmatched = 0;
  sqlite3_str *um = sqlite3_str_new(NULL);
  for (size_t r = 1; r < t.n_rec; r++) {
    const char *k = t.rec[r][kc];
    int64_t cell = -1;
    if (by_id) {
      if (!parse_i64(k, &cell)) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: key '%s' is not a cell_id (an integer)", o->table, (long long)t.line[r], k); goto done; }
      if (cell < 0 || cell >= N) cell = -1;
    } else {
      uint32_t id;
      if (cv_map_get(&names, k, &id)) {
        if (id == UINT32_MAX) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: several cells are named '%s'; key by cell_id instead (--key cell_id)", o->table, (long long)t.line[r], k); goto done; }
        cell = id;
      }
    }
    if (cell < 0) {
      if (unmatched++ < 5) sqlite3_str_appendf(um, "%s'%s' (line %lld)", unmatched > 1 ? ", " : "", k, (long long)t.line[r]);
      continue;
    }
    if (row_of[cell] >= 0) { sqlite3_free(sqlite3_str_finish(um)); cv_fail(e, "%s: line %lld: key '%s' again (first on line %lld)", o->table, (long long)t.line[r], k, (long long)t.line[row_of[cell]]); goto done; }
    row_of[cell] = (int64_t)r;
  }
  char *ums = sqlite3_str_finish(um);
  /* each column's kind: given (--type), else inferred from its values */
  kinds = calloc(nf, sizeof *kinds);
  if (!kinds) { sqlite3_free(ums); cv_fail(e, "out of memory"); goto done; }
  for (int i = 0; i < o->n_types; i++) {
    const char *eq = strrchr(o->types[i], '=');
    int found = 0;
    int k = eq ? dc_obs_kind_from_name(eq + 1) : 0;
    if (!k) { sqlite3_free(ums); cv_fail(e, "--type %s: give COLUMN=KIND, KIND one of category, text, int, real, bool", o->types[i]); goto done; }
    for (uint32_t c = 0; c < nf; c++)
      if (c != kc && strlen(hdr[c]) == (size_t)(eq - o->types[i]) && !strncmp(hdr[c], o->types[i], (size_t)(eq - o->types[i]))) { kinds[c] = k; found = 1; }
    if (!found) { sqlite3_free(ums); cv_fail(e, "--type %s: the table has no such column", o->types[i]); goto done; }
  }
  int64_t next_col = 0;
  for (int i = 0; i < ncols; i++) if (cols[i].col >= next_col) next_col = cols[i].col + 1;
  int n_new = 0, n_repl = 0;
  dsw_over(&w, db, D.id, e);
  if (!w.ins_block) { sqlite3_free(ums); goto done; }
  for (uint32_t c = 0; c < nf; c++) {
    if (c == kc) continue;
    int kind = kinds[c];
    if (!kind) {  /* int, else bool, else real, else category or text */
      int all_i = 1, all_b = 1, all_f = 1;
      cv_map dv = {0};
      uint64_t distinct = 0, nn = 0;
      for (size_t r = 1; r < t.n_rec; r++) {
        const char *s = t.rec[r][c];
        if (is_na(s)) continue;
        int64_t iv; double fv; int bv;
        nn++;
        all_i &= parse_i64(s, &iv);
        all_b &= parse_bool(s, &bv);
        all_f &= parse_f64(s, &fv);
        if (distinct <= 65536 && !cv_map_ref(&dv, s)) { distinct++; if (cv_map_put(&dv, s, 0, e)) { cv_map_free(&dv); sqlite3_free(ums); goto done; } }
      }
      cv_map_free(&dv);
      kind = !nn ? DC_OBS_TEXT : all_i ? DC_OBS_INT : all_b ? DC_OBS_BOOL : all_f ? DC_OBS_REAL
             : (distinct > 65536 || distinct * 2 > nn) ? DC_OBS_TEXT : DC_OBS_CATEGORY;
    }
    /* every value of the column is checked, also those of rows that match no cell */
    for (size_t r = 1; r < t.n_rec; r++) {
      const char *s = t.rec[r][c];
      int64_t iv; double fv; int bv;
      if (is_na(s)) continue;
      int ok = kind == DC_OBS_INT ? parse_i64(s, &iv) : kind == DC_OBS_REAL ? parse_f64(s, &fv)
               : kind == DC_OBS_BOOL ? (parse_bool(s, &bv) || (parse_i64(s, &iv) && (iv == 0 || iv == 1))) : 1;
      if (!ok) { sqlite3_free(ums); cv_fail(e, "%s: line %lld: column '%s': '%s' is not %s", o->table, (long long)t.line[r], hdr[c], s, kind == DC_OBS_INT ? "an integer" : kind == DC_OBS_REAL ? "a number" : "a boolean (true/false, 1/0)"); goto done; }
    }
    /* the values, cell by cell */
    vals_free(&v);
    v.kind = kind;
    cv_map_free(&lm);
    memset(&lm, 0, sizeof lm);
    if (labels) for (int64_t k = 0; k < nl; k++) free(labels[k]);
    free(labels);
    labels = NULL;
    nl = 0;
    if (vals_reserve(&v, (uint64_t)N + 1, e)) { sqlite3_free(ums); goto done; }
    for (int64_t i = 0; i < N; i++) {
      int64_t r = row_of[i];
      const char *s = r >= 0 ? t.rec[r][c] : NULL;
      val1 x;
      memset(&x, 0, sizeof x);
      x.kind = kind;
      x.is_null = !s || is_na(s);
      int ok = 1, bv = 0;
      if (!x.is_null) {
        switch (kind) {
          case DC_OBS_INT: ok = parse_i64(s, &x.i); break;
          case DC_OBS_REAL: ok = parse_f64(s, &x.f); if (ok && isnan(x.f)) x.is_null = 1; break;
          case DC_OBS_BOOL: ok = parse_bool(s, &bv) || (parse_i64(s, &x.i) && (x.i == 0 || x.i == 1)); if (ok && !x.i) x.i = bv; break;
          case DC_OBS_CATEGORY: { int32_t code; if (add_label(&labels, &nl, &lm, s, &code, e)) { sqlite3_free(ums); goto done; } x.i = code; break; }
          default: x.s = s; x.len = (uint32_t)strlen(s); break;
        }
      }
      if (!ok) { sqlite3_free(ums); cv_fail(e, "%s: line %lld: column '%s': '%s' is not %s %s", o->table, (long long)t.line[r], hdr[c], s, kind == DC_OBS_INT ? "an" : "a", kind == DC_OBS_INT ? "integer" : kind == DC_OBS_REAL ? "number" : "boolean (true/false, 1/0)"); goto done; }
      if (vals_push(&v, &x, e)) { sqlite3_free(ums); goto done; }
    }
    /* replace a column of the same name (ignoring case), or add one */
    int64_t col = -1;
    int replaced = 0;
    for (int i = 0; i < ncols; i++)
      if (!strcasecmp(cols[i].name, hdr[c])) col = cols[i].col;
    if (col == 0) { sqlite3_free(ums); cv_fail(e, "%s: column '%s' would replace the obs index", o->table, hdr[c]); goto done; }
    if (col >= 0) {
      n_repl++;
      replaced = 1;
      char *sql = sqlite3_mprintf("DELETE FROM main.cells_blocks WHERE col = %lld; DELETE FROM main.cells_dict WHERE col = %lld; "
                                  "DELETE FROM main.cells_columns WHERE col = %lld;", (long long)col, (long long)col, (long long)col);
      int r = sql ? xexec(db, sql, e) : cv_fail(e, "out of memory");
      sqlite3_free(sql);
      if (r) { sqlite3_free(ums); goto done; }
    } else {
      col = next_col++;
      n_new++;
    }
    if (write_blocks(&w, col, hdr[c], kind == DC_OBS_CATEGORY ? nl : -1, 0, &v, B, e)) { sqlite3_free(ums); goto done; }
    if (write_dict_rows(db, col, labels, 0, kind == DC_OBS_CATEGORY ? nl : 0, e)) { sqlite3_free(ums); goto done; }
    if (write_column_row(db, D.id, col, hdr[c], kind, labels, kind == DC_OBS_CATEGORY ? nl : -1, e)) { sqlite3_free(ums); goto done; }
    if (!o->quiet) printf("%s: column '%s' (%s) %s\n", o->dataset, hdr[c], kind_label(kind), replaced ? "replaced" : "added");
  }
  if (xexec(db, "CREATE TABLE main.dc_append_schema_bump(x); DROP TABLE main.dc_append_schema_bump;", e) || cv_check_interrupt(e) ||
      xexec(db, "COMMIT", e)) { sqlite3_free(ums); goto done; }
  in_tx = 0;
  int64_t matched = 0;
  for (int64_t i = 0; i < N; i++) matched += row_of[i] >= 0;
  if (!o->quiet)
    printf("%s: %lld of %lld cells annotated from %zu rows (%d columns added, %d replaced)\n", o->dataset, (long long)matched,
           (long long)N, t.n_rec - 1, n_new, n_repl);
  if (unmatched)
    fprintf(stderr, "deltacells: note: %lld key%s of %s match no cell (by %s): %s%s\n", (long long)unmatched,
            unmatched == 1 ? "" : "s", o->table, o->key, ums ? ums : "", unmatched > 5 ? ", ..." : "");
  sqlite3_free(ums);
  rc = 0;
done:
  dsw_over_end(&w);
  if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  if (db) sqlite3_close(db);
  csv_free(&t);
  dcols_free(cols, ncols);
  free(row_of);
  free(kinds);
  vals_free(&v);
  cv_map_free(&names);
  cv_map_free(&lm);
  if (labels) for (int64_t k = 0; k < nl; k++) free(labels[k]);
  free(labels);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ convert --gene-order */
int cv_gene_order_load(const char *path, char ***names, uint32_t *n, cv_err *e) {
  *names = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return cv_fail(e, "--gene-order %s: %s", path, strerror(errno));
  char hdr[16];
  size_t got = fread(hdr, 1, 16, f);
  if (got == 16 && !memcmp(hdr, "SQLite format 3", 16)) {   /* a dataset */
    fclose(f);
    sqlite3 *db = NULL;
    dsinfo D;
    memset(&D, 0, sizeof D);
    vals nv;
    memset(&nv, 0, sizeof nv);
    nv.kind = DC_OBS_TEXT;
    int rc = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) cv_fail(e, "--gene-order %s: cannot open", path);
    else if (!read_meta(db, "main", path, &D, e)) {
      char what[300];
      snprintf(what, sizeof what, "%s: genes column 'name'", path);
      if (!load_column(db, "main", "genes", 0, DC_OBS_TEXT, 0, 0, NULL, NULL, &nv, what, e)) {
        for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) nv.text[i] = strdup("");
        *names = nv.text;
        *n = (uint32_t)nv.n;
        nv.text = NULL;
        nv.n = 0;
        rc = 0;
      }
    }
    vals_free(&nv);
    free(D.sources);
    if (db) sqlite3_close(db);
    return rc;
  }
  rewind(f);
  char *line = NULL;
  size_t cap = 0, ncap = 0;
  ssize_t len;
  cv_map seen = {0};
  int rc = 0;
  int64_t ln = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    ln++;
    char *s = line, *t = line + len;
    while (s < t && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) s++;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r' || t[-1] == '\n')) t--;
    if (s == t) continue;
    *t = 0;
    if (!cv_utf8_valid(s, (size_t)(t - s))) { rc = cv_fail(e, "--gene-order %s: line %lld is not UTF-8 text", path, (long long)ln); break; }
    if (cv_grow((void **)names, &ncap, (size_t)*n + 1, sizeof **names, e)) { rc = -1; break; }
    (*names)[*n] = strdup(s);
    if (!(*names)[(*n)++]) { rc = cv_fail(e, "out of memory"); break; }
  }
  cv_map_free(&seen);
  free(line);
  fclose(f);
  if (!rc && !*n) rc = cv_fail(e, "--gene-order %s: no gene names", path);
  if (rc) {
    for (uint32_t i = 0; i < *n; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
    *n = 0;
  }
  return rc;
}
