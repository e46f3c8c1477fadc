/*
** dc_rans_compress.c — encoder of the rANS codec: builds the tile's static
** model (symbol frequencies per context, written to the tile's shared
** section) and encodes chunks with it.  See dc_rans.h for the model and
** docs/format.md section 2 for the bytes.
*/
#include "dc_rans.h"

#include <stdlib.h>
#include <zstd.h>

/* symbol id = gap code << 7 | count code; the encoder's tables index symbols
** compactly: gap code * 66 + count code, the escape last */
#define NSYMIX (64u * DC_RANS_NCODES + 1u)
static inline uint32_t cix(uint32_t sid) {
  uint32_t gc = sid >> 7;
  return gc >= 64 ? 64u * DC_RANS_NCODES : gc * DC_RANS_NCODES + (sid & 127);
}
static inline uint32_t sid_of(uint32_t k) {
  return k == 64u * DC_RANS_NCODES ? DC_RANS_ESC : (k / DC_RANS_NCODES) << 7 | (k % DC_RANS_NCODES);
}

typedef struct enc_model {
  dc_rans_model m;
  uint32_t *tab;               /* n_ctx x NSYMIX: freq | start << 12, 0 = not coded (escape) */
} enc_model;

void dc_rans_free_model(void *model) {
  enc_model *em = model;
  if (!em) return;
  free(em->tab);
  free(em);
}

/* Number of cell-size buckets for a tile: more data affords more contexts. */
static uint32_t choose_nb(uint64_t nnz, int level) {
  if (level > 0 && level <= (int)DC_RANS_MAXNB) return (uint32_t)level;
  if (nnz >= 12000000) return 4;
  if (nnz >= 4000000) return 3;
  if (nnz >= 1000000) return 2;
  return 1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}
static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Per nonzero: context, symbol id and extra bits. */
typedef struct nz_sym {
  uint16_t ctx, sid;
  uint32_t gx, cx;             /* extra bits of the gap and of the count */
} nz_sym;

static inline void sym_of(const dc_rans_model *m, uint32_t bucket, int64_t prev, uint32_t idx, uint32_t v,
                          nz_sym *o) {
  uint64_t gap = (uint64_t)((int64_t)idx - prev - 1);
  uint32_t gc = dc_vcode(gap), cc = dc_vcode(v);
  o->ctx = (uint16_t)(bucket * m->nrc + dc_rcode((uint64_t)(prev + 1), m->nrc));
  o->sid = (uint16_t)(gc << 7 | cc);
  o->gx = (uint32_t)(gap - dc_vbase(gc));
  o->cx = (uint32_t)(v - dc_vbase(cc));
}

