/*
** merge_store.c — the stored obs and genes columns of existing datasets, for the commands that
** change datasets (append, merge, annotate; see merge_store.h): a dataset's dc_meta, a column
** read into memory (vals), written back as sealed blocks with its dictionary and cells_columns
** row, and its seals computed again under a new dataset id.
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

/* ------------------------------------------------------------ SQL helpers */
int cv_sql_fail(sqlite3 *db, cv_err *e, const char *what) {
  return cv_fail(e, "%s: %s", what, sqlite3_errmsg(db));
}

int cv_exec(sqlite3 *db, const char *sql, cv_err *e) {
  char *m = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &m) != SQLITE_OK) {
    int r = cv_fail(e, "%.80s: %s", sql, m ? m : sqlite3_errmsg(db));
    sqlite3_free(m);
    return r;
  }
  return 0;
}

sqlite3_stmt *cv_prep(sqlite3 *db, cv_err *e, const char *fmt, ...) {
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
static int meta_get(sqlite3 *db, const char *schema, const char *key, sqlite3_stmt **out, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e, "SELECT value FROM \"%w\".dc_meta WHERE key = %Q", schema, key);
  if (!st) return -1;
  if (sqlite3_step(st) != SQLITE_ROW) {
    sqlite3_finalize(st);
    return 1;
  }
  *out = st;
  return 0;
}

