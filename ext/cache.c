/*
** cache.c — the decoded-chunk cache (see dc_cache.h).
**
** A hash table of entries (open hashing with chains, power-of-two buckets)
** plus a doubly linked LRU list, under one pthread mutex.  The cache belongs
** to one connection (dc_conn.cache); the mutex makes it safe whichever thread
** runs that connection's statements, and costs nothing measurable next to a
** chunk decode.  Chunk data is freed outside the lock.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "dc_cache.h"
#include "dc_codec.h"

/* Large buffers (decoded chunks, result blobs, tile buffers) come from dc_mem_alloc (the
** codec's: 2 MiB aligned, with MADV_HUGEPAGE; measured here: page faults were most of the time
** of a batch into fresh buffers). */
#define CHUNK_HEAD ((sizeof(dc_chunk_data) + 15) & ~(uint64_t)15)

uint64_t dc_chunk_size(uint32_t n_cells, uint64_t nnz) {
  return CHUNK_HEAD + ((uint64_t)n_cells + 1) * sizeof(int64_t) + 2 * nnz * sizeof(int32_t);
}

dc_chunk_data *dc_chunk_new(dc_bufpool *pool, uint32_t n_cells, uint64_t nnz) {
  /* sizes in 64 bits; nnz is capped by the caller from a validated header */
  uint64_t head = CHUNK_HEAD;
  uint64_t ip = ((uint64_t)n_cells + 1) * sizeof(int64_t);
  uint64_t ix = nnz * sizeof(int32_t);
  if (nnz > ((uint64_t)1 << 40)) return NULL;
  uint64_t total = dc_chunk_size(n_cells, nnz);
  if (total != (size_t)total) return NULL;
  uint8_t *p = rcbuf_new(pool, total);      /* recycled memory: no page faults */
  if (!p) return NULL;
  dc_chunk_data *d = (dc_chunk_data *)p;
  memset(d, 0, sizeof *d);
  d->n_cells = n_cells;
  d->nnz = nnz;
  d->indptr = (int64_t *)(p + head);
  d->indices = (int32_t *)(p + head + ip);
  d->values = (int32_t *)(p + head + ip + ix);
  d->bytes = rcbuf_held(p);   /* what the buffer holds: a recycled one may be up to 2x total */
  d->n_ref = 1;
  return d;
}

void dc_chunk_ref(dc_chunk_data *d) { __atomic_add_fetch(&d->n_ref, 1, __ATOMIC_RELAXED); }

void dc_chunk_release(dc_chunk_data *d) {
  if (d && __atomic_sub_fetch(&d->n_ref, 1, __ATOMIC_ACQ_REL) == 0) rcbuf_unref(d);
}

typedef struct entry entry;
struct entry {
  uint64_t ns;
  uint32_t tile, chunk;
  dc_chunk_data *d;
  entry *hnext;              /* hash chain */
  entry *prev, *next;        /* LRU list: head = most recent */
};

#define GHOSTS 1024        /* chunks decoded in part lately (dc_cache_recall): direct-mapped */
struct dc_cache {
  pthread_mutex_t mu;
  int64_t budget, bytes, n, hits, misses;
  entry **bucket;
  size_t n_bucket;           /* power of two */
  entry *head, *tail;
  uint64_t ghost[GHOSTS];    /* a key's hash | 1; 0 empty */
};

static size_t hash_key(uint64_t ns, uint32_t tile, uint32_t chunk) {
  uint64_t h = ns * 0x9E3779B97F4A7C15ull ^ ((uint64_t)tile << 20 | chunk);
  h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 32;
  return (size_t)h;
}

dc_cache *dc_cache_new(int64_t budget) {
  dc_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->n_bucket = 1024;
  c->bucket = calloc(c->n_bucket, sizeof *c->bucket);
  if (!c->bucket || pthread_mutex_init(&c->mu, NULL)) { free(c->bucket); free(c); return NULL; }
  c->budget = budget;
  return c;
}

