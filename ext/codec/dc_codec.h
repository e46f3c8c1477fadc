/*
** dc_codec.h — the deltacells tile codec and threaded decoder (public API).
**
** Pure C: no SQLite and no HDF5 here, so the codec is tested and fuzzed alone.
** Layout, as zstd's lib/: common (errors, header, checksums, pool), compress
** (encoder) and decompress (decoder) live in separate files of ext/codec/.
** The byte format is written down in docs/format.md; the threading rules in
** docs/threading.md.
**
** A tile is a CSR block of up to about 10,000 cells.  Gene indices are in the
** dataset's numbering (gene 0 = most total counts), strictly increasing within
** a cell.  Counts are unsigned 32-bit.  A tile is split into independently
** compressed chunks (8 by default) of consecutive cells.
**
** Ownership: every output buffer of a decode is owned by the caller and may be
** reused across calls.  Functions never call exit() or abort() on bad data;
** they return a DC_E* code and fill a dc_error with a message.
*/
#ifndef DC_CODEC_H
#define DC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */
enum {
  DC_OK = 0,
  DC_ECORRUPT = 1,     /* bad magic, version, length, checksum or payload   */
  DC_ENOMEM = 2,       /* allocation failed                                 */
  DC_EARG = 3,         /* caller passed something invalid                   */
  DC_EUNSUPPORTED = 4  /* unknown codec id or format version                */
};

typedef struct dc_error {
  int code;            /* DC_OK or a DC_E* code */
  char msg[256];       /* names the thing and the reason, e.g. "chunk 3: checksum mismatch" */
} dc_error;

