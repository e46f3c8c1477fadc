/*
** dc_compress.c — the tile encoder: input checks, the split into chunks,
** parallel chunk encoding, and the tile header.  Also the encoder of the zstd
** codec (the published design: zstd over byte planes).  The rANS encoder is
** in dc_rans_compress.c.  Byte layout: docs/format.md section 2.
*/
#include "dc_ctx.h"

#include <stdlib.h>
#include <zstd.h>

/* ------------------------------------------------------------ zstd codec
** Raw chunk image, compressed as one zstd frame:
**   A  per-cell nnz, LEB128 varints (n_cells of them)
**   B  low byte of each gap   (nnz bytes)     gap = index - previous index - 1,
**   C  high byte of each gap  (nnz bytes)           the first index of a cell itself
**   D  count, 255 = escape    (nnz bytes)
**   E  escapes in nonzero order: for a gap >= 65535 (stored as 0xFFFF) the
**      varint gap - 65535, then for a count >= 255 the varint count - 255.
** Payload: varint |A|, varint |E|, then the zstd frame of A B C D E. */
int dc_zstd_encode_chunk(const dc_chunk_in *c, int level, dc_buf *out, dc_error *err) {
  uint64_t nnz = c->nnz;
  dc_buf a = {0}, e = {0};
  uint8_t *planes = NULL, *raw = NULL;
  int rc = DC_OK;
  if (nnz > SIZE_MAX / 4) { rc = DC_ENOMEM; goto oom; }
  planes = malloc(nnz ? (size_t)nnz * 3 : 1);
  if (!planes) { rc = DC_ENOMEM; goto oom; }
  uint8_t *lo = planes, *hi = planes + nnz, *ct = planes + 2 * nnz;
  size_t k = 0;
  for (uint32_t i = 0; i < c->n_cells; i++) {
    uint64_t s = c->indptr[i], t = c->indptr[i + 1];
    dc_buf_varint(&a, t - s);
    int64_t prev = -1;
    for (uint64_t j = s; j < t; j++, k++) {
      uint64_t g = (uint64_t)((int64_t)c->indices[j] - prev - 1);
      prev = c->indices[j];
      uint32_t v = c->data[j];
      if (g < 65535) { lo[k] = (uint8_t)g; hi[k] = (uint8_t)(g >> 8); }
      else { lo[k] = hi[k] = 0xFF; dc_buf_varint(&e, g - 65535); }
      if (v < 255) ct[k] = (uint8_t)v;
      else { ct[k] = 255; dc_buf_varint(&e, (uint64_t)v - 255); }
    }
  }
  if (a.oom || e.oom) { rc = DC_ENOMEM; goto oom; }
  size_t raw_len = a.len + (size_t)nnz * 3 + e.len;
  raw = malloc(raw_len ? raw_len : 1);
  if (!raw) { rc = DC_ENOMEM; goto oom; }
  if (a.len) memcpy(raw, a.p, a.len);
  if (nnz) memcpy(raw + a.len, planes, (size_t)nnz * 3);
  if (e.len) memcpy(raw + a.len + nnz * 3, e.p, e.len);
  free(planes); planes = NULL;
  dc_buf_varint(out, a.len);
  dc_buf_varint(out, e.len);
  size_t bound = ZSTD_compressBound(raw_len);
  if (dc_buf_reserve(out, bound)) { rc = DC_ENOMEM; goto oom; }
  if (level < ZSTD_minCLevel()) level = ZSTD_minCLevel();
  if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
  size_t z = ZSTD_compress(out->p + out->len, bound, raw, raw_len, level);
  if (ZSTD_isError(z)) {
    dc_error_set(err, DC_ENOMEM, "zstd compression failed: %s", ZSTD_getErrorName(z));
    rc = DC_ENOMEM;
    goto done;
  }
  out->len += z;
  goto done;
oom:
  dc_error_set(err, DC_ENOMEM, "out of memory encoding a chunk of %llu nonzeros",
               (unsigned long long)nnz);
done:
  free(planes);
  free(raw);
  dc_buf_free(&a);
  dc_buf_free(&e);
  return rc;
}