int dc_rans_build_model(const dc_csr *in, int level, void **model, dc_buf *shared, dc_error *err) {
  *model = NULL;
  enc_model *em = calloc(1, sizeof *em);
  uint64_t *cnt = NULL;
  uint32_t *nnzs = NULL;
  dc_buf raw = {0};
  int rc = DC_ENOMEM;
  if (!em) goto done;
  dc_rans_model *m = &em->m;
  uint32_t C = in->n_cells;
  uint64_t nnz = in->indptr[C] - in->indptr[0];
  /* cell-size buckets at quantiles of the nonempty cells' nnz */
  m->nb = choose_nb(nnz, level);
  nnzs = malloc((C ? C : 1) * sizeof *nnzs);
  if (!nnzs) goto done;
  uint32_t ne = 0;
  for (uint32_t i = 0; i < C; i++) {
    uint64_t k = in->indptr[i + 1] - in->indptr[i];
    if (k) nnzs[ne++] = (uint32_t)k;
  }
  qsort(nnzs, ne, sizeof *nnzs, cmp_u32);
  for (uint32_t k = 0; k + 1 < m->nb; k++) {
    uint32_t q = ne ? nnzs[(uint64_t)ne * (k + 1) / m->nb] : 0;
    if (k && q <= m->nb_lim[k - 1]) q = m->nb_lim[k - 1] + 1;
    m->nb_lim[k] = q;
  }
  m->nb_lim[m->nb - 1] = UINT32_MAX;
  m->nrc = dc_vcode(in->n_genes ? in->n_genes - 1 : 0) + 1;
  if (m->nrc > DC_RANS_MAXRC) m->nrc = DC_RANS_MAXRC;
  m->n_ctx = m->nb * m->nrc;

  /* symbol counts per context */
  uint32_t max_gc = 0, max_cc = 0;
  cnt = calloc((size_t)m->n_ctx * NSYMIX, sizeof *cnt);
  em->tab = calloc((size_t)m->n_ctx * NSYMIX, sizeof *em->tab);
  if (!cnt || !em->tab) goto done;
  for (uint32_t i = 0; i < C; i++) {
    uint64_t s = in->indptr[i], t = in->indptr[i + 1];
    uint32_t b = dc_nnz_bucket(m, t - s);
    int64_t prev = -1;
    for (uint64_t j = s; j < t; j++) {
      nz_sym z;
      sym_of(m, b, prev, in->indices[j], in->data[j], &z);
      cnt[(size_t)z.ctx * NSYMIX + cix(z.sid)]++;
      if ((z.sid >> 7) > max_gc) max_gc = z.sid >> 7;
      if ((z.sid & 127) > max_cc) max_cc = z.sid & 127;
      prev = in->indices[j];
    }
  }

  /* frequencies; serialise */
  dc_buf_put(&raw, (uint8_t[]){DC_RANS_MODEL_VERSION, (uint8_t)m->nb, (uint8_t)m->nrc}, 3);
  for (uint32_t k = 0; k + 1 < m->nb; k++) dc_buf_varint(&raw, m->nb_lim[k]);
  uint32_t *ids = malloc(NSYMIX * sizeof *ids), *f = malloc(NSYMIX * sizeof *f);
  uint64_t *c = malloc(NSYMIX * sizeof *c);
  if (!ids || !f || !c) { free(ids); free(f); free(c); goto done; }
  for (uint32_t x = 0; x < m->n_ctx; x++) {
    uint64_t *cx = cnt + (size_t)x * NSYMIX;
    uint32_t n = 0;
    for (uint32_t gc = 0; gc <= max_gc; gc++)   /* in symbol id order */
      for (uint32_t cc = 0; cc <= max_cc; cc++) {
        uint32_t q = gc * DC_RANS_NCODES + cc;
        if (cx[q]) { ids[n] = sid_of(q); c[n] = cx[q]; n++; }
      }
    if (n > DC_RANS_MAXSYM - 1) {
      /* too many distinct symbols: the rarest share the escape symbol, whose
      ** gap and count codes then follow in a raw step */
      uint64_t *key = malloc(n * sizeof *key);
      if (!key) { free(ids); free(f); free(c); goto done; }
      for (uint32_t i = 0; i < n; i++) key[i] = ~(c[i] << 14 | ids[i]);   /* descending count */
      qsort(key, n, sizeof *key, cmp_u64);
      uint64_t esc = 0;
      for (uint32_t i = DC_RANS_MAXSYM - 1; i < n; i++) esc += (~key[i]) >> 14;
      for (uint32_t i = DC_RANS_MAXSYM - 1; i < n; i++) key[i] = 0;
      uint8_t *keep = calloc(NSYMIX, 1);
      if (!keep) { free(key); free(ids); free(f); free(c); goto done; }
      for (uint32_t j = 0; j < DC_RANS_MAXSYM - 1; j++) keep[cix((uint32_t)((~key[j]) & 16383))] = 1;
      uint32_t k = 0;
      for (uint32_t i = 0; i < n; i++)        /* kept symbols, in id order */
        if (keep[cix(ids[i])]) { ids[k] = ids[i]; c[k] = c[i]; k++; }
      free(keep);
      ids[k] = DC_RANS_ESC;
      c[k] = esc;
      n = k + 1;
      free(key);
    }
    dc_buf_varint(&raw, n);
    if (!n) continue;
    dc_normalize_freqs(c, f, n, DC_RANS_M);
    uint32_t start = 0, prev_id = 0;
    uint32_t *tx = em->tab + (size_t)x * NSYMIX;
    for (uint32_t i = 0; i < n; i++) {
      dc_buf_varint(&raw, i ? ids[i] - prev_id - 1 : ids[i]);
      dc_buf_varint(&raw, f[i] - 1);
      tx[cix(ids[i])] = f[i] | start << 12;
      start += f[i];
      prev_id = ids[i];
    }
  }
  free(ids); free(f); free(c);
  if (raw.oom) goto done;
  /* the shared section: varint raw size, zstd frame */
  dc_buf_varint(shared, raw.len);
  size_t bound = ZSTD_compressBound(raw.len);
  if (dc_buf_reserve(shared, bound)) goto done;
  size_t z = ZSTD_compress(shared->p + shared->len, bound, raw.p, raw.len, 9);
  if (ZSTD_isError(z)) goto done;
  shared->len += z;
  *model = em;
  em = NULL;
  rc = DC_OK;
done:
  if (rc) dc_error_set(err, rc, "encode: out of memory building the rans model");
  dc_rans_free_model(em);
  free(cnt);
  free(nnzs);
  dc_buf_free(&raw);
  return rc;
}

