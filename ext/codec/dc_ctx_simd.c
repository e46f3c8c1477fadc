/*
** dc_ctx_simd.c — the AVX2 stream decoder of codec `rans` (id 3), chosen at
** run time by dc_simd_level() (dc_common.c) on CPUs with AVX2 or AVX-512.
** (An AVX-512 version with 16-lane registers was measured slower than this
** one on an AVX-512 CPU and removed: docs/codec-design.md.)  It decodes
** exactly what dc_ctx_stream_scalar (dc_ctx_stream.c) decodes: symbol i
** uses lane i mod 32 and the lanes of group g (8g .. 8g+7) that renormalise
** read group g's word stream in lane order.  It runs whole rounds of 32
** symbols while every group has 8 words left (a round reads at most 8 per
** group), then hands the states to the scalar tail, which checks every read.
**
** Four registers of 8 lanes; per register eight table loads (a vpgatherdd of
** 8 random entries measured slower than the loads and inserts), a
** multiply-add, and the renormalisation: the lanes below L take consecutive
** words of their group's stream, placed by a permutation looked up from the
** lane mask.
*/
#include "dc_ctx.h"

#ifdef DC_CTX_X86
#include <immintrin.h>
#include <pthread.h>

#define AVX2 __attribute__((target("avx2,popcnt")))

/* perm[m]: for lane i with bit i of m set, the index of its word among the
** set lanes (popcount of the lower bits); 0 elsewhere (blended away). */
static uint32_t perm[256][8] __attribute__((aligned(32)));
static pthread_once_t perm_once = PTHREAD_ONCE_INIT;
static void perm_init(void) {
  for (uint32_t m = 0; m < 256; m++) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < 8; i++) perm[m][i] = (m >> i & 1) ? k++ : 0;
  }
}

#define LOOKUP8(X, TAB) lookup8(TAB, _mm256_and_si256(X, m12))
AVX2 static inline __m256i lookup8(const uint32_t *tab, __m256i slot) {
  uint32_t t[8] __attribute__((aligned(32)));
  _mm256_store_si256((__m256i *)t, slot);
  return _mm256_setr_epi32((int)tab[t[0]], (int)tab[t[1]], (int)tab[t[2]], (int)tab[t[3]],
                           (int)tab[t[4]], (int)tab[t[5]], (int)tab[t[6]], (int)tab[t[7]]);
}

/* The state update of a step from its eight slot entries E (freq | bias << 12 | ...), and the
** renormalisation: the lanes below L take consecutive words of their group's stream W. */
#define AVX2_ADVANCE(X, E, W)                                                        \
  do {                                                                               \
    __m256i f_ = _mm256_and_si256(E, m12);                                           \
    __m256i b_ = _mm256_and_si256(_mm256_srli_epi32(E, 12), m12);                    \
    X = _mm256_add_epi32(_mm256_mullo_epi32(f_, _mm256_srli_epi32(X, 12)), b_);      \
    __m256i lt_ = _mm256_cmpeq_epi32(_mm256_srli_epi32(X, 16), zero);                \
    int k_ = _mm256_movemask_ps(_mm256_castsi256_ps(lt_));                           \
    __m256i w_ = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)W));         \
    w_ = _mm256_permutevar8x32_epi32(w_, _mm256_load_si256((const __m256i *)perm[k_])); \
    X = _mm256_blendv_epi8(X, _mm256_or_si256(_mm256_slli_epi32(X, 16), w_), lt_);   \
    W += 2 * __builtin_popcount((unsigned)k_);                                       \
  } while (0)

#define AVX2_STEP(X, S, W, TAB)                                                      \
  do {                                                                               \
    __m256i e_ = LOOKUP8(X, TAB);                                                    \
    S = _mm256_srli_epi32(e_, 24);                                                   \
    AVX2_ADVANCE(X, e_, W);                                                          \
  } while (0)

