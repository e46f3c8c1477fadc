/*
** http_prefetch.c — the dchttp VFS's prefetcher: background requests, on threads of the open
** file, for the blocks ahead of a sequential reader (how it works: the comment below).
*/
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "vfs_http_int.h"
#include "dc_codec.h"     /* dc_mem_alloc_huge */

/* --- prefetch: background requests for the blocks ahead of a sequential reader ------------
** When a miss continues the last one (an overflow chain: a tile, a long column), the blocks ahead
** are fetched by max_inflight threads of the file: 2 requests ahead at the start of a stream, one
** more each time the reader takes one, up to max_inflight + 1 (about readahead_kb).  A read announced
** with dc_vfs_expect (its length known: a tile's blob) starts its stream at its first miss, every
** request up to its end queued at once and none past it (pf_end: the last request is cut there,
** requests queued past it are dropped, and the stream stays there until the reader misses a block
** outside the read); a read whose blocks the stream before it fetched sets pf_end when the reader
** takes them.  One request of
** `pf_chunk` blocks each (readahead_kb / max_inflight), each thread on its own curl handle (its
** own connection, throttled as one).  A request's bytes stay in its entry (pf_ent) until the
** reading thread needs one of its blocks: it waits for the entry if in flight, then installs its
** blocks into the memory block cache (and the disk cache) itself; the threads touch only their
** entries (under pf->mu), the process's shared block cache (its own lock) and the stats, never
** SQLite.  A prefetch request makes one attempt and checks the version like any other; when it
** fails, the reading thread fetches the blocks itself (with retries) and reports what fails
** then.  A miss that does not continue the stream drops the queued requests; the entries already
** fetched stay until an entry is needed for another window, then go to the disk cache.
** Memory: (max_inflight + 1) entries of pf_chunk blocks per file.
** Fork: the threads are the parent's; a child leaves the inherited state alone (never locks,
** joins or frees it) and starts its own. */
enum { PF_FREE = 0, PF_QUEUED, PF_BUSY, PF_DONE, PF_FAILED };
struct pf_ent {
  int state;
  unsigned seq;                 /* counts the requests the entry has been given (dh_pf_wait_span) */
  int64_t first, n;             /* blocks first .. first + n - 1 (n 0: a span request) */
  int64_t plo, plen;            /* a span request (n 0): bytes [plo, plo + plen) (dh_pf_queue_span) */
  uint8_t *buf;                 /* pf_chunk blocks, in huge pages where the system has them (a new
                                   process fills it in fresh memory: dc_mem_alloc_huge) */
  size_t buf_map;               /* dc_mem_free's */
};

struct dc_prefetch {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pid_t pid;
  dc_hfile *f;
  int nent, nth, inflight;
  pf_ent *ent;
  pthread_t *th;
  _Atomic int stop;
};

static void note_peak(int n) {
  int64_t p = atomic_load(&dh_st.pf_peak);
  while (n > p && !atomic_compare_exchange_weak(&dh_st.pf_peak, &p, n)) {}
}

static int pf_abort(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a; (void)b; (void)c; (void)d;
  return atomic_load(&((dc_prefetch *)ud)->stop);     /* nonzero: abort the transfer (close) */
}

