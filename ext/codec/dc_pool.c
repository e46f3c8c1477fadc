/*
** dc_pool.c — the threaded decoder: a pthreads parallel-for, parallel chunk
** decoding (dc_pool_decode) and gathering cells into one CSR batch (dc_gather).
**
** Threading rules (docs/threading.md, "Codec pool"):
**   - dc_pool_new starts n-1 workers; the calling thread is worker 0 of every
**     dc_pool_for, so a pool of 1 starts no thread at all.
**   - dc_pool_set_threads(p, k), k <= n, runs later calls on threads 0..k-1 only (the
**     others sleep, keeping their decoders' scratch): a DataLoader worker whose sibling
**     finished takes both cores and gives one back next epoch without starting threads
**     or faulting in fresh scratch each time.
**   - dc_pool_for calls on one pool are serialised by a mutex; a call made from
**     inside a running item of the same pool runs serially on that thread
**     (no deadlock on nesting).
**   - The pool calls nothing but the function it is given: never SQLite.
**   - Each thread has its own dc_decoder (scratch reused across calls).
**   - Fork: the workers of a pool do not exist in a child made by fork(), and its
**     mutexes may have been held by threads of the parent at the moment of the fork.
**     A child that calls into a pool it inherited never touches the inherited
**     threads, mutexes or condition variables: the first call makes a fresh pool of
**     the same size in the child (the inherited pool's heir) and every call on the
**     inherited pool runs on the heir (if the heir cannot be made, serially on the
**     caller).  dc_pool_free of an inherited pool frees the heir, and of the
**     inherited pool only memory (no join).  Inheritance is detected with a fork
**     generation bumped by a pthread_atfork child handler, and the process id.
*/
#include "dc_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct dc_pool {
  int n;                       /* threads including the caller */
  int n_req;                   /* threads asked for (the heir's size) */
  atomic_int active;           /* threads that run items (dc_pool_set_threads; <= n) */
  int job_active;              /* `active` of the job running (under mu) */
  unsigned fork_gen;           /* g_fork_gen when made */
  pid_t pid;                   /* the process that made it */
  struct dc_pool *heir;        /* in a forked child: the pool that does this one's work */
  pthread_t *threads;
  int n_started;
  pthread_mutex_t call_mu;     /* serialises dc_pool_for calls */
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;                /* bumped for each dc_pool_for */
  int stop;
  /* the current job */
  void (*fn)(void *, size_t, int);
  void *arg;
  size_t n_items;
  atomic_size_t next;
  int n_busy;                  /* workers still in the current job */
  dc_decoder **dec;            /* per-thread decoders for dc_pool_decode */
};

static _Thread_local const dc_pool *tl_in_pool;   /* pool whose item this thread runs */

/* ------------------------------------------------------------ fork awareness */
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_heir_mu = PTHREAD_MUTEX_INITIALIZER;   /* making heirs */
static atomic_uint g_fork_gen;                                  /* forks below the first pool */

