/*
** dc_ctx_decompress.c — decoder of the default codec `rans` (id 3).
**
** A chunk decodes in three stages (dc_ctx.h has the model):
**   1. the per-cell rank-bucket counts (a zstd frame of varints), which give
**      every context's symbol count and every cell's size;
**   2. each context's stream, decoded in bulk into symbol indices by the
**      stream decoder of the selected instruction set (scalar in
**      dc_ctx_stream.c, AVX2 in dc_ctx_simd.c; DC_SIMD forces one, see
**      dc_simd_level);
**   3. one pass over the cells in order: take each bucket's next symbols,
**      add the mantissa bits, prefix-sum the gaps into gene indices, write.
** The tile's tables (dc_ctx_tables.c) are built once per decoder and reused
** while the same shared section comes back (keyed by its bytes).
**
** Safety: every length is checked before use; tables are validated; stream
** decoders check every word read and the final states; the mantissa reader
** never reads outside its section (reads are clamped, and the bits consumed
** must match the section's length exactly); indices are checked per cell.
*/
#include "dc_ctx.h"
#include "dc_ctx_tables.h"

#include <stdlib.h>
#include <zstd.h>

/* Stage timers (thread CPU time, summed over chunks and threads): defined only in the
** build of build/bench_decode_stages (the Makefile), off in every other build.
** dc_ctx_prof[0]: tables and bucket counts, [1]: streams, [2]: cells (stage 3). */
#ifdef DC_CTX_PROFILE
#include <time.h>
uint64_t dc_ctx_prof[4];
static inline uint64_t prof_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#define PROF(i)                                                                 \
  do {                                                                          \
    uint64_t t_ = prof_ns();                                                    \
    __atomic_fetch_add(&dc_ctx_prof[i], t_ - prof_t, __ATOMIC_RELAXED);         \
    prof_t = t_;                                                                \
  } while (0)
#define PROF_START uint64_t prof_t = prof_ns()
#else
#define PROF(i) do { } while (0)
#define PROF_START do { } while (0)
#endif


#define CORRUPT(...) do { dc_error_set(err, DC_ECORRUPT, __VA_ARGS__); return DC_ECORRUPT; } while (0)

/* AVX-512 CPUs run the AVX2 stream decoder: an AVX-512 one measured slower
** (codec-design.md). */
static dc_ctx_stream_fn stream_fn(int vec) {
#ifdef DC_CTX_X86
  if (vec) return dc_ctx_stream_avx2;
#endif
  (void)vec;
  return dc_ctx_stream_scalar;
}

static dc_ctx_stream_fn pairs_fn(int vec) {
#ifdef DC_CTX_X86
  if (vec) return dc_ctx_pairs_avx2;
#endif
  (void)vec;
  return dc_ctx_pairs_scalar;
}

/* The marks among 16 bytes as two words whose bytes are 0xff at a mark, with GCC/Clang vector
** extensions (one 16-byte compare on SSE2 or NEON; no intrinsics). */
typedef uint8_t dc_u8x16 __attribute__((vector_size(16)));
static inline void marks16(const uint8_t *p, uint64_t *u) {
  dc_u8x16 a;
  memcpy(&a, p, 16);
  const dc_u8x16 ff = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                       0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  dc_u8x16 x = (dc_u8x16)(a == ff);
  memcpy(u, &x, 16);
}
/* A pair context's symbols outside its top K (DC_CTX_PAIR_ESC bytes; no symbol index reaches
** 255) and an odd last symbol take the stream's raw symbols in order, each checked against the
** context's n1 symbols, from byte i and raw symbol j on (the AVX2 decoder puts them in for its
** whole rounds as it goes).  Returns 0, or -1 when they do not match. */
static int pair_fixup(uint8_t *o, uint64_t n, const uint8_t *side, uint64_t nside, uint32_t n1, int vec,
                      uint64_t i, uint64_t j) {
  const uint64_t m = n & ~(uint64_t)1;
#ifdef DC_CTX_X86
  /* AVX2 (the decoder has done its whole rounds: bytes [0, i), raw symbols [0, j)): 64 bytes at a
  ** time, a mask of the marks from two compares */
  if (vec && dc_ctx_fixup_avx2(o, m, side, nside, n1, &i, &j)) return -1;
#else
  (void)vec;
#endif
  /* portable: 16 bytes at a time, skipped when they hold no mark */
  for (; i + 16 <= m; i += 16) {
    uint64_t u[2];
    marks16(o + i, u);
    if (!(u[0] | u[1])) continue;
    for (int h = 0; h < 2; h++)
      for (uint64_t w = u[h]; w;) {
        uint32_t b = (uint32_t)__builtin_ctzll(w) >> 3;
        w &= ~(0xffull << (8 * b));
        if (dc_ctx_put_raw(o + i + 8 * (uint64_t)h + b, side, nside, n1, &j)) return -1;
      }
  }
  for (; i < m; i++)
    if (o[i] == DC_CTX_PAIR_ESC && dc_ctx_put_raw(o + i, side, nside, n1, &j)) return -1;
  if ((n & 1) && dc_ctx_put_raw(o + n - 1, side, nside, n1, &j)) return -1;
  return j == nside ? 0 : -1;
}

