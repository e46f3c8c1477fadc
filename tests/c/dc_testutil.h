/*
** dc_testutil.h — helpers shared by the codec tests and the fuzz target:
** a seeded generator of random CSR matrices, a round-trip checker, and
** dct_reseal(), which recomputes a tile's checksums after a mutation so that
** the decoder proper (not only the checksum) meets the corrupt bytes.
*/
#ifndef DC_TESTUTIL_H
#define DC_TESTUTIL_H
#include "dc_codec.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t dct_rng(uint64_t *s) {   /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double dct_unif(uint64_t *s) { return (double)(dct_rng(s) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct dct_mat {
  uint32_t n_cells, n_genes;
  uint64_t *indptr;
  uint32_t *indices, *data;
} dct_mat;

static inline void dct_mat_free(dct_mat *m) {
  free(m->indptr); free(m->indices); free(m->data);
  memset(m, 0, sizeof *m);
}

/* count kinds for dct_mat_random */
enum { DCT_SMALL = 0, DCT_MIXED = 1, DCT_HUGE = 2, DCT_ONES = 3 };

static inline uint32_t dct_count(uint64_t *s, int kind, uint32_t g) {
  switch (kind) {
    case DCT_ONES: return 1;
    case DCT_HUGE: {
      static const uint32_t edge[] = {1, 254, 255, 256, 65535, 65536, 65537, 4294967295u, 4294967294u, 0};
      if (dct_rng(s) % 3 == 0) return edge[dct_rng(s) % 10];
      return (uint32_t)dct_rng(s);
    }
    case DCT_MIXED: {
      double u = dct_unif(s);
      if (u < 0.01) return (uint32_t)(dct_rng(s) % 100000) + 1;
      if (u < 0.03) return 255 + (uint32_t)(dct_rng(s) % 3);
      return 1 + (uint32_t)(-log(1 - dct_unif(s)) * (g < 50 ? 30.0 : 1.5));
    }
    default: return 1 + (uint32_t)(-log(1 - dct_unif(s)) * (g < 20 ? 8.0 : 0.7));
  }
}

/* Random CSR: each gene nonzero with probability decreasing in its index
** (p0 * (1+g)^-0.7), a fraction of empty cells, optionally dense cells. */
static inline int dct_mat_random(dct_mat *m, uint64_t seed, uint32_t n_cells, uint32_t n_genes,
                                 double p0, int kind, double frac_empty, double frac_dense) {
  uint64_t s = seed;
  memset(m, 0, sizeof *m);
  m->n_cells = n_cells; m->n_genes = n_genes;
  size_t cap = 1024;
  m->indptr = malloc(((size_t)n_cells + 1) * sizeof(uint64_t));
  m->indices = malloc(cap * sizeof(uint32_t));
  m->data = malloc(cap * sizeof(uint32_t));
  if (!m->indptr || !m->indices || !m->data) return -1;
  uint64_t k = 0;
  m->indptr[0] = 0;
  double *pg = malloc(((size_t)n_genes + 1) * sizeof *pg);
  if (!pg) return -1;
  for (uint32_t g = 0; g < n_genes; g++) pg[g] = p0 * pow(1.0 + g, -0.7);
  for (uint32_t i = 0; i < n_cells; i++) {
    double u = dct_unif(&s);
    int empty = u < frac_empty, dense = !empty && u < frac_empty + frac_dense;
    double scale = 0.3 + 1.4 * dct_unif(&s);
    for (uint32_t g = 0; g < n_genes && !empty; g++) {
      double p = dense ? 1.0 : scale * pg[g];
      if (dct_unif(&s) >= p) continue;
      if (k == cap) {
        cap *= 2;
        uint32_t *a = realloc(m->indices, cap * sizeof(uint32_t)), *b;
        if (!a) { free(pg); return -1; }
        m->indices = a;
        b = realloc(m->data, cap * sizeof(uint32_t));
        if (!b) { free(pg); return -1; }
        m->data = b;
      }
      m->indices[k] = g;
      m->data[k] = dct_count(&s, kind, g);
      k++;
    }
    m->indptr[i + 1] = k;
  }
  free(pg);
  return 0;
}

static inline dc_csr dct_csr(const dct_mat *m) {
  dc_csr c = {m->n_cells, m->n_genes, m->indptr, m->indices, m->data};
  return c;
}