void dc_error_set(dc_error *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
const char *dc_strerror(int code);

/* ---------------------------------------------------------------- codecs */
enum {
  DC_CODEC_RANS_V1 = 1, /* "rans-v1": the first release's codec (tile version 1);
                          read for old datasets, written only on request         */
  DC_CODEC_ZSTD = 2,   /* the published design: zstd over byte planes, per chunk   */
  DC_CODEC_RANS = 3    /* "rans", the default (dc_encode_opts_default): contexts
                          known before decoding, one stream per context, 32-lane
                          rANS with 16-bit words; decoders for AVX-512, AVX2 and
                          portable C (docs/codec-design.md) */
};
const char *dc_codec_name(int codec_id);          /* "rans", "zstd", "rans-v1", or NULL */
int dc_codec_from_name(const char *name);         /* id, or 0 if unknown     */
/* The levels codec_id takes besides 0 (its default): *lo .. *hi; -1 for an unknown codec. */
int dc_codec_levels(int codec_id, int *lo, int *hi);

typedef struct dc_encode_opts {
  int codec;           /* DC_CODEC_*; default DC_CODEC_RANS (see the enum)   */
  int level;           /* 0 = codec default.  zstd: the zstd level (default
                          19).  rans: number of cell-size buckets of the
                          model, 1..4 (default by tile size: 1 below 1 M
                          nonzeros, 2, 3, 4 from 12 M); rans-v1: 1..8.
                          Out of range: the default (dc_codec_levels says
                          what a codec takes)                               */
  uint32_t n_chunks;   /* chunks per tile, at most; default DC_CHUNKS_MAX  */
  uint32_t chunk_cells;/* the fewest cells a chunk should hold: a tile of
                          nnz nonzeros gets min(n_chunks, max(DC_CHUNKS_BASE,
                          ceil(nnz / DC_CHUNK_NNZ)), max(2, n_cells /
                          chunk_cells)) chunks, past 8 rounded up to a
                          multiple of 4 (down where n_chunks is lower), so
                          that 2 or 4 threads share a tile evenly: 8, more
                          where a tile has over 8 M nonzeros (a chunk's
                          scratch then stays near the cores' caches,
                          docs/codec-design.md, 2026-12-07 (stop 65)), fewer
                          where its cells are few, so that a small tile's
                          context streams stay long (2026-12-06, later);
                          default DC_CHUNK_CELLS;
                          0: n_chunks exactly.  Either way at most n_cells */
  int threads;         /* encoder threads across chunks; 0 = one per core    */
  int rans_v2;         /* rans: 1 writes the previous model (tile version 2:
                          one symbol per rANS step everywhere), which readers
                          before 2026-12 read; 0 (default) the current one
                          (tile version 3: pairs of symbols per step where
                          that pays, docs/codec-design.md)                  */
  int rans_pairs;      /* rans, version 3: 0 (default) pairs where the model
                          says they pay; 1 in every context that has two or
                          more symbols; -1 in none (for tests and benchmarks) */
  int rans_one_bucket; /* rans, version 3: 0 (default) one rank bucket for
                          every gene (one segment per cell: faster on small
                          cells) in a tile of small cells where that costs
                          at most 3% more bytes; 1 always; -1 never (rank
                          buckets of 16 genes and octaves above) */
} dc_encode_opts;
void dc_encode_opts_default(dc_encode_opts *o);
#define DC_CHUNK_CELLS 512
#define DC_CHUNKS_MAX 32           /* n_chunks's default                                */
#define DC_CHUNKS_BASE 8           /* chunks of a tile of up to 8 x DC_CHUNK_NNZ nonzeros */
#define DC_CHUNK_NNZ (1u << 20)    /* a chunk's nonzeros, at most, where its tile has room */
/* The chunks a tile of n_cells cells and nnz nonzeros is encoded in under o (the rule above). */
uint32_t dc_encode_chunks(const dc_encode_opts *o, uint32_t n_cells, uint64_t nnz);

/* A CSR tile given to the encoder.  indptr has n_cells+1 entries, indptr[0]
** need not be 0 (the tile may be a window of a larger CSR); indices and data
** are indexed by indptr.  indices must be < n_genes and strictly increasing
** within each cell (the encoder checks and fails with DC_EARG otherwise). */
typedef struct dc_csr {
  uint32_t n_cells;
  uint32_t n_genes;
  const uint64_t *indptr;
  const uint32_t *indices;
  const uint32_t *data;
} dc_csr;

/* Encodes one tile.  *out is allocated with malloc() and owned by the caller. */
int dc_tile_encode(const dc_csr *in, const dc_encode_opts *o,
                   uint8_t **out, size_t *out_len, dc_error *err);

/* ---------------------------------------------------------------- header */
typedef struct dc_chunk_info {
  uint32_t first_cell;   /* first cell of the chunk, relative to the tile */
  uint32_t n_cells;
  uint64_t nnz_before;   /* nonzeros of the tile before this chunk        */
  uint64_t nnz;
  uint64_t offset;       /* byte offset of the chunk payload in the tile  */
  uint64_t length;       /* byte length of the chunk payload              */
  uint32_t checksum;     /* dc_checksum() of the payload (added by codec)  */
} dc_chunk_info;

#define DC_MAX_CHUNKS 256

typedef struct dc_tile_hdr {
  uint32_t version;      /* format version                                */
  uint32_t codec;        /* DC_CODEC_*                                    */
  uint32_t n_cells;
  uint32_t n_genes;
  uint64_t nnz;
  uint32_t n_chunks;     /* 0 only for an empty tile (n_cells == 0)        */
  uint64_t hdr_len;      /* bytes of header before the first payload      */
  /* Codec-wide shared section (e.g. rANS tables), between the header and the
  ** first chunk payload; chunk decodes read and verify it.  May be empty.
  ** (fields added by the codec engineer) */
  uint64_t shared_offset;
  uint64_t shared_len;
  uint32_t shared_checksum;
  dc_chunk_info chunk[DC_MAX_CHUNKS];
} dc_tile_hdr;

/* Parses and validates the header (every length and offset checked against
** len).  Reads only the header bytes; payloads are checked when decoded. */
int dc_tile_parse(const uint8_t *buf, size_t len, dc_tile_hdr *h, dc_error *err);

/* Bytes needed to parse the header of a tile, given its first `have` bytes:
** returns 0 when `have` suffices, else a byte count to read first (lets a
** reader fetch just the header of a blob). */
size_t dc_tile_header_need(const uint8_t *buf, size_t have);

/* Cells -> chunks (added by the codec engineer).  dc_chunk_of_cell returns the
** chunk holding tile-relative cell `cell`, or -1 if cell >= n_cells.
** dc_chunks_for_cells writes the sorted distinct chunks holding the given
** cells to chunks_out (room for h->n_chunks entries) and returns their count;
** cells out of range are ignored. */
int dc_chunk_of_cell(const dc_tile_hdr *h, uint32_t cell);
uint32_t dc_chunks_for_cells(const dc_tile_hdr *h, const uint32_t *cells, size_t n,
                             uint32_t *chunks_out);

/* ---------------------------------------------------------------- decode */
/* Tile-wide output buffers owned by the caller.  indptr has n_cells+1
** entries, indices and values nnz entries (sizes from the header).  A chunk
** decode writes indptr[first_cell .. first_cell+n_cells] (tile-relative, so
** indptr[0] = 0; the two end entries, shared with the neighbouring chunks, get
** the same value from both, stored atomically) and indices/values at
** [nnz_before, nnz_before+nnz).  So chunks of one tile can be decoded in
** parallel into the same buffers, and decoding only some chunks leaves valid
** indptr entries for every cell of those chunks.  Counts are uint32 stored in
** int32 (cast back to uint32 for counts >= 2^31), or float32 on request. */
typedef struct dc_out {
  int64_t *indptr;
  int32_t *indices;
  void *values;          /* int32_t* or float* (values_f32)               */
  int values_f32;        /* 1: write counts as float32                     */
} dc_out;

/* Per-thread decoding context (holds scratch and codec state); reusable. */
typedef struct dc_decoder dc_decoder;
dc_decoder *dc_decoder_new(void);
void dc_decoder_free(dc_decoder *d);

/* Decodes chunk `c` of a parsed tile.  Verifies the chunk checksum first. */
int dc_chunk_decode(dc_decoder *d, const uint8_t *buf, size_t len,
                    const dc_tile_hdr *h, uint32_t c, const dc_out *out,
                    dc_error *err);

/* Parses and decodes a whole tile on the calling thread. */
int dc_tile_decode(dc_decoder *d, const uint8_t *buf, size_t len,
                   const dc_out *out, dc_error *err);

/* Placing: each cell of a chunk decoded straight to a place of the caller's
** choosing (the rows of a shuffled batch live in different batches), with no
** intermediate copy of the chunk.  Cell i of the chunk (chunk-relative) goes
** to ix[i] (gene indices, sorted) and val[i] (counts, int32 or float32); its
** size is what dc_chunk_cell_nnz said.  A NULL ix[i] or val[i]: the cell is
** kept nowhere (its streams are decoded, as they must be for the cells after
** it, but its genes and counts are not: the sum of its symbols' mantissa
** widths moves on past it; a cell with a rare slow symbol is decoded into a
** sink).  No indptr is written.  Codec rans (3) only: the other codecs give
** DC_EUNSUPPORTED (the caller decodes and copies).  A
** corrupt chunk is an error as for dc_chunk_decode; the places of a failed
** chunk hold arbitrary values.
**
** filter (optional): called for each kept cell right after it is placed, on the
** decoding thread, while the cell is in that core's cache, with the cell's place
** and size; it may rewrite the cell in place (dc_batch keeps a gene panel's
** genes only) and returns the cell's size after it (at most n), which goes to
** n_out[i] (one entry per cell of the chunk; cells kept nowhere are not
** written).  It reports its own errors through filter_arg. */
typedef struct dc_place {
  int32_t *const *ix;
  void *const *val;
  int values_f32;        /* 1: write counts as float32                     */
  uint32_t (*filter)(void *filter_arg, int32_t *ix, void *val, uint32_t n);
  void *filter_arg;
  uint32_t *n_out;
} dc_place;
/* nnz[i] = the nonzeros of cell i of chunk c (chunk-relative), read from the
** chunk's per-cell counts without decoding it.  Verifies the chunk checksum
** first.  Codec rans (3) only (else DC_EUNSUPPORTED). */
int dc_chunk_cell_nnz(dc_decoder *d, const uint8_t *buf, size_t len,
                      const dc_tile_hdr *h, uint32_t c, uint32_t *nnz, dc_error *err);
int dc_chunk_place(dc_decoder *d, const uint8_t *buf, size_t len,
                   const dc_tile_hdr *h, uint32_t c, const dc_place *pl, dc_error *err);

/* A chunk placed in part (dc_chunk_cell_nnz, then dc_chunk_place), its rows one after another:
** the cells with keep[i] set get their nnz[i] nonzeros in cell order from indices and values
** (4 bytes each), the others no place (NULL: decoded nowhere).  dc_part_nnz says how many
** nonzeros the kept cells hold, or -1 where that exceeds max (the chunk's nonzeros: a corrupt
** chunk's counts); dc_part_rows lays them out: ix[i], val[i] (n cells), and indptr (n + 1
** offsets from 0, an empty row for a cell not kept) where it is not NULL. */
int64_t dc_part_nnz(const uint32_t *nnz, const uint8_t *keep, uint32_t n, uint64_t max);
void dc_part_rows(const uint32_t *nnz, const uint8_t *keep, uint32_t n, int32_t *indices, void *values,
                  int64_t *indptr, int32_t **ix, void **val);

/* The genes a tile holds, where it says (a rans tile with a gene map: a tile of one input of
** a merged dataset, or of cells that leave many genes out): *set = a bitmap of h->n_genes bits
** (bit g of byte g / 8 set: gene g has a nonzero in the tile; no other gene has), malloc'ed and
** owned by the caller; or *set = NULL, when the tile says nothing (other codecs, a rans tile
** without a map, an empty tile): any gene may occur.  Reads the header and the shared section
** only (buf: at least the bytes before the first chunk payload), and checks its checksum and
** the map as a decode would: DC_ECORRUPT otherwise.  A query for a few genes skips the tiles
** that hold none of them. */
int dc_tile_gene_set(const uint8_t *buf, size_t len, const dc_tile_hdr *h, uint8_t **set, dc_error *err);

/* ---------------------------------------------------------------- threads */
/* A pool of worker threads; the calling thread works too.  No function of
** the pool calls SQLite or any callback other than the one given. */
typedef struct dc_pool dc_pool;
dc_pool *dc_pool_new(int n_threads);              /* 0: one per online core */
void dc_pool_free(dc_pool *p);
int dc_pool_size(const dc_pool *p);               /* threads incl. caller that run items */
/* Later calls run on n of the pool's threads (0: one per online core, as dc_pool_new; at
** most the threads it started with: the rest sleep and keep their scratch); returns 0
** (nothing changed) when the pool has fewer than n.  Not during a call on the pool. */
int dc_pool_set_threads(dc_pool *p, int n);
/* Runs fn(arg, i) for i in [0, n) across the pool and waits for all. */
void dc_pool_for(dc_pool *p, size_t n, void (*fn)(void *arg, size_t i), void *arg);
/* Like dc_pool_for, with the index (0 .. dc_pool_size-1) of the thread that
** runs the item, for per-thread scratch.  p may be NULL: runs everything on the
** caller as thread 0. */
void dc_pool_for_tid(dc_pool *p, size_t n, void (*fn)(void *arg, size_t i, int tid), void *arg);

/* One decoding job: chunk `chunk` of tile buf/len (already parsed into hdr). */
typedef struct dc_job {
  const uint8_t *buf;
  size_t len;
  const dc_tile_hdr *hdr;
  uint32_t chunk;
  dc_out out;
  int rc;                /* out: DC_OK or error code                       */
  dc_error err;          /* out                                            */
  const dc_place *place; /* not NULL: dc_chunk_place (out unused)          */
  uint32_t *cell_nnz;    /* not NULL: dc_chunk_cell_nnz (out, place unused) */
} dc_job;
/* Decodes (or places, or counts) all jobs in parallel; returns DC_OK or the
** rc of the first failed job (in job order); every job's rc/err is filled. */
int dc_pool_decode(dc_pool *p, dc_job *jobs, size_t n_jobs);

/* ---------------------------------------------------------------- gather */
/* A decoded tile (or the decoded chunks of one), as dc_out filled it. */
typedef struct dc_decoded {
  uint32_t n_cells;
  const int64_t *indptr;
  const int32_t *indices;
  const int32_t *values;
} dc_decoded;

/* Gathers n cells, cell i being cell cell[i] of tile src[tile[i]], into one
** CSR batch in the given order: indptr_out has n+1 entries (indptr_out[0]=0),
** indices_out/values_out must hold dc_gather_nnz() entries. */
uint64_t dc_gather_nnz(const dc_decoded *src, const uint32_t *tile,
                       const uint32_t *cell, size_t n);
void dc_gather(dc_pool *p, const dc_decoded *src, const uint32_t *tile,
               const uint32_t *cell, size_t n, int64_t *indptr_out,
               int32_t *indices_out, int32_t *values_out);

/* ---------------------------------------------------------------- SIMD */
/* The decoders have one path per instruction set behind one dispatch.  The
** path used is the best the CPU has, capped by the environment variable
** DC_SIMD=avx512|avx2|scalar (read at every chunk decode; for tests and
** benchmarks).  DC_NO_SIMD=1 (the first release's switch) means scalar. */
enum { DC_SIMD_SCALAR = 0, DC_SIMD_AVX2 = 1, DC_SIMD_AVX512 = 2 };
int dc_simd_supported(int level);                 /* 1 if this CPU (and build) has it */
int dc_simd_level(void);                          /* the path decodes use now         */
const char *dc_simd_name(int level);              /* "scalar", "avx2", "avx512"       */
/* 0 when DC_SIMD is unset or names a path (avx512, best, avx2, scalar, portable, none); else
** -1 and, in msg, why: a program refuses to start rather than silently run another path. */
int dc_simd_env_check(char *msg, size_t n);

/* ---------------------------------------------------------------- misc */
/* The per-chunk checksum: low 32 bits of XXH3-64 (Debian's libxxhash). */
uint32_t dc_checksum(const void *buf, size_t len);

/* A large buffer (decoder scratch, decoded chunks, result buffers): from DC_BIG_MIN bytes up
** mapped directly, 2 MiB aligned, with MADV_HUGEPAGE where the system has it, so that touching
** it fresh costs one page fault per 2 MiB instead of one per 4 KiB (on the development VM a
** fault costs 10-25 us: a new process's first chunk decode faulted in its scratch 4 KiB at a
** time); below that, or where mapping fails, malloc.  *map_len: what dc_mem_free needs (0 for
** malloc).  NULL when out of memory. */
#define DC_BIG_MIN ((size_t)4 << 20)
void *dc_mem_alloc(size_t n, size_t *map_len);
/* The same in huge pages whatever the size (a buffer of about 2 MiB that a new process would
** otherwise fault in 4 KiB at a time: a decoder's tables). */
void *dc_mem_alloc_huge(size_t n, size_t *map_len);
void dc_mem_free(void *p, size_t map_len);

#ifdef __cplusplus
}
#endif
#endif /* DC_CODEC_H */