/* A stream's 32 states as four registers P0 .. P3 (declared here), and back. */
#define STATES_LOAD(P, x)                                                            \
  __m256i P##0 = _mm256_load_si256((const __m256i *)((x) + 0)),                      \
          P##1 = _mm256_load_si256((const __m256i *)((x) + 8)),                      \
          P##2 = _mm256_load_si256((const __m256i *)((x) + 16)),                     \
          P##3 = _mm256_load_si256((const __m256i *)((x) + 24))
#define STATES_STORE(x, P)                                                           \
  do {                                                                               \
    _mm256_store_si256((__m256i *)((x) + 0), P##0);                                  \
    _mm256_store_si256((__m256i *)((x) + 8), P##1);                                  \
    _mm256_store_si256((__m256i *)((x) + 16), P##2);                                 \
    _mm256_store_si256((__m256i *)((x) + 24), P##3);                                 \
  } while (0)

/* 32 symbols (each < 256 in a 32-bit lane) -> 32 bytes in lane order */
#define STORE32(P, S0, S1, S2, S3)                                                   \
  do {                                                                               \
    __m256i b_ = _mm256_packus_epi16(_mm256_packus_epi32(S0, S1), _mm256_packus_epi32(S2, S3)); \
    _mm256_storeu_si256((__m256i *)(P), _mm256_permutevar8x32_epi32(b_, order));     \
  } while (0)

/* all four word streams have a round's worth (8 words, one 16-byte load) */
#define ROOM(w, s) ((s)->we[0] - (w)[0] >= 16 && (s)->we[1] - (w)[1] >= 16 && \
                    (s)->we[2] - (w)[2] >= 16 && (s)->we[3] - (w)[3] >= 16)

/* Whole rounds of one stream from symbol *pi on, with the states x[32] and
** word pointers w[4], while every group has a round's worth of words. */
AVX2 static void rounds1(const uint32_t *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out, uint32_t *x,
                         const uint8_t **w, uint32_t *pi) {
  uint32_t i = *pi;
  const __m256i m12 = _mm256_set1_epi32(0xfff), zero = _mm256_setzero_si256();
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  STATES_LOAD(X, x);
  const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
  for (; i + DC_CTX_LANES <= n; i += DC_CTX_LANES) {
    const uint8_t *wn[4] = {w0, w1, w2, w3};
    if (!ROOM(wn, s)) break;
    __m256i S0, S1, S2, S3;
    AVX2_STEP(X0, S0, w0, tab);
    AVX2_STEP(X1, S1, w1, tab);
    AVX2_STEP(X2, S2, w2, tab);
    AVX2_STEP(X3, S3, w3, tab);
    STORE32(out + i, S0, S1, S2, S3);
  }
  w[0] = w0; w[1] = w1; w[2] = w2; w[3] = w3;
  STATES_STORE(x, X);
  *pi = i;
}

AVX2 int dc_ctx_stream_avx2(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out) {
  uint32_t x[DC_CTX_LANES] __attribute__((aligned(32)));
  dc_ctx_stream_start(s, n, x);
  const uint8_t *w[4] = {s->w[0], s->w[1], s->w[2], s->w[3]};
  uint32_t i = 0;
  if (n >= 2 * DC_CTX_LANES) {
    pthread_once(&perm_once, perm_init);
    rounds1(tab, s, n, out, x, w, &i);
  }
  return dc_ctx_stream_tail(tab, 1, s, x, w, i, n, out);
}

/* The marks (DC_CTX_PAIR_ESC bytes) of the 64 bytes a, c as a mask: bit i for byte i. */
AVX2 static inline uint64_t marks64(__m256i a, __m256i c) {
  const __m256i ff = _mm256_set1_epi8(-1);
  return (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(c, ff)) << 32 |
         (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, ff));
}
/* Replaces the marks of the 64 bytes at b (hit: their mask) with raw symbols; 0 or -1. */
static inline int fix64(uint8_t *b, uint64_t hit, const uint8_t *side, uint64_t nside, uint32_t n1, uint64_t *pj) {
  for (; hit; hit &= hit - 1)
    if (dc_ctx_put_raw(b + __builtin_ctzll(hit), side, nside, n1, pj)) return -1;
  return 0;
}

/* Pair contexts (model version 3): the same step on the single step's u32 slot entries (the
** first symbol in their top byte) plus a byte of second symbol per slot, two symbols per lane. */
#define PAIR_STEP(X, S, W, TAB)                                                          \
  do {                                                                                   \
    uint32_t t_[8] __attribute__((aligned(32)));                                         \
    _mm256_store_si256((__m256i *)t_, _mm256_and_si256(X, m12));                         \
    __m256i e_ = _mm256_setr_epi32((int)TAB[t_[0]], (int)TAB[t_[1]], (int)TAB[t_[2]], (int)TAB[t_[3]], \
                                   (int)TAB[t_[4]], (int)TAB[t_[5]], (int)TAB[t_[6]], (int)TAB[t_[7]]); \
    __m256i s1_ = _mm256_setr_epi32(T1[t_[0]], T1[t_[1]], T1[t_[2]], T1[t_[3]],          \
                                    T1[t_[4]], T1[t_[5]], T1[t_[6]], T1[t_[7]]);         \
    S = _mm256_or_si256(_mm256_srli_epi32(e_, 24), _mm256_slli_epi32(s1_, 8));           \
    AVX2_ADVANCE(X, e_, W);                                                              \
  } while (0)
AVX2 int dc_ctx_pairs_avx2(const void *tabv, const dc_ctx_stream *s, uint32_t n, uint8_t *out) {
  const uint32_t *tab = tabv;
  const uint8_t *T1 = (const uint8_t *)tabv + 4 * DC_CTX_M;
  uint32_t x[DC_CTX_LANES] __attribute__((aligned(32)));
  dc_ctx_stream_start(s, n, x);
  const uint8_t *w[4] = {s->w[0], s->w[1], s->w[2], s->w[3]};
  uint32_t i = 0;
  if (n >= 2 * DC_CTX_LANES) {
    pthread_once(&perm_once, perm_init);
    const __m256i m12 = _mm256_set1_epi32(0xfff), zero = _mm256_setzero_si256();
    STATES_LOAD(X, x);
    const uint8_t *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    for (; i + DC_CTX_LANES <= n; i += DC_CTX_LANES) {
      const uint8_t *wn[4] = {w0, w1, w2, w3};
      if (!ROOM(wn, s)) break;
      __m256i S0, S1, S2, S3;
      PAIR_STEP(X0, S0, w0, tab);
      PAIR_STEP(X1, S1, w1, tab);
      PAIR_STEP(X2, S2, w2, tab);
      PAIR_STEP(X3, S3, w3, tab);
      /* 32 lanes of u16 pairs -> 64 bytes in lane order */
      __m256i a_ = _mm256_permute4x64_epi64(_mm256_packus_epi32(S0, S1), 0xd8);
      __m256i c_ = _mm256_permute4x64_epi64(_mm256_packus_epi32(S2, S3), 0xd8);
      _mm256_storeu_si256((__m256i *)(out + 2 * (size_t)i), a_);
      _mm256_storeu_si256((__m256i *)(out + 2 * (size_t)i) + 1, c_);
      if (s->raw) {                 /* marks (raw symbols to put in): rare, done now */
        uint64_t hit = marks64(a_, c_);
        if (hit && fix64(out + 2 * (size_t)i, hit, s->raw, s->n_raw, s->n1, s->raw_at)) return -1;
      }
    }
    if (s->raw) *s->rounds = i / DC_CTX_LANES;
    w[0] = w0; w[1] = w1; w[2] = w2; w[3] = w3;
    STATES_STORE(x, X);
  }
  return dc_ctx_pairs_tail(tabv, 1, s, x, w, i, n, out);
}

AVX2 int dc_ctx_fixup_avx2(uint8_t *o, uint64_t m, const uint8_t *side, uint64_t nside, uint32_t n1, uint64_t *pi,
                           uint64_t *pj) {
  uint64_t i = *pi;
  for (; i + 64 <= m; i += 64) {
    uint64_t hit = marks64(_mm256_loadu_si256((const __m256i *)(o + i)), _mm256_loadu_si256((const __m256i *)(o + i + 32)));
    if (hit && fix64(o + i, hit, side, nside, n1, pj)) return -1;
  }
  *pi = i;
  return 0;
}

/* Two streams at once: their rounds are independent, so the core has twice
** the work between one round's table loads and the next round's. */
AVX2 int dc_ctx_stream2_avx2(const void *tab_a, const dc_ctx_stream *sa, uint32_t na, uint8_t *oa,
                             const void *tab_b, const dc_ctx_stream *sb, uint32_t nb, uint8_t *ob) {
  const uint32_t *ta = tab_a, *tb = tab_b;
  uint32_t xa[DC_CTX_LANES] __attribute__((aligned(32))), xb[DC_CTX_LANES] __attribute__((aligned(32)));
  dc_ctx_stream_start(sa, na, xa);
  dc_ctx_stream_start(sb, nb, xb);
  const uint8_t *wa[4] = {sa->w[0], sa->w[1], sa->w[2], sa->w[3]};
  const uint8_t *wb[4] = {sb->w[0], sb->w[1], sb->w[2], sb->w[3]};
  uint32_t ia = 0, ib = 0;
  pthread_once(&perm_once, perm_init);
  if (na >= 2 * DC_CTX_LANES && nb >= 2 * DC_CTX_LANES) {
    const __m256i m12 = _mm256_set1_epi32(0xfff), zero = _mm256_setzero_si256();
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    STATES_LOAD(A, xa);
    STATES_LOAD(B, xb);
    const uint8_t *a0 = wa[0], *a1 = wa[1], *a2 = wa[2], *a3 = wa[3];
    const uint8_t *b0 = wb[0], *b1 = wb[1], *b2 = wb[2], *b3 = wb[3];
    for (; ia + DC_CTX_LANES <= na && ib + DC_CTX_LANES <= nb; ia += DC_CTX_LANES, ib += DC_CTX_LANES) {
      const uint8_t *an[4] = {a0, a1, a2, a3}, *bn[4] = {b0, b1, b2, b3};
      if (!ROOM(an, sa) || !ROOM(bn, sb)) break;
      __m256i S0, S1, S2, S3, T0, T1, T2, T3;
      AVX2_STEP(A0, S0, a0, ta);
      AVX2_STEP(B0, T0, b0, tb);
      AVX2_STEP(A1, S1, a1, ta);
      AVX2_STEP(B1, T1, b1, tb);
      AVX2_STEP(A2, S2, a2, ta);
      AVX2_STEP(B2, T2, b2, tb);
      AVX2_STEP(A3, S3, a3, ta);
      AVX2_STEP(B3, T3, b3, tb);
      STORE32(oa + ia, S0, S1, S2, S3);
      STORE32(ob + ib, T0, T1, T2, T3);
    }
    wa[0] = a0; wa[1] = a1; wa[2] = a2; wa[3] = a3;
    wb[0] = b0; wb[1] = b1; wb[2] = b2; wb[3] = b3;
    STATES_STORE(xa, A);
    STATES_STORE(xb, B);
  }
  if (na >= 2 * DC_CTX_LANES) rounds1(ta, sa, na, oa, xa, wa, &ia);
  if (nb >= 2 * DC_CTX_LANES) rounds1(tb, sb, nb, ob, xb, wb, &ib);
  int ra = dc_ctx_stream_tail(ta, 1, sa, xa, wa, ia, na, oa);
  int rb = dc_ctx_stream_tail(tb, 1, sb, xb, wb, ib, nb, ob);
  return ra ? -1 : rb ? -2 : 0;
}

/* Widths of skipped cells: each 32 symbols split into high and low nibbles; for each 16 entries
** k of the table, a shuffle looks the low nibbles up, kept where the high nibble is k; the
** bytes (at most 28 each) are summed by vpsadbw. */
AVX2 uint64_t dc_ctx_width_sum_avx2(const uint8_t *nbt, uint32_t nsym, const uint8_t *sp, uint32_t n) {
  const __m256i m0f = _mm256_set1_epi8(0x0f), zero = _mm256_setzero_si256(), one = _mm256_set1_epi8(1);
  const __m256i lane = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                        21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  const uint32_t nk = (nsym + 15) / 16;
  __m256i acc = zero;
  for (uint32_t j = 0; j < n; j += 32) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(sp + j));
    __m256i lo = _mm256_and_si256(x, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m0f);
    __m256i w = zero, kv = zero;
    for (uint32_t k = 0; k < nk; k++, kv = _mm256_add_epi8(kv, one)) {
      __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)(nbt + 16 * k)));
      w = _mm256_or_si256(w, _mm256_and_si256(_mm256_shuffle_epi8(t, lo), _mm256_cmpeq_epi8(hi, kv)));
    }
    if (n - j < 32)       /* the bytes past n are another segment's: they count nothing */
      w = _mm256_and_si256(w, _mm256_cmpgt_epi8(_mm256_set1_epi8((char)(n - j)), lane));
    acc = _mm256_add_epi64(acc, _mm256_sad_epu8(w, zero));
  }
  __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  return (uint64_t)_mm_cvtsi128_si64(s2) + (uint64_t)_mm_extract_epi64(s2, 1);
}

