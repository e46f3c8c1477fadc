/*
** dc_ctx.h — definitions shared by the encoder and the decoders of the
** default codec, `rans` (codec id 3, tile format version 3; 2 is read).  Private to
** ext/codec.  The bytes are written down in docs/format.md section 2; why the
** design looks like this, with measurements, in docs/codec-design.md.
**
** Model.  A gene's *rank bucket* is 0 for genes below 2^s (s = the model's
** shift: 4, or in a tile of small cells where it pays the smallest that puts
** every gene in bucket 0, dc_tile_encode) and floor(log2 gene) - s + 1
** above.  Each chunk stores, per cell, how
** many of its nonzeros fall in each rank bucket, so every nonzero's context =
** (cell-size bucket of its cell, rank bucket of its gene) is known before its
** symbol is decoded.  The symbols of one context form one order-0 stream,
** decoded in bulk: the table stays in L1 and no step waits for the previous
** gene.  A symbol is the joint (gap code, count code) of a nonzero (gap =
** gene - previous gene - 1 in the cell).  The codes' mantissa bits go to one
** raw bit stream per chunk in nonzero order.
**
** Coder.  Static rANS, 12-bit probabilities, 32-bit states in [2^16, 2^32),
** 16-bit renormalisation (at most one word per step), 32 lanes interleaved
** symbol by symbol (symbol i of a stream uses lane i mod 32).  Lanes 8g ..
** 8g+7 share word stream g (four per context stream), read in symbol order,
** so 8 (AVX2) or 16 (AVX-512) lanes decode per instruction, the scalar
** decoder is the same loop one lane at a time, and the four groups do not
** wait on each other's word pointers.
**
** Pairs (model version 3).  A context may instead code its stream two
** symbols per step: step k codes the pair (2k, 2k+1) as one of (K+1)^2 codes
** over its K <= 32 most frequent symbols and "another symbol", or as the
** escaped pair; the other symbols, the escaped pairs' and an odd last one
** follow the stream's words as raw bytes.  The decoders write 0xff for each
** of them and a fix-up pass puts the raw bytes in; stage 3 is the same for
** both kinds of context.  The encoder makes a context a pair context where
** that costs at most PAIR_SLACK more bits (dc_ctx_compress.c).
*/
#ifndef DC_CTX_H
#define DC_CTX_H

#include "dc_internal.h"

#define DC_CTX_PREC      12u
#define DC_CTX_M         (1u << DC_CTX_PREC)
#define DC_CTX_L         (1u << 16)      /* states live in [L, 2^32) */

/* The encoder divides a state x by a frequency f (1 <= f <= M) with x < f << 20 (below
** ((L >> PREC) << 16) f, after renormalisation).  With r = ceil(2^44 / f) = (2^44 + e) / f,
** 0 <= e < f: x r / 2^44 = x / f + x e / (f 2^44), and x e < f^2 2^20 <= 2^44, so the error
** stays under 1 / f, less than the distance from x / f up to the next integer:
** (x r) >> 44 = floor(x / f) exactly.  x r < 2^64: x <= f 2^20 - 1 gives
** x r <= 2^64 + 2^20 e - (2^44 + e) / f, and e f < 2^24.  A multiplication instead of a division
** (test_codec checks every f). */
#define DC_CTX_RCP_SHIFT 44u
static inline uint64_t dc_ctx_rcp(uint32_t f) { return (((uint64_t)1 << DC_CTX_RCP_SHIFT) + f - 1) / f; }
static inline uint32_t dc_ctx_rcp_div(uint32_t x, uint64_t r) { return (uint32_t)(((uint64_t)x * r) >> DC_CTX_RCP_SHIFT); }
#define DC_CTX_LANES     32u
#define DC_CTX_MAXSYM    255u            /* coded symbols per context; index 255.. never used */
#define DC_CTX_NCODES    66u             /* value codes 0..65 cover 0 .. 2^32-1 (see dc_vcode) */
#define DC_CTX_NGC       64u             /* gap codes (gaps < 2^32) */
#define DC_CTX_NID       (DC_CTX_NGC * DC_CTX_NCODES)   /* joint ids: gap code * 66 + count code */
#define DC_CTX_ESC_BITS  13u             /* an escaped symbol's joint id, raw */
#define DC_CTX_MAXQ      4u              /* cell-size buckets */
#define DC_CTX_MAXRB     32u             /* rank buckets */
#define DC_CTX_MODEL_VERSION 3u         /* written (tile version 3); 2 (tile version 2) is read too */
#define DC_CTX_MAXSYM3   254u            /* version 3: coded symbols per context, so that symbol
                                            indices stay below 255, the escaped pair's mark */
