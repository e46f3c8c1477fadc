/*
** dc_rans.h — definitions shared by the rANS codec's encoder and decoder
** (private to ext/codec).  The model and the byte layout are described in
** docs/format.md section 2 and the design notes in docs/codec-design.md.
**
** Model.  Each nonzero is one joint symbol (gap code, count code) coded with
** rANS under a context = (cell-size bucket of the cell, rank code of the next
** candidate gene, i.e. previous gene + 1).  A value code is exact below 8,
** then two codes per octave; the code's extra (mantissa) bits of the gap and
** of the count are carried in the same rANS step (as a symbol of precision
** 10 + extra bits) when they total at most DC_RANS_MAXB bits, else in raw steps.
**
** Coder.  64-bit states in [2^31, 2^63), 32-bit renormalisation (at most one
** word per step), probabilities of precision 10 bits.  A chunk is split into
** up to 32 lanes of consecutive cells with balanced nonzero counts; each lane
** has its own state and word stream, and lanes are decoded in lockstep (step t
** decodes the t-th nonzero of every lane that has one), so the scalar decoder
** overlaps the lanes and the AVX-512 decoder runs 8 of them per register.
*/
#ifndef DC_RANS_H
#define DC_RANS_H

#include "dc_internal.h"

#define DC_RANS_PREC      10u
#define DC_RANS_M         (1u << DC_RANS_PREC)
#define DC_RANS_L         (1ull << 31)
#define DC_RANS_MAXB      20u          /* extra bits carried by the main step */
#define DC_RANS_MAXSYM    1024u        /* distinct symbols per context (10-bit index) */
#define DC_RANS_NCODES    66u          /* value codes 0..65 cover 0 .. 2^32-1 */
#define DC_RANS_ESC       (127u << 7)  /* symbol id of the escape (codes follow raw) */
#define DC_RANS_MAXLANES  32u
#define DC_RANS_MAXNB     8u           /* cell-size buckets */
#define DC_RANS_MAXRC     64u          /* rank codes */
#define DC_RANS_MODEL_VERSION 1u


/* rank code of the next candidate gene r, capped to nrc-1 */
static inline uint32_t dc_rcode(uint64_t r, uint32_t nrc) {
  uint32_t c = dc_vcode(r);
  return c < nrc ? c : nrc - 1;
}

/* Symbols whose extra bits (or values >= 2^16) take raw steps after the
** main step; the escape symbol (gap code 127) always does. */
#define DC_RANS_FASTCODES 34u          /* codes below: value < 2^16 */
static inline int dc_rans_is_big(uint32_t gc, uint32_t cc) {
  return gc >= DC_RANS_FASTCODES || cc >= DC_RANS_FASTCODES || dc_vbits(gc) + dc_vbits(cc) > DC_RANS_MAXB;
}

/* The model as both sides hold it. */
typedef struct dc_rans_model {
  uint32_t nb;                         /* cell-size buckets */
  uint32_t nb_lim[DC_RANS_MAXNB];      /* bucket k holds cells with nnz < nb_lim[k] (last: all) */
  uint32_t nrc;                        /* rank codes */
  uint32_t n_ctx;                      /* nb * nrc; ctx = bucket * nrc + rank code */
} dc_rans_model;

static inline uint32_t dc_nnz_bucket(const dc_rans_model *m, uint64_t nnz) {
  uint32_t k = 0;
  while (k + 1 < m->nb && nnz >= m->nb_lim[k]) k++;
  return k;
}

#endif /* DC_RANS_H */
