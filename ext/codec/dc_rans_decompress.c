/*
** dc_rans_decompress.c — decoder of the rANS codec.  The tile's shared
** section (the model) is parsed and validated into decoding tables once and
** cached in the dc_decoder (keyed by its bytes); chunks are then decoded lane
** by lane in lockstep straight into the caller's buffers.  See dc_rans.h.
**
** Safety: every length is checked before use; the tables are validated
** (frequencies sum to 2^11, no zero frequency, codes in range); the hot loop
** runs over blocks of steps for which the word stream is known to be long
** enough, the rest with a check per read; every loop is bounded by the
** nonzero counts of the header; gene indices are checked before returning.
*/
#include "dc_rans.h"

#include <stdlib.h>
#include <zstd.h>

/* A decoding table entry (one load per nonzero):
**   bits  0..10  frequency - 1         bits 11..21  slot - start of the symbol
**   bits 22..26  extra bits carried by the step (31: big symbol, raw steps follow)
**   bits 27..31  extra bits of the gap (the rest are the count's)
**   bits 32..47  gap base              bits 48..63  count base
** For a big symbol bits 32..38 hold the gap code, 39..45 the count code, bit 46
** marks the escape (codes follow raw) and bit 47 an unused context. */
#define E_BIG      31u
#define E_ESC      (1ull << 46)
#define E_UNUSED   (1ull << 47)

typedef struct rans_state {
  uint8_t *key;               /* the shared section these tables were built from */
  size_t key_len;
  dc_rans_model m;
  uint64_t *dtab;             /* n_ctx x 2^11 entries */
} rans_state;

void dc_rans_decoder_free(void *state) {
  rans_state *s = state;
  if (!s) return;
  free(s->key);
  free(s->dtab);
  free(s);
}

#define CORRUPT(...) do { dc_error_set(err, DC_ECORRUPT, __VA_ARGS__); return DC_ECORRUPT; } while (0)