#define DC_CTX_KMAX      32u             /* version 3: a pair context's top symbols, at most */
#define DC_CTX_PAIR_ESC  0xffu           /* a symbol outside a pair context's top K, as the pair
                                            decoders write it (its index follows raw) */
#define DC_CTX_MAP_MIN   0.95            /* map when at most this share of genes occurs */

/* Rank bucket of gene g under shift s (1 <= s <= 16). */
static inline uint32_t dc_ctx_rb(uint32_t g, uint32_t s) {
  if (g < (1u << s)) return 0;
  return 31u - (uint32_t)__builtin_clz(g) - s + 1u;
}
/* First gene of rank bucket b. */
static inline uint64_t dc_ctx_rb_lo(uint32_t b, uint32_t s) {
  return b == 0 ? 0 : 1ull << (b + s - 1);
}

/* The model as both sides hold it.  With a gene map, the tile's genes are
** renumbered 0 .. n_local-1 (the genes with a nonzero in the tile, in
** order) before anything else, so that a tile of a dataset merged from
** several inputs does not pay for the genes of the others. */
typedef struct dc_ctx_model {
  uint32_t n_local;                  /* genes after the map (= n_genes without one) */
  uint32_t mapped;                   /* 1: the shared section holds a gene map */
  uint32_t nq;                       /* cell-size buckets, 1..4 */
  uint32_t q_lim[DC_CTX_MAXQ];       /* bucket k holds cells with nnz < q_lim[k] (last: all) */
  uint32_t nrb;                      /* rank buckets, 1..32 */
  uint32_t shift;                    /* s of dc_ctx_rb */
  uint32_t n_ctx;                    /* nq * nrb; ctx = q * nrb + rank bucket */
} dc_ctx_model;

static inline uint32_t dc_ctx_q(const dc_ctx_model *m, uint64_t nnz) {
  uint32_t k = 0;
  while (k + 1 < m->nq && nnz >= m->q_lim[k]) k++;
  return k;
}


/* ------------------------------------------------------------ decoding
** Slot tables (4096 slots per context), in one of two layouts:
**   vector (the AVX2 decoder): one u32 per slot, bits 0..11 frequency,
**     12..23 slot - start, 24..31 symbol index;
**   portable: one u32 per slot, frequency | (slot - start) << 16, then one
**     byte per slot, the symbol index (every field is a load, none a shift
**     and mask: 0.91x the portable decode time, docs/codec-design.md).
** A stream as the decoders see it: min(n, 32) initial states (u32), then the
** word streams of the four lane groups. */
typedef struct dc_ctx_stream {
  const uint8_t *st;                 /* states, 4 bytes each                  */
  const uint8_t *w[4], *we[4];       /* word stream of lane group g: [w, we)  */
  /* the AVX2 pair decoder puts a pair context's raw symbols in as it goes (NULL: not asked):
  ** raw[*raw_at..n_raw), each < n1, for its whole rounds of 32 steps (*rounds of them) */
  const uint8_t *raw;
  uint64_t n_raw, *raw_at;
  uint32_t n1, *rounds;
} dc_ctx_stream;
/* The stream decoders (one per instruction set) turn a stream of n symbols
** into n symbol indices.  Each returns 0, or -1 when the stream is corrupt
** (runs out of words, has words left, or ends in a wrong state). */
/* A pair context's next raw symbol into *dst: raw[*j] if one is left and it is below n1 (the
** context's symbols); 0, or -1 when not. */
static inline int dc_ctx_put_raw(uint8_t *dst, const uint8_t *raw, uint64_t n_raw, uint32_t n1, uint64_t *j) {
  if (*j == n_raw || raw[*j] >= n1) return -1;
  *dst = raw[(*j)++];
  return 0;
}
typedef int (*dc_ctx_stream_fn)(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out);
int dc_ctx_stream_scalar(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out);
/* The initial states (the rest = L), and the one-symbol-at-a-time tail from
** symbol `done` on with states x[32] and word pointers w[4], which checks
** every read and the final states (vec: the table's layout, above). */
void dc_ctx_stream_start(const dc_ctx_stream *s, uint32_t n, uint32_t *x);
int dc_ctx_stream_tail(const void *tab, int vec, const dc_ctx_stream *s, uint32_t *x, const uint8_t **w,
                       uint32_t done, uint32_t n, uint8_t *out);