static void fork_prepare(void) { pthread_mutex_lock(&g_heir_mu); }
static void fork_parent(void) { pthread_mutex_unlock(&g_heir_mu); }
static void fork_child(void) {
  /* the only thread of the child is the one that forked, which holds the mutex */
  pthread_mutex_unlock(&g_heir_mu);
  atomic_fetch_add(&g_fork_gen, 1);
}
static void atfork_register(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

static int pool_owned(const dc_pool *p) {
  return p->fork_gen == atomic_load(&g_fork_gen) && p->pid == getpid();
}

/* Memory of a pool made by another process (its threads do not exist here). Its
** decoders are freed only if the pool was idle at the fork: a decoder that a thread
** of the parent was using may be half-updated, and is left alone. */
static void pool_forget(dc_pool *p) {
  if (!p) return;
  if (p->heir) {
    if (pool_owned(p->heir)) dc_pool_free(p->heir); else pool_forget(p->heir);
  }
  if (p->dec && p->fn == NULL)
    for (int t = 0; t < p->n; t++) dc_decoder_free(p->dec[t]);
  free(p->dec);
  free(p->threads);
  free(p);
}

/* The pool that does p's work in this process: p itself, or (p inherited through a
** fork) its heir, made on first use; NULL (run serially) if the heir cannot be made. */
static dc_pool *pool_live(dc_pool *p) {
  if (!p || pool_owned(p)) return p;
  pthread_mutex_lock(&g_heir_mu);
  dc_pool *h = p->heir;
  if (!h || !pool_owned(h)) {
    if (h) pool_forget(h);          /* the heir of a process between the maker and us */
    h = dc_pool_new(p->n_req);
    if (h) dc_pool_set_threads(h, atomic_load(&p->active));
    p->heir = h;
  }
  pthread_mutex_unlock(&g_heir_mu);
  return h;
}

typedef struct { dc_pool *p; int tid; } worker_arg;

static void run_items(dc_pool *p, int tid) {
  const dc_pool *saved = tl_in_pool;
  tl_in_pool = p;
  for (;;) {
    size_t i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    if (i >= p->n_items) break;
    p->fn(p->arg, i, tid);
  }
  tl_in_pool = saved;
}

static void *worker_main(void *v) {
  worker_arg wa = *(worker_arg *)v;
  free(v);
  dc_pool *p = wa.p;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->go, &p->mu);
    if (p->stop) break;
    seen = p->gen;
    if (wa.tid >= p->job_active) continue;     /* resting (dc_pool_set_threads) */
    pthread_mutex_unlock(&p->mu);
    run_items(p, wa.tid);
    pthread_mutex_lock(&p->mu);
    if (--p->n_busy == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* threads asked for -> threads to run: 0, one per online core; at most 1024 */
static int pool_threads(int n_threads) {
  if (n_threads <= 0) {
    long k = sysconf(_SC_NPROCESSORS_ONLN);
    n_threads = k > 0 ? (int)k : 1;
  }
  return n_threads > 1024 ? 1024 : n_threads;
}

dc_pool *dc_pool_new(int n_threads) {
  n_threads = pool_threads(n_threads);
  pthread_once(&g_atfork_once, atfork_register);
  dc_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n_threads;
  p->n_req = n_threads;
  p->fork_gen = atomic_load(&g_fork_gen);
  p->pid = getpid();
  pthread_mutex_init(&p->call_mu, NULL);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  p->dec = calloc((size_t)n_threads, sizeof *p->dec);
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  if (!p->dec || !p->threads) { dc_pool_free(p); return NULL; }
  for (int t = 1; t < n_threads; t++) {
    worker_arg *wa = malloc(sizeof *wa);
    if (!wa) break;
    wa->p = p;
    wa->tid = t;
    if (pthread_create(&p->threads[t - 1], NULL, worker_main, wa) != 0) { free(wa); break; }
    p->n_started++;
  }
  p->n = p->n_started + 1;   /* if some thread failed to start, run with fewer */
  atomic_init(&p->active, p->n);
  return p;
}

void dc_pool_free(dc_pool *p) {
  if (!p) return;
  if (!pool_owned(p)) {   /* inherited through fork: no thread to join, no mutex to use */
    pthread_mutex_lock(&g_heir_mu);
    pool_forget(p);
    pthread_mutex_unlock(&g_heir_mu);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int t = 0; t < p->n_started; t++) pthread_join(p->threads[t], NULL);
  if (p->dec)
    for (int t = 0; t < p->n; t++) dc_decoder_free(p->dec[t]);
  free(p->dec);
  free(p->threads);
  pthread_mutex_destroy(&p->call_mu);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  free(p);
}

int dc_pool_size(const dc_pool *p) {
  p = pool_live((dc_pool *)p);
  return p ? atomic_load(&p->active) : 1;
}

int dc_pool_set_threads(dc_pool *p, int n) {
  if (!p) return 0;
  n = pool_threads(n);
  dc_pool *live = pool_live(p);
  if (live != p) {   /* inherited: its heir works here (none: serially); p's mutexes are the parent's */
    if (n > (live ? live->n : p->n)) return 0;
    atomic_store(&p->active, n);
    if (!live) return 1;
    p = live;
  }
  if (n > p->n) return 0;
  pthread_mutex_lock(&p->call_mu);    /* between two calls, never under one */
  atomic_store(&p->active, n);
  pthread_mutex_unlock(&p->call_mu);
  return 1;
}

void dc_pool_for_tid(dc_pool *p, size_t n, void (*fn)(void *, size_t, int), void *arg) {
  if (n == 0) return;
  p = pool_live(p);
  if (!p || tl_in_pool == p) {
    /* serial: no pool, or a nested call from inside this pool (tid 0 then;
    ** dc_pool_decode uses a private decoder when nested). */
    for (size_t i = 0; i < n; i++) fn(arg, i, 0);
    return;
  }
  pthread_mutex_lock(&p->call_mu);
  if (p->n_started == 0 || n == 1 || atomic_load(&p->active) <= 1) {
    /* serial on the caller's thread, still as the pool's tid 0: per-tid
    ** state (p->dec[0]) belongs to whoever holds call_mu, so two threads
    ** sharing the pool never use it at once. */
    const dc_pool *saved = tl_in_pool;
    tl_in_pool = p;
    for (size_t i = 0; i < n; i++) fn(arg, i, 0);
    tl_in_pool = saved;
    pthread_mutex_unlock(&p->call_mu);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->arg = arg;
  p->n_items = n;
  atomic_store(&p->next, 0);
  p->job_active = atomic_load(&p->active);
  p->n_busy = p->job_active - 1;
  p->gen++;
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  run_items(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->n_busy > 0) pthread_cond_wait(&p->done, &p->mu);
  p->fn = NULL;
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&p->call_mu);
}

typedef struct { void (*fn)(void *, size_t); void *arg; } plain_for;
static void plain_item(void *v, size_t i, int tid) {
  (void)tid;
  plain_for *pf = v;
  pf->fn(pf->arg, i);
}

void dc_pool_for(dc_pool *p, size_t n, void (*fn)(void *arg, size_t i), void *arg) {
  plain_for pf = {fn, arg};
  dc_pool_for_tid(p, n, plain_item, &pf);
}

/* ------------------------------------------------------------ decode jobs */
typedef struct { dc_pool *p; dc_job *jobs; dc_decoder *solo; } decode_ctx;

static void decode_item(void *v, size_t i, int tid) {
  decode_ctx *dc = v;
  dc_job *j = &dc->jobs[i];
  dc_decoder *d = dc->solo;
  if (!d) {
    if (!dc->p->dec[tid]) dc->p->dec[tid] = dc_decoder_new();
    d = dc->p->dec[tid];
  }
  if (!d) {
    dc_error_set(&j->err, DC_ENOMEM, "chunk %u: out of memory for a decoder", j->chunk);
    j->rc = DC_ENOMEM;
    return;
  }
  j->rc = j->cell_nnz ? dc_chunk_cell_nnz(d, j->buf, j->len, j->hdr, j->chunk, j->cell_nnz, &j->err)
        : j->place  ? dc_chunk_place(d, j->buf, j->len, j->hdr, j->chunk, j->place, &j->err)
                    : dc_chunk_decode(d, j->buf, j->len, j->hdr, j->chunk, &j->out, &j->err);
}

int dc_pool_decode(dc_pool *p, dc_job *jobs, size_t n_jobs) {
  p = pool_live(p);
  decode_ctx dc = {p, jobs, NULL};
  int rc = DC_OK;
  if (!p || tl_in_pool == p) {
    /* no pool (or nested): decode serially with a private decoder */
    dc.solo = dc_decoder_new();
    if (!dc.solo) {
      for (size_t i = 0; i < n_jobs; i++) {
        jobs[i].rc = DC_ENOMEM;
        dc_error_set(&jobs[i].err, DC_ENOMEM, "chunk %u: out of memory for a decoder", jobs[i].chunk);
      }
      return n_jobs ? DC_ENOMEM : DC_OK;
    }
  }
  dc_pool_for_tid(p, n_jobs, decode_item, &dc);
  dc_decoder_free(dc.solo);
  for (size_t i = 0; i < n_jobs; i++)
    if (jobs[i].rc != DC_OK) { rc = jobs[i].rc; break; }
  return rc;
}

/* ------------------------------------------------------------ gather */
uint64_t dc_gather_nnz(const dc_decoded *src, const uint32_t *tile,
                       const uint32_t *cell, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) {
    const dc_decoded *t = &src[tile[i]];
    s += (uint64_t)(t->indptr[cell[i] + 1] - t->indptr[cell[i]]);
  }
  return s;
}

typedef struct {
  const dc_decoded *src;
  const uint32_t *tile, *cell;
  size_t n, block;
  const int64_t *indptr_out;
  int32_t *indices_out, *values_out;
} gather_ctx;

static void gather_item(void *v, size_t b, int tid) {
  (void)tid;
  gather_ctx *g = v;
  size_t lo = b * g->block, hi = lo + g->block;
  if (hi > g->n) hi = g->n;
  for (size_t i = lo; i < hi; i++) {
    const dc_decoded *t = &g->src[g->tile[i]];
    int64_t a = t->indptr[g->cell[i]], k = t->indptr[g->cell[i] + 1] - a;
    int64_t o = g->indptr_out[i];
    memcpy(g->indices_out + o, t->indices + a, (size_t)k * sizeof(int32_t));
    memcpy(g->values_out + o, t->values + a, (size_t)k * sizeof(int32_t));
  }
}

void dc_gather(dc_pool *p, const dc_decoded *src, const uint32_t *tile,
               const uint32_t *cell, size_t n, int64_t *indptr_out,
               int32_t *indices_out, int32_t *values_out) {
  int64_t s = 0;
  indptr_out[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const dc_decoded *t = &src[tile[i]];
    s += t->indptr[cell[i] + 1] - t->indptr[cell[i]];
    indptr_out[i + 1] = s;
  }
  gather_ctx g = {src, tile, cell, n, 256, indptr_out, indices_out, values_out};
  size_t nb = (n + g.block - 1) / g.block;
  dc_pool_for_tid(p, nb, gather_item, &g);
}