/* Parses the shared section into s (tables).  c = chunk, for messages. */
static int build_tables(dc_decoder *d, rans_state *s, const uint8_t *sh, size_t sh_len, uint32_t c,
                        dc_error *err) {
  const uint8_t *end = sh + sh_len;
  uint64_t raw_len;
  size_t k = dc_get_varint(sh, end, &raw_len);
  if (!k) CORRUPT("chunk %u: rans tables: truncated", c);
  sh += k;
  if (raw_len > (64u << 20)) CORRUPT("chunk %u: rans tables: %llu bytes", c, (unsigned long long)raw_len);
  unsigned long long fcs = ZSTD_getFrameContentSize(sh, (size_t)(end - sh));
  if (fcs != raw_len) CORRUPT("chunk %u: rans tables: bad zstd frame", c);
  uint8_t *raw = malloc(raw_len ? raw_len : 1);
  if (!raw) {
    dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory for rans tables", c);
    return DC_ENOMEM;
  }
  if (!d->zstd_dctx) d->zstd_dctx = ZSTD_createDCtx();
  size_t z = d->zstd_dctx ? ZSTD_decompressDCtx(d->zstd_dctx, raw, raw_len, sh, (size_t)(end - sh)) : 0;
  int rc = DC_ECORRUPT;
  const char *why = "bad zstd frame";
  if (!d->zstd_dctx) { rc = DC_ENOMEM; why = "out of memory"; goto fail; }
  if (ZSTD_isError(z) || z != raw_len) goto fail;
  const uint8_t *p = raw, *pe = raw + raw_len;
  why = "truncated";
  if (pe - p < 3) goto fail;
  why = "unknown model version";
  if (p[0] != DC_RANS_MODEL_VERSION) goto fail;
  dc_rans_model *m = &s->m;
  m->nb = p[1];
  m->nrc = p[2];
  p += 3;
  why = "bad context counts";
  if (m->nb < 1 || m->nb > DC_RANS_MAXNB || m->nrc < 1 || m->nrc > DC_RANS_MAXRC) goto fail;
  m->n_ctx = m->nb * m->nrc;
  for (uint32_t b = 0; b + 1 < m->nb; b++) {
    uint64_t v;
    why = "truncated";
    if (!(k = dc_get_varint(p, pe, &v))) goto fail;
    p += k;
    why = "bad cell-size buckets";
    if (v > UINT32_MAX || (b && v <= m->nb_lim[b - 1])) goto fail;
    m->nb_lim[b] = (uint32_t)v;
  }
  m->nb_lim[m->nb - 1] = UINT32_MAX;
  free(s->dtab);
  s->dtab = malloc((size_t)m->n_ctx * DC_RANS_M * sizeof *s->dtab);
  if (!s->dtab) { rc = DC_ENOMEM; why = "out of memory"; goto fail; }
  for (uint32_t x = 0; x < m->n_ctx; x++) {
    uint64_t n;
    why = "truncated";
    if (!(k = dc_get_varint(p, pe, &n))) goto fail;
    p += k;
    why = "too many symbols in a context";
    if (n > DC_RANS_MAXSYM) goto fail;
    uint64_t *dt = s->dtab + (size_t)x * DC_RANS_M;
    if (n == 0) {            /* unused context: any use of it is corruption */
      for (uint32_t i = 0; i < DC_RANS_M; i++) dt[i] = (uint64_t)E_BIG << 22 | E_UNUSED;
      continue;
    }
    uint32_t start = 0;
    int64_t prev = -1;
    for (uint32_t i = 0; i < n; i++) {
      uint64_t dv, fv;
      why = "truncated";
      if (!(k = dc_get_varint(p, pe, &dv))) goto fail;
      p += k;
      if (!(k = dc_get_varint(p, pe, &fv))) goto fail;
      p += k;
      why = "bad symbol";
      if (dv >= (1u << 14) || prev + 1 + (int64_t)dv >= (1 << 14)) goto fail;
      uint32_t id = (uint32_t)(prev + 1 + (int64_t)dv);
      prev = id;
      uint32_t gc = id >> 7, cc = id & 127;
      int esc = id == DC_RANS_ESC;
      if (!esc && (gc > 63 || cc >= DC_RANS_NCODES)) goto fail;
      why = "frequencies do not sum to 2^11";
      if (fv >= DC_RANS_M || start + fv + 1 > DC_RANS_M) goto fail;
      uint32_t f = (uint32_t)fv + 1;
      uint64_t hi;
      if (esc || dc_rans_is_big(gc, cc)) {
        hi = (uint64_t)E_BIG << 22 | (uint64_t)(esc ? 0 : gc) << 32 | (uint64_t)(esc ? 0 : cc) << 39 |
             (esc ? E_ESC : 0);
      } else {
        uint32_t gnb = dc_vbits(gc), cnb = dc_vbits(cc);
        hi = (uint64_t)(gnb + cnb) << 22 | (uint64_t)gnb << 27 | dc_vbase(gc) << 32 | dc_vbase(cc) << 48;
      }
      for (uint32_t j = 0; j < f; j++) dt[start + j] = hi | (f - 1) | (uint64_t)j << 11;
      start += f;
    }
    why = "frequencies do not sum to 2^11";
    if (start != DC_RANS_M) goto fail;
  }
  why = "trailing bytes";
  if (p != pe) goto fail;
  free(raw);
  return DC_OK;
fail:
  free(raw);
  free(s->key);
  s->key = NULL;
  s->key_len = 0;
  dc_error_set(err, rc, "chunk %u: rans tables: %s", c, why);
  return rc;
}