/* Version 3's pair contexts: a stream of n steps, each two symbol indices (2n bytes out; a
** symbol outside the context's top K comes out as DC_CTX_PAIR_ESC, replaced afterwards from
** the stream's raw symbols).  Slot tables: vector layout u32 freq | bias << 12 | sym0 << 24 per
** slot, then a byte of sym1 per slot; portable layout u16 frequencies, u16 biases, then two
** symbol bytes per slot. */
int dc_ctx_pairs_scalar(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out);
int dc_ctx_pairs_tail(const void *tab, int vec, const dc_ctx_stream *s, uint32_t *x, const uint8_t **w,
                      uint32_t done, uint32_t n, uint8_t *out);
/* What a symbol index means, for stage 3 (8 bytes, so that the place loop
** addresses it with one scaled index, and the AVX2 cell decoder loads it as
** one u64: gbase | cbase << 16 | gmask << 32 | nb << 48 | gb << 56).  Fast
** symbols have values below 2^16 and at most 28 mantissa bits (two of them
** fit one 57-bit read): gap = gbase + (bits & gmask), count = cbase +
** (bits >> gb), bits = the next nb mantissa bits.  Slow ones (nb = SLOW) keep
** the codes in gbase and cbase; gmask is 1 for big values and 2 for the
** escape. */
typedef struct dc_ctx_sinfo {
  uint16_t gbase, cbase, gmask;
  uint8_t nb, gb;
} dc_ctx_sinfo;
#define DC_CTX_SLOW 255u
/* Stage 3 asks for the output's lines this many nonzeros ahead of its stores (1 KiB of int32:
** past a cell's end, the next cell's first lines where rows are contiguous), in both paths; the
** portable one only in cells at least this long (docs/codec-design.md, stop 68). */
#define DC_CTX_PF_AHEAD 256
#if defined(__x86_64__) && defined(__GNUC__)
#define DC_CTX_X86 1

/* Stage 3 of one cell whose symbols are all fast, on AVX2 (dc_ctx_simd.c).
** fl: the cell's tot symbols as (rank bucket << 8 | symbol index), indices
** into inf (the cell-size bucket's tables), followed by 8 entries that index
** inf safely.  mant: the padded mantissa copy (64 readable bytes past any
** position a cell may reach); pos: the cell's first mantissa bit.  Writes tot
** gene indices and counts (int32, or float32 when f32); returns the next
** bit position, and sets *bad when a gene index reaches n_genes.  map (or
** NULL): the tile's gene map (n_genes local ids -> genes), applied in the
** loop by scalar loads two steps behind the stores, not by a pass after it. */
uint64_t dc_ctx_cell_avx2(const dc_ctx_sinfo *inf, const uint16_t *fl, uint64_t tot, const uint8_t *mant,
                          uint64_t pos, uint32_t n_genes, const uint32_t *map, int32_t *ix, void *val,
                          int f32, int *bad);