/* ------------------------------------------------------------ stage 3 */
typedef struct mreader {
  const uint8_t *p;                  /* a padded copy of the mantissa section */
  uint64_t pos, lim;                 /* bit position; last byte offset a read may start at */
  uint64_t end_bits;                 /* bits in the section: a cell must start inside */
} mreader;

static inline uint64_t mread(mreader *r, uint32_t nb) {  /* nb <= 56 */
  uint64_t off = r->pos >> 3;
  off = off < r->lim ? off : r->lim;
  uint64_t w;
  memcpy(&w, r->p + off, 8);
  w = (w >> (r->pos & 7)) & ((1ull << nb) - 1);
  r->pos += nb;
  return w;
}

/* The rare symbols: values of 2^16 and more, escapes.  Returns 0 or -1. */
static __attribute__((noinline)) int slow_sym(const dc_ctx_sinfo *in, mreader *r, uint64_t *gap, uint64_t *cnt) {
  uint32_t gc = in->gbase, cc = in->cbase;
  if (in->gmask == 2) {
    uint32_t id = (uint32_t)mread(r, DC_CTX_ESC_BITS);
    if (id >= DC_CTX_NID) return -1;
    gc = id / DC_CTX_NCODES;
    cc = id % DC_CTX_NCODES;
  }
  if (cc >= DC_CTX_NCODES) return -1;
  *gap = dc_vbase(gc) + mread(r, dc_vbits(gc));
  *cnt = dc_vbase(cc) + mread(r, dc_vbits(cc));
  return *cnt > UINT32_MAX || *gap >= (1ull << 31) ? -1 : 0;
}

/* Places one chunk's symbols, cell by cell: the cell's symbols are first
** gathered from its rank buckets' streams into one list of (bucket << 8 |
** symbol), so that one loop (one branch miss) covers the cell whatever its
** segments.  Returns 0, or -1 on corrupt data (an index out of range, a bad
** escape).  Reads are unclamped when even the cell's nnz reads of the
** largest size stay inside the mantissa section (all but the last cells). */
#define FLAT_LOOP                                                               \
  for (uint64_t j = 0; j < tot; j++) {                                          \
    const dc_ctx_sinfo e = inf[fl[j]];                                                 \
    uint64_t gap, cnt;                                                          \
    if (__builtin_expect(e.nb == DC_CTX_SLOW, 0)) {                                    \
      r.pos = pos;                                                              \
      if (slow_sym(&e, &r, &gap, &cnt)) return -1;                              \
      pos = r.pos;                                                              \
    } else {                                                                    \
      uint64_t w;                                                               \
      memcpy(&w, mant + (pos >> 3), 8);                                         \
      w >>= (pos & 7);                                                          \
      uint64_t bits = w & ((1ull << e.nb) - 1);                                 \
      pos += e.nb;                                                              \
      gap = e.gbase + (bits & e.gmask);                                         \
      cnt = e.cbase + (bits >> e.gb);                                           \
    }                                                                           \
    /* gaps are below 2^31 and a cell has fewer than 2^31 nonzeros */          \
    prev += (int64_t)gap + 1;                                                   \
    ix[j] = (int32_t)prev;                                                      \
    if (f32) vf[j] = (float)cnt; else vi[j] = (int32_t)(uint32_t)cnt;           \
  }

/* The common case: fast symbols only; two symbols per read (2 x 28 bits fit
** the 57 a read guarantees).  FAST_PAIRS places the symbols [SRC, END) of
** table INF (INF + index); in the functions below it uses prev, pos, ix,
** vi, vf, mant and F32.  Each function is its own (per output type), so
** that its few live values stay in registers.  Portable path only: the AVX2
** path places fast cells with dc_ctx_cell_avx2. */
#define FAST_PAIRS(SRC, END, P32, P8, F32, PF)                                  \
  {                                                                             \
    size_t n_ = (size_t)(END - SRC), j_ = 0;                                    \
    for (; j_ + 2 <= n_; j_ += 2) {                                             \
      size_t ka = SRC[j_], kb = SRC[j_ + 1];                                    \
      uint64_t w;                                                               \
      memcpy(&w, mant + (pos >> 3), 8);                                         \
      w >>= (pos & 7);                                                          \
      uint32_t na = P8[ka];                                                     \
      uint32_t wa = (uint32_t)w, wb = (uint32_t)(w >> na);                      \
      pos += na + P8[kb];                                                       \
      int64_t pa = prev + (uint32_t)((wa & P32[PF_GM + ka]) + P32[ka]);         \
      prev = pa + (uint32_t)((wb & P32[PF_GM + kb]) + P32[kb]);                 \
      ix[j_] = (int32_t)pa;                                                     \
      ix[j_ + 1] = (int32_t)prev;                                               \
      if (PF) {                 /* as dc_ctx_cell_avx2 (PF: a constant) */      \
        __builtin_prefetch(ix + j_ + DC_CTX_PF_AHEAD, 1, 3);                    \
        __builtin_prefetch(vi + j_ + DC_CTX_PF_AHEAD, 1, 3);                    \
      }                                                                         \
      uint32_t ca = ((wa >> P8[PF_GB + ka]) & P32[PF_CM + ka]) + P32[PF_CB + ka]; \
      uint32_t cb = ((wb >> P8[PF_GB + kb]) & P32[PF_CM + kb]) + P32[PF_CB + kb]; \
      if (F32) { vf[j_] = (float)ca; vf[j_ + 1] = (float)cb; }                  \
      else { vi[j_] = (int32_t)ca; vi[j_ + 1] = (int32_t)cb; }                  \
    }                                                                           \
    if (j_ < n_) {                                                              \
      size_t k = SRC[j_];                                                       \
      uint64_t w;                                                               \
      memcpy(&w, mant + (pos >> 3), 8);                                         \
      uint32_t wa = (uint32_t)(w >> (pos & 7));                                 \
      pos += P8[k];                                                             \
      prev += (uint32_t)((wa & P32[PF_GM + k]) + P32[k]);                       \
      ix[j_] = (int32_t)prev;                                                   \
      uint32_t c1 = ((wa >> P8[PF_GB + k]) & P32[PF_CM + k]) + P32[PF_CB + k];  \
      if (F32) vf[j_] = (float)c1; else vi[j_] = (int32_t)c1;                   \
    }                                                                           \
    ix += n_; vi += n_; vf += n_;                                               \
    SRC = END;                                                                  \
  }