static void lru_unlink(dc_cache *c, entry *e) {
  if (e->prev) e->prev->next = e->next; else c->head = e->next;
  if (e->next) e->next->prev = e->prev; else c->tail = e->prev;
  e->prev = e->next = NULL;
}
static void lru_push(dc_cache *c, entry *e) {
  e->prev = NULL; e->next = c->head;
  if (c->head) c->head->prev = e; else c->tail = e;
  c->head = e;
}
static void hash_unlink(dc_cache *c, entry *e) {
  entry **pp = &c->bucket[hash_key(e->ns, e->tile, e->chunk) & (c->n_bucket - 1)];
  while (*pp && *pp != e) pp = &(*pp)->hnext;
  if (*pp) *pp = e->hnext;
}

/* Removes LRU entries until bytes <= budget; returns the removed entries as a
** list (through hnext) to free outside the lock. */
/* Takes entry e out of the cache (under the lock) onto the list *dead (through hnext). */
static void remove_locked(dc_cache *c, entry *e, entry **dead) {
  lru_unlink(c, e);
  hash_unlink(c, e);
  c->bytes -= (int64_t)e->d->bytes;
  c->n--;
  e->hnext = *dead; *dead = e;
}
static entry *evict_locked(dc_cache *c, int64_t budget) {
  entry *dead = NULL;
  while (c->tail && c->bytes > budget) remove_locked(c, c->tail, &dead);
  return dead;
}
static void free_dead(entry *dead) {
  while (dead) { entry *n = dead->hnext; dc_chunk_release(dead->d); free(dead); dead = n; }
}

void dc_cache_free(dc_cache *c) {
  if (!c) return;
  entry *dead = evict_locked(c, -1);
  free_dead(dead);
  pthread_mutex_destroy(&c->mu);
  free(c->bucket);
  free(c);
}

void dc_cache_make_room(dc_cache *c, int64_t incoming) {
  entry *dead = NULL;
  pthread_mutex_lock(&c->mu);
  for (entry *e = c->tail; e && c->bytes + incoming > c->budget;) {
    entry *prev = e->prev;
    if (__atomic_load_n(&e->d->n_ref, __ATOMIC_ACQUIRE) == 1) remove_locked(c, e, &dead);   /* only the cache holds it */
    e = prev;
  }
  pthread_mutex_unlock(&c->mu);
  free_dead(dead);
}

void dc_cache_set_budget(dc_cache *c, int64_t budget) {
  pthread_mutex_lock(&c->mu);
  c->budget = budget;
  entry *dead = evict_locked(c, budget);
  pthread_mutex_unlock(&c->mu);
  free_dead(dead);
}

dc_chunk_data *dc_cache_get(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk) {
  dc_chunk_data *d = NULL;
  pthread_mutex_lock(&c->mu);
  for (entry *e = c->bucket[hash_key(ns, tile, chunk) & (c->n_bucket - 1)]; e; e = e->hnext) {
    if (e->ns == ns && e->tile == tile && e->chunk == chunk) {
      lru_unlink(c, e); lru_push(c, e);
      d = e->d; dc_chunk_ref(d);
      break;
    }
  }
  if (d) c->hits++; else c->misses++;
  pthread_mutex_unlock(&c->mu);
  return d;
}

static void grow_locked(dc_cache *c) {
  size_t nb = c->n_bucket * 2;
  entry **b = calloc(nb, sizeof *b);
  if (!b) return;                       /* keep the old table: only slower */
  for (size_t i = 0; i < c->n_bucket; i++) {
    entry *e = c->bucket[i];
    while (e) {
      entry *n = e->hnext;
      size_t h = hash_key(e->ns, e->tile, e->chunk) & (nb - 1);
      e->hnext = b[h]; b[h] = e;
      e = n;
    }
  }
  free(c->bucket);
  c->bucket = b; c->n_bucket = nb;
}

int dc_cache_recall(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk) {
  uint64_t h = (uint64_t)hash_key(ns, tile, chunk) | 1;
  int seen = 0;
  pthread_mutex_lock(&c->mu);
  uint64_t *g = &c->ghost[(h >> 1) & (GHOSTS - 1)];
  if (c->budget > 0) {
    seen = *g == h;
    *g = h;              /* kept: a chunk evicted since is decoded whole when asked for again */
  }
  pthread_mutex_unlock(&c->mu);
  return seen;
}

