/*
** dc_ctx_stream.c — the portable stream decoder of the default codec `rans`
** (stage 2 of dc_ctx_decompress.c): a context's stream of 32 interleaved rANS
** lanes into symbol indices, and the checked one-symbol-at-a-time tail that
** the SIMD decoders (dc_ctx_simd.c) share.  Called through stream_fn, so it
** inlines into nothing and lives apart from the chunk decoder.
*/
#include "dc_ctx.h"

/* ------------------------------------------------------------ streams
** The scalar stream decoder: the reference the SIMD ones must equal.  Symbol
** i uses lane i % 32; a lane whose state drops below L after its step reads
** the next 16-bit word of its group's stream. */
void dc_ctx_stream_start(const dc_ctx_stream *s, uint32_t n, uint32_t *x) {
  uint32_t k = n < DC_CTX_LANES ? n : DC_CTX_LANES;
  for (uint32_t l = 0; l < DC_CTX_LANES; l++) x[l] = l < k ? dc_rd32(s->st + 4 * l) : DC_CTX_L;
}

/* The checked tail, one step at a time: one symbol per step, or (pairs) two. */
#define TAIL_LOOP(ENTRY)                                                        \
  for (uint32_t i = done; i < n; i++) {                                         \
    uint32_t l = i % DC_CTX_LANES, g = l / 8, xs = x[l];                        \
    uint32_t slot = xs & (DC_CTX_M - 1);                                        \
    ENTRY;                                                                      \
    if (xs < DC_CTX_L) {                                                        \
      if (s->we[g] - w[g] < 2) return -1;                                       \
      xs = xs << 16 | dc_rd16(w[g]);                                            \
      w[g] += 2;                                                                \
    }                                                                           \
    x[l] = xs;                                                                  \
  }

static int tail_end(const dc_ctx_stream *s, const uint32_t *x, const uint8_t *const *w) {
  uint32_t bad = 0;
  for (uint32_t g = 0; g < 4; g++) bad |= w[g] != s->we[g];
  for (uint32_t l = 0; l < DC_CTX_LANES; l++) bad |= x[l] != DC_CTX_L;
  return bad ? -1 : 0;
}

int dc_ctx_stream_tail(const void *tab, int vec, const dc_ctx_stream *s, uint32_t *x, const uint8_t **w,
                       uint32_t done, uint32_t n, uint8_t *out) {
  const uint32_t *t32 = tab;
  const uint16_t *t16 = tab;
  const uint8_t *sym = (const uint8_t *)tab + 4 * DC_CTX_M;
  if (vec) {               /* freq | bias << 12 | symbol << 24 */
    TAIL_LOOP(uint32_t e = t32[slot]; out[i] = (uint8_t)(e >> 24);
              xs = (e & 0xfff) * (xs >> DC_CTX_PREC) + ((e >> 12) & 0xfff))
  } else {                 /* u16 freqs, u16 biases, u8 symbols */
    TAIL_LOOP(out[i] = sym[slot]; xs = t16[slot] * (xs >> DC_CTX_PREC) + t16[DC_CTX_M + slot])
  }
  return tail_end(s, x, w);
}

int dc_ctx_pairs_tail(const void *tab, int vec, const dc_ctx_stream *s, uint32_t *x, const uint8_t **w,
                      uint32_t done, uint32_t n, uint8_t *out) {
  const uint8_t *t8 = tab;
  const uint16_t *t16 = tab;
  if (vec) {               /* u32 freq | bias << 12 | sym0 << 24, then u8 sym1 per slot */
    TAIL_LOOP(uint32_t e = dc_rd32(t8 + 4 * (size_t)slot); out[2 * (size_t)i] = (uint8_t)(e >> 24);
              out[2 * (size_t)i + 1] = t8[4 * DC_CTX_M + slot];
              xs = (e & 0xfff) * (xs >> DC_CTX_PREC) + ((e >> 12) & 0xfff))
  } else {                 /* u16 freqs, u16 biases, two bytes of symbols */
    TAIL_LOOP(memcpy(out + 2 * (size_t)i, t8 + 4 * DC_CTX_M + 2 * (size_t)slot, 2);
              xs = t16[slot] * (xs >> DC_CTX_PREC) + t16[DC_CTX_M + slot])
  }
  return tail_end(s, x, w);
}

