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

dc_chunk_data *dc_chunk_new(uint32_t n_cells, uint64_t nnz) {
  /* sizes in 64 bits; nnz is capped by the caller from a validated header */
  uint64_t head = (sizeof(dc_chunk_data) + 15) & ~(uint64_t)15;
  uint64_t ip = ((uint64_t)n_cells + 1) * sizeof(int64_t);
  uint64_t ix = nnz * sizeof(int32_t);
  if (nnz > ((uint64_t)1 << 40)) return NULL;
  uint64_t total = head + ip + 2 * ix;
  if (total != (size_t)total) return NULL;
  uint8_t *p = malloc((size_t)total);
  if (!p) return NULL;
  dc_chunk_data *d = (dc_chunk_data *)p;
  memset(d, 0, sizeof *d);
  d->n_cells = n_cells;
  d->nnz = nnz;
  d->indptr = (int64_t *)(p + head);
  d->indices = (int32_t *)(p + head + ip);
  d->values = (int32_t *)(p + head + ip + ix);
  d->bytes = (size_t)total;
  d->n_ref = 1;
  return d;
}

void dc_chunk_ref(dc_chunk_data *d) { __atomic_add_fetch(&d->n_ref, 1, __ATOMIC_RELAXED); }

void dc_chunk_release(dc_chunk_data *d) {
  if (d && __atomic_sub_fetch(&d->n_ref, 1, __ATOMIC_ACQ_REL) == 0) free(d);
}

typedef struct entry entry;
struct entry {
  uint64_t ns;
  uint32_t tile, chunk;
  dc_chunk_data *d;
  entry *hnext;              /* hash chain */
  entry *prev, *next;        /* LRU list: head = most recent */
};

struct dc_cache {
  pthread_mutex_t mu;
  int64_t budget, bytes, n, hits, misses;
  entry **bucket;
  size_t n_bucket;           /* power of two */
  entry *head, *tail;
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
static entry *evict_locked(dc_cache *c, int64_t budget) {
  entry *dead = NULL;
  while (c->tail && c->bytes > budget) {
    entry *e = c->tail;
    lru_unlink(c, e);
    hash_unlink(c, e);
    c->bytes -= (int64_t)e->d->bytes;
    c->n--;
    e->hnext = dead; dead = e;
  }
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