/* Returns the decoding tables of shared section sh (cached in d). */
static int get_tables(dc_decoder *d, const uint8_t *sh, size_t sh_len, uint32_t c, rans_state **out,
                      dc_error *err) {
  rans_state *s = d->rans;
  if (!s) {
    s = d->rans = calloc(1, sizeof *s);
    if (!s) {
      dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory", c);
      return DC_ENOMEM;
    }
  }
  if (s->key && s->key_len == sh_len && memcmp(s->key, sh, sh_len) == 0) {
    *out = s;
    return DC_OK;
  }
  free(s->key);
  s->key = malloc(sh_len ? sh_len : 1);
  s->key_len = sh_len;
  if (!s->key) {
    dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory", c);
    return DC_ENOMEM;
  }
  memcpy(s->key, sh, sh_len);
  int rc = build_tables(d, s, sh, sh_len, c, err);
  if (rc) return rc;
  *out = s;
  return DC_OK;
}

/* ------------------------------------------------------------ chunk */
typedef struct lane {
  uint64_t x;
  const uint8_t *p, *pe; /* the lane's word stream */
  int64_t prev;          /* previous gene of the cell, -1 at its start */
  uint64_t left;         /* nonzeros left in the current cell */
  uint32_t cell;         /* next cell (chunk-relative) */
  const uint64_t *T;     /* tables of the current cell's size bucket */
  uint64_t pos;          /* next output position (chunk-relative) */
  uint64_t end;          /* end of the lane's nonzeros */
} lane;

typedef struct chunk_ctx {
  const rans_state *s;
  const uint32_t *cnnz;  /* per-cell nonzeros */
  uint32_t n_cells;
  int32_t *idx;
  int32_t *vi;
  float *vf;
  uint64_t bad;          /* nonzero if a gene index went out of range */
} chunk_ctx;

/* Starts the lane's next nonempty cell (its nonzero total guarantees one). */
static __attribute__((noinline)) void next_cell(const chunk_ctx *k, lane *L) {
  while (k->cnnz[L->cell] == 0) L->cell++;
  uint64_t n = k->cnnz[L->cell];
  L->left = n;
  L->prev = -1;
  L->T = k->s->dtab + (size_t)dc_nnz_bucket(&k->s->m, n) * k->s->m.nrc * DC_RANS_M;
  L->cell++;
}

/* Raw bits with a checked renormalisation: returns -1 past the stream end. */
static inline int raw_bits(lane *L, uint32_t nb, uint64_t *bits) {
  if (!nb) { *bits = 0; return 0; }
  *bits = L->x & ((1ull << nb) - 1);
  L->x >>= nb;
  if (L->x < DC_RANS_L) {
    if (L->pe - L->p < 4) return -1;
    L->x = L->x << 32 | dc_rd32(L->p);
    L->p += 4;
  }
  return 0;
}

static inline void put(chunk_ctx *k, lane *L, uint64_t gap, uint64_t cnt, int f32) {
  int64_t i = L->prev + 1 + (int64_t)gap;
  k->bad |= (uint64_t)i >> 31;
  L->prev = i;
  k->idx[L->pos] = (int32_t)i;
  if (f32) k->vf[L->pos] = (float)cnt; else k->vi[L->pos] = (int32_t)(uint32_t)cnt;
  L->pos++;
}

/* The raw steps of a big symbol (entry e), after every lane's main step. */
static __attribute__((noinline)) int big_steps(chunk_ctx *k, lane *L, uint64_t e, int f32) {
  uint32_t gc, cc;
  uint64_t v, gx, cx;
  if (e & E_UNUSED) return -1;
  if (e & E_ESC) {                            /* escape: the codes follow */
    if (raw_bits(L, 14, &v)) return -1;
    gc = (uint32_t)(v >> 7);
    cc = (uint32_t)(v & 127);
    if (gc > 63 || cc >= DC_RANS_NCODES) return -1;
  } else {
    gc = (uint32_t)(e >> 32) & 127;
    cc = (uint32_t)(e >> 39) & 127;
  }
  if (raw_bits(L, dc_vbits(gc), &gx) || raw_bits(L, dc_vbits(cc), &cx)) return -1;
  put(k, L, dc_vbase(gc) + gx, dc_vbase(cc) + cx, f32);
  return 0;
}