/* The sum of the widths nbt[sp[j]] of n symbols of one context whose indices are below nsym
** (<= 256): 32 symbols per step, a shuffle per 16 entries of nbt (a skipped cell's bits, AVX2).
** Reads up to 31 bytes past sp + n (the symbol buffers' slack). */
uint64_t dc_ctx_width_sum_avx2(const uint8_t *nbt, uint32_t nsym, const uint8_t *sp, uint32_t n);
int dc_ctx_stream_avx2(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out);
int dc_ctx_pairs_avx2(const void *tab, const dc_ctx_stream *s, uint32_t n, uint8_t *out);
/* A pair context's fix-up (dc_ctx_decompress.c) on AVX2: from byte *i of the m at o, whole
** blocks of 64, each mark (DC_CTX_PAIR_ESC) replaced by the next of the nside raw symbols (from
** *j), each checked < n1.  Advances *i and *j; returns 0, or -1 when they do not match. */
int dc_ctx_fixup_avx2(uint8_t *o, uint64_t m, const uint8_t *side, uint64_t nside, uint32_t n1, uint64_t *i,
                      uint64_t *j);
/* Two streams decoded together (more independent work per round); returns 0,
** -1 when stream a is corrupt, -2 when stream b is. */
int dc_ctx_stream2_avx2(const void *tab_a, const dc_ctx_stream *sa, uint32_t na, uint8_t *oa,
                        const void *tab_b, const dc_ctx_stream *sb, uint32_t nb, uint8_t *ob);
#endif

/* The codec's entry points (dc_internal.h declares the rest of the codecs). */
/* pool: NULL, or the pool the model's counts are counted on (in parts of the tile's cells) */
/* first[0..n_chunks]: the chunks' cell boundaries (pairs are counted per chunk, as coded);
** v2: 1 writes the version-2 model (one symbol per step everywhere, tile version 2); pairs: 0
** pair contexts where they pay, 1 wherever possible, -1 none (dc_encode_opts) */
/* one_bucket: 1 puts every gene in rank bucket 0 (the shift the smallest, from 4, that holds
** the tile's genes, at most 16), 0 the shift 4 */
int dc_ctx_build_model(const dc_csr *in, int level, int v2, int pairs, int one_bucket, const uint32_t *first,
                       uint32_t n_chunks, dc_pool *pool, void **model, dc_buf *shared, dc_error *err);
uint32_t dc_ctx_model_nrb(const void *model);      /* a built model's rank buckets */
/* dc_tile_encode's default (dc_encode_opts.rans_one_bucket 0): a tile whose nonempty cells
** hold fewer than ONE_BUCKET_NNZ nonzeros on average is also encoded with one rank bucket,
** and that encoding kept when it is at most ONE_BUCKET_SLACK larger (docs/codec-design.md:
** scanpy_10x10k_subset, 69 nonzeros per cell: 2.7% larger, decoded in 0.87x the time on
** the AVX2 path and 0.94x on the portable one) */
#define DC_CTX_ONE_BUCKET_NNZ   256u
#define DC_CTX_ONE_BUCKET_SLACK 0.03
int dc_ctx_encode_chunk(const dc_chunk_in *c, int level, const void *model, dc_buf *out, dc_error *err);
void dc_ctx_free_model(void *model);
/* One of: out (decode into a tile's arrays), pl (place each cell, dc_chunk_place), nnz
** (the per-cell counts only, dc_chunk_cell_nnz). */
int dc_ctx_decode_chunk(dc_decoder *d, const uint8_t *shared, size_t shared_len,
                        const uint8_t *p, size_t len,
                        const dc_tile_hdr *h, uint32_t c, const dc_out *out, const dc_place *pl,
                        uint32_t *nnz, dc_error *err);
/* The gene map's bitmap of a shared section (checked as the decoder checks it), malloc'ed into
** *set, or *set NULL when the tile has no map (dc_tile_gene_set). */
int dc_ctx_gene_set(const uint8_t *shared, size_t shared_len, uint32_t n_genes, uint8_t **set, dc_error *err);
void dc_ctx_decoder_free(void *state);

#endif /* DC_CTX_H */