/* A cell's gathered list [fl, end). */
#define DEF_CELL_FAST(NAME, F32)                                                 \
  __attribute__((noinline)) static uint64_t NAME(                               \
      const uint8_t *pq, const uint16_t *fl, const uint16_t *end,               \
      const uint8_t *mant, uint64_t pos, int64_t *last, int32_t *ix, void *val) { \
    int64_t prev = -1;                                                          \
    int32_t *vi = val;                                                          \
    float *vf = val;                                                            \
    const uint32_t *p32 = (const uint32_t *)(const void *)pq;                   \
    const uint8_t *p8 = (const uint8_t *)(p32 + PF_U32);                        \
    /* the output's lines asked for 1 KiB ahead in cells that long; in shorter cells \
    ** (10x10k: 69 nonzeros) they cost more than they gain (2%) */             \
    if (end - fl >= DC_CTX_PF_AHEAD) FAST_PAIRS(fl, end, p32, p8, F32, 1)       \
    else FAST_PAIRS(fl, end, p32, p8, F32, 0)                                   \
    *last = prev;                                                               \
    return pos;                                                                 \
  }

/* A cell of long segments, segment by segment (no gather). */
#define DEF_SEGS_FAST(NAME, F32)                                                 \
  __attribute__((noinline)) static uint64_t NAME(                               \
      const uint8_t *pq, const uint8_t **cq, const uint32_t *bc,                \
      uint32_t used, const uint8_t *mant, uint64_t pos, int64_t *last, int32_t *ix, void *val, \
      int pf) {                 /* pf: the cell has DC_CTX_PF_AHEAD nonzeros or more */ \
    int64_t prev = -1;                                                          \
    int32_t *vi = val;                                                          \
    float *vf = val;                                                            \
    for (; used; used &= used - 1) {                                            \
      uint32_t b = (uint32_t)__builtin_ctz(used);                               \
      const uint8_t *src = cq[b], *end = src + bc[b];                           \
      cq[b] = end;                                                              \
      const uint32_t *p32 = (const uint32_t *)(const void *)pq + (size_t)b * 256; \
      const uint8_t *p8 = (const uint8_t *)((const uint32_t *)(const void *)pq + PF_U32) + (size_t)b * 256; \
      if (pf) FAST_PAIRS(src, end, p32, p8, F32, 1)                             \
      else FAST_PAIRS(src, end, p32, p8, F32, 0)                                \
    }                                                                           \
    *last = prev;                                                               \
    return pos;                                                                 \
  }

/* Gathers a cell's symbols: bucket b's k symbols, widened with b << 8, 32
** at a time whatever k (the symbol buffer has 64 bytes of slack and the list
** 32 entries; what lies past k is overwritten by the next bucket), then 16 at
** a time past 32: in small cells, whose buckets hold a few symbols each, no
** loop exit to mispredict (a loop of 16 at a time exited after one or two
** passes by the bucket's size).  The AVX2 version is the same with intrinsics. */
static inline void widen16(uint16_t *fl, const uint8_t *src, uint16_t hi) {
  /* through local copies: with fl and src apart the compiler would need a
  ** run-time overlap check, and at -O2 it then leaves the loop scalar */
  uint8_t in[16];
  uint16_t o[16];
  memcpy(in, src, sizeof in);
  for (uint32_t t = 0; t < 16; t++) o[t] = (uint16_t)(hi | in[t]);
  memcpy(fl, o, sizeof o);
}
static inline uint16_t *gather_sym(uint16_t *fl, const uint8_t *src, uint32_t k, uint32_t b) {
  uint16_t hi = (uint16_t)(b << 8);
  widen16(fl, src, hi);
  widen16(fl + 16, src + 16, hi);
  for (uint32_t j = 32; j < k; j += 16) widen16(fl + j, src + j, hi);
  return fl + k;
}
#ifdef DC_CTX_X86
#include <immintrin.h>
#define WIDEN16_AVX2(J)                                                         \
  _mm256_storeu_si256((__m256i *)(fl + (J)),                                    \
                      _mm256_or_si256(hi, _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(src + (J))))))
