/*
** test_cache.c — the decoded-chunk cache and the recycled buffers of the
** extension (ext/cache.c, pure C: compiled in here directly).
*/
#include "dctest.h"
#include "../../ext/cache.c"

static dc_chunk_data *chunk(uint32_t cells, uint64_t nnz) {
  dc_chunk_data *d = dc_chunk_new(NULL, cells, nnz);
  if (d) {
    for (uint32_t i = 0; i <= cells; i++) d->indptr[i] = 0;
    if (nnz) { d->indices[nnz - 1] = 7; d->values[nnz - 1] = 9; }
  }
  return d;
}

static void test_get_put_lru(void) {
  dc_chunk_data *a = chunk(10, 1000), *b = chunk(10, 1000), *c = chunk(10, 1000);
  DCT_CHECK(a && b && c);
  size_t one = a->bytes;
  dc_cache *k = dc_cache_new((int64_t)(2 * one + one / 2));   /* room for two */
  DCT_CHECK(k != NULL);
  dc_cache_put(k, 1, 0, 0, a);
  dc_cache_put(k, 1, 0, 1, b);
  dc_chunk_data *g = dc_cache_get(k, 1, 0, 0);                /* a is now most recent */
  DCT_CHECK(g == a);
  dc_chunk_release(g);
  DCT_CHECK(dc_cache_get(k, 2, 0, 0) == NULL);               /* other namespace */
  dc_cache_put(k, 1, 0, 2, c);                               /* evicts b, the LRU */
  g = dc_cache_get(k, 1, 0, 1);
  DCT_CHECK(g == NULL);
  g = dc_cache_get(k, 1, 0, 0);
  DCT_CHECK(g == a);
  dc_chunk_release(g);
  int64_t bytes, n, hits, misses;
  dc_cache_stats(k, &bytes, &n, &hits, &misses);
  DCT_CHECKF(n == 2 && bytes == (int64_t)(2 * one) && hits == 2 && misses == 2,
             "n %lld bytes %lld hits %lld misses %lld", (long long)n, (long long)bytes, (long long)hits,
             (long long)misses);
  /* b was evicted but we still hold it: its memory is intact */
  DCT_CHECK(b->indices[999] == 7 && b->values[999] == 9);
  dc_cache_set_budget(k, 0);
  dc_cache_stats(k, &bytes, &n, NULL, NULL);
  DCT_CHECK(n == 0 && bytes == 0);
  DCT_CHECK(a->values[999] == 9);                            /* our references keep them */
  dc_cache_free(k);
  dc_chunk_release(a);
  dc_chunk_release(b);
  dc_chunk_release(c);
}

static void test_too_big_and_duplicates(void) {
  dc_chunk_data *a = chunk(4, 100);
  dc_cache *k = dc_cache_new((int64_t)a->bytes - 1);
  dc_cache_put(k, 1, 3, 3, a);                                /* larger than the budget */
  DCT_CHECK(dc_cache_get(k, 1, 3, 3) == NULL);
  dc_cache_set_budget(k, 1 << 20);
  dc_cache_put(k, 1, 3, 3, a);
  dc_cache_put(k, 1, 3, 3, a);                                /* second put is ignored */
  int64_t n;
  dc_cache_stats(k, NULL, &n, NULL, NULL);
  DCT_CHECK(n == 1);
  DCT_CHECK(a->n_ref == 2);
  dc_cache_free(k);
  DCT_CHECK(a->n_ref == 1);
  dc_chunk_release(a);
}

static void test_many_entries_grow(void) {
  dc_cache *k = dc_cache_new((int64_t)1 << 30);
  for (uint32_t i = 0; i < 5000; i++) {
    dc_chunk_data *d = chunk(1, 1);
    dc_cache_put(k, 9, i / 8, i % 8, d);
    dc_chunk_release(d);
  }
  int ok = 1;
  for (uint32_t i = 0; i < 5000; i++) {
    dc_chunk_data *d = dc_cache_get(k, 9, i / 8, i % 8);
    if (!d) ok = 0; else dc_chunk_release(d);
  }
  DCT_CHECK(ok);
  dc_cache_free(k);
}

static void test_bufpool_recycles(void) {
  dc_bufpool *p = dc_bufpool_new();
  DCT_CHECK(p != NULL);
  uint8_t *a = rcbuf_new(p, 3u << 20);
  DCT_CHECK(a != NULL);
  a[0] = 1; a[(3u << 20) - 1] = 2;
  rcbuf_unref(a);
  DCT_CHECK(dc_bufpool_spare_bytes(p) >= (3 << 20));
  uint8_t *b = rcbuf_new(p, (3u << 20) - 1000);             /* same size class: reused */
  DCT_CHECK(b == a);
  uint8_t *c = rcbuf_new(p, 100);                           /* small: plain malloc */
  DCT_CHECK(c != NULL && c != a);
  rcbuf_ref(b);                                             /* two references */
  rcbuf_unref(b);
  b[5] = 7;                                                 /* still ours */
  rcbuf_unref(b);
  rcbuf_unref(c);
  uint8_t *big = rcbuf_new(p, 40u << 20);                   /* mapped, huge-page aligned */
  DCT_CHECK(big != NULL);
  memset(big, 1, 40u << 20);
  /* the connection goes away while a buffer is alive: the buffer is freed later */
  dc_bufpool_release(p);
  DCT_CHECK(big[123] == 1);
  rcbuf_unref(big);
}