/* ------------------------------------------------------------ tile */
typedef struct {
  const dc_csr *in;
  int codec, level;
  uint32_t n_chunks;
  uint32_t *first;        /* n_chunks+1 cell boundaries */
  dc_buf *bufs;
  int *rcs;
  dc_error *errs;
  const void *shared;     /* codec model shared by all chunks (rANS) */
} enc_ctx;

/* Checks one chunk's CSR (indices strictly increasing and < n_genes). */
static int check_chunk(const dc_chunk_in *c, uint32_t first_cell, dc_error *err) {
  for (uint32_t i = 0; i < c->n_cells; i++) {
    uint64_t s = c->indptr[i], t = c->indptr[i + 1];
    int64_t prev = -1;
    for (uint64_t j = s; j < t; j++) {
      uint32_t g = c->indices[j];
      if (g >= c->n_genes || (int64_t)g <= prev) {
        dc_error_set(err, DC_EARG, "encode: cell %u: gene index %u at position %llu is %s", first_cell + i, g,
                     (unsigned long long)(j - s),
                     g >= c->n_genes ? "out of range" : "not strictly increasing");
        return DC_EARG;
      }
      prev = g;
    }
  }
  return DC_OK;
}

static void enc_item(void *v, size_t k, int tid) {
  (void)tid;
  enc_ctx *x = v;
  const dc_csr *in = x->in;
  uint32_t a = x->first[k], b = x->first[k + 1];
  dc_chunk_in c = {b - a, in->n_genes, in->indptr + a, in->indices, in->data,
                   in->indptr[b] - in->indptr[a]};
  int rc = DC_OK;
  {
    if (x->codec == DC_CODEC_ZSTD) rc = dc_zstd_encode_chunk(&c, x->level, &x->bufs[k], &x->errs[k]);
    else if (x->codec == DC_CODEC_RANS) rc = dc_ctx_encode_chunk(&c, x->level, x->shared, &x->bufs[k], &x->errs[k]);
    else rc = dc_rans_encode_chunk(&c, x->level, x->shared, &x->bufs[k], &x->errs[k]);
  }
  if (rc == DC_OK && x->bufs[k].oom) {
    rc = DC_ENOMEM;
    dc_error_set(&x->errs[k], rc, "chunk %zu: out of memory", k);
  }
  x->rcs[k] = rc;
}

/* Encodes every chunk into x->bufs with x->shared; DC_OK or the first chunk's error. */
static int encode_chunks(enc_ctx *x, dc_pool *pool, dc_error *err) {
  dc_pool_for_tid(pool, x->n_chunks, enc_item, x);
  for (uint32_t k = 0; k < x->n_chunks; k++)
    if (x->rcs[k] != DC_OK) {
      if (err) *err = x->errs[k];
      return x->rcs[k];
    }
  return DC_OK;
}

static size_t chunks_len(const dc_buf *bufs, uint32_t nc) {
  size_t n = 0;
  for (uint32_t k = 0; k < nc; k++) n += bufs[k].len;
  return n;
}

/* rans, a tile of small cells (dc_encode_opts.rans_one_bucket 0): the tile encoded again with
** one rank bucket, which replaces the encoding in x (model, shared section, chunks) when it
** is at most DC_CTX_ONE_BUCKET_SLACK larger. */
static int try_one_bucket(enc_ctx *x, const dc_encode_opts *o, dc_pool *pool, void **model, dc_buf *shared,
                          dc_error *err) {
  if (dc_ctx_model_nrb(*model) == 1) return DC_OK;   /* already one bucket (at most 16 genes) */
  void *m1 = NULL;
  dc_buf sh1 = {0};
  dc_buf *b0 = x->bufs, *b1 = calloc(x->n_chunks, sizeof *b1);
  if (!b1) {
    dc_error_set(err, DC_ENOMEM, "encode: out of memory");
    return DC_ENOMEM;
  }
  int rc = dc_ctx_build_model(x->in, o->level, 0, o->rans_pairs, 1, x->first, x->n_chunks, pool, &m1, &sh1, err);
  if (rc == DC_OK) {
    x->bufs = b1;
    x->shared = m1;
    rc = encode_chunks(x, pool, err);
    if (rc == DC_OK && (double)(sh1.len + chunks_len(b1, x->n_chunks)) <=
                           (1.0 + DC_CTX_ONE_BUCKET_SLACK) * (double)(shared->len + chunks_len(b0, x->n_chunks))) {
      dc_buf t = *shared;      /* keep the one-bucket encoding; free the other */
      *shared = sh1;
      sh1 = t;
      void *tm = *model;
      *model = m1;
      m1 = tm;
      dc_buf *tb = b0;
      b0 = b1;
      b1 = tb;
    }
  }
  x->bufs = b0;
  x->shared = *model;
  for (uint32_t k = 0; k < x->n_chunks; k++) dc_buf_free(&b1[k]);
  free(b1);
  dc_ctx_free_model(m1);
  dc_buf_free(&sh1);
  return rc;
}

