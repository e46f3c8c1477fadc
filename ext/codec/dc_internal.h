/*
** dc_internal.h — private helpers shared by the files of ext/codec/.
** Not part of the public API (dc_codec.h).
*/
#ifndef DC_INTERNAL_H
#define DC_INTERNAL_H

#include "dc_codec.h"
#include <string.h>

/* ------------------------------------------------------------ tile header
** Fixed part (32 bytes), then n_chunks chunk records (24 bytes each), then
** the shared section checksum and the header checksum (4 bytes each).
** See docs/format.md section 2. */
/* The codec dc_encode_opts_default() picks. */
#define DC_CODEC_DEFAULT   DC_CODEC_RANS

#define DC_TILE_MAGIC      0x4C544344u   /* "DCTL" read as a little-endian u32 */
#define DC_TILE_VERSION    3u         /* written (codec 3); 1 to 3 are read (codec 3 needs 2 or 3) */
#define DC_HDR_FIXED       32u
#define DC_HDR_CHUNK       24u
#define DC_HDR_TAIL        8u
#define DC_HDR_LEN(nc)     ((uint64_t)DC_HDR_FIXED + (uint64_t)DC_HDR_CHUNK * (nc) + DC_HDR_TAIL)

static inline uint16_t dc_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t dc_rd32(const uint8_t *p) {
  uint32_t v; memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}
static inline uint64_t dc_rd64(const uint8_t *p) {
  return (uint64_t)dc_rd32(p) | ((uint64_t)dc_rd32(p + 4) << 32);
}
static inline void dc_wr16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void dc_wr32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void dc_wr64(uint8_t *p, uint64_t v) { dc_wr32(p, (uint32_t)v); dc_wr32(p + 4, (uint32_t)(v >> 32)); }

/* The first and last indptr entries of a chunk are shared with the
** neighbouring chunks, which write the same value: relaxed atomic stores keep
** parallel chunk decodes free of data races. */
static inline void dc_indptr_edge(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

/* ------------------------------------------------------------ value codes
** Both rANS codecs code a gap or a count v as a value code (exact below 8,
** then two per octave: codes 0..65 cover 0 .. 2^32-1) plus the code's extra
** (mantissa) bits; docs/format.md section 2. */
static inline uint32_t dc_vcode(uint64_t v) {
  if (v < 8) return (uint32_t)v;
  uint32_t e = 63u - (uint32_t)__builtin_clzll(v);
  return 8u + 2u * (e - 3u) + (uint32_t)((v >> (e - 1)) & 1u);
}
/* base value and number of extra bits of code c (c < 66) */
static inline uint64_t dc_vbase(uint32_t c) {
  if (c < 8) return c;
  uint32_t e = (c - 8) / 2 + 3, sub = (c - 8) & 1;
  return (uint64_t)(2u | sub) << (e - 1);
}
static inline uint32_t dc_vbits(uint32_t c) { return c < 8 ? 0 : (c - 8) / 2 + 2; }

/* Scales counts c[0..n) to frequencies f summing to m, each >= 1 (needs
** n <= m); slots are moved where they cost least. */
void dc_normalize_freqs(const uint64_t *c, uint32_t *f, uint32_t n, uint32_t m);

/* The shared section of a rANS tile: varint raw size (at most max), then
** one zstd frame of it.  Returns a malloc'd copy of the raw bytes (*raw_len
** of them), or NULL with err set ("chunk C: rans tables: why", DC_ECORRUPT or
** DC_ENOMEM in err->code).  d NULL: a zstd context of the call's own (no
** decoder at hand: dc_tile_gene_set). */
uint8_t *dc_unpack_shared(dc_decoder *d, const uint8_t *sh, size_t sh_len, uint64_t max, uint32_t c,
                          size_t *raw_len, dc_error *err);

/* ------------------------------------------------------------ byte buffer */
typedef struct dc_buf {
  uint8_t *p;
  size_t len, cap;
  int oom;               /* sticky: an allocation failed */
} dc_buf;
int dc_buf_reserve(dc_buf *b, size_t extra);      /* 0 ok, -1 oom (sets b->oom) */
void dc_buf_put(dc_buf *b, const void *src, size_t n);
void dc_buf_varint(dc_buf *b, uint64_t v);
void dc_buf_free(dc_buf *b);

/* LEB128 varint reader: returns bytes consumed, 0 if truncated or > 10 bytes. */
static inline size_t dc_get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  unsigned shift = 0;
  const uint8_t *s = p;
  while (p < end && shift < 64) {
    uint8_t b = *p++;
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) { *v = r; return (size_t)(p - s); }
    shift += 7;
  }
  return 0;
}

/* ------------------------------------------------------------ codecs */
/* A chunk as the encoder sees it: cells [0, n_cells) of a CSR window. */
typedef struct dc_chunk_in {
  uint32_t n_cells;
  uint32_t n_genes;
  const uint64_t *indptr;   /* n_cells+1 entries, absolute offsets into indices/data */
  const uint32_t *indices;
  const uint32_t *data;
  uint64_t nnz;
} dc_chunk_in;

int dc_zstd_encode_chunk(const dc_chunk_in *c, int level, dc_buf *out, dc_error *err);

/* rANS codec (dc_rans_compress.c): a model built over the whole tile is
** written to the tile's shared section; chunks are coded with it. */
int dc_rans_build_model(const dc_csr *in, int level, void **model, dc_buf *shared, dc_error *err);
int dc_rans_encode_chunk(const dc_chunk_in *c, int level, const void *model, dc_buf *out, dc_error *err);
void dc_rans_free_model(void *model);

struct dc_decoder {
  void *zstd_dctx;           /* ZSTD_DCtx*, created on first use */
  uint8_t *scratch;          /* codec scratch, reused (dc_mem_alloc) */
  size_t scratch_cap, scratch_map;
  void *rans;                /* rans-v1 decoder state (tables), codec private */
  void *ctx;                 /* rans decoder state (tables), codec private */
};
int dc_decoder_scratch(dc_decoder *d, size_t need, dc_error *err);

/* Chunk payload decoders: payload has been checksum-verified; they still
** check every length and index.  Output goes at the chunk's place in out. */
int dc_zstd_decode_chunk(dc_decoder *d, const uint8_t *p, size_t len,
                         const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err);
/* shared = the tile's verified shared section (tables). */
int dc_rans_decode_chunk(dc_decoder *d, const uint8_t *shared, size_t shared_len,
                         const uint8_t *p, size_t len,
                         const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err);
void dc_rans_decoder_free(void *state);

#endif /* DC_INTERNAL_H */