/* ------------------------------------------------------------ chunks */
/* The encoder state of one lane: 64-bit rANS state; words are appended to a
** shared buffer in reverse read order. */
typedef struct wbuf { uint32_t *w; size_t n, cap; int oom; } wbuf;

static inline void put_word(wbuf *b, uint32_t w) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 4096;
    uint32_t *p = realloc(b->w, cap * sizeof *p);
    if (!p) { b->oom = 1; b->n = 0; return; }
    b->w = p;
    b->cap = cap;
  }
  b->w[b->n++] = w;
}

/* A symbol of frequency f at precision DC_RANS_PREC (10) followed by nb raw bits (value
** bits): the decoder reads them in one step. */
static inline void enc_sym(uint64_t *x, uint32_t f, uint32_t start, uint32_t nb, uint64_t bits, wbuf *b) {
  uint64_t xmax = (uint64_t)f << (63 - DC_RANS_PREC - nb);
  if (*x >= xmax) { put_word(b, (uint32_t)*x); *x >>= 32; }
  uint64_t y = *x << nb | bits;
  *x = ((y / f) << DC_RANS_PREC) + (y % f) + start;
}
/* nb raw bits alone (nb <= 31) */
static inline void enc_raw(uint64_t *x, uint32_t nb, uint64_t bits, wbuf *b) {
  if (!nb) return;
  uint64_t xmax = 1ull << (63 - nb);
  if (*x >= xmax) { put_word(b, (uint32_t)*x); *x >>= 32; }
  *x = *x << nb | bits;
}

/* Whether symbol (gap code, count code) takes the raw path. */
static inline int is_big(uint32_t gc, uint32_t cc) {
  return dc_rans_is_big(gc, cc);
}

#define DC_RANS_LANES 32u    /* four groups of 8 for the AVX-512 decoder */