void dc_cache_put(dc_cache *c, uint64_t ns, uint32_t tile, uint32_t chunk, dc_chunk_data *d) {
  entry *dead = NULL;
  pthread_mutex_lock(&c->mu);
  if ((int64_t)d->bytes > c->budget) { pthread_mutex_unlock(&c->mu); return; }
  size_t h = hash_key(ns, tile, chunk) & (c->n_bucket - 1);
  for (entry *e = c->bucket[h]; e; e = e->hnext)
    if (e->ns == ns && e->tile == tile && e->chunk == chunk) { pthread_mutex_unlock(&c->mu); return; }
  entry *e = calloc(1, sizeof *e);
  if (e) {
    e->ns = ns; e->tile = tile; e->chunk = chunk; e->d = d;
    dc_chunk_ref(d);
    dead = evict_locked(c, c->budget - (int64_t)d->bytes);
    e->hnext = c->bucket[h]; c->bucket[h] = e;
    lru_push(c, e);
    c->bytes += (int64_t)d->bytes;
    c->n++;
    if ((size_t)c->n > c->n_bucket) grow_locked(c);
  }
  pthread_mutex_unlock(&c->mu);
  free_dead(dead);
}

void dc_cache_stats(dc_cache *c, int64_t *bytes, int64_t *entries, int64_t *hits, int64_t *misses) {
  pthread_mutex_lock(&c->mu);
  if (bytes) *bytes = c->bytes;
  if (entries) *entries = c->n;
  if (hits) *hits = c->hits;
  if (misses) *misses = c->misses;
  pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------- result buffers */
#define RC_HEAD 32            /* keeps the payload 16-byte aligned */
#define RC_MIN_RECYCLE ((uint64_t)1 << 20)
#define DC_BUFPOOL_MAX_BYTES ((int64_t)1 << 30)

/* Capacities of recycled buffers are rounded up to size classes (steps of
** 1/8 of a power of two) so that buffers of similar sizes are interchangeable. */
static uint64_t size_class(uint64_t n) {
  int k = 63 - __builtin_clzll(n);          /* 2^k <= n */
  uint64_t step = ((uint64_t)1 << k) >> 3;
  return (n + step - 1) / step * step;
}

struct dc_bufpool {
  pthread_mutex_t mu;
  int n_ref;                  /* owner + live buffers */
  int n_spare;
  void *spare[DC_BUFPOOL_MAX];   /* raw allocations (header included) */
  uint64_t cap[DC_BUFPOOL_MAX];  /* payload capacity */
  int64_t spare_bytes;
};

typedef struct rc_head {
  int64_t n_ref;
  uint64_t cap;
  dc_bufpool *pool;
  uint64_t map_len;           /* dc_mem_alloc's: 0 = malloc */
} rc_head;

static void rc_free(rc_head *h) { if (h) dc_mem_free(h, (size_t)h->map_len); }

dc_bufpool *dc_bufpool_new(void) {
  dc_bufpool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (pthread_mutex_init(&p->mu, NULL)) { free(p); return NULL; }
  p->n_ref = 1;
  return p;
}

static void pool_unref_locked_free(dc_bufpool *p) {
  /* called with the lock held after decrementing; frees when unused */
  int last = p->n_ref == 0;
  pthread_mutex_unlock(&p->mu);
  if (last) {
    for (int i = 0; i < p->n_spare; i++) rc_free(p->spare[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
  }
}

void dc_bufpool_trim(dc_bufpool *p) {
  void *dead[DC_BUFPOOL_MAX];
  int n;
  pthread_mutex_lock(&p->mu);
  n = p->n_spare;
  memcpy(dead, p->spare, (size_t)n * sizeof *dead);
  p->n_spare = 0;
  p->spare_bytes = 0;
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < n; i++) rc_free(dead[i]);
}

void dc_bufpool_release(dc_bufpool *p) {
  if (!p) return;
  dc_bufpool_trim(p);
  pthread_mutex_lock(&p->mu);
  p->n_ref--;
  pool_unref_locked_free(p);
}

int64_t dc_bufpool_spare_bytes(dc_bufpool *p) {
  pthread_mutex_lock(&p->mu);
  int64_t b = p->spare_bytes;
  pthread_mutex_unlock(&p->mu);
  return b;
}

void *rcbuf_new(dc_bufpool *p, uint64_t n) {
  rc_head *h = NULL;
  uint64_t cap = n ? n : 1;
  if (cap > ((uint64_t)1 << 46)) return NULL;
  if (cap >= RC_MIN_RECYCLE) cap = size_class(cap);
  if (p) {
    pthread_mutex_lock(&p->mu);
    int best = -1;
    for (int i = 0; i < p->n_spare; i++)       /* smallest spare that fits, at most 2x */
      if (p->cap[i] >= cap && p->cap[i] / 2 <= cap && (best < 0 || p->cap[i] < p->cap[best])) best = i;
    if (best >= 0) {
      h = p->spare[best];
      cap = p->cap[best];
      p->spare_bytes -= (int64_t)cap;
      p->spare[best] = p->spare[p->n_spare - 1];
      p->cap[best] = p->cap[p->n_spare - 1];
      p->n_spare--;
    }
    p->n_ref++;
    pthread_mutex_unlock(&p->mu);
  }
  if (!h) {
    size_t map_len;
    h = dc_mem_alloc(RC_HEAD + (size_t)cap, &map_len);
    if (h) h->map_len = map_len;
    if (!h) {
      if (p) { pthread_mutex_lock(&p->mu); p->n_ref--; pool_unref_locked_free(p); }
      return NULL;
    }
  }
  h->n_ref = 1;
  /* a mapped buffer holds whole 2 MiB pages: all of it is usable, so a recycled one fits
  ** any request up to that (chunks of similar sizes reuse each other's buffers) */
  if (h->map_len && h->map_len - RC_HEAD > cap) cap = h->map_len - RC_HEAD;
  h->cap = cap;
  h->pool = p;
  return (uint8_t *)h + RC_HEAD;
}

uint64_t rcbuf_held(const void *b) {
  const rc_head *h = (const rc_head *)(const void *)((const uint8_t *)b - RC_HEAD);
  return h->map_len ? h->map_len : RC_HEAD + h->cap;
}

void rcbuf_ref(void *b) {
  rc_head *h = (rc_head *)((uint8_t *)b - RC_HEAD);
  __atomic_add_fetch(&h->n_ref, 1, __ATOMIC_RELAXED);
}

void rcbuf_unref(void *b) {
  if (!b) return;
  rc_head *h = (rc_head *)((uint8_t *)b - RC_HEAD);
  if (__atomic_sub_fetch(&h->n_ref, 1, __ATOMIC_ACQ_REL) != 0) return;
  dc_bufpool *p = h->pool;
  if (!p) { rc_free(h); return; }
  pthread_mutex_lock(&p->mu);
  if (h->cap >= RC_MIN_RECYCLE && p->n_ref > 1 /* the owner still holds it */ &&
      p->spare_bytes + (int64_t)h->cap <= DC_BUFPOOL_MAX_BYTES) {
    if (p->n_spare == DC_BUFPOOL_MAX) {        /* replace the smallest spare */
      int small = 0;
      for (int i = 1; i < p->n_spare; i++) if (p->cap[i] < p->cap[small]) small = i;
      if (p->cap[small] < h->cap) {
        void *old = p->spare[small];
        p->spare_bytes -= (int64_t)p->cap[small];
        p->spare[small] = h; p->cap[small] = h->cap;
        p->spare_bytes += (int64_t)h->cap;
        h = old;
      }
    } else {
      p->spare[p->n_spare] = h; p->cap[p->n_spare] = h->cap;
      p->spare_bytes += (int64_t)h->cap;
      p->n_spare++;
      h = NULL;
    }
  }
  p->n_ref--;
  pool_unref_locked_free(p);
  rc_free(h);
}