__attribute__((target("avx2"))) static inline uint16_t *gather_sym_avx2(uint16_t *fl, const uint8_t *src,
                                                                      uint32_t k, uint32_t b) {
  const __m256i hi = _mm256_set1_epi16((short)(b << 8));
  WIDEN16_AVX2(0);
  WIDEN16_AVX2(16);
  for (uint32_t j = 32; j < k; j += 16) WIDEN16_AVX2(j);
  return fl + k;
}
#endif

/* The mantissa bits of a cell whose symbols are all fast, without decoding it:
** the sum of its symbols' widths (a cell that is placed nowhere), its streams'
** cursors moved past it.  The widths: a byte per symbol, 256 per rank bucket (nbt
** of the vector tables, the nb bytes of the portable ones); on AVX2 32 symbols at a
** time (dc_ctx_width_sum_avx2), else four sums, so that the loads are not one chain. */
static inline uint64_t skip_cell(const uint8_t *nbt, const uint16_t *nsym, int vec, const uint8_t **cq,
                                 const uint32_t *bc, uint32_t used) {
  uint64_t w0 = 0, w1 = 0, w2 = 0, w3 = 0;
  for (uint32_t u = used; u; u &= u - 1) {
    uint32_t b = (uint32_t)__builtin_ctz(u);
    const uint8_t *e = nbt + ((size_t)b << 8);     /* bucket b's widths: 256 bytes */
    const uint8_t *sp = cq[b];
    uint32_t n = bc[b], j = 0;
    cq[b] = sp + n;
#ifdef DC_CTX_X86
    if (vec) {
      w0 += dc_ctx_width_sum_avx2(e, nsym[b], sp, n);
      continue;
    }
#else
    (void)nsym; (void)vec;
#endif
    for (; j + 4 <= n; j += 4) {
      w0 += e[sp[j]];
      w1 += e[sp[j + 1]];
      w2 += e[sp[j + 2]];
      w3 += e[sp[j + 3]];
    }
    for (; j < n; j++) w0 += e[sp[j]];
  }
  return w0 + w1 + w2 + w3;
}