/* ------------------------------------------------------------ stage 3
** One cell, eight nonzeros per step.  The eight symbols' table entries give
** their mantissa widths; a prefix sum of the widths places each symbol's bits
** in the mantissa stream, and the 32-bit window at each place is cut from the
** 32 bytes loaded at the step's first byte (two dword permutations and a
** funnel shift per lane: a symbol's bits start at most 7 + 7 * 28 = 203 bits
** into the load and need 28 more).  A second prefix sum turns the gaps
** into gene indices.  The last step of a cell keeps only its live lanes. */
#define CELL_AVX2 __attribute__((target("avx2,bmi,bmi2,prfchw")))

/* inclusive prefix sum of eight int32 lanes */
CELL_AVX2 static inline __m256i prefix8(__m256i x) {
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
  x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
  __m256i c = _mm256_shuffle_epi32(x, 0xff);                 /* lane 3 of each half */
  return _mm256_add_epi32(x, _mm256_permute2x128_si256(c, c, 0x08));   /* [0, lo's lane 3] */
}

/* A step in two halves.  STEP_A(TAIL, J, LO, HI, NB, PN): the eight table entries
** of symbols J .. J+7 (lo = gbase | cbase << 16, hi = gmask | nb << 16 | gb
** << 24, in lane order), their mantissa widths and the widths' prefix sum;
** it does not depend on pos.  STEP_B(TAIL, J, ...): the bits at pos, the
** gene indices and counts, the stores.  The loop runs the next step's A
** before this step's B, so that the loads of the next entries are under way
** while this step waits on its mantissa load (the core's window alone did
** not overlap them enough). */
/* entry K broadcast to the four qwords: a load alone (vbroadcastsd), no shuffle */
#define BQ(K) _mm256_castpd_si256(_mm256_broadcast_sd((const double *)(const void *)(inf + (K))))
#define STEP_A(TAIL, J, LO, HI, NB, PN)                                          \
  do {                                                                           \
    const uint16_t *f_ = fl + (J);                                               \
    __m256i v0_ = _mm256_blend_epi32(_mm256_blend_epi32(BQ(f_[0]), BQ(f_[1]), 0x0c),       \
                                     _mm256_blend_epi32(BQ(f_[4]), BQ(f_[5]), 0xc0), 0xf0); \
    __m256i v1_ = _mm256_blend_epi32(_mm256_blend_epi32(BQ(f_[2]), BQ(f_[3]), 0x0c),       \
                                     _mm256_blend_epi32(BQ(f_[6]), BQ(f_[7]), 0xc0), 0xf0); \
    LO = _mm256_castps_si256(                                                    \
        _mm256_shuffle_ps(_mm256_castsi256_ps(v0_), _mm256_castsi256_ps(v1_), 0x88)); \
    HI = _mm256_castps_si256(                                                    \
        _mm256_shuffle_ps(_mm256_castsi256_ps(v0_), _mm256_castsi256_ps(v1_), 0xdd)); \
    NB = _mm256_and_si256(_mm256_srli_epi32(HI, 16), mff);                      \
    if (TAIL) NB = _mm256_and_si256(NB, live);                                   \
    PN = prefix8(NB);                                                            \
  } while (0)