/* one prefetch request, one attempt: 1 when all `total` bytes from `off` are in buf (the blocks
** first .. first + n - 1, or a span: n 0) */
static int pf_fetch(dc_prefetch *p, CURL **cp, int64_t first, int64_t n, int64_t off, int64_t total, uint8_t *buf) {
  dc_hfile *f = p->f;
  if (f->local) {
    double t0 = dh_now();
    int64_t done = 0;
    while (done < total) {
      ssize_t k = pread(f->pf_fd, buf + done, (size_t)(total - done), off + done);
      if (k <= 0) return 0;
      done += k;
    }
    atomic_fetch_add(&dh_st.requests, 1);
    atomic_fetch_add(&dh_st.bytes, total);
    dh_throttle(f, total, t0, &p->stop);
    return 1;
  }
  if (!*cp && !(*cp = curl_easy_init())) return 0;
  curl_easy_reset(*cp);
  dh_setup_curl(f, *cp);
  curl_easy_setopt(*cp, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(*cp, CURLOPT_XFERINFOFUNCTION, pf_abort);
  curl_easy_setopt(*cp, CURLOPT_XFERINFODATA, p);
  char err[900];
  int64_t got = 0;
  double t0 = dh_trace ? dh_now() : 0;
  int rc = dh_get_on(f, *cp, 0, off, total, buf, &got, 0, err, sizeof err, &p->stop);
  if (dh_trace && n)
    fprintf(stderr, "dchttp: %.3f %d %s prefetched blocks %lld..%lld in %.3f s: %s\n", dh_now(), (int)getpid(), f->name,
            (long long)first, (long long)(first + n - 1), dh_now() - t0, rc == SQLITE_OK ? "ok" : err);
  else if (dh_trace)
    fprintf(stderr, "dchttp: %.3f %d %s prefetched bytes %lld..%lld in %.3f s: %s\n", dh_now(), (int)getpid(), f->name,
            (long long)off, (long long)(off + total - 1), dh_now() - t0, rc == SQLITE_OK ? "ok" : err);
  return rc == SQLITE_OK && got == total;
}

static void *pf_main(void *arg) {
  dc_prefetch *p = arg;
  CURL *c = NULL;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    pf_ent *e = NULL;
    while (!atomic_load(&p->stop)) {
      for (int i = 0; i < p->nent; i++)     /* the queued request nearest the reader first */
        if (p->ent[i].state == PF_QUEUED && (!e || p->ent[i].first < e->first)) e = &p->ent[i];
      if (e) break;
      pthread_cond_wait(&p->work, &p->mu);
    }
    if (atomic_load(&p->stop)) break;
    e->state = PF_BUSY;
    note_peak(++p->inflight);
    int64_t first = e->first, n = e->n, plo = e->plo, plen = e->plen;
    pthread_mutex_unlock(&p->mu);
    int ok = 0;
    dc_hfile *f = p->f;
    if (!e->buf) e->buf = dc_mem_alloc_huge((size_t)(f->pf_chunk * f->bsize), &e->buf_map);
    if (e->buf && n)
      ok = pf_fetch(p, &c, first, n, first * f->bsize, (n - 1) * f->bsize + dc_block_len(first + n - 1, f->bsize, f->size),
                    e->buf);
    else if (e->buf)                  /* (a span fits the buffer: dh_pf_queue_span) */
      ok = pf_fetch(p, &c, 0, 0, plo, plen, e->buf);
    /* into the process's shared cache (and a span's edges into the parts) here, off the reading
    ** thread (its copies into fresh memory are slow on some machines); it has its own lock and no SQLite */
    for (int64_t k = first; ok && k < first + n; k++)
      dh_shared_put(f, k, e->buf + (k - first) * f->bsize, dc_block_len(k, f->bsize, f->size));
    if (ok && !n) dh_span_put(f, plo, plen, e->buf);
    if (!n) atomic_fetch_add(&dh_st.spans, 1);
    atomic_fetch_add(&dh_st.pf_requests, 1);
    if (!ok) atomic_fetch_add(&dh_st.pf_failed, 1);
    pthread_mutex_lock(&p->mu);
    p->inflight--;
    e->state = ok ? PF_DONE : PF_FAILED;
    pthread_cond_broadcast(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  if (c) curl_easy_cleanup(c);
  return NULL;
}

/* the file's prefetcher of this process if it has started one, else NULL */
dc_prefetch *dh_pf_peek(dc_hfile *f) {
  if (f->pf && f->pf->pid != getpid()) f->pf = NULL;   /* a forked child: the parent's, left untouched */
  return f->pf;
}

/* the file's prefetcher in this process (its threads started on the first sequential miss), or
** NULL when off */
dc_prefetch *dh_pf_get(dc_hfile *f) {
  if (f->max_inflight <= 0) return NULL;
  if (dh_pf_peek(f)) return f->pf;
  if (f->local && f->pf_fd < 0) {
    f->pf_fd = open(f->name, O_RDONLY | O_CLOEXEC);
    if (f->pf_fd < 0) { f->max_inflight = 0; return NULL; }
  }
  dc_prefetch *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->nent = f->max_inflight + 1;
  p->ent = calloc((size_t)p->nent, sizeof *p->ent);
  p->th = calloc((size_t)f->max_inflight, sizeof *p->th);
  if (!p->ent || !p->th) { free(p->ent); free(p->th); free(p); return NULL; }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->pid = getpid();
  p->f = f;
  sigset_t all, old;                     /* signals stay with the application's threads */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < f->max_inflight; i++) {
    if (pthread_create(&p->th[p->nth], NULL, pf_main, p) != 0) break;
    p->nth++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!p->nth) {                         /* no thread: read as without prefetch */
    pthread_mutex_destroy(&p->mu); pthread_cond_destroy(&p->work); pthread_cond_destroy(&p->done);
    free(p->ent); free(p->th); free(p);
    f->max_inflight = 0;
    return NULL;
  }
  f->pf = p;
  return p;
}

void dh_pf_close(dc_hfile *f) {
  dc_prefetch *p = f->pf;
  f->pf = NULL;
  if (!p || p->pid != getpid()) return;  /* a forked child: not ours */
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
  for (int i = 0; i < p->nent; i++) {
    if (p->ent[i].state == PF_DONE) atomic_fetch_add(&dh_st.pf_unused, p->ent[i].n);
    dc_mem_free(p->ent[i].buf, p->ent[i].buf_map);
  }
  pthread_mutex_destroy(&p->mu); pthread_cond_destroy(&p->work); pthread_cond_destroy(&p->done);
  free(p->ent); free(p->th); free(p);
}

/* the entry holding block idx (queued, in flight or fetched), or NULL */
pf_ent *dh_pf_find(dc_prefetch *p, int64_t idx) {
  pf_ent *e = NULL;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nent && !e; i++) {
    pf_ent *x = &p->ent[i];
    if (x->state != PF_FREE && idx >= x->first && idx < x->first + x->n) e = x;
  }
  pthread_mutex_unlock(&p->mu);
  return e;
}