int cv_read_meta(sqlite3 *db, const char *schema, const char *path, dsinfo *m, cv_err *e) {
  memset(m, 0, sizeof *m);
  m->path = path;
  struct { const char *k; int64_t *v; int need; } ints[] = {
      {"format_version", &m->version, 1}, {"n_cells", &m->n_cells, 1}, {"n_genes", &m->n_genes, 1},
      {"nnz", &m->nnz, 1}, {"n_tiles", &m->n_tiles, 1}, {"level", &m->level, 0}, {"chunks", &m->chunks, 0}, {"chunk_cells", &m->chunk_cells, 0},
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
  /* the codec settings new tiles are encoded with: what convert accepts (--tile-cells, --chunks) */
  if (m->tile_cells < 1 || m->tile_cells > CV_MAX_TILE_CELLS || m->chunks < 1 || m->chunks > DC_MAX_CHUNKS)
    return cv_fail(e, "%s: dc_meta.tile_cells (%lld) or chunks (%lld) is impossible (1..%d and 1..%d)", path,
                   (long long)m->tile_cells, (long long)m->chunks, CV_MAX_TILE_CELLS, DC_MAX_CHUNKS);
  /* chunk_cells: absent before 2026-12-06, when every tile had `chunks` chunks (0 says so) */
  if (m->chunk_cells < 0 || m->chunk_cells > CV_MAX_TILE_CELLS)
    return cv_fail(e, "%s: dc_meta.chunk_cells (%lld) is impossible (0..%d)", path, (long long)m->chunk_cells,
                   CV_MAX_TILE_CELLS);
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
  m->genes_id = m->id;
  if (meta_get(db, schema, "sources", &st, e) == 0) {
    const char *s = (const char *)sqlite3_column_text(st, 0);
    m->sources = strdup(s ? s : "[]");
    sqlite3_finalize(st);
  } else m->sources = strdup("[]");
  if (!m->sources) return cv_fail(e, "out of memory");
  st = cv_prep(db, e, "SELECT json_array_length(%Q)", m->sources);
  if (!st) return -1;
  if (sqlite3_step(st) == SQLITE_ROW) m->n_sources = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  return 0;
}

/* ------------------------------------------------------------ column values */
void cv_vals_free(vals *v) {
  if (v->text) for (uint64_t i = 0; i < v->n; i++) free(v->text[i]);
  free(v->codes); free(v->i64); free(v->valid); free(v->f64); free(v->b8); free(v->text); free(v->tlen);
  int k = v->kind;
  memset(v, 0, sizeof *v);
  v->kind = k;
}

int cv_vals_reserve(vals *v, uint64_t need, cv_err *e) {
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

int cv_vals_null(vals *v, cv_err *e) {
  if (cv_vals_reserve(v, v->n + 1, e)) return -1;
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


static char *fmt_num(const val1 *x, uint32_t *len) {
  char buf[64];
  if (x->kind == DC_OBS_REAL) snprintf(buf, sizeof buf, "%.17g", x->f);
  else if (x->kind == DC_OBS_BOOL) snprintf(buf, sizeof buf, "%s", x->i ? "True" : "False");
  else snprintf(buf, sizeof buf, "%lld", (long long)x->i);
  *len = (uint32_t)strlen(buf);
  return strdup(buf);
}

/* Appends x to v, cast to v's kind (the casts check_cast allows). */
int cv_vals_push(vals *v, const val1 *x, cv_err *e) {
  if (x->is_null || (x->kind == DC_OBS_TEXT && v->kind != DC_OBS_TEXT)) return cv_vals_null(v, e);
  if (cv_vals_reserve(v, v->n + 1, e)) return -1;
  uint64_t i = v->n;
  switch (v->kind) {
    case DC_OBS_CATEGORY: v->codes[i] = (int32_t)x->i; break;
    case DC_OBS_INT:
      if (x->kind == DC_OBS_REAL) {
        if (x->f != floor(x->f) || fabs(x->f) > 9e15) return cv_vals_null(v, e);
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

/* Appends a decoded block of dst's own kind, as cv_vals_push would value by value (without
** a val1 and a call per value: loading the genes of the real files for a merge went a value at
** a time).  dst has room for b->n more. */
static int block_append(vals *dst, const dc_obs_block *b, const int32_t *remap, cv_err *e) {
  uint64_t o = dst->n;
  switch (b->kind) {
    case DC_OBS_CATEGORY:
      for (uint32_t i = 0; i < b->n; i++) dst->codes[o + i] = b->codes[i] < 0 ? -1 : remap ? remap[b->codes[i]] : b->codes[i];
      break;
    case DC_OBS_INT:        /* i64 is 0 where NULL, as cv_vals_null writes */
      memcpy(dst->i64 + o, b->i64, (size_t)b->n * sizeof *b->i64);
      memcpy(dst->valid + o, b->valid, b->n);
      break;
    case DC_OBS_REAL: memcpy(dst->f64 + o, b->f64, (size_t)b->n * sizeof *b->f64); break;
    case DC_OBS_BOOL: for (uint32_t i = 0; i < b->n; i++) dst->b8[o + i] = b->valid[i] ? (b->i64[i] ? 1 : 0) : -1; break;
    default:
      for (uint32_t i = 0; i < b->n; i++) {
        dst->text[o + i] = NULL;
        dst->tlen[o + i] = 0;
        if (!b->valid[i]) continue;
        size_t len = (size_t)(b->text_off[i + 1] - b->text_off[i]);
        char *t = malloc(len + 1);
        if (!t) { dst->n = o + i; return cv_fail(e, "out of memory"); }
        memcpy(t, b->text + b->text_off[i], len);
        t[len] = 0;
        dst->text[o + i] = t;
        dst->tlen[o + i] = (uint32_t)len;
      }
      break;
  }
  dst->n = o + b->n;
  return 0;
}

/* values [off, off+k) of v as the encoder takes them */
dc_obs_values cv_vals_slice(const vals *v, uint64_t off, uint32_t k, uint32_t n_categories) {
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
int cv_load_column(sqlite3 *db, const char *schema, const char *table, int64_t col, int kind, uint32_t n_cat,
                   int64_t b0, char *const *labels, const int32_t *remap, vals *dst, const char *what, cv_err *e) {
  int genes = !strcmp(table, "genes");
  sqlite3_stmt *st = cv_prep(db, e, "SELECT block, %s, data FROM \"%w\".%s_blocks WHERE col = %lld AND block >= %lld ORDER BY block",
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
    if (cv_vals_reserve(dst, dst->n + b.n, e)) { rc = -1; break; }
    if (b.kind == dst->kind) { rc = block_append(dst, &b, remap, e); continue; }
    for (uint32_t i = 0; i < b.n && !rc; i++) {
      val1 x = block_val(&b, i, labels);
      if (kind == DC_OBS_CATEGORY && !x.is_null && remap) x.i = remap[x.i];
      rc = cv_vals_push(dst, &x, e);
    }
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, what);
  dc_obs_decoder_free(d);
  sqlite3_finalize(st);
  return rc;
}


int cv_load_names(sqlite3 *db, const char *table, const char *path, vals *nv, cv_err *e) {
  memset(nv, 0, sizeof *nv);
  nv->kind = DC_OBS_TEXT;
  char what[300];
  snprintf(what, sizeof what, "%s: %s", path, strcmp(table, "genes") ? "obs column '_index'" : "genes column 'name'");
  if (cv_load_column(db, "main", table, 0, DC_OBS_TEXT, 0, 0, NULL, NULL, nv, what, e)) { cv_vals_free(nv); return -1; }
  return 0;
}

int cv_dataset_gene_reps(sqlite3 *db, const char *schema, const char *path, const vals *names, const vals *orig, uint32_t *rep,
                         cv_err *e) {
  char what[300];
  snprintf(what, sizeof what, "%s: genes column 'orig_index'", path);
  vals ov;
  memset(&ov, 0, sizeof ov);
  ov.kind = DC_OBS_INT;
  int have = 0;           /* ov holds the dataset's orig_index */
  if (orig) {             /* a copy: unplaced genes are marked below */
    if (cv_vals_reserve(&ov, orig->n, e)) return -1;
    memcpy(ov.i64, orig->i64, orig->n * sizeof *ov.i64);
    memcpy(ov.valid, orig->valid, orig->n);
    ov.n = orig->n;
    have = 1;
  } else {
    sqlite3_stmt *st = cv_prep(db, e, "SELECT col FROM \"%w\".genes_columns WHERE name = 'orig_index' AND kind = 'int'", schema);
    if (!st) return -1;
    int sr = sqlite3_step(st);
    int64_t col = sr == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    if (sr != SQLITE_ROW && sr != SQLITE_DONE) { cv_sql_fail(db, e, path); sqlite3_finalize(st); return -1; }
    sqlite3_finalize(st);
    if (col >= 0) {
      if (cv_load_column(db, schema, "genes", col, DC_OBS_INT, 0, 0, NULL, NULL, &ov, what, e)) { cv_vals_free(&ov); return -1; }
      have = 1;
    }
  }
  if (have) {
    if (ov.n != names->n) {
      cv_vals_free(&ov);
      return cv_fail(e, "%s holds %llu values for %llu genes", what, (unsigned long long)ov.n, (unsigned long long)names->n);
    }
    for (uint64_t i = 0; i < ov.n; i++) if (!ov.valid[i]) ov.i64[i] = INT64_MAX;   /* no place: last */
  }
  int rc = cv_gene_repeats((const char *const *)names->text, names->n, NULL, have ? ov.i64 : NULL, rep, e);
  cv_vals_free(&ov);
  return rc;
}

/* ------------------------------------------------------------ seals */
/* Seals every block of main's obs column col again, keyed by new_id (after
** its n_categories, or the dataset id, changed).  old_id: checks each first. */
int cv_reseal_blocks(sqlite3 *db, uint64_t old_id, int64_t old_ncat, uint64_t new_id, int64_t col, const char *name,
                     int kind, int64_t ncat, cv_err *e) {
  sqlite3_stmt *q = cv_prep(db, e, "SELECT id, block, first_cell, n_cells, null_count, min, max, present, "
                                 "substr(data, 1, %d), length(data), checksum FROM main.cells_blocks WHERE col = %lld",
                          DC_SEAL_OBS_HEAD, (long long)col);
  sqlite3_stmt *u = q ? cv_prep(db, e, "UPDATE main.cells_blocks SET checksum = ?1 WHERE id = ?2") : NULL;
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
    if (sqlite3_step(u) != SQLITE_DONE) { rc = cv_sql_fail(db, e, "cells_blocks"); break; }
    sqlite3_reset(u);
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, "cells_blocks");
  sqlite3_finalize(q);
  sqlite3_finalize(u);
  return rc;
}

/* Checks the seal of every block of obs column c of schema's dataset (id) from block b0 on:
** blocks decoded to be stored again must be the ones written there, or the damage would be
** sealed anew (two columns' blocks swapped read as each other's values). */
int cv_check_block_seals(sqlite3 *db, const char *schema, uint64_t id, const dcol *c, int64_t b0, const char *path,
                         cv_err *e) {
  sqlite3_stmt *q = cv_prep(db, e, "SELECT block, first_cell, n_cells, null_count, min, max, present, "
                                 "substr(data, 1, %d), length(data), checksum FROM \"%w\".cells_blocks WHERE col = %lld AND block >= %lld",
                          DC_SEAL_OBS_HEAD, schema, (long long)c->col, (long long)b0);
  int rc = q ? 0 : -1, r = SQLITE_DONE;
  while (!rc && (r = sqlite3_step(q)) == SQLITE_ROW) {
    dc_blockplace pl = {"cells", c->col, c->name, c->kind, c->kind == DC_OBS_CATEGORY ? c->ncat : -1, sqlite3_column_int64(q, 0),
                        sqlite3_column_int64(q, 1), sqlite3_column_int64(q, 2), sqlite3_column_int64(q, 3)};
    dc_sealval mn = cv_sealval_of_column(q, 4), mx = cv_sealval_of_column(q, 5), pr = cv_sealval_of_column(q, 6);
    int64_t seal = 0;
    if (dc_seal_block(id, &pl, &mn, &mx, &pr, (uint64_t)sqlite3_column_int64(q, 8), sqlite3_column_blob(q, 7), &seal)) {
      rc = cv_fail(e, "out of memory");
      break;
    }
    if (sqlite3_column_type(q, 9) != SQLITE_INTEGER || sqlite3_column_int64(q, 9) != seal)
      rc = cv_fail(e, "%s: obs column '%s', block %lld: its seal does not match (the block and its place were not written "
                   "together); run `deltacells verify`", path, c->name, (long long)pl.block);
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, "cells_blocks");
  sqlite3_finalize(q);
  return rc;
}

/* The same for every block of genes column col (name, kind) of schema's dataset (id): a var
** column renamed, or its blocks swapped, copied or edited, must not be sealed again as it is. */
int cv_check_genes_seals(sqlite3 *db, const char *schema, uint64_t id, int64_t col, const char *name, int kind,
                         const char *path, cv_err *e) {
  sqlite3_stmt *q = cv_prep(db, e, "SELECT block, first_gene, n_genes, data, checksum FROM \"%w\".genes_blocks WHERE col = %lld",
                          schema, (long long)col);
  int rc = q ? 0 : -1, r = SQLITE_DONE;
  while (!rc && (r = sqlite3_step(q)) == SQLITE_ROW) {
    dc_blockplace pl = {"genes", col, name, kind, -1, sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1),
                        sqlite3_column_int64(q, 2), -1};
    const void *blob = sqlite3_column_blob(q, 3);
    int64_t seal = 0;
    if (dc_seal_block(id, &pl, NULL, NULL, NULL, (uint64_t)sqlite3_column_bytes(q, 3), blob, &seal)) {
      rc = cv_fail(e, "out of memory");
      break;
    }
    if (sqlite3_column_type(q, 4) != SQLITE_INTEGER || sqlite3_column_int64(q, 4) != seal)
      rc = cv_fail(e, "%s: genes column '%s', block %lld: its seal does not match (the block, its place and its column's "
                   "name were not written together); run `deltacells verify`", path, name, (long long)pl.block);
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, "genes_blocks");
  sqlite3_finalize(q);
  return rc;
}

/* Blocks of a column `table`_columns lacks (its row deleted) are an error: stored again, that
** column's values would be lost unseen (the cells and genes tables refuse them too). */
int cv_check_stray_blocks(sqlite3 *db, const char *schema, const char *table, const char *path, cv_err *e) {
  sqlite3_stmt *st = cv_prep(db, e, "SELECT col FROM \"%w\".%s_blocks WHERE col NOT IN (SELECT col FROM \"%w\".%s_columns) LIMIT 1",
                             schema, table, schema, table);
  if (!st) return -1;
  int rc = 0, r = sqlite3_step(st);
  if (r == SQLITE_ROW)
    rc = cv_fail(e, "%s: %s_blocks has blocks of column %lld, which %s_columns lacks; run `deltacells verify`", path, table,
                 (long long)sqlite3_column_int64(st, 0), table);
  else if (r != SQLITE_DONE) rc = cv_sql_fail(db, e, path);
  sqlite3_finalize(st);
  return rc;
}

/* ------------------------------------------------------------ obs blocks */
/* Writes (or replaces) block b of main's column col: values [off, off+k) of v. */
static int write_block(dsw *w, int64_t col, const char *name, int64_t ncat, int64_t b, int64_t first, const vals *v,
                       uint64_t off, uint32_t k, cv_err *e) {
  dc_obs_values ov = cv_vals_slice(v, off, k, ncat > 0 ? (uint32_t)ncat : 0);
  return dsw_obs_block(w, col, name, b, first, &ov, NULL, NULL, e);
}

/* cells_dict rows [from, ncat) of column col: labels[from .. ncat-1] */
int cv_write_dict_rows(sqlite3 *db, int64_t col, char *const *labels, int64_t from, int64_t ncat, cv_err *e) {
  sqlite3_stmt *ins = cv_prep(db, e, "INSERT INTO main.cells_dict VALUES(?1, ?2, ?3)");
  if (!ins) return -1;
  for (int64_t k = from; k < ncat; k++) {
    sqlite3_bind_int64(ins, 1, col);
    sqlite3_bind_int64(ins, 2, k);
    sqlite3_bind_text(ins, 3, labels[k], -1, SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) { sqlite3_finalize(ins); return cv_sql_fail(db, e, "cells_dict"); }
    sqlite3_reset(ins);
  }
  sqlite3_finalize(ins);
  return 0;
}

/* cells_columns' row of col, from its blocks and dictionary (checksum: the dictionary's seal) */
int cv_write_column_row(sqlite3 *db, uint64_t id, int64_t col, const char *name, int kind, char *const *labels,
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
  sqlite3_stmt *st = cv_prep(db, e,
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
  int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : cv_sql_fail(db, e, "cells_columns");
  sqlite3_finalize(st);
  return rc;
}


/* ------------------------------------------------------------ obs columns of a dataset */
void cv_dcols_free(dcol *c, int n) {
  for (int i = 0; i < n; i++) {
    free(c[i].name);
    if (c[i].labels) for (int64_t k = 0; k < c[i].ncat; k++) free(c[i].labels[k]);
    free(c[i].labels);
  }
  free(c);
}

int cv_read_cols(sqlite3 *db, const char *schema, const char *path, uint64_t id, dcol **out, int *n_out, cv_err *e) {
  *out = NULL;
  *n_out = 0;
  sqlite3_stmt *st = cv_prep(db, e, "SELECT col, name, kind, coalesce(n_categories, 0), checksum FROM \"%w\".cells_columns ORDER BY col",
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
    const char *nm = (const char *)sqlite3_column_text(st, 1);
    if (!nm) { rc = cv_fail(e, "%s: cells_columns row of col %lld has no name", path, (long long)x->col); break; }
    x->name = strdup(nm);
    x->kind = dc_obs_kind_from_name((const char *)sqlite3_column_text(st, 2));
    x->ncat = sqlite3_column_int64(st, 3);
    if (!x->name) { rc = cv_fail(e, "out of memory"); break; }
    if (!x->kind) { rc = cv_fail(e, "%s: obs column '%s' has an unknown kind", path, x->name); break; }
    if (x->kind == DC_OBS_CATEGORY) {
      x->labels = calloc((size_t)x->ncat + 1, sizeof *x->labels);
      sqlite3_stmt *d = cv_prep(db, e, "SELECT code, value FROM \"%w\".cells_dict WHERE col = %lld ORDER BY code", schema,
                              (long long)x->col);
      if (!x->labels || !d) { sqlite3_finalize(d); rc = -1; break; }
      int64_t k = 0;
      int dr;
      while ((dr = sqlite3_step(d)) == SQLITE_ROW && k < x->ncat) {
        if (sqlite3_column_int64(d, 0) != k) break;
        const char *s = (const char *)sqlite3_column_text(d, 1);
        if (!(x->labels[k++] = strdup(s ? s : ""))) { dr = SQLITE_NOMEM; break; }
      }
      if (dr != SQLITE_ROW && dr != SQLITE_DONE) {   /* an error, not the dictionary's end */
        x->ncat = k;
        rc = dr == SQLITE_NOMEM ? cv_fail(e, "out of memory") : cv_sql_fail(db, e, path);
        sqlite3_finalize(d);
        break;
      }
      sqlite3_finalize(d);
      if (k != x->ncat) { x->ncat = k; rc = cv_fail(e, "%s: obs column '%s': its dictionary is incomplete", path, x->name); break; }
      /* its seal, as the cells table checks it: a dictionary edited must not be sealed again as it is */
      dc_blockplace pl = {"cells", x->col, x->name, x->kind, x->ncat, 0, 0, 0, 0};
      dc_seal ds;
      int64_t seal = 0;
      dc_seal_dict_begin(&ds, id, &pl);
      for (k = 0; k < x->ncat; k++) dc_seal_bytes(&ds, x->labels[k], strlen(x->labels[k]));
      if (dc_seal_end(&ds, &seal)) { rc = cv_fail(e, "out of memory"); break; }
      if (sqlite3_column_type(st, 4) != SQLITE_INTEGER || sqlite3_column_int64(st, 4) != seal) {
        rc = cv_fail(e, "%s: obs column '%s': its dictionary (cells_dict) or its cells_columns row does not match its seal "
                     "(edited); run `deltacells verify`", path, x->name);
        break;
      }
    }
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, path);
  sqlite3_finalize(st);
  if (!rc) rc = cv_check_stray_blocks(db, schema, "cells", path, e);
  *out = c;
  *n_out = n;
  return rc;
}

const char *cv_obs_kind_label(int k) { return dc_obs_kind_name(k) ? dc_obs_kind_name(k) : "?"; }

/* ------------------------------------------------------------ writing to main */
/* A writer (dataset.h) over main of an open connection, for its insert helpers. */
int dsw_over(dsw *w, sqlite3 *db, const char *path, uint64_t id, cv_err *e) {
  memset(w, 0, sizeof *w);
  w->db = db;
  w->lock_fd = -1;
  w->dataset_id = id;
  if (!(w->out_path = strdup(path))) return cv_fail(e, "out of memory");
  if (!(w->ins_tile = cv_prep(db, e, "INSERT INTO main.tiles_data VALUES(?,?,?,?,?,?,?)")) ||
      !(w->ins_block = cv_prep(db, e, "INSERT OR REPLACE INTO main.cells_blocks VALUES(?,?,?,?,?,?,?,?,?,?,?)")) ||
      !(w->ins_gblock = cv_prep(db, e, "INSERT INTO main.genes_blocks VALUES(?,?,?,?,?,?,?)")) ||
      !(w->ins_gcol = cv_prep(db, e, "INSERT INTO main.genes_columns VALUES(?,?,?,?,?)")) ||
      !(w->ins_meta = cv_prep(db, e, "INSERT OR REPLACE INTO main.dc_meta VALUES(?,?)")))
    return -1;
  return 0;
}

void dsw_over_end(dsw *w) {
  sqlite3_stmt **sts[] = {&w->ins_tile, &w->ins_block, &w->ins_dict, &w->ins_col, &w->ins_gblock, &w->ins_gcol, &w->ins_meta};
  for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) {
    sqlite3_finalize(*sts[i]);
    *sts[i] = NULL;
  }
  free(w->out_path);
  w->out_path = NULL;
}

int cv_commit(sqlite3 *db, const char *path, cv_err *e) {
  if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK) return 0;
  return dsw_db_fail(path, e, "commit", sqlite3_extended_errcode(db), sqlite3_errmsg(db));
}

void cv_name_dataset(sqlite3 *db, const char *path, cv_err *e) {
  int rc = sqlite3_extended_errcode(db) & 0xff;
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE || !strncmp(e->msg, path, strlen(path))) return;
  if (rc == SQLITE_FULL || rc == SQLITE_IOERR)
    cv_prefix(e, "%s: %s, nothing was written", path, rc == SQLITE_FULL ? "disk full" : "I/O error");
  else
    cv_prefix(e, "%s", path);
}

void cv_rollback(sqlite3 *db) {
  if (sqlite3_get_autocommit(db)) {
    /* SQLite gave the transaction up itself (a full disk or an I/O error in the middle of it):
    ** its journal is left hot, for the next reader of the file to play back.  Read now, so
    ** that this connection plays it back, and the file is its old size again when we exit. */
    sqlite3_exec(db, "SELECT count(*) FROM main.sqlite_schema", NULL, NULL, NULL);
    return;
  }
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
}

int cv_add_label(char ***labels, int64_t *n, cv_map *m, const char *s, int32_t *code, cv_err *e) {
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

/* writes vals v (the cells first .. first + v.n - 1, first a block boundary) as blocks of col */
int cv_write_blocks(dsw *w, int64_t col, const char *name, int64_t ncat, int64_t first, const vals *v, int64_t B, cv_err *e) {
  for (uint64_t off = 0; off < v->n; off += (uint64_t)B) {
    uint32_t k = v->n - off < (uint64_t)B ? (uint32_t)(v->n - off) : (uint32_t)B;
    int64_t f = first + (int64_t)off;
    if (cv_check_interrupt(e) || write_block(w, col, name, ncat, f / B, f, v, off, k, e)) return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ tiles copied */
/* The state of one cv_copy_tiles: the source's blob handle and one reused buffer. */
typedef struct tilecopy {
  sqlite3 *db;
  const char *schema, *path;
  uint64_t old_id, new_id;
  int64_t tile_off, cell_off;
  sqlite3_blob *b;
  uint8_t *buf;
  size_t cap;
  dc_tile_hdr *h;
  int64_t seal_tile, seal;   /* the new seal of the row cv_tile_copy read last */
} tilecopy;

static void fn_fail(sqlite3_context *ctx, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (m) sqlite3_result_error(ctx, m, -1);
  else sqlite3_result_error_nomem(ctx);
  sqlite3_free(m);
}

/* cv_tile_copy(tile, first_cell, n_cells, nnz, chunks, checksum): the row's blob, read into the
** reused buffer and returned as it is (SQLITE_STATIC: SQLite copies it into the new row's
** record, whose buffer one statement reuses); its seal is checked under the old dataset id, and
** the seal at its new place kept for cv_tile_copy_seal. */
static void fn_tile_copy(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  tilecopy *c = sqlite3_user_data(ctx);
  int64_t t = sqlite3_value_int64(argv[0]), fc = sqlite3_value_int64(argv[1]), nc = sqlite3_value_int64(argv[2]);
  int64_t nz = sqlite3_value_int64(argv[3]), ch = sqlite3_value_int64(argv[4]);
  c->seal_tile = -1;
  int br = c->b ? sqlite3_blob_reopen(c->b, t) : sqlite3_blob_open(c->db, c->schema, DC_TILES_DATA, "data", t, 0, &c->b);
  if (br != SQLITE_OK) { fn_fail(ctx, "tile %lld: %s", (long long)t, sqlite3_errmsg(c->db)); return; }
  int64_t len = sqlite3_blob_bytes(c->b);
  if (len <= 0) { fn_fail(ctx, "tile %lld: no data", (long long)t); return; }
  if ((size_t)len > c->cap) {
    size_t n = c->cap ? c->cap : 1 << 20;
    while (n < (size_t)len) n *= 2;
    free(c->buf);   /* nothing to keep: grown, not copied */
    c->buf = malloc(n);
    c->cap = c->buf ? n : 0;
    if (!c->buf) { sqlite3_result_error_nomem(ctx); return; }
  }
  if (sqlite3_blob_read(c->b, c->buf, (int)len, 0) != SQLITE_OK) { fn_fail(ctx, "tile %lld: %s", (long long)t, sqlite3_errmsg(c->db)); return; }
  dc_error de;
  memset(&de, 0, sizeof de);
  if (dc_tile_parse(c->buf, (size_t)len, c->h, &de) != DC_OK) { fn_fail(ctx, "tile %lld: %s", (long long)t, de.msg); return; }
  int64_t old = 0, neu = 0;
  if (dc_seal_tile(c->old_id, t, fc, nc, nz, ch, (uint64_t)len, c->buf, (size_t)c->h->hdr_len, &old) ||
      dc_seal_tile(c->new_id, t + c->tile_off, fc + c->cell_off, nc, nz, ch, (uint64_t)len, c->buf, (size_t)c->h->hdr_len, &neu)) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (sqlite3_value_type(argv[5]) != SQLITE_INTEGER || old != sqlite3_value_int64(argv[5]) || (int64_t)c->h->n_cells != nc ||
      (int64_t)c->h->nnz != nz) {
    fn_fail(ctx, "tile %lld: its seal does not match (the tile and its place were not written together)", (long long)t);
    return;
  }
  c->seal_tile = t;
  c->seal = neu;
  sqlite3_result_blob64(ctx, c->buf, (sqlite3_uint64)len, SQLITE_STATIC);
}

/* cv_tile_copy_seal(tile): the new seal cv_tile_copy computed for that row */
static void fn_tile_copy_seal(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  tilecopy *c = sqlite3_user_data(ctx);
  if (c->seal_tile < 0 || c->seal_tile != sqlite3_value_int64(argv[0])) { fn_fail(ctx, "internal: a tile's seal asked before its copy"); return; }
  sqlite3_result_int64(ctx, c->seal);
}

/* Copies every row of schema's tiles_data into main's, numbered on by tile_off and cell_off,
** each blob as it is, in one INSERT ... SELECT whose blob (cv_tile_copy) is read with
** sqlite3_blob_read into one reused buffer: SQLite neither takes each blob into fresh memory
** of its own nor builds each row's record in fresh memory (on a machine where the first touch
** of fresh pages is slow, that was most of a merge's time).  Each row's seal is checked under
** old_id and computed again under new_id for its new place. */
int cv_copy_tiles(sqlite3 *db, const char *schema, const char *path, uint64_t old_id, uint64_t new_id, int64_t tile_off,
                  int64_t cell_off, cv_err *e) {
  tilecopy c;
  memset(&c, 0, sizeof c);
  c.db = db;
  c.schema = schema;
  c.path = path;
  c.old_id = old_id;
  c.new_id = new_id;
  c.tile_off = tile_off;
  c.cell_off = cell_off;
  c.seal_tile = -1;
  c.h = malloc(sizeof *c.h);
  if (!c.h) return cv_fail(e, "out of memory");
  int rc = 0;
  if (sqlite3_create_function(db, "cv_tile_copy", 6, SQLITE_UTF8, &c, fn_tile_copy, NULL, NULL) != SQLITE_OK ||
      sqlite3_create_function(db, "cv_tile_copy_seal", 1, SQLITE_UTF8, &c, fn_tile_copy_seal, NULL, NULL) != SQLITE_OK)
    rc = cv_sql_fail(db, e, "cv_tile_copy");
  char *sql = rc ? NULL : sqlite3_mprintf(
      "INSERT INTO main." DC_TILES_DATA " SELECT tile + %lld, first_cell + %lld, n_cells, nnz, chunks, "
      "cv_tile_copy(tile, first_cell, n_cells, nnz, chunks, checksum), cv_tile_copy_seal(tile) FROM \"%w\"." DC_TILES_DATA
      " ORDER BY tile",
      (long long)tile_off, (long long)cell_off, schema);
  if (!rc && !sql) rc = cv_fail(e, "out of memory");
  char *m = NULL;
  if (!rc && sqlite3_exec(db, sql, NULL, NULL, &m) != SQLITE_OK) rc = cv_fail(e, "%s: %s", path, m ? m : sqlite3_errmsg(db));
  sqlite3_free(m);
  sqlite3_free(sql);
  sqlite3_blob_close(c.b);
  /* the functions point at c: gone with it */
  sqlite3_create_function(db, "cv_tile_copy", 6, SQLITE_UTF8, NULL, NULL, NULL, NULL);
  sqlite3_create_function(db, "cv_tile_copy_seal", 1, SQLITE_UTF8, NULL, NULL, NULL, NULL);
  free(c.buf);
  free(c.h);
  return rc;
}