int dc_tile_encode(const dc_csr *in, const dc_encode_opts *o_in,
                   uint8_t **out, size_t *out_len, dc_error *err) {
  dc_encode_opts o;
  if (!in || !out || !out_len) {
    dc_error_set(err, DC_EARG, "encode: NULL argument");
    return DC_EARG;
  }
  *out = NULL;
  *out_len = 0;
  if (o_in) o = *o_in; else dc_encode_opts_default(&o);
  if (!dc_codec_name(o.codec)) {
    dc_error_set(err, DC_EUNSUPPORTED, "encode: unknown codec id %d", o.codec);
    return DC_EUNSUPPORTED;
  }
  if (o.level == 0 && o.codec == DC_CODEC_ZSTD) o.level = 19;
  if (in->n_genes > (uint32_t)INT32_MAX) {
    dc_error_set(err, DC_EARG, "encode: %u genes (at most %d)", in->n_genes, INT32_MAX);
    return DC_EARG;
  }
  if (in->n_cells && (!in->indptr)) {
    dc_error_set(err, DC_EARG, "encode: NULL indptr");
    return DC_EARG;
  }
  uint32_t nonempty = 0;                      /* cells with a nonzero */
  for (uint32_t i = 0; i < in->n_cells; i++) {
    nonempty += in->indptr[i + 1] > in->indptr[i];
    if (in->indptr[i + 1] < in->indptr[i]) {
      dc_error_set(err, DC_EARG, "encode: indptr decreases at cell %u", i);
      return DC_EARG;
    }
    if (in->indptr[i + 1] - in->indptr[i] > in->n_genes) {
      dc_error_set(err, DC_EARG, "encode: cell %u has %llu nonzeros but there are %u genes", i,
                   (unsigned long long)(in->indptr[i + 1] - in->indptr[i]), in->n_genes);
      return DC_EARG;
    }
  }
  uint64_t nnz = in->n_cells ? in->indptr[in->n_cells] - in->indptr[0] : 0;
  if (nnz && (!in->indices || !in->data)) {
    dc_error_set(err, DC_EARG, "encode: NULL indices or data");
    return DC_EARG;
  }
  uint32_t nc = dc_encode_chunks(&o, in->n_cells, nnz);

  int rc = DC_OK;
  dc_pool *pool = NULL;
  dc_buf shared = {0}, tile = {0};
  void *model = NULL;
  enc_ctx x = {in, o.codec, o.level, nc, NULL, NULL, NULL, NULL, NULL};
  x.first = calloc((size_t)nc + 1, sizeof *x.first);
  x.bufs = calloc(nc ? nc : 1, sizeof *x.bufs);
  x.rcs = calloc(nc ? nc : 1, sizeof *x.rcs);
  x.errs = calloc(nc ? nc : 1, sizeof *x.errs);
  if (!x.first || !x.bufs || !x.rcs || !x.errs) goto oom;

  /* chunk boundaries: balanced by nonzeros, at least one cell each */
  x.first[0] = 0;
  x.first[nc] = in->n_cells;
  for (uint32_t k = 1; k < nc; k++) {
    uint64_t target = in->indptr[0] + (uint64_t)((double)nnz * k / nc);
    uint32_t lo = x.first[k - 1] + 1, hi = in->n_cells - (nc - k);
    uint32_t l = lo, h = hi;               /* first cell i in [lo,hi] with indptr[i] >= target */
    while (l < h) {
      uint32_t m = l + (h - l) / 2;
      if (in->indptr[m] >= target) h = m; else l = m + 1;
    }
    x.first[k] = l;
  }

  /* the input must be valid before any codec looks at it (the rans model
  ** is built over the whole tile) */
  if (nc > 0) {
    dc_chunk_in all = {in->n_cells, in->n_genes, in->indptr, in->indices, in->data, nnz};
    rc = check_chunk(&all, 0, err);
    if (rc) goto done;
  }

  if (nc > 0) {
    int nt = o.threads > 0 ? o.threads : 0;
    pool = dc_pool_new(nt);
    if (!pool) goto oom;
  }
  if (o.codec == DC_CODEC_RANS && nc > 0) {
    rc = dc_ctx_build_model(in, o.level, o.rans_v2 != 0, o.rans_pairs, !o.rans_v2 && o.rans_one_bucket > 0, x.first,
                            nc, pool, &model, &shared, err);
    if (rc) goto done;
    x.shared = model;
  } else if (o.codec == DC_CODEC_RANS_V1 && nc > 0) {
    rc = dc_rans_build_model(in, o.level, &model, &shared, err);
    if (rc) goto done;
    x.shared = model;
  }

  if (nc > 0) {
    rc = encode_chunks(&x, pool, err);
    if (rc) goto done;
  }
  if (o.codec == DC_CODEC_RANS && nc > 0 && !o.rans_v2 && o.rans_one_bucket == 0 &&
      nnz < (uint64_t)DC_CTX_ONE_BUCKET_NNZ * nonempty) {
    rc = try_one_bucket(&x, &o, pool, &model, &shared, err);
    if (rc) goto done;
  }

  /* header */
  uint64_t hl = DC_HDR_LEN(nc);
  if (shared.len > UINT32_MAX) {
    dc_error_set(err, DC_EARG, "encode: codec tables of %zu bytes", shared.len);
    rc = DC_EARG;
    goto done;
  }
  size_t total = (size_t)hl + shared.len;   /* the tile's exact size: one allocation, no regrowth */
  for (uint32_t k = 0; k < nc; k++) total += x.bufs[k].len;
  if (dc_buf_reserve(&tile, total)) goto oom;
  uint8_t *hp = tile.p;
  memset(hp, 0, (size_t)hl);
  dc_wr32(hp, DC_TILE_MAGIC);
  dc_wr16(hp + 4, o.codec == DC_CODEC_RANS ? (o.rans_v2 ? 2 : DC_TILE_VERSION) : 1);
  dc_wr16(hp + 6, (uint16_t)o.codec);
  dc_wr32(hp + 8, in->n_cells);
  dc_wr32(hp + 12, in->n_genes);
  dc_wr64(hp + 16, nnz);
  dc_wr32(hp + 24, nc);
  dc_wr32(hp + 28, (uint32_t)shared.len);
  for (uint32_t k = 0; k < nc; k++) {
    uint8_t *r = hp + DC_HDR_FIXED + (size_t)k * DC_HDR_CHUNK;
    dc_wr32(r, x.first[k + 1] - x.first[k]);
    dc_wr32(r + 4, dc_checksum(x.bufs[k].p, x.bufs[k].len));
    dc_wr64(r + 8, in->indptr[x.first[k + 1]] - in->indptr[x.first[k]]);
    dc_wr64(r + 16, x.bufs[k].len);
  }
  dc_wr32(hp + hl - 8, dc_checksum(shared.p, shared.len));
  dc_wr32(hp + hl - 4, dc_checksum(hp, (size_t)hl - 4));
  tile.len = (size_t)hl;
  dc_buf_put(&tile, shared.p, shared.len);
  for (uint32_t k = 0; k < nc; k++) dc_buf_put(&tile, x.bufs[k].p, x.bufs[k].len);
  if (tile.oom) goto oom;
  *out = tile.p;
  *out_len = tile.len;
  tile.p = NULL;
  goto done;
oom:
  rc = DC_ENOMEM;
  dc_error_set(err, rc, "encode: out of memory");
done:
  if (x.bufs)
    for (uint32_t k = 0; k < nc; k++) dc_buf_free(&x.bufs[k]);
  free(x.first);
  free(x.bufs);
  free(x.rcs);
  free(x.errs);
  if (o.codec == DC_CODEC_RANS) dc_ctx_free_model(model);
  else dc_rans_free_model(model);
  dc_buf_free(&shared);
  dc_buf_free(&tile);
  dc_pool_free(pool);
  if (rc == DC_OK && err) { err->code = DC_OK; err->msg[0] = 0; }
  return rc;
}