/* m encoded into exactly n_chunks chunks (at most its cells; 0: 8), not the encoder's default
** of fewer, longer chunks in small tiles (dc_encode_opts.chunk_cells): the tests choose their
** chunk layouts.  codec 0: the default codec; threads 0: one per core.  The caller frees *buf. */
static inline int dct_encode(const dct_mat *m, int codec, uint32_t n_chunks, int threads, uint8_t **buf,
                             size_t *len, dc_error *err) {
  dc_csr in = dct_csr(m);
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  if (codec) o.codec = codec;
  o.n_chunks = n_chunks;
  o.chunk_cells = 0;
  o.threads = threads;
  return dc_tile_encode(&in, &o, buf, len, err);
}

/* Recomputes every checksum of a tile (after a mutation), if its header is
** readable; leaves it alone otherwise.  Knows the layout of docs/format.md 2. */
static inline void dct_reseal(uint8_t *buf, size_t len) {
  if (len < 32) return;
  uint32_t nc = (uint32_t)buf[24] | (uint32_t)buf[25] << 8 | (uint32_t)buf[26] << 16 | (uint32_t)buf[27] << 24;
  uint32_t sl = (uint32_t)buf[28] | (uint32_t)buf[29] << 8 | (uint32_t)buf[30] << 16 | (uint32_t)buf[31] << 24;
  if (nc > DC_MAX_CHUNKS) return;
  uint64_t hl = 32 + 24ull * nc + 8;
  if (hl > len) return;
  uint64_t off = hl;
  if (sl <= len - off) {
    uint32_t x = dc_checksum(buf + off, sl);
    memcpy(buf + hl - 8, &x, 4);
    off += sl;
    for (uint32_t c = 0; c < nc; c++) {
      uint8_t *r = buf + 32 + 24 * c;
      uint64_t l;
      memcpy(&l, r + 16, 8);
      if (l > len - off) break;
      x = dc_checksum(buf + off, (size_t)l);
      memcpy(r + 4, &x, 4);
      off += l;
    }
  }
  uint32_t x = dc_checksum(buf, (size_t)hl - 4);
  memcpy(buf + hl - 4, &x, 4);
}

/* Decodes a whole tile into freshly allocated buffers; returns rc. */
typedef struct dct_dec {
  int64_t *indptr;
  int32_t *indices;
  void *values;
  dc_tile_hdr hdr;
} dct_dec;

static inline void dct_dec_free(dct_dec *d) {
  free(d->indptr); free(d->indices); free(d->values);
  d->indptr = NULL; d->indices = NULL; d->values = NULL;
}

static inline int dct_decode(const uint8_t *buf, size_t len, int f32, dct_dec *o, dc_error *err) {
  memset(o, 0, sizeof *o);
  int rc = dc_tile_parse(buf, len, &o->hdr, err);
  if (rc) return rc;
  o->indptr = malloc(((size_t)o->hdr.n_cells + 1) * sizeof(int64_t));
  o->indices = malloc((size_t)o->hdr.nnz * sizeof(int32_t) + 4);
  o->values = malloc((size_t)o->hdr.nnz * sizeof(int32_t) + 4);
  if (!o->indptr || !o->indices || !o->values) { dct_dec_free(o); return DC_ENOMEM; }
  dc_out out = {o->indptr, o->indices, o->values, f32};
  dc_decoder *d = dc_decoder_new();
  rc = dc_tile_decode(d, buf, len, &out, err);
  dc_decoder_free(d);
  if (rc) dct_dec_free(o);
  return rc;
}

/* 1 if the decoded tile equals the matrix (int32 or float32 values). */
static inline int dct_same(const dct_mat *m, const dct_dec *o, int f32) {
  if (o->hdr.n_cells != m->n_cells || o->hdr.n_genes != m->n_genes) return 0;
  if (o->indptr[0] != 0) return 0;
  for (uint32_t i = 0; i < m->n_cells; i++) {
    if ((uint64_t)o->indptr[i + 1] != m->indptr[i + 1] - m->indptr[0]) return 0;
  }
  uint64_t nnz = m->indptr[m->n_cells] - m->indptr[0];
  if (o->hdr.nnz != nnz) return 0;
  for (uint64_t j = 0; j < nnz; j++) {
    if ((uint32_t)o->indices[j] != m->indices[m->indptr[0] + j]) return 0;
    uint32_t v = m->data[m->indptr[0] + j];
    if (f32) { if (((float *)o->values)[j] != (float)v) return 0; }
    else if ((uint32_t)((int32_t *)o->values)[j] != v) return 0;
  }
  return 1;
}
#endif