#define DEF_PLACE(NAME, ATTR, GATHER, USE_VEC, CELL_VEC, PLACING)               \
  ATTR static int NAME(const ctx_state *s, const uint32_t *bcnt, uint32_t n_cells, \
                       const uint8_t **cur, uint16_t *fl, const uint8_t *slow, mreader *rd, \
                       int64_t *indptr, uint64_t base, int32_t *ix, void *val, uint64_t n_genes, \
                       int f32, const dc_place *pl, int32_t *sink) {            \
    const dc_ctx_model *m = &s->m;                                              \
    const uint32_t nrb = m->nrb;                                                \
    const uint32_t *map = s->map;                                               \
    const uint8_t *mant = rd->p;                                                \
    const uint64_t end_bits = rd->end_bits;                                     \
    mreader r = *rd;                                                            \
    uint64_t pos = r.pos, o = 0;                                                \
    int32_t *vi = val;                                                          \
    float *vf = val;                                                            \
    /* per cell-size bucket: the rank buckets whose context has slow symbols */ \
    uint32_t slowmask[DC_CTX_MAXQ] = {0};                                       \
    for (uint32_t q = 0; q < m->nq; q++)                                        \
      for (uint32_t b = 0; b < nrb; b++)                                        \
        slowmask[q] |= (uint32_t)(slow[q * nrb + b] != 0) << b;                 \
    for (uint32_t c = 0; c < n_cells; c++) {                                    \
      const uint32_t *bc = bcnt + (size_t)c * nrb;                              \
      if (PLACING) {             /* placing: this cell's own place, or the sink */ \
        int keep_ = pl->ix[c] && pl->val[c];                                    \
        ix = keep_ ? pl->ix[c] : sink;                                          \
        vi = keep_ ? (int32_t *)pl->val[c] : sink + n_genes + 8;                \
        vf = (float *)vi;                                                       \
      }                                                                         \
      uint64_t tot = 0;                                                         \
      uint32_t used = 0, nused = 0;                                             \
      for (uint32_t b = 0; b < nrb; b++) {                                      \
        tot += bc[b];                                                           \
        used |= (uint32_t)(bc[b] != 0) << b;                                    \
        nused += bc[b] != 0;        /* not a popcount: a call without POPCNT */ \
      }                                                                         \
      const uint32_t q = dc_ctx_q(m, tot);                                      \
      const uint8_t **cq = cur + (size_t)q * nrb;                               \
      const dc_ctx_sinfo *inf = s->inf + (size_t)q * nrb * 256;                        \
      /* the portable tables (none when the vector path built the tables) */    \
      const uint8_t *pinf = USE_VEC ? NULL : s->pinf + (size_t)q * PF_BYTES;    \
      int64_t prev = -1;                                                        \
      /* the mantissa copy has 10 bytes of zeros per nonzero of the largest   \
      ** cell after its end, so a cell that starts inside the section reads   \
      ** inside the copy whatever its symbols say */                          \
      if (pos > end_bits) return -1;                                            \
      if (PLACING && ix == sink && !(used & slowmask[q])) {                     \
        /* kept nowhere: its symbols' widths move pos on, nothing is written   \
        ** (the kept cells' output and the section's end check are the same) */ \
        pos += skip_cell(USE_VEC ? s->nbt + ((size_t)q * nrb << 8) : pinf + 4 * PF_U32, \
                         s->nsym + (size_t)q * nrb, USE_VEC, cq, bc, used);     \
        continue;                                                               \
      }                                                                         \
      if (!USE_VEC && !(used & slowmask[q]) &&                                \
          tot >= 32ull * nused) {                                             \
        /* long segments: straight from the streams */                        \
        pos = f32 ? segs_fast_f32(pinf, cq, bc, used, mant, pos, &prev, ix, vf, tot >= DC_CTX_PF_AHEAD) \
                  : segs_fast_i32(pinf, cq, bc, used, mant, pos, &prev, ix, vi, tot >= DC_CTX_PF_AHEAD); \
        goto next;                                                            \
      }                                                                       \
      uint16_t *fe = fl;                                                      \
      for (uint32_t u = used; u; u &= u - 1) {                                \
        uint32_t b = (uint32_t)__builtin_ctz(u);                              \
        fe = GATHER(fe, cq[b], bc[b], b);                                     \
        cq[b] += bc[b];                                                       \
      }                                                                       \
      if (USE_VEC && !(used & slowmask[q])) {                                 \
        /* one vectorised loop over the cell's gathered symbols */            \
        memset(fe, 0, 8 * sizeof *fe);      /* the last step's dead lanes */  \
        int bad_ = 0;                                                         \
        pos = CELL_VEC(inf, fl, tot, mant, pos, (uint32_t)n_genes,            \
                       ix != sink ? map : NULL, ix,                           \
                       f32 ? (void *)vf : (void *)vi, f32, &bad_);            \
        if (bad_) return -1;                                                  \
        goto mapped;              /* genes already (map applied in the loop) */ \
      }                                                                       \
      if (!(used & slowmask[q])) {                                              \
        pos = f32 ? cell_fast_f32(pinf, fl, fe, mant, pos, &prev, ix, vf)  \
                  : cell_fast_i32(pinf, fl, fe, mant, pos, &prev, ix, vi); \
      } else {                                                                  \
        FLAT_LOOP                                                               \
      }                                                                         \
    next:                                                                       \
      if (prev >= (int64_t)n_genes) return -1;                                  \
      if (map && ix != sink)      /* local ids (checked) -> genes, from L1 */ \
        for (uint64_t j_ = 0; j_ < tot; j_++) ix[j_] = (int32_t)map[ix[j_]];   \
    mapped:                                                                   \
      if (PLACING && pl->filter && ix != sink) {  /* the caller's, while in cache */ \
        uint32_t k_ = pl->filter(pl->filter_arg, ix, (void *)vi, (uint32_t)tot); \
        pl->n_out[c] = k_ < tot ? k_ : (uint32_t)tot;                             \
      }                                                                         \
      ix += tot;                                                                \
      vi += tot;                                                                \
      vf += tot;                                                                \
      o += tot;                                                                 \
      if (!PLACING && c + 1 < n_cells) indptr[c + 1] = (int64_t)(base + o);    \
    }                                                                           \
    rd->pos = pos;                                                              \
    return 0;                                                                   \
  }

/* The portable stage 3's cell loops (the AVX2 place never reaches them: its
** fast cells go to dc_ctx_cell_avx2, its slow ones to FLAT_LOOP). */
DEF_CELL_FAST(cell_fast_i32, 0)
DEF_CELL_FAST(cell_fast_f32, 1)
DEF_SEGS_FAST(segs_fast_i32, 0)
DEF_SEGS_FAST(segs_fast_f32, 1)
static uint64_t no_cell_vec(const dc_ctx_sinfo *inf, const uint16_t *fl, uint64_t tot, const uint8_t *mant,
                            uint64_t pos, uint32_t n_genes, const uint32_t *map, int32_t *ix, void *val,
                            int f32, int *bad) {
  (void)inf; (void)fl; (void)tot; (void)mant; (void)n_genes; (void)map; (void)ix; (void)val; (void)f32;
  *bad = 1;                         /* never called: the portable place has no vector loop */
  return pos;
}
/* each twice: decoding into a tile's arrays, and placing (per-cell destinations), so that
** the decoding loop carries nothing of placing (a per-cell test had cost the portable path
** 1.26x on 10x10k's small cells) */
DEF_PLACE(place, , gather_sym, 0, no_cell_vec, 0)
DEF_PLACE(place_to, , gather_sym, 0, no_cell_vec, 1)
#ifdef DC_CTX_X86
#define AVX2_BMI2 __attribute__((target("avx2,bmi,bmi2")))
DEF_PLACE(place_avx2, AVX2_BMI2, gather_sym_avx2, 1, dc_ctx_cell_avx2, 0)
DEF_PLACE(place_to_avx2, AVX2_BMI2, gather_sym_avx2, 1, dc_ctx_cell_avx2, 1)
#endif

