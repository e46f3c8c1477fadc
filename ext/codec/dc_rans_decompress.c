/*
** dc_rans_decompress.c — decoder of the rANS codec.  The tile's shared
** section (the model) is parsed and validated into decoding tables once and
** cached in the dc_decoder (keyed by its bytes); chunks are then decoded lane
** by lane in lockstep straight into the caller's buffers.  See dc_rans.h.
**
** Safety: every length is checked before use; the tables are validated
** (frequencies sum to 2^10 = DC_RANS_M, no zero frequency, codes in range); the hot loop
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
  uint64_t *dtab;             /* n_ctx x 2^10 (DC_RANS_M) entries */
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
  size_t raw_len, k;
  const char *why;
  uint8_t *raw = dc_unpack_shared(d, sh, sh_len, 64u << 20, c, &raw_len, err);
  if (!raw) return err->code;
  int rc = DC_ECORRUPT;
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
      why = "frequencies do not sum to 2^10";
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
    why = "frequencies do not sum to 2^10";
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
  if (rc) {                      /* forget the key: the tables are not valid */
    free(s->key);
    s->key = NULL;
    s->key_len = 0;
    return rc;
  }
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
  int64_t n_genes;
} chunk_ctx;

/* Starts the lane's next nonempty cell (its nonzero total guarantees one). */
static __attribute__((noinline)) void next_cell(chunk_ctx *k, lane *L) {
  /* indices rise within a cell: the last one of the cell ending bounds them all */
  k->bad |= L->prev >= k->n_genes;
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
  rc = rc < nrc ? rc : nrc - 1;          /* corrupt data may run past the genes */
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

#if defined(__x86_64__) && defined(__GNUC__) && !defined(DC_NO_SIMD)
/* ------------------------------------------------------------ AVX-512
** The lockstep decoder with 8 lanes per 512-bit register (groups of 8), for
** the stretches where every lane is active, inside one cell, and holds at
** least one word per step: it gathers the table entries and the
** renormalisation words, and scatters the nonzeros to their lanes' places.
** Big symbols and cell changes go through the scalar code above. */
#include <immintrin.h>
#define DC_AVX512 __attribute__((target("avx512f,avx512dq,avx512cd,avx512vl,avx512bw")))
#define DC_HAVE_SIMD 1

/* The CPU has AVX-512 (F, DQ, CD, VL, BW) and DC_NO_SIMD is not set in the
** environment (tests use it to check the scalar path against the SIMD one). */
static int simd_ok(void) { return dc_simd_level() == DC_SIMD_AVX512; }

/* Stores rows b[0..7][c..c+7] (step r, lane c+i) transposed: lane i gets its 8
** consecutive values at out[pos[i] + j0 ...]. */
DC_AVX512 static inline void transpose8_store(uint32_t b[8][32], uint32_t c, uint32_t *out, const uint64_t *pos,
                                              uint64_t j0) {
  __m256 r0 = _mm256_load_ps((const float *)&b[0][c]), r1 = _mm256_load_ps((const float *)&b[1][c]);
  __m256 r2 = _mm256_load_ps((const float *)&b[2][c]), r3 = _mm256_load_ps((const float *)&b[3][c]);
  __m256 r4 = _mm256_load_ps((const float *)&b[4][c]), r5 = _mm256_load_ps((const float *)&b[5][c]);
  __m256 r6 = _mm256_load_ps((const float *)&b[6][c]), r7 = _mm256_load_ps((const float *)&b[7][c]);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps((float *)(out + pos[0] + j0), _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps((float *)(out + pos[1] + j0), _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps((float *)(out + pos[2] + j0), _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps((float *)(out + pos[3] + j0), _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps((float *)(out + pos[4] + j0), _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps((float *)(out + pos[5] + j0), _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps((float *)(out + pos[6] + j0), _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps((float *)(out + pos[7] + j0), _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* Runs blocks for nl = 8*G lanes (G = 1..4).  Returns 0, or -1 if corrupt. */
DC_AVX512 static inline __attribute__((always_inline)) int simd_lanes_t(chunk_ctx *k, lane *ln, const uint32_t G, const int f32) {
  const uint32_t nl = 8 * G;
  const uint32_t nrc = k->s->m.nrc;
  const uint8_t *base = ln[0].p;        /* all streams lie after lane 0's start */
  const __m512i one = _mm512_set1_epi64(1), m11 = _mm512_set1_epi64(0x7ff), m5 = _mm512_set1_epi64(31),
                m16 = _mm512_set1_epi64(0xffff), mslot = _mm512_set1_epi64(DC_RANS_M - 1),
                four = _mm512_set1_epi64(4), seven = _mm512_set1_epi64(7), c63 = _mm512_set1_epi64(63),
                lim = _mm512_set1_epi64((long long)DC_RANS_L), rcmax = _mm512_set1_epi64(nrc - 1),
                big31 = _mm512_set1_epi64(E_BIG);
  const uint64_t *dtab = k->s->dtab;
  uint64_t minT = UINT64_MAX;
  for (uint32_t l = 0; l < nl; l++)
    if (ln[l].end - ln[l].pos < minT) minT = ln[l].end - ln[l].pos;
  uint64_t t = 0;
  __attribute__((aligned(64))) uint64_t ax[32], ap[32], aprev[32], atb[32], apos[32], ae[32], aleft[32];
  __attribute__((aligned(64))) uint32_t bi[8][32], bv[8][32];
  for (;;) {
    if (t >= minT) break;
    uint64_t n = minT - t;
    for (uint32_t l = 0; l < nl; l++) {
      if (ln[l].left == 0) next_cell(k, &ln[l]);
      uint64_t w = (uint64_t)(ln[l].pe - ln[l].p) / 4;
      if (w < n) n = w;
    }
    if (n == 0) break;
    for (uint32_t l = 0; l < nl; l++) {
      ax[l] = ln[l].x;
      ap[l] = (uint64_t)(ln[l].p - base);
      aprev[l] = (uint64_t)ln[l].prev;
      atb[l] = (uint64_t)(ln[l].T - dtab);
      apos[l] = ln[l].pos;
      aleft[l] = ln[l].left;
    }
    __m512i x[4], p[4], prev[4], tb[4], pos[4], left[4];
    for (uint32_t g = 0; g < G; g++) {
      x[g] = _mm512_load_si512(ax + 8 * g);
      p[g] = _mm512_load_si512(ap + 8 * g);
      prev[g] = _mm512_load_si512(aprev + 8 * g);
      tb[g] = _mm512_load_si512(atb + 8 * g);
      pos[g] = _mm512_load_si512(apos + 8 * g);
      left[g] = _mm512_load_si512(aleft + 8 * g);
    }
    uint64_t j = 0;
    int stop = 0, buffered = 0;
    for (; j < n && !stop; j++) {
      __m512i E[4];
      __mmask8 big[4];
      if ((j & 7) == 0) buffered = n - j >= 8;
      for (uint32_t g = 0; g < G; g++) {
        __m512i r = _mm512_add_epi64(prev[g], one);
        __m512i e = _mm512_sub_epi64(c63, _mm512_lzcnt_epi64(r));
        __m512i sub = _mm512_and_si512(_mm512_srlv_epi64(r, _mm512_sub_epi64(e, one)), one);
        __m512i code = _mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(e, e), _mm512_set1_epi64(2)), sub);
        __mmask8 small = _mm512_cmple_epu64_mask(r, seven);
        __m512i rc = _mm512_min_epu64(_mm512_mask_mov_epi64(code, small, r), rcmax);
        __m512i ix = _mm512_add_epi64(_mm512_add_epi64(tb[g], _mm512_slli_epi64(rc, DC_RANS_PREC)),
                                      _mm512_and_si512(x[g], mslot));
        E[g] = _mm512_i64gather_epi64(ix, (const long long *)dtab, 8);
        __m512i f = _mm512_add_epi64(_mm512_and_si512(E[g], m11), one);
        __m512i bias = _mm512_and_si512(_mm512_srli_epi64(E[g], 11), m11);
        __m512i xx = _mm512_add_epi64(_mm512_mullo_epi64(f, _mm512_srli_epi64(x[g], DC_RANS_PREC)), bias);
        __m512i nbt = _mm512_and_si512(_mm512_srli_epi64(E[g], 22), m5);
        big[g] = _mm512_cmpeq_epu64_mask(nbt, big31);
        nbt = _mm512_maskz_mov_epi64((__mmask8)~big[g], nbt);
        __m512i bits = _mm512_and_si512(xx, _mm512_sub_epi64(_mm512_sllv_epi64(one, nbt), one));
        xx = _mm512_srlv_epi64(xx, nbt);
        __mmask8 need = _mm512_cmplt_epu64_mask(xx, lim);
        __m256i w = _mm512_mask_i64gather_epi32(_mm256_setzero_si256(), need, p[g], (const int *)base, 1);
        __m512i xs = _mm512_or_si512(_mm512_slli_epi64(xx, 32), _mm512_cvtepu32_epi64(w));
        x[g] = _mm512_mask_mov_epi64(xx, need, xs);
        p[g] = _mm512_mask_add_epi64(p[g], need, p[g], four);
        __m512i gnb = _mm512_and_si512(_mm512_srli_epi64(E[g], 27), m5);
        __m512i gap = _mm512_add_epi64(_mm512_and_si512(_mm512_srli_epi64(E[g], 32), m16),
                                       _mm512_and_si512(bits, _mm512_sub_epi64(_mm512_sllv_epi64(one, gnb), one)));
        __m512i cnt = _mm512_add_epi64(_mm512_srli_epi64(E[g], 48), _mm512_srlv_epi64(bits, gnb));
        __m512i np = _mm512_add_epi64(_mm512_add_epi64(prev[g], one), gap);
        __mmask8 ok = (__mmask8)~big[g];
        prev[g] = _mm512_mask_mov_epi64(prev[g], ok, np);
        if (buffered) {           /* rows of 8 steps, transposed into place below */
          _mm256_store_si256((__m256i *)&bi[j & 7][8 * g], _mm512_cvtepi64_epi32(np));
          if (f32) _mm256_store_ps((float *)&bv[j & 7][8 * g], _mm512_cvtepu64_ps(cnt));
          else _mm256_store_si256((__m256i *)&bv[j & 7][8 * g], _mm512_cvtepi64_epi32(cnt));
        } else {
          _mm512_mask_i64scatter_epi32(k->idx, ok, pos[g], _mm512_cvtepi64_epi32(np), 4);
          if (f32) _mm512_mask_i64scatter_ps(k->vf, ok, pos[g], _mm512_cvtepu64_ps(cnt), 4);
          else _mm512_mask_i64scatter_epi32(k->vi, ok, pos[g], _mm512_cvtepi64_epi32(cnt), 4);
        }
      }
      uint32_t anybig = 0;
      for (uint32_t g = 0; g < G; g++) anybig |= big[g];
      if (__builtin_expect(anybig != 0, 0)) {
        /* raw steps of the big lanes, in lane order, on the scalar path */
        for (uint32_t g = 0; g < G; g++) {
          _mm512_store_si512(ax + 8 * g, x[g]);
          _mm512_store_si512(ap + 8 * g, p[g]);
          _mm512_store_si512(aprev + 8 * g, prev[g]);
          _mm512_store_si512(ae + 8 * g, E[g]);
        }
        for (uint32_t l = 0; l < nl; l++) {
          if (!((big[l / 8] >> (l % 8)) & 1)) continue;
          lane L = ln[l];
          L.x = ax[l];
          L.p = base + ap[l];
          L.prev = (int64_t)aprev[l];
          L.pos = apos[l] + j;
          if (big_steps(k, &L, ae[l], f32)) return -1;
          if (buffered) {
            bi[j & 7][l] = (uint32_t)k->idx[apos[l] + j];
            bv[j & 7][l] = f32 ? 0 : (uint32_t)k->vi[apos[l] + j];
            if (f32) memcpy(&bv[j & 7][l], &k->vf[apos[l] + j], 4);
          }
          ax[l] = L.x;
          ap[l] = (uint64_t)(L.p - base);
          aprev[l] = (uint64_t)L.prev;
        }
        for (uint32_t g = 0; g < G; g++) {
          x[g] = _mm512_load_si512(ax + 8 * g);
          p[g] = _mm512_load_si512(ap + 8 * g);
          prev[g] = _mm512_load_si512(aprev + 8 * g);
        }
        stop = 1;                 /* words were used: recheck the bounds */
      }
      /* lanes whose cell ended start their next cell (scalar) */
      uint32_t anyend = 0;
      __mmask8 ended[4];
      for (uint32_t g = 0; g < G; g++) {
        pos[g] = _mm512_add_epi64(pos[g], one);
        left[g] = _mm512_sub_epi64(left[g], one);
        ended[g] = _mm512_cmpeq_epu64_mask(left[g], _mm512_setzero_si512());
        anyend |= ended[g];
      }
      if (anyend && j + 1 < n && !stop) {
        for (uint32_t g = 0; g < G; g++) {
          _mm512_store_si512(aprev + 8 * g, prev[g]);
          _mm512_store_si512(atb + 8 * g, tb[g]);
          _mm512_store_si512(aleft + 8 * g, left[g]);
        }
        for (uint32_t l = 0; l < nl; l++) {
          if (!((ended[l / 8] >> (l % 8)) & 1)) continue;
          ln[l].prev = (int64_t)aprev[l];
          ln[l].left = 0;
          next_cell(k, &ln[l]);
          aprev[l] = (uint64_t)ln[l].prev;
          atb[l] = (uint64_t)(ln[l].T - dtab);
          aleft[l] = ln[l].left;
        }
        for (uint32_t g = 0; g < G; g++) {
          prev[g] = _mm512_load_si512(aprev + 8 * g);
          tb[g] = _mm512_load_si512(atb + 8 * g);
          left[g] = _mm512_load_si512(aleft + 8 * g);
        }
      }
      if (buffered && ((j & 7) == 7 || stop)) {
        uint32_t rows = (uint32_t)(j & 7) + 1;
        uint64_t j0 = j - (rows - 1);
        if (rows == 8) {
          for (uint32_t g = 0; g < G; g++) {
            transpose8_store(bi, 8 * g, (uint32_t *)k->idx, apos + 8 * g, j0);
            transpose8_store(bv, 8 * g, f32 ? (uint32_t *)k->vf : (uint32_t *)k->vi, apos + 8 * g, j0);
          }
        } else {
          for (uint32_t l = 0; l < nl; l++)
            for (uint32_t r = 0; r < rows; r++) {
              ((uint32_t *)k->idx)[apos[l] + j0 + r] = bi[r][l];
              (f32 ? (uint32_t *)k->vf : (uint32_t *)k->vi)[apos[l] + j0 + r] = bv[r][l];
            }
        }
      }
    }
    for (uint32_t g = 0; g < G; g++) {
      _mm512_store_si512(ax + 8 * g, x[g]);
      _mm512_store_si512(ap + 8 * g, p[g]);
      _mm512_store_si512(aprev + 8 * g, prev[g]);
    }
    for (uint32_t g = 0; g < G; g++) {
      _mm512_store_si512(atb + 8 * g, tb[g]);
      _mm512_store_si512(aleft + 8 * g, left[g]);
    }
    for (uint32_t l = 0; l < nl; l++) {
      ln[l].x = ax[l];
      ln[l].p = base + ap[l];
      ln[l].prev = (int64_t)aprev[l];
      ln[l].T = dtab + atb[l];
      ln[l].left = aleft[l];
      ln[l].pos += j;
    }
    t += j;
  }
  return 0;
}

DC_AVX512 static int simd_lanes(chunk_ctx *k, lane *ln, uint32_t G, int f32) {
  switch (G * 2 + (f32 != 0)) {
    case 2: return simd_lanes_t(k, ln, 1, 0);
    case 3: return simd_lanes_t(k, ln, 1, 1);
    case 4: return simd_lanes_t(k, ln, 2, 0);
    case 5: return simd_lanes_t(k, ln, 2, 1);
    case 6: return simd_lanes_t(k, ln, 3, 0);
    case 7: return simd_lanes_t(k, ln, 3, 1);
    case 8: return simd_lanes_t(k, ln, 4, 0);
    default: return simd_lanes_t(k, ln, 4, 1);
  }
}
#endif

static int decode_lanes(chunk_ctx *k, lane *ln, uint32_t nl, int f32, uint32_t c, dc_error *err) {
  int r;
#ifdef DC_HAVE_SIMD
  if (nl % 8 == 0 && nl <= 32 && simd_ok() && simd_lanes(k, ln, nl / 8, f32))
    CORRUPT("chunk %u: rans stream is corrupt or truncated", c);
#endif
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
  chunk_ctx k = {s, cnnz, ci->n_cells, out->indices + ci->nnz_before, NULL, NULL, 0, (int64_t)h->n_genes};
  if (out->values_f32) k.vf = (float *)out->values + ci->nnz_before;
  else k.vi = (int32_t *)out->values + ci->nnz_before;
  rc = out->values_f32 ? decode_lanes(&k, ln, nl, 1, c, err) : decode_lanes(&k, ln, nl, 0, c, err);
  if (rc) return rc;
  for (uint32_t l = 0; l < nl; l++) {
    if (ln[l].p != ln[l].pe) CORRUPT("chunk %u: lane %u: %zu bytes left in its stream", c, l, (size_t)(ln[l].pe - ln[l].p));
    if (ln[l].x != DC_RANS_L) CORRUPT("chunk %u: lane %u ends in a wrong state", c, l);
  }
  for (uint32_t l = 0; l < nl; l++) k.bad |= ln[l].prev >= k.n_genes;
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
