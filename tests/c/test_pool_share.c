/*
** test_pool_share.c — two threads sharing one codec pool (docs/threading.md promises that
** they may): every call, including the serial ones (a single job, or a pool without worker
** threads) that run on the caller as the pool's thread 0, gives the right output.  `make test`
** also runs this file built with ThreadSanitizer (build/tsan/tests/), which reports any data
** race on the pool's per-thread decoders even when the outputs happen to be right.
*/
#include "dctest.h"
#include "dc_testutil.h"
#include "dc_internal.h"

#include <pthread.h>

#define ROUNDS 12

typedef struct { dct_mat m; uint8_t *buf; size_t len; dc_tile_hdr h; } tile_t;

static int tile_make(tile_t *t, uint64_t seed, uint32_t n_cells, uint32_t n_chunks) {
  memset(t, 0, sizeof *t);
  if (dct_mat_random(&t->m, seed, n_cells, 900, 0.7, DCT_MIXED, 0.05, 0.01) != 0) return 0;
  dc_error err = {0};
  if (dct_encode(&t->m, 0, n_chunks, 1, &t->buf, &t->len, &err) != DC_OK) return 0;
  return dc_tile_parse(t->buf, t->len, &t->h, &err) == DC_OK;
}

static void tile_free(tile_t *t) {
  free(t->buf);
  dct_mat_free(&t->m);
}

/* Decodes chunks [c0, c0+nc) of t through dc_pool_decode on p, each call one job when
** `one_by_one`; 1 if the whole tile then equals its matrix. */
static int decode_check(dc_pool *p, const tile_t *t, int one_by_one) {
  int64_t *ip = malloc((t->h.n_cells + 1) * sizeof *ip);
  int32_t *ix = malloc(t->h.nnz * 4 + 4), *vv = malloc(t->h.nnz * 4 + 4);
  int ok = ip && ix && vv;
  if (ok) {
    dc_job jobs[DC_MAX_CHUNKS];
    for (uint32_t c = 0; c < t->h.n_chunks; c++)
      jobs[c] = (dc_job){t->buf, t->len, &t->h, c, {ip, ix, vv, 0}, -1, {0, {0}}, NULL, NULL};
    if (one_by_one) {
      for (uint32_t c = 0; ok && c < t->h.n_chunks; c++) ok = dc_pool_decode(p, &jobs[c], 1) == DC_OK;
    } else {
      ok = dc_pool_decode(p, jobs, t->h.n_chunks) == DC_OK;
    }
    dct_dec d = {ip, ix, vv, t->h};
    ok = ok && dct_same(&t->m, &d, 0);
  }
  free(ip); free(ix); free(vv);
  return ok;
}

typedef struct { dc_pool *p; const tile_t *t; int ok; } worker_t;

static void *worker(void *v) {
  worker_t *w = v;
  w->ok = 1;
  for (int r = 0; r < ROUNDS && w->ok; r++) w->ok = decode_check(w->p, w->t, r % 2);
  return NULL;
}

/* Two threads, each with a tile of its own (different tiles: the decoders' tables differ),
** share pool p; returns 1 if both decoded every round right. */
static int share(dc_pool *p) {
  tile_t a, b;
  int ok = tile_make(&a, 11, 300, 6) && tile_make(&b, 12, 250, 5);
  if (ok) {
    worker_t wa = {p, &a, 0}, wb = {p, &b, 0};
    pthread_t ta, tb;
    ok = pthread_create(&ta, NULL, worker, &wa) == 0;
    if (ok && pthread_create(&tb, NULL, worker, &wb) != 0) { pthread_join(ta, NULL); ok = 0; }
    if (ok) {
      pthread_join(ta, NULL);
      pthread_join(tb, NULL);
      ok = wa.ok && wb.ok;
    }
  }
  tile_free(&a);
  tile_free(&b);
  return ok;
}

static void test_share_pool_of_three(void) {
  dc_pool *p = dc_pool_new(3);
  DCT_CHECK(p != NULL);
  if (p) DCT_CHECK(share(p));
  dc_pool_free(p);
}

/* a pool of one thread has no worker threads: every call runs serially on its caller */
static void test_share_pool_of_one(void) {
  dc_pool *p = dc_pool_new(1);
  DCT_CHECK(p != NULL);
  if (p) DCT_CHECK(share(p));
  dc_pool_free(p);
}

/* no pool at all: each call decodes with a private decoder */
static void test_share_no_pool(void) { DCT_CHECK(share(NULL)); }

int main(void) {
  DCT_RUN(test_share_pool_of_three);
  DCT_RUN(test_share_pool_of_one);
  DCT_RUN(test_share_no_pool);
  return dct_done();
}