/* ------------------------------------------------------------ chunk */
int dc_ctx_decode_chunk(dc_decoder *d, const uint8_t *shared, size_t shared_len,
                        const uint8_t *p, size_t len,
                        const dc_tile_hdr *h, uint32_t c, const dc_out *out, const dc_place *pl,
                        uint32_t *nnz_only, dc_error *err) {
  const dc_chunk_info *ci = &h->chunk[c];
  PROF_START;
  if (h->shared_checksum != dc_checksum(shared, shared_len))
    CORRUPT("chunk %u: rans tables: checksum mismatch", c);
  ctx_state *s;
#ifdef DC_CTX_X86
  const int vec = dc_simd_level() >= DC_SIMD_AVX2;   /* once: DC_SIMD may change between calls */
#else
  const int vec = 0;
#endif
  int rc = dc_ctx_get_tables(d, shared, shared_len, h->n_genes, vec, c, &s, err);
  if (rc) return rc;
  if (s->ver != (h->version >= 3 ? 3u : 2u))
    CORRUPT("chunk %u: rans tables of model version %u in a version %u tile", c, s->ver, h->version);
  const dc_ctx_model *m = &s->m;
  const uint8_t *pe = p + len;
  uint64_t craw, cz, mlen, dlen;
  size_t k;
  if (!(k = dc_get_varint(p, pe, &craw))) CORRUPT("chunk %u: truncated payload", c);
  p += k;
  if (!(k = dc_get_varint(p, pe, &cz)) || cz > (uint64_t)(pe - p - k)) CORRUPT("chunk %u: truncated payload", c);
  p += k;
  if (craw > 5ull * m->nrb * ci->n_cells || craw < (uint64_t)m->nrb * ci->n_cells)
    CORRUPT("chunk %u: bucket counts of %llu bytes for %u cells", c, (unsigned long long)craw, ci->n_cells);
  const uint8_t *zc = p;
  p += cz;
  if (!(k = dc_get_varint(p, pe, &mlen))) CORRUPT("chunk %u: truncated payload", c);
  p += k;
  if (!(k = dc_get_varint(p, pe, &dlen))) CORRUPT("chunk %u: truncated payload", c);
  p += k;
  if (dlen > (uint64_t)(pe - p) || mlen > (uint64_t)(pe - p) - dlen || mlen < 8)
    CORRUPT("chunk %u: section sizes out of range", c);
  const uint8_t *dir = p, *dire = p + dlen, *mant = dire;
  const uint8_t *sp = mant + mlen;

  /* scratch: raw counts | counts (u32, cells x nrb) | stream cursors |
  ** symbols (+ slack for 16-byte copies) | one cell's symbol list */
  size_t ncnt = (size_t)ci->n_cells * m->nrb;
  size_t off_cnt = ((size_t)craw + 7) & ~(size_t)7;
  size_t off_cur = off_cnt + ((ncnt * 4 + 7) & ~(size_t)7);
  size_t off_sym = off_cur + (size_t)m->n_ctx * sizeof(uint8_t *);
  size_t off_fl = (off_sym + (size_t)ci->nnz + 64 + 31) & ~(size_t)31;
  size_t max_cell = ci->nnz < h->n_genes ? (size_t)ci->nnz : h->n_genes;
  size_t off_mant = (off_fl + (max_cell + 32) * 2 + 7) & ~(size_t)7;
  if (mlen > SIZE_MAX / 2 || max_cell > SIZE_MAX / 64) CORRUPT("chunk %u: section sizes out of range", c);
  /* placing: a sink for the cells kept nowhere (indices, then counts at n_genes + 8) */
  size_t off_sink = (off_mant + (size_t)mlen + 10 * max_cell + 80 + 63) & ~(size_t)63;
  size_t sink_len = pl ? ((size_t)h->n_genes + 8) * 8 + 64 : 0;
  rc = dc_decoder_scratch(d, off_sink + sink_len, err);
  if (rc) return rc;
  uint8_t *craw_p = d->scratch;
  uint32_t *bcnt = (uint32_t *)(d->scratch + off_cnt);
  const uint8_t **cur = (const uint8_t **)(d->scratch + off_cur);
  uint8_t *syms = d->scratch + off_sym;
  uint16_t *fl = (uint16_t *)(d->scratch + off_fl);
  uint8_t *mcopy = d->scratch + off_mant;
  uint64_t max_tot = 0;
  uint8_t slow[DC_CTX_MAXQ * DC_CTX_MAXRB];

  /* 1. bucket counts */
  if (!d->zstd_dctx) d->zstd_dctx = ZSTD_createDCtx();
  if (!d->zstd_dctx) {
    dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory for a zstd context", c);
    return DC_ENOMEM;
  }
  if (ZSTD_getFrameContentSize(zc, (size_t)cz) != craw) CORRUPT("chunk %u: bucket counts: bad zstd frame", c);
  size_t z = ZSTD_decompressDCtx(d->zstd_dctx, craw_p, (size_t)craw, zc, (size_t)cz);
  if (ZSTD_isError(z) || z != craw) CORRUPT("chunk %u: bucket counts: bad zstd frame", c);
  {
    const uint8_t *a = craw_p, *ae = craw_p + craw;
    uint64_t sum = 0;
    uint64_t nper[DC_CTX_MAXQ * DC_CTX_MAXRB];
    memset(slow, 0, sizeof slow);
    memset(nper, 0, sizeof nper);
    int64_t *indptr = out ? out->indptr + ci->first_cell : NULL;
    if (indptr) dc_indptr_edge(&indptr[0], (int64_t)ci->nnz_before);
    for (uint32_t i = 0; i < ci->n_cells; i++) {
      uint32_t *bc = bcnt + (size_t)i * m->nrb;
      uint64_t tot = 0;
      for (uint32_t b = 0; b < m->nrb; b++) {
        uint64_t v;
        if (a < ae && *a < 0x80) { v = *a++; }
        else {
          if (!(k = dc_get_varint(a, ae, &v))) CORRUPT("chunk %u: bucket counts: truncated", c);
          a += k;
        }
        uint64_t width = b == 0 ? dc_ctx_rb_lo(1, m->shift) : dc_ctx_rb_lo(b, m->shift);
        if (v > width) CORRUPT("chunk %u: cell %u: %llu nonzeros in rank bucket %u", c, ci->first_cell + i,
                               (unsigned long long)v, b);
        bc[b] = (uint32_t)v;
        tot += v;
      }
      if (tot > m->n_local || tot > ci->nnz - sum)
        CORRUPT("chunk %u: cell %u has %llu nonzeros (%u genes, %llu left in the chunk)", c,
                ci->first_cell + i, (unsigned long long)tot, m->n_local, (unsigned long long)(ci->nnz - sum));
      if (nnz_only) nnz_only[i] = (uint32_t)tot;
      uint32_t q = dc_ctx_q(m, tot);
      if (tot > max_tot) max_tot = tot;
      for (uint32_t b = 0; b < m->nrb; b++) nper[q * m->nrb + b] += bc[b];
      sum += tot;
    }
    if (sum != ci->nnz)
      CORRUPT("chunk %u: cells hold %llu nonzeros, header says %llu", c, (unsigned long long)sum,
              (unsigned long long)ci->nnz);
    if (a != ae) CORRUPT("chunk %u: bucket counts: trailing bytes", c);
    if (nnz_only) return DC_OK;     /* the per-cell counts are all that was asked */
    if (indptr) dc_indptr_edge(&indptr[ci->n_cells], (int64_t)(ci->nnz_before + sum));

    PROF(0);
    /* 2. streams.  A context is slow in this chunk if a coded symbol of it is
    ** slow or an escape occurs in its stream: stage 3's fast loops see
    ** neither, whatever the bytes say. */
    dc_ctx_stream_fn fn = stream_fn(vec), pfn = pairs_fn(vec);
    uint64_t o = 0;
    int pend = -1;                    /* a stream waiting for a partner */
    dc_ctx_stream pst;
    for (uint32_t x = 0; x < m->n_ctx; x++) {
      uint64_t n = nper[x];
      cur[x] = syms + o;
      if (!n) continue;
      if (!s->nsym[x]) CORRUPT("chunk %u: %llu symbols in an unused context", c, (unsigned long long)n);
      /* directory entry: stream bytes, then the words of lane groups 0..2; a pair context's
      ** (version 3) then its raw symbols, which end the stream */
      const uint32_t K = s->pk[x];
      const uint64_t steps = K ? n / 2 : n;
      uint64_t sl, nw[3], nside = 0;
      if (!(k = dc_get_varint(dir, dire, &sl)) || sl > (uint64_t)(pe - sp))
        CORRUPT("chunk %u: stream directory: bad length", c);
      dir += k;
      uint64_t st_len = 4ull * (steps < DC_CTX_LANES ? steps : DC_CTX_LANES), used = st_len;
      for (uint32_t g = 0; g < 3; g++) {
        if (!(k = dc_get_varint(dir, dire, &nw[g])) || nw[g] > sl) CORRUPT("chunk %u: stream directory: bad length", c);
        dir += k;
        used += 2 * nw[g];
      }
      if (K) {
        if (!(k = dc_get_varint(dir, dire, &nside)) || nside > sl) CORRUPT("chunk %u: stream directory: bad length", c);
        dir += k;
        used += nside;
      }
      if (used > sl || (sl - used) % 2) CORRUPT("chunk %u: stream of context %u: bad lengths", c, x);
      const uint8_t *raw = sp + sl - nside;   /* a pair context's raw symbols */
      dc_ctx_stream st = {.st = sp};
      const uint8_t *q = sp + st_len;
      for (uint32_t g = 0; g < 4; g++) {
        st.w[g] = q;
        q = g < 3 ? q + 2 * nw[g] : raw;
        st.we[g] = q;
      }
      const uint8_t *tab = s->tab + (size_t)x * s->tstride;
      if (K) {                        /* pairs: the steps, then the other symbols, raw */
        uint64_t raw_at = 0;
        uint32_t rounds = 0;
        st.raw = raw;
        st.n_raw = nside;
        st.raw_at = &raw_at;
        st.n1 = s->nsym[x];
        st.rounds = &rounds;
        if (pfn(tab, &st, (uint32_t)steps, syms + o))
          CORRUPT("chunk %u: rans stream of context %u is corrupt or truncated", c, x);
        if (pair_fixup(syms + o, n, raw, nside, s->nsym[x], vec, 64 * (uint64_t)rounds, raw_at))
          CORRUPT("chunk %u: rans stream of context %u: its symbols do not match its %llu raw symbols", c, x,
                  (unsigned long long)nside);
        /* an escape: among the pairs' symbols, or else only in the raw ones (no pass over all) */
        slow[x] = s->has_slow[x] || (s->pesc[x] ? memchr(syms + o, s->nsym[x] - 1, (size_t)n)
                                                : memchr(raw, s->nsym[x] - 1, (size_t)nside)) != NULL;
      } else
#ifdef DC_CTX_X86
      if (vec) {                      /* AVX2: two streams at a time */
        if (pend < 0) {
          pend = (int)x;
          pst = st;
        } else {
          int r2 = dc_ctx_stream2_avx2(s->tab + (size_t)pend * s->tstride, &pst, (uint32_t)nper[pend],
                                       (uint8_t *)cur[pend], tab, &st, (uint32_t)n, syms + o);
          if (r2) CORRUPT("chunk %u: rans stream of context %u is corrupt or truncated", c, r2 == -1 ? (uint32_t)pend : x);
          pend = -1;
        }
      } else
#endif
      if (fn(tab, &st, (uint32_t)n, syms + o))
        CORRUPT("chunk %u: rans stream of context %u is corrupt or truncated", c, x);
      sp += sl;
      o += n;
    }
    if (dir != dire || sp != pe) CORRUPT("chunk %u: trailing bytes after the streams", c);
    if (pend >= 0 && fn(s->tab + (size_t)pend * s->tstride, &pst, (uint32_t)nper[pend], (uint8_t *)cur[pend]))
      CORRUPT("chunk %u: rans stream of context %u is corrupt or truncated", c, (uint32_t)pend);
    for (uint32_t x = 0; x < m->n_ctx; x++)
      if (!s->pk[x]) slow[x] = nper[x] && (s->has_slow[x] || memchr(cur[x], s->nsym[x] - 1, (size_t)nper[x]));
  }

  PROF(1);
  /* 3. cells */
  /* a copy of the mantissa section followed by 10 zero bytes per nonzero of
  ** the largest cell (the most a symbol can consume) and 80 more (the AVX2
  ** cell decoder loads 64 bytes at a time), so that stage 3's reads need no
  ** bounds (see place) */
  memcpy(mcopy, mant, (size_t)mlen);
  memset(mcopy + mlen, 0, 10 * (size_t)max_tot + 80);
  mreader r = {mcopy, 0, mlen + 10 * max_tot + 8, 8 * mlen};
  /* decoding: the tile's arrays; placing: each cell's own place (set per cell in place) */
  int64_t *indptr = out ? out->indptr + ci->first_cell : NULL;
  int32_t *idx = out ? out->indices + ci->nnz_before : NULL;
  void *val = out ? (uint8_t *)out->values + 4 * ci->nnz_before : NULL;     /* int32 or float32 */
  int f32 = (out ? out->values_f32 : pl->values_f32) != 0, bad;
  int32_t *sink = pl ? (int32_t *)(d->scratch + off_sink) : NULL;
#ifdef DC_CTX_X86
  if (vec)
    bad = (pl ? place_to_avx2 : place_avx2)(s, bcnt, ci->n_cells, cur, fl, slow, &r, indptr, ci->nnz_before, idx,
                                            val, m->n_local, f32, pl, sink);
  else
#endif
    bad = (pl ? place_to : place)(s, bcnt, ci->n_cells, cur, fl, slow, &r, indptr, ci->nnz_before, idx, val,
                                  m->n_local, f32, pl, sink);
  PROF(2);
  if (bad) CORRUPT("chunk %u: corrupt symbols (gene index out of range or bad escape)", c);
  if ((r.pos + 7) / 8 != mlen - 8) CORRUPT("chunk %u: mantissa bits do not match their section", c);
  return DC_OK;
}