/* One main step of lane L.  Returns the entry of a big symbol (whose raw
** steps the caller runs after all lanes' main steps), else 0 after writing
** the nonzero.  checked: renormalise with a bound check (returns 1 when the
** stream is short: never a valid entry, as entries of big symbols have
** E_BIG set in bits 22..26). */
static inline __attribute__((always_inline)) uint64_t main_step(chunk_ctx *k, lane *L, uint32_t nrc, int f32,
                                                               int checked) {
  if (__builtin_expect(L->left == 0, 0)) next_cell(k, L);
  L->left--;
  uint64_t r = (uint64_t)(L->prev + 1);
  uint32_t rc = r < 8 ? (uint32_t)r : dc_rcode(r, nrc);
  uint64_t x = L->x;
  uint64_t e = L->T[(size_t)rc * DC_RANS_M + (x & (DC_RANS_M - 1))];
  x = ((e & 0x7ff) + 1) * (x >> DC_RANS_PREC) + ((e >> 11) & 0x7ff);
  uint32_t nbt = (uint32_t)(e >> 22) & 31;
  if (__builtin_expect(nbt == E_BIG, 0)) nbt = 0;
  uint64_t bits = x & ((1ull << nbt) - 1);
  x >>= nbt;
  if (checked) {
    if (x < DC_RANS_L) {
      if (L->pe - L->p < 4) { L->x = x; return 1; }
      x = x << 32 | dc_rd32(L->p);
      L->p += 4;
    }
  } else {
    /* branch-free: the renormalisation is taken about half the time */
    uint64_t w = dc_rd32(L->p);
    uint64_t need = x < DC_RANS_L;
    x = (x << (need << 5)) | (w & (0 - need));
    L->p += need << 2;
  }
  L->x = x;
  if (__builtin_expect(((e >> 22) & 31) == E_BIG, 0)) return e;
  uint32_t gnb = (uint32_t)(e >> 27) & 31;
  uint64_t gap = ((e >> 32) & 0xffff) + (bits & ((1ull << gnb) - 1));
  uint64_t cnt = (e >> 48) + (bits >> gnb);
  int64_t i = L->prev + 1 + (int64_t)gap;
  L->prev = i;
  k->idx[L->pos] = (int32_t)i;
  if (f32) k->vf[L->pos] = (float)cnt; else k->vi[L->pos] = (int32_t)(uint32_t)cnt;
  L->pos++;
  return 0;
}

#define HOT_B 64u

/* Lockstep decoding of nl lanes.  NL > 0: a compile-time lane count. */
static inline __attribute__((always_inline)) int decode_lanes_t(chunk_ctx *k, lane *ln, uint32_t nl, int f32,
                                                              const uint32_t NL) {
  if (NL) nl = NL;
  const uint32_t nrc = k->s->m.nrc;
  uint64_t minT = UINT64_MAX, maxT = 0;
  for (uint32_t l = 0; l < nl; l++) {
    uint64_t T = ln[l].end - ln[l].pos;
    if (T < minT) minT = T;
    if (T > maxT) maxT = T;
  }
  uint64_t big[DC_RANS_MAXLANES];
  uint64_t t = 0;
  /* hot blocks: every lane active, and holding a word for each step */
  for (;;) {
    if (t + HOT_B > minT) break;
    int room = 1;
    for (uint32_t l = 0; l < nl; l++) room &= (uint64_t)(ln[l].pe - ln[l].p) >= HOT_B * 4;
    if (!room) break;
    lane L[DC_RANS_MAXLANES];
    memcpy(L, ln, nl * sizeof *L);
    uint64_t u = 0;
    for (; u < HOT_B; u++) {
      uint64_t any = 0;
      if (NL == 8) {
#define DC_STEP(l) big[l] = main_step(k, &L[l], nrc, f32, 0); any |= big[l];
        DC_STEP(0) DC_STEP(1) DC_STEP(2) DC_STEP(3) DC_STEP(4) DC_STEP(5) DC_STEP(6) DC_STEP(7)
#undef DC_STEP
      } else {
        for (uint32_t l = 0; l < nl; l++) {
          big[l] = main_step(k, &L[l], nrc, f32, 0);
          any |= big[l];
        }
      }
      if (__builtin_expect(any != 0, 0)) {
        int short_ = 0;
        for (uint32_t l = 0; l < nl; l++) {
          if (big[l] && big_steps(k, &L[l], big[l], f32)) { memcpy(ln, L, nl * sizeof *L); return -1; }
          short_ |= (uint64_t)(L[l].pe - L[l].p) < (HOT_B - u) * 4;
        }
        if (short_) { u++; break; }
      }
    }
    memcpy(ln, L, nl * sizeof *L);
    t += u;
    if (u < HOT_B) break;
  }
  for (; t < maxT; t++) {
    for (uint32_t l = 0; l < nl; l++) {
      big[l] = 0;
      if (ln[l].pos < ln[l].end) {
        big[l] = main_step(k, &ln[l], nrc, f32, 1);
        if (big[l] == 1) return -1;
      }
    }
    for (uint32_t l = 0; l < nl; l++)
      if (big[l] && big_steps(k, &ln[l], big[l], f32)) return -1;
  }
  return 0;
}