/* The cache counts the memory a chunk holds, not what was asked for: a chunk
** in a recycled buffer twice its size counts twice (it used to count its
** request, so a cache could hold up to twice its budget). */
static void test_chunk_counts_held_memory(void) {
  dc_bufpool *p = dc_bufpool_new();
  DCT_CHECK(p != NULL);
  dc_chunk_data *big = dc_chunk_new(p, 100, 1u << 20);      /* ~8 MiB: mapped */
  DCT_CHECK(big != NULL);
  size_t big_bytes = big->bytes;
#if defined(__SANITIZE_ADDRESS__)   /* dc_mem_alloc mallocs every buffer there (ASan checks its bounds) */
  DCT_CHECKF(big_bytes >= 8u << 20, "chunk counts %zu", big_bytes);
#else
  DCT_CHECKF(big_bytes >= 8u << 20 && big_bytes % (2u << 20) == 0, "mapped chunk counts %zu", big_bytes);
#endif
  dc_chunk_release(big);                                    /* back to the pool */
  dc_chunk_data *small = dc_chunk_new(p, 100, (1u << 20) * 6 / 10);   /* 0.6x: reuses it */
  DCT_CHECK(small != NULL);
  DCT_CHECKF(small->bytes == big_bytes, "recycled chunk counts %zu, its buffer holds %zu", small->bytes, big_bytes);
  dc_cache *k = dc_cache_new((int64_t)big_bytes);
  dc_cache_put(k, 1, 0, 0, small);
  int64_t bytes, n;
  dc_cache_stats(k, &bytes, &n, NULL, NULL);
  DCT_CHECKF(n == 1 && bytes == (int64_t)big_bytes, "cache holds %lld bytes in %lld entries", (long long)bytes,
             (long long)n);
  dc_chunk_release(small);
  dc_cache_free(k);
  dc_bufpool_release(p);
}

static void test_bufpool_limits(void) {
  dc_bufpool *p = dc_bufpool_new();
  void *bufs[DC_BUFPOOL_MAX + 8];
  for (int i = 0; i < DC_BUFPOOL_MAX + 8; i++) bufs[i] = rcbuf_new(p, (1u << 20) + (uint64_t)i * 4096);
  for (int i = 0; i < DC_BUFPOOL_MAX + 8; i++) rcbuf_unref(bufs[i]);
  DCT_CHECK(dc_bufpool_spare_bytes(p) <= ((int64_t)DC_BUFPOOL_MAX << 21));
  dc_bufpool_trim(p);
  DCT_CHECK(dc_bufpool_spare_bytes(p) == 0);
  dc_bufpool_release(p);
  DCT_CHECK(size_class(1000000) >= 1000000 && size_class(1000000) <= 1000000 + 1000000 / 8 + 1);
  DCT_CHECK(size_class(1u << 20) == (1u << 20));
}

/* make_room evicts least recently used entries nothing else holds, before the new chunks are
** allocated, so that their buffers are the ones the new chunks get (no fresh memory). */
static void test_make_room_recycles(void) {
  dc_bufpool *p = dc_bufpool_new();
  DCT_CHECK(p != NULL);
  dc_chunk_data *a = dc_chunk_new(p, 100, 1u << 20), *b = dc_chunk_new(p, 100, 1u << 20);
  DCT_CHECK(a && b);
  int64_t one = (int64_t)a->bytes;
  dc_cache *c = dc_cache_new(2 * one);
  dc_cache_put(c, 1, 0, 0, a);
  dc_cache_put(c, 1, 0, 1, b);
  dc_chunk_release(a);                 /* only the cache holds a */
  dc_chunk_data *held = dc_cache_get(c, 1, 0, 1);   /* b: in use, and most recent */
  DCT_CHECK(held == b);
  void *a_mem = a;
  /* room for two: a goes (its buffer to the pool), b stays (in use) */
  dc_cache_make_room(c, 2 * one);
  int64_t bytes, entries, hits, misses;
  dc_cache_stats(c, &bytes, &entries, &hits, &misses);
  DCT_CHECKF(entries == 1 && bytes == one, "entries %lld bytes %lld", (long long)entries, (long long)bytes);
  DCT_CHECK(dc_cache_get(c, 1, 0, 0) == NULL);
  dc_chunk_data *again = dc_cache_get(c, 1, 0, 1);
  DCT_CHECK(again == b);
  dc_chunk_release(again);
  DCT_CHECK(dc_bufpool_spare_bytes(p) > 0);
  dc_chunk_data *n = dc_chunk_new(p, 100, 1u << 20);   /* gets a's buffer back */
  DCT_CHECK((void *)n == a_mem);
  /* nothing to do when the incoming chunks fit */
  dc_cache_make_room(c, 0);
  dc_cache_stats(c, &bytes, &entries, &hits, &misses);
  DCT_CHECK(entries == 1);
  dc_chunk_release(n);
  dc_chunk_release(held);
  dc_chunk_release(b);
  dc_cache_free(c);
  dc_bufpool_release(p);
}

int main(void) {
  DCT_RUN(test_get_put_lru);
  DCT_RUN(test_too_big_and_duplicates);
  DCT_RUN(test_many_entries_grow);
  DCT_RUN(test_bufpool_recycles);
  DCT_RUN(test_chunk_counts_held_memory);
  DCT_RUN(test_bufpool_limits);
  DCT_RUN(test_make_room_recycles);
  return dct_done();
}
