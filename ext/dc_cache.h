/*
** dc_cache.h — the decoded-chunk cache of a connection (ext/cache.c).
**
** A decoded chunk (dc_chunk_data) holds the CSR of one chunk of one tile:
** n_cells rows, indptr relative to the chunk (indptr[0] == 0), gene indices
** and counts.  Chunks are reference counted: the cache holds one reference
** per entry, every user one more; a chunk is freed when the last reference
** goes.  So eviction never frees a chunk that a running query still reads.
**
** Entries are keyed by (namespace, tile, chunk).  A namespace names one tile
** index, i.e. one schema of the connection at one data version (reader.c
** loads it once and every table of that schema shares it: dc_batch,
** expression, expression_long, dc_aggregate*, tiles).  When the data changes,
** the index is loaded again under a new namespace and old entries age out.
**
** Eviction is least-recently-used under a byte budget (dc_config cache_mb).
** All functions lock the cache's mutex; none calls SQLite.
*/
#ifndef DC_CACHE_H
#define DC_CACHE_H
#include <stddef.h>
#include <stdint.h>

typedef struct dc_chunk_data {
  uint32_t n_cells;
  uint64_t nnz;
  int64_t *indptr;        /* n_cells+1 entries, indptr[0] == 0 */
  int32_t *indices;       /* nnz entries */
  int32_t *values;        /* nnz entries */
  size_t bytes;           /* memory the chunk holds (rcbuf_held: cache accounting) */
  int n_ref;              /* atomic */
} dc_chunk_data;

/* A chunk of a tile: how the cache, the reader and dc_batch's planner name it. */
typedef struct dc_chunkkey { uint32_t tile, chunk; } dc_chunkkey;

typedef struct dc_bufpool dc_bufpool;
/* One allocation (a recycled buffer of the pool, which may be NULL) holding
** the struct and its arrays; one reference.  NULL on out-of-memory. */
dc_chunk_data *dc_chunk_new(dc_bufpool *pool, uint32_t n_cells, uint64_t nnz);
/* The bytes dc_chunk_new asks for, for a chunk of n_cells cells and nnz nonzeros. */
uint64_t dc_chunk_size(uint32_t n_cells, uint64_t nnz);
void dc_chunk_ref(dc_chunk_data *d);
void dc_chunk_release(dc_chunk_data *d);

typedef struct dc_cache dc_cache;
dc_cache *dc_cache_new(int64_t budget_bytes);
void dc_cache_free(dc_cache *c);
void dc_cache_set_budget(dc_cache *c, int64_t budget_bytes);   /* evicts to fit */
/* A new reference to the cached chunk, or NULL. */
dc_chunk_data *dc_cache_get(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk);
/* Adds d under the key (the cache takes its own reference; the caller keeps
** its one).  Chunks larger than the budget are not kept. */
void dc_cache_put(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk, dc_chunk_data *d);
/* Before decoding `incoming` bytes of chunks: evicts least recently used entries that nothing
** else holds until they would fit the budget, so that their buffers go back to the buffer
** pool and the new chunks reuse them (instead of fresh memory, then evictions at the put). */
void dc_cache_make_room(dc_cache *c, int64_t incoming);
/* A reader about to decode only some cells of a chunk that is not cached asks this first: 1 when
** the chunk was asked for in part before (then the caller decodes it whole and puts it: a second
** look at a chunk is a sign of more), else 0; either way the chunk is noted.  The note stays, so
** a chunk that was cached and evicted since is decoded whole at once when asked for again.
** Always 0 when the budget is 0 (nothing would be kept).  The notes are a small direct-mapped
** table of key hashes: a note may be overwritten by another chunk's, which only costs a partial
** decode. */
int dc_cache_recall(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk);
/* Statistics: bytes held, entries, hits, misses. */
void dc_cache_stats(dc_cache *c, int64_t *bytes, int64_t *entries, int64_t *hits, int64_t *misses);

/* ---------------------------------------------------------------- result buffers
** Reference-counted buffers for result blobs (dc_batch hands them to SQLite
** with rcbuf_unref as the destructor, a column read twice shares one buffer).
** Large buffers come back to the connection's dc_bufpool when released, so
** the next batch reuses memory that is already mapped: a fresh 100 MB buffer
** costs tens of milliseconds of page faults and zeroing.  Decoded chunks use
** the same buffers.  The pool keeps at most DC_BUFPOOL_MAX spare buffers and
** 1 GiB; it is reference counted by the connection and
** by every live buffer, so a buffer released after the connection closed is
** simply freed.  Thread-safe (mutex). */
#define DC_BUFPOOL_MAX 64
dc_bufpool *dc_bufpool_new(void);
void dc_bufpool_release(dc_bufpool *p);           /* the owner's reference */
void dc_bufpool_trim(dc_bufpool *p);              /* frees the spare buffers */
int64_t dc_bufpool_spare_bytes(dc_bufpool *p);
/* A buffer of n bytes (uninitialized) with one reference; NULL on OOM. */
void *rcbuf_new(dc_bufpool *p, uint64_t n);
/* The memory buffer b holds: a recycled buffer may be up to twice what was
** asked for, a mapped one is rounded up to 2 MiB. */
uint64_t rcbuf_held(const void *b);
void rcbuf_ref(void *b);
void rcbuf_unref(void *b);

#endif