static int decode_lanes(chunk_ctx *k, lane *ln, uint32_t nl, int f32, uint32_t c, dc_error *err) {
  int r;
  if (nl == 8) r = f32 ? decode_lanes_t(k, ln, nl, 1, 8) : decode_lanes_t(k, ln, nl, 0, 8);
  else r = f32 ? decode_lanes_t(k, ln, nl, 1, 0) : decode_lanes_t(k, ln, nl, 0, 0);
  if (r) CORRUPT("chunk %u: rans stream is corrupt or truncated", c);
  return DC_OK;
}

int dc_rans_decode_chunk(dc_decoder *d, const uint8_t *shared, size_t shared_len,
                         const uint8_t *p, size_t len,
                         const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err) {
  const dc_chunk_info *ci = &h->chunk[c];
  if (h->shared_checksum != dc_checksum(shared, shared_len))
    CORRUPT("chunk %u: rans tables: checksum mismatch", c);
  rans_state *s;
  int rc = get_tables(d, shared, shared_len, c, &s, err);
  if (rc) return rc;
  const uint8_t *pe = p + len;
  if (len < 1) CORRUPT("chunk %u: truncated payload", c);
  uint32_t nl = *p++;
  if (nl < 1 || nl > DC_RANS_MAXLANES || nl > ci->n_cells)
    CORRUPT("chunk %u: %u lanes for %u cells", c, nl, ci->n_cells);
  /* per-cell nonzeros -> indptr (and kept for the lanes) */
  rc = dc_decoder_scratch(d, (size_t)ci->n_cells * sizeof(uint32_t), err);
  if (rc) return rc;
  uint32_t *cnnz = (uint32_t *)d->scratch;
  int64_t *indptr = out->indptr + ci->first_cell;
  uint64_t sum = 0;
  dc_indptr_edge(&indptr[0], (int64_t)ci->nnz_before);
  for (uint32_t i = 0; i < ci->n_cells; i++) {
    uint64_t v;
    size_t k = dc_get_varint(p, pe, &v);
    if (!k) CORRUPT("chunk %u: truncated cell sizes", c);
    p += k;
    if (v > h->n_genes || v > ci->nnz - sum)
      CORRUPT("chunk %u: cell %u has %llu nonzeros (%u genes, %llu left in the chunk)", c,
              ci->first_cell + i, (unsigned long long)v, h->n_genes, (unsigned long long)(ci->nnz - sum));
    cnnz[i] = (uint32_t)v;
    sum += v;
    if (i + 1 < ci->n_cells) indptr[i + 1] = (int64_t)(ci->nnz_before + sum);
  }
  if (sum != ci->nnz)
    CORRUPT("chunk %u: cells hold %llu nonzeros, header says %llu", c, (unsigned long long)sum,
            (unsigned long long)ci->nnz);
  dc_indptr_edge(&indptr[ci->n_cells], (int64_t)(ci->nnz_before + sum));
  /* lanes */
  lane ln[DC_RANS_MAXLANES];
  uint32_t cell = 0;
  uint64_t pos = 0;
  for (uint32_t l = 0; l < nl; l++) {
    uint64_t n = ci->n_cells - cell - (nl - 1 - l);   /* last lane: the rest */
    if (l + 1 < nl) {
      size_t k = dc_get_varint(p, pe, &n);
      if (!k) CORRUPT("chunk %u: truncated lane table", c);
      p += k;
      if (n < 1 || n > ci->n_cells - cell - (nl - 1 - l)) CORRUPT("chunk %u: bad lane table", c);
    }
    ln[l].cell = cell;
    ln[l].pos = pos;
    for (uint64_t i = 0; i < n; i++) pos += cnnz[cell + i];
    ln[l].end = pos;
    ln[l].left = 0;
    ln[l].prev = -1;
    ln[l].T = s->dtab;
    cell += (uint32_t)n;
  }
  uint64_t wl[DC_RANS_MAXLANES], wsum = 0;
  for (uint32_t l = 0; l + 1 < nl; l++) {
    size_t k = dc_get_varint(p, pe, &wl[l]);
    if (!k) CORRUPT("chunk %u: truncated lane table", c);
    p += k;
    if (wl[l] > (uint64_t)(pe - p) / 4) CORRUPT("chunk %u: bad lane stream length", c);
    wsum += wl[l];
  }
  if ((size_t)(pe - p) < 8ull * nl) CORRUPT("chunk %u: truncated lane states", c);
  for (uint32_t l = 0; l < nl; l++, p += 8) {
    ln[l].x = dc_rd64(p);
    if (ln[l].x < DC_RANS_L || ln[l].x >> 63) CORRUPT("chunk %u: bad lane state", c);
  }
  if ((pe - p) % 4 || wsum > (uint64_t)(pe - p) / 4)
    CORRUPT("chunk %u: word streams of %zu bytes", c, (size_t)(pe - p));
  wl[nl - 1] = (uint64_t)(pe - p) / 4 - wsum;
  for (uint32_t l = 0; l < nl; l++) {
    ln[l].p = p;
    p += wl[l] * 4;
    ln[l].pe = p;
  }
  chunk_ctx k = {s, cnnz, ci->n_cells, out->indices + ci->nnz_before, NULL, NULL, 0};
  if (out->values_f32) k.vf = (float *)out->values + ci->nnz_before;
  else k.vi = (int32_t *)out->values + ci->nnz_before;
  rc = out->values_f32 ? decode_lanes(&k, ln, nl, 1, c, err) : decode_lanes(&k, ln, nl, 0, c, err);
  if (rc) return rc;
  for (uint32_t l = 0; l < nl; l++) {
    if (ln[l].p != ln[l].pe) CORRUPT("chunk %u: lane %u: %zu bytes left in its stream", c, l, (size_t)(ln[l].pe - ln[l].p));
    if (ln[l].x != DC_RANS_L) CORRUPT("chunk %u: lane %u ends in a wrong state", c, l);
  }
  if (k.bad) CORRUPT("chunk %u: gene index out of range", c);
  /* indices are strictly increasing within a cell, so checking each cell's
  ** last one against n_genes checks them all */
  const int32_t *ix = out->indices + ci->nnz_before;
  uint64_t o = 0;
  for (uint32_t i = 0; i < ci->n_cells; i++) {
    o += cnnz[i];
    if (cnnz[i] && (uint32_t)ix[o - 1] >= h->n_genes)
      CORRUPT("chunk %u: cell %u: gene index %u out of range (%u genes)", c, ci->first_cell + i,
              (uint32_t)ix[o - 1], h->n_genes);
  }
  return DC_OK;
}