/* a block the reader has (memory, shared or disk cache) or has asked for needs no prefetch */
static int pf_held(dc_hfile *f, dc_prefetch *p, int64_t idx) {
  int64_t l;
  return dc_blockcache_get(f->mem, idx, &l) != NULL || dh_pf_find(p, idx) != NULL || dh_shared_has(f, idx) ||
         dh_on_disk(f, idx);
}

/* an entry's blocks into the disk cache; into memory too when mem (the reader is about to use them).
** Called by the reading thread on a DONE entry (no thread touches it), which it then frees. */
static void pf_install(dc_hfile *f, dc_prefetch *p, pf_ent *e, int mem) {
  for (int64_t k = e->first; k < e->first + e->n; k++) {
    int64_t lk = dc_block_len(k, f->bsize, f->size);
    const uint8_t *src = e->buf + (k - e->first) * f->bsize;
    if (!f->local) dh_disk_put(f, k, src, lk);      /* (the thread put it in the shared cache) */
    if (mem && !dh_shared_keeps(f, k)) {
      uint8_t *s = dc_blockcache_slot(f->mem, k);
      if (s) { memcpy(s, src, (size_t)lk); dc_blockcache_commit(f->mem, k, lk); }
    }
  }
  atomic_fetch_add(mem ? &dh_st.pf_blocks : &dh_st.pf_unused, e->n);
  pthread_mutex_lock(&p->mu);
  e->state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
}

/* A free entry for a new request, else one fetched (or failed) whose blocks lie outside [from,
** limit), freed first (a fetched one's blocks to the caches); NULL when there is none.  The
** reading thread only (no thread takes an entry that is not queued). */
static pf_ent *pf_entry(dc_hfile *f, dc_prefetch *p, int64_t from, int64_t limit) {
  pf_ent *e = NULL, *old = NULL;
  int old_done = 0;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nent && !e; i++) {
    pf_ent *x = &p->ent[i];
    if (x->state == PF_FREE) e = x;
    else if ((x->state == PF_DONE || x->state == PF_FAILED) && (x->first + x->n <= from || x->first >= limit))
      old = x;
  }
  if (!e && old && old->state == PF_FAILED) { old->state = PF_FREE; e = old; }
  else if (!e && old) old_done = 1;
  pthread_mutex_unlock(&p->mu);
  if (old_done) { pf_install(f, p, old, 0); e = old; }
  return e;
}