#define STEP_B(TAIL, J, LO, HI, NB, PN)                                          \
  do {                                                                           \
    __m256i nb_ = NB, pn_ = PN;                                                  \
    __m256i r0_ = _mm256_loadu_si256((const __m256i *)(mant + (pos >> 3)));      \
    __m256i off_ = _mm256_add_epi32(_mm256_set1_epi32((int)(pos & 7)), _mm256_sub_epi32(pn_, nb_)); \
    __m256i d_ = _mm256_srli_epi32(off_, 5), s_ = _mm256_and_si256(off_, m31);  \
    __m256i lw_ = _mm256_permutevar8x32_epi32(r0_, d_);                          \
    __m256i hw_ = _mm256_permutevar8x32_epi32(r0_, _mm256_add_epi32(d_, one));   \
    __m256i w_ = _mm256_or_si256(_mm256_srlv_epi32(lw_, s_),                      \
                                 _mm256_sllv_epi32(hw_, _mm256_sub_epi32(m32, s_))); \
    __m256i bits_ = _mm256_and_si256(w_, _mm256_sub_epi32(_mm256_sllv_epi32(one, nb_), one)); \
    __m256i g1_ = _mm256_add_epi32(_mm256_and_si256(LO, m16),                    \
                                   _mm256_add_epi32(_mm256_and_si256(bits_, _mm256_and_si256(HI, m16)), one)); \
    if (TAIL) g1_ = _mm256_and_si256(g1_, live);                                 \
    __m256i cnt_ = _mm256_add_epi32(_mm256_srli_epi32(LO, 16),                   \
                                    _mm256_srlv_epi32(bits_, _mm256_srli_epi32(HI, 24))); \
    __m256i gene_ = _mm256_add_epi32(prefix8(g1_), prev);                        \
    badv = _mm256_or_si256(badv, _mm256_cmpgt_epi32(gene_, lim));               \
    prev = _mm256_permutevar8x32_epi32(gene_, seven);                           \
    pos += (uint32_t)_mm256_extract_epi32(pn_, 7);                               \
    if (MAPPED) gene_ = _mm256_min_epu32(gene_, lim);   /* (a corrupt id is bad above) */ \
    if (TAIL) {                                                                  \
      _mm256_maskstore_epi32(ix + (J), live, gene_);                             \
      if (f32) _mm256_maskstore_ps((float *)val + (J), live, _mm256_cvtepi32_ps(cnt_)); \
      else _mm256_maskstore_epi32((int *)val + (J), live, cnt_);                 \
    } else {                                                                     \
      /* the lines 1 KiB on asked for in the state a store wants (prefetchw:    \
      ** a NOP where the CPU lacks it; never a fault).  Past a cell's end they  \
      ** are the next cell's first lines where rows are contiguous (a decode;   \
      ** docs/codec-design.md, stop 68: 256 bytes on left them cold) */        \
      __builtin_prefetch(ix + (J) + DC_CTX_PF_AHEAD, 1, 3);                      \
      __builtin_prefetch((int32_t *)val + (J) + DC_CTX_PF_AHEAD, 1, 3);          \
      _mm256_storeu_si256((__m256i *)(ix + (J)), gene_);                         \
      if (f32) _mm256_storeu_ps((float *)val + (J), _mm256_cvtepi32_ps(cnt_));   \
      else _mm256_storeu_si256((__m256i *)((int32_t *)val + (J)), cnt_);         \
    }                                                                            \
    if (MAPPED && !TAIL && (J) >= 16) {  /* local ids -> genes, two steps behind */ \
      int32_t *m_ = ix + (J) - 16;                                               \
      for (uint32_t k_ = 0; k_ < 8; k_++) m_[k_] = (int32_t)map[(uint32_t)m_[k_]]; \
    }                                                                            \
  } while (0)