/* One lane's step, branch-free (the renormalisation is taken half the time:
** a branch would miss often).  The lanes of a group live in registers (X);
** the renormalisation word is read whatever the state and kept or masked. */
#define SCALAR_STEP(X, L)                                                       \
  do {                                                                          \
    size_t sl_ = X & (DC_CTX_M - 1);                                            \
    if (pairs_) memcpy(o + 2 * (L), stab + 2 * sl_, 2);                         \
    else o[L] = stab[sl_];                                                      \
    uint32_t y_ = ftab[sl_] * (X >> DC_CTX_PREC) + ftab[DC_CTX_M + sl_];         \
    /* r = y < L, as the sign of a 64-bit difference (two instructions) */   \
    uint32_t w_ = dc_rd16(W), r_ = (uint32_t)(((uint64_t)y_ - DC_CTX_L) >> 63); \
    X = (y_ << (r_ << 4)) | (w_ & (0u - r_));                                   \
    W += 2 * r_;                                                                \
  } while (0)

/* The portable stream decoder (tables in the portable layout, TAB_BYTES).
** The groups are independent (each has its own word stream and lanes), so
** each is decoded alone for R rounds with its eight states in registers, R
** being as many rounds as every group surely has words for (a round reads
** at most 8 words per group); then R is worked out again from what is left.
** The scalar tail takes the last rounds, checking every read. */
#define DEF_STREAM_SCALAR(NAME, PAIRS, TAIL)                                    \
int NAME(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out) { \
  const int pairs_ = PAIRS;                                                   \
  const uint16_t *ftab = tab;                                                 \
  const uint8_t *stab = (const uint8_t *)tab + 4 * DC_CTX_M;                  \
  uint32_t x[DC_CTX_LANES];                                                   \
  dc_ctx_stream_start(s, n, x);                                               \
  const uint8_t *w[4] = {s->w[0], s->w[1], s->w[2], s->w[3]};                 \
  uint32_t i = 0;                                                             \
  for (;;) {                                                                  \
    size_t R = (n - i) / DC_CTX_LANES;                                        \
    for (uint32_t g = 0; g < 4; g++) {                                        \
      size_t rg = (size_t)(s->we[g] - w[g]) / 16;                             \
      if (rg < R) R = rg;                                                     \
    }                                                                         \
    if (!R) break;                                                            \
    for (uint32_t g = 0; g < 4; g++) {                                        \
      uint32_t *xg = x + 8 * g;                                               \
      uint32_t x0 = xg[0], x1 = xg[1], x2 = xg[2], x3 = xg[3], x4 = xg[4], x5 = xg[5], x6 = xg[6], x7 = xg[7]; \
      const uint8_t *W = w[g];                                                \
      uint8_t *o = out + (PAIRS ? 2u : 1u) * (i + 8 * g);                     \
      for (size_t r = 0; r < R; r++, o += (PAIRS ? 2u : 1u) * DC_CTX_LANES) { \
        SCALAR_STEP(x0, 0); SCALAR_STEP(x1, 1); SCALAR_STEP(x2, 2); SCALAR_STEP(x3, 3); \
        SCALAR_STEP(x4, 4); SCALAR_STEP(x5, 5); SCALAR_STEP(x6, 6); SCALAR_STEP(x7, 7); \
      }                                                                       \
      xg[0] = x0; xg[1] = x1; xg[2] = x2; xg[3] = x3; xg[4] = x4; xg[5] = x5; xg[6] = x6; xg[7] = x7; \
      w[g] = W;                                                               \
    }                                                                         \
    i += (uint32_t)R * DC_CTX_LANES;                                          \
  }                                                                           \
  return TAIL(tab, 0, s, x, w, i, n, out);                                    \
}
DEF_STREAM_SCALAR(dc_ctx_stream_scalar, 0, dc_ctx_stream_tail)
/* A pair context's stream: n steps of two symbols each (2n bytes out; portable pair layout). */
DEF_STREAM_SCALAR(dc_ctx_pairs_scalar, 1, dc_ctx_pairs_tail)