/* queue requests for the blocks from `from` on, up to the window, in the free entries; the
** stale entries already fetched go to the caches first */
void dh_pf_schedule(dc_hfile *f, dc_prefetch *p, int64_t from) {
  int64_t nblocks = (f->size + f->bsize - 1) / f->bsize;
  if (f->pf_depth < 2) f->pf_depth = 2;
  if (f->pf_depth > p->nent) f->pf_depth = p->nent;
  int64_t limit = from + (int64_t)f->pf_depth * f->pf_chunk;
  if (f->pf_end && limit > f->pf_end) limit = f->pf_end;   /* an announced read's end (hf_read drops it
                                                           ** when the reader misses a block outside it) */
  if (f->pf_end) {               /* requests queued past an announced read's end (before its end was
                                 ** known) are dropped; those in flight or fetched stay */
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nent; i++)
      if (p->ent[i].state == PF_QUEUED && p->ent[i].first >= f->pf_end) p->ent[i].state = PF_FREE;
    pthread_mutex_unlock(&p->mu);
  }
  if (f->pf_next < from || f->pf_next > limit) f->pf_next = from;
  int queued = 0;
  while (f->pf_next < limit && f->pf_next < nblocks) {
    if (pf_held(f, p, f->pf_next)) { f->pf_next++; continue; }
    pf_ent *e = pf_entry(f, p, from, limit);
    if (!e) break;
    int64_t n = 1;
    while (n < f->pf_chunk && (!f->pf_end || f->pf_next + n < f->pf_end) && f->pf_next + n < nblocks && !pf_held(f, p, f->pf_next + n)) n++;
    pthread_mutex_lock(&p->mu);
    e->first = f->pf_next; e->n = n; e->state = PF_QUEUED;      /* (n > 0: plo, plen unused) */
    e->seq++;
    pthread_mutex_unlock(&p->mu);
    f->pf_next += n;
    queued++;
  }
  if (queued) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
  }
}

/* Block idx from the prefetcher: waits for its request, installs its blocks into memory and
** returns the entry's last block + 1; 0 when it has not got it (not asked for, or failed). */
int64_t dh_pf_take(dc_hfile *f, dc_prefetch *p, pf_ent *e) {
  pthread_mutex_lock(&p->mu);
  if (e->state == PF_QUEUED || e->state == PF_BUSY) atomic_fetch_add(&dh_st.pf_waits, 1);
  while (e->state == PF_QUEUED || e->state == PF_BUSY) pthread_cond_wait(&p->done, &p->mu);
  int st = e->state;
  if (st == PF_FAILED) e->state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
  if (st != PF_DONE) return 0;
  int64_t end = e->first + e->n;
  pf_install(f, p, e, 1);
  return end;
}

/* the reader took a request's blocks in order: the stream goes on, one more request ahead */
void dh_pf_advance(dc_hfile *f, dc_prefetch *p, int64_t from) {
  f->pf_depth++;
  f->pf_detour = 0;
  dh_pf_schedule(f, p, from);
}

/* the reader left the stream: queued requests dropped; those in flight or fetched stay until their
** entry is needed for another window (pf_schedule) */
void dh_pf_jump(dc_prefetch *p) {
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nent; i++)
    if (p->ent[i].state == PF_QUEUED) p->ent[i].state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
  p->f->pf_next = -1;
  p->f->pf_detour = 0;
  p->f->pf_depth = 2;
  p->f->pf_end = 0;
}

pf_ent *dh_pf_queue_span(dc_prefetch *p, int64_t lo, int64_t len, unsigned *seq) {
  if (len > p->f->pf_chunk * p->f->bsize) return NULL;    /* (an entry's buffer) */
  /* a free entry, else any request nobody took (a stream left, a fetch that failed): every
  ** entry's blocks lie before INT64_MAX */
  pf_ent *e = pf_entry(p->f, p, INT64_MAX, INT64_MAX);
  pthread_mutex_lock(&p->mu);
  if (e) {
    e->first = -1; e->n = 0;        /* no block: dh_pf_find never gives it, pf_main takes it first */
    e->plo = lo; e->plen = len;
    e->state = PF_QUEUED;
    *seq = ++e->seq;
    pthread_cond_broadcast(&p->work);
  }
  pthread_mutex_unlock(&p->mu);
  return e;
}

void dh_pf_wait_span(dc_prefetch *p, pf_ent *e, unsigned seq) {
  pthread_mutex_lock(&p->mu);
  if (e->seq == seq && (e->state == PF_QUEUED || e->state == PF_BUSY)) atomic_fetch_add(&dh_st.pf_waits, 1);
  while (e->seq == seq && (e->state == PF_QUEUED || e->state == PF_BUSY)) pthread_cond_wait(&p->done, &p->mu);
  if (e->seq == seq && e->state != PF_FREE) e->state = PF_FREE;   /* (else given another request since) */
  pthread_mutex_unlock(&p->mu);
}