/* MAPPED (a constant once inlined: one loop with the gene map, one without):
** the tile's gene map is applied in the loop, to the ids stored two steps
** before, by scalar loads and stores that run beside the vector work (load
** and store ports, not the vector pipes that bound the loop); the ids are
** clamped to the map first (a corrupt one sets bad all the same).  A pass
** over the cell's ids after the loop had cost a 2,000-cell tile about a third
** of its stage 3; a gather per step (vpgatherdd) 1.07-1.12x the time of that
** pass, the ids of the same step 1.0x, of the step before 0.89-0.99x, two
** steps before 0.87-0.89x (`make bench-ab AB_ARGS='--tile-cells 2000'`). */
CELL_AVX2 static inline __attribute__((always_inline)) uint64_t
cell_avx2(const dc_ctx_sinfo *infs, const uint16_t *fl, uint64_t tot, const uint8_t *mant, uint64_t pos,
          uint32_t n_genes, const uint32_t *map, const int MAPPED, int32_t *ix, void *val, int f32, int *bad) {
  const uint64_t *inf = (const uint64_t *)(const void *)infs;   /* one load per entry */
  const __m256i one = _mm256_set1_epi32(1), m16 = _mm256_set1_epi32(0xffff), mff = _mm256_set1_epi32(0xff);
  const __m256i m31 = _mm256_set1_epi32(31), m32 = _mm256_set1_epi32(32), seven = _mm256_set1_epi32(7);
  /* gene indices are compared signed: a corrupt cell passes n_genes - 1
  ** long before its sums could wrap (a step adds at most 8 * 2^16) */
  const __m256i lim = _mm256_set1_epi32((int)(n_genes - 1));
  __m256i prev = _mm256_set1_epi32(-1), badv = _mm256_setzero_si256(), live = badv;
  __m256i lo, hi, nb, pn;
  uint64_t j = 0;
  if (MAPPED && !n_genes) {           /* a map of no genes: every id is out of it */
    *bad = 1;
    return pos;
  }
  if (tot >= 8) {
    STEP_A(0, 0, lo, hi, nb, pn);
    for (; j + 16 <= tot; j += 8) {
      __m256i lo2, hi2, nb2, pn2;
      STEP_A(0, j + 8, lo2, hi2, nb2, pn2);
      STEP_B(0, j, lo, hi, nb, pn);
      lo = lo2; hi = hi2; nb = nb2; pn = pn2;
    }
    STEP_B(0, j, lo, hi, nb, pn);
    j += 8;
  }
  if (j < tot) {
    live = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(tot - j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    STEP_A(1, j, lo, hi, nb, pn);
    STEP_B(1, j, lo, hi, nb, pn);
  }
  /* the ids the full steps left: the last two full steps' (they end at j) and the tail's */
  if (MAPPED)
    for (uint64_t k = j >= 16 ? j - 16 : 0; k < tot; k++) ix[k] = (int32_t)map[(uint32_t)ix[k]];
  *bad = !_mm256_testz_si256(badv, badv);
  return pos;
}

CELL_AVX2 uint64_t dc_ctx_cell_avx2(const dc_ctx_sinfo *inf, const uint16_t *fl, uint64_t tot,
                                    const uint8_t *mant, uint64_t pos, uint32_t n_genes,
                                    const uint32_t *map, int32_t *ix, void *val, int f32, int *bad) {
  return map ? cell_avx2(inf, fl, tot, mant, pos, n_genes, map, 1, ix, val, f32, bad)
             : cell_avx2(inf, fl, tot, mant, pos, n_genes, NULL, 0, ix, val, f32, bad);
}
#endif
