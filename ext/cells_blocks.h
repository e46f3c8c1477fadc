/*
** cells_blocks.h — the decoded-block cache of one schema's obs statistics
** (dc_obsstats.h: the connection's dataset object, one per data version).
**
** Pure C: no SQLite.  An entry is one decoded obs block (stored column k, block b) copied
** into one allocation with its arrays, plus (int and real columns) the block's value order
** once range filters asked for it (cells_filter.h).  Entries are reference counted: the
** cache holds none; each user (a cursor's current block of a column) holds one.  Least
** recently used entries are dropped when the cache is over its byte budget; a dropped entry
** that is still referenced is freed by its last release, so eviction never frees a block a
** cursor reads.  One connection, one thread at a time (SQLite's rule for a connection).
*/
#ifndef CELLS_BLOCKS_H
#define CELLS_BLOCKS_H
#include <stddef.h>
#include <stdint.h>
#include "dc_obs.h"

typedef struct cells_dblock {
  struct cells_dblock *prev, *next;   /* LRU list, most recently used first */
  int k;
  int64_t b;
  int n_ref;
  int dropped;            /* not in the cache (evicted, or never fitted) */
  size_t bytes;           /* counted against the budget: the allocation and the order */
  dc_obs_block blk;       /* points into this allocation */
  uint32_t *order;        /* int and real: offsets of non-NULL values in value order */
  uint32_t n_order;
  uint64_t range_visit;   /* the first visit (cursor pass) whose range filter used the block; 0: none */
} cells_dblock;

typedef struct cells_bcache {
  int n_cols;
  int64_t n_blocks;
  cells_dblock **ent;     /* [n_cols * n_blocks], column major */
  cells_dblock *head, *tail;
  int64_t bytes;          /* of the entries in the cache */
  uint64_t visits;        /* block visits so far: each cursor pass over a block takes the next (from 1) */
  void *scratch;          /* cells_bcache_scratch: kept, so that its pages are touched once */
  size_t scratch_cap;
  dc_obs_decoder *dec;    /* cells_bcache_decoder: one for every cursor and column */
} cells_bcache;

/* Makes an empty cache for n_cols columns of n_blocks blocks; -1 on out-of-memory. */
int cells_bcache_init(cells_bcache *c, int n_cols, int64_t n_blocks);
/* Drops every entry (those still referenced live on until their release) and frees the
** table; the cache is then as after memset 0 (init it again to use it). */
void cells_bcache_clear(cells_bcache *c);
/* The cached block (k, b) with one more reference, moved to the front; NULL if not cached. */
cells_dblock *cells_bcache_get(cells_bcache *c, int k, int64_t b);
/* A new entry for block (k, b) with room for `bytes` of arrays at cells_dblock_arrays(d)
** (8-byte aligned; the caller decodes into it, dc_obs_decode_to, and sets d->blk), one
** reference, not cached (released, it is freed).  NULL on out-of-memory. */
cells_dblock *cells_dblock_new(int k, int64_t b, size_t bytes);
void *cells_dblock_arrays(cells_dblock *d);
/* Caches d (from cells_dblock_new, its blk set) when it fits in budget bytes (older entries
** are dropped to make room) and no entry holds its block, else leaves it to the caller
** alone.  Returns d. */
cells_dblock *cells_bcache_add(cells_bcache *c, cells_dblock *d, int64_t budget);
/* A copy of src as block (k, b), added as above.  NULL on out-of-memory. */
cells_dblock *cells_bcache_put(cells_bcache *c, int k, int64_t b, const dc_obs_block *src, int64_t budget);
/* Drops least recently used entries until the cache holds at most budget bytes. */
void cells_bcache_fit(cells_bcache *c, int64_t budget);
/* Counts extra bytes that entry d now holds (its order). */
void cells_bcache_grow(cells_bcache *c, cells_dblock *d, size_t extra);
/* Scratch memory of at least bytes bytes (16-byte aligned), the cache's own: valid until the
** next call or cells_bcache_clear.  It is kept between uses (a block's stored bytes while it is
** decoded, a value order's build), so that the next use touches no fresh pages.  NULL on
** out-of-memory. */
void *cells_bcache_scratch(cells_bcache *c, size_t bytes);
/* The decoder that fills the cache (made on first use, kept, so that its buffers are warm for
** every cursor and column of the connection; one thread at a time, as the cache).  NULL on
** out-of-memory. */
dc_obs_decoder *cells_bcache_decoder(cells_bcache *c);
/* Lets go of one reference (d may be NULL). */
void cells_dblock_release(cells_dblock *d);
#endif