int dc_rans_encode_chunk(const dc_chunk_in *c, int level, const void *model, dc_buf *out, dc_error *err) {
  (void)level;
  const enc_model *em = model;
  const dc_rans_model *m = &em->m;
  uint64_t nnz = c->nnz, base = c->indptr[0];
  nz_sym *z = NULL;
  wbuf wbs[DC_RANS_MAXLANES];
  memset(wbs, 0, sizeof wbs);
  int rc = DC_ENOMEM;
  uint32_t nl = c->n_cells < DC_RANS_LANES ? c->n_cells : DC_RANS_LANES;
  uint32_t lane_cell[DC_RANS_MAXLANES + 1];
  uint64_t lane_off[DC_RANS_MAXLANES + 1], x[DC_RANS_MAXLANES];

  z = malloc((nnz ? nnz : 1) * sizeof *z);
  if (!z) goto done;
  /* symbols in nonzero order; escapes where the model has none */
  for (uint32_t i = 0; i < c->n_cells; i++) {
    uint64_t s = c->indptr[i], t = c->indptr[i + 1];
    uint32_t b = dc_nnz_bucket(m, t - s);
    int64_t prev = -1;
    for (uint64_t j = s; j < t; j++) {
      sym_of(m, b, prev, c->indices[j], c->data[j], &z[j - base]);
      prev = c->indices[j];
    }
  }
  /* lanes: consecutive cells, balanced by nonzeros */
  lane_cell[0] = 0;
  lane_cell[nl] = c->n_cells;
  for (uint32_t k = 1; k < nl; k++) {
    uint64_t target = base + nnz * k / nl;
    uint32_t lo = lane_cell[k - 1] + 1, hi = c->n_cells - (nl - k);
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (c->indptr[mid] >= target) hi = mid; else lo = mid + 1;
    }
    lane_cell[k] = lo;
  }
  uint64_t maxT = 0;
  for (uint32_t k = 0; k <= nl; k++) lane_off[k] = c->indptr[lane_cell[k]] - base;
  for (uint32_t k = 0; k < nl; k++) {
    x[k] = DC_RANS_L;
    if (lane_off[k + 1] - lane_off[k] > maxT) maxT = lane_off[k + 1] - lane_off[k];
  }
  /* reverse lockstep: step t of lane l decodes nonzero lane_off[l] + t;
  ** the decoder does all lanes' main steps (lane order), then the raw steps
  ** of the lanes with big symbols (lane order) */
  for (uint64_t t = maxT; t-- > 0;) {
    for (uint32_t l = nl; l-- > 0;) {
      if (t >= lane_off[l + 1] - lane_off[l]) continue;
      const nz_sym *s = &z[lane_off[l] + t];
      uint32_t e = em->tab[(size_t)s->ctx * NSYMIX + cix(s->sid)];
      uint32_t gc = s->sid >> 7, cc = s->sid & 127;
      if (!e || is_big(gc, cc)) {
        enc_raw(&x[l], dc_vbits(cc), s->cx, &wbs[l]);
        enc_raw(&x[l], dc_vbits(gc), s->gx, &wbs[l]);
        if (!e) enc_raw(&x[l], 14, s->sid, &wbs[l]);
      }
    }
    for (uint32_t l = nl; l-- > 0;) {
      if (t >= lane_off[l + 1] - lane_off[l]) continue;
      const nz_sym *s = &z[lane_off[l] + t];
      uint32_t e = em->tab[(size_t)s->ctx * NSYMIX + cix(s->sid)];
      uint32_t gc = s->sid >> 7, cc = s->sid & 127;
      if (!e) e = em->tab[(size_t)s->ctx * NSYMIX + cix(DC_RANS_ESC)];
      if (!e) {
        dc_error_set(err, DC_EARG, "encode: symbol outside the tile's model");   /* cannot happen */
        rc = DC_EARG;
        goto done;
      }
      if (is_big(gc, cc) || em->tab[(size_t)s->ctx * NSYMIX + cix(s->sid)] == 0)
        enc_sym(&x[l], e & 0xfff, e >> 12, 0, 0, &wbs[l]);
      else
        enc_sym(&x[l], e & 0xfff, e >> 12, dc_vbits(gc) + dc_vbits(cc),
                (uint64_t)s->gx | (uint64_t)s->cx << dc_vbits(gc), &wbs[l]);
    }
  }
  for (uint32_t l = 0; l < nl; l++)
    if (wbs[l].oom) goto done;
  /* payload */
  dc_buf_put(out, (uint8_t[]){(uint8_t)nl}, 1);
  for (uint32_t i = 0; i < c->n_cells; i++) dc_buf_varint(out, c->indptr[i + 1] - c->indptr[i]);
  for (uint32_t k = 1; k < nl; k++) dc_buf_varint(out, lane_cell[k] - lane_cell[k - 1]);
  for (uint32_t k = 0; k + 1 < nl; k++) dc_buf_varint(out, wbs[k].n);
  for (uint32_t k = 0; k < nl; k++) {
    uint8_t b8[8];
    dc_wr64(b8, x[k]);
    dc_buf_put(out, b8, 8);
  }
  for (uint32_t l = 0; l < nl; l++) {
    if (dc_buf_reserve(out, wbs[l].n * 4)) goto done;
    for (size_t i = wbs[l].n; i-- > 0;) {
      dc_wr32(out->p + out->len, wbs[l].w[i]);
      out->len += 4;
    }
  }
  rc = out->oom ? DC_ENOMEM : DC_OK;
done:
  if (rc == DC_ENOMEM) dc_error_set(err, rc, "encode: out of memory in the rans encoder");
  free(z);
  for (uint32_t l = 0; l < DC_RANS_MAXLANES; l++) free(wbs[l].w);
  return rc;
}
