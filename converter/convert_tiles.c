/*
** convert_tiles.c — pass 2 of a conversion (see convert_int.h): tiles read on the calling
** thread, their genes put in the new order and encoded by worker threads, written in order.
*/
#include "convert.h"
#include "dc_seal.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "export.h"
#include "h5ad.h"
#include "tenx.h"

#include "convert_int.h"

/* ------------------------------------------------------------ pass 2 */
enum { S_FREE, S_READY, S_BUSY, S_DONE, S_ERR };
enum { SORT_PARTS = 8 };   /* at most this many threads sort a lone tile */

typedef struct slot {
  int state;
  int64_t tile;
  uint64_t first_cell;
  rowbuf rb;
  const uint32_t *remap;  /* NULL, or rb holds local gene ids: this map to dataset ids first */
  uint8_t *out;
  size_t out_len;
  cv_err err;
} slot;

typedef struct pipe {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  int stop;
  slot *slots;
  int n_slots;
  uint32_t n_genes;
  int dropping;         /* some genes are not stored (--genes intersect) */
  dc_encode_opts opts;
} pipe_t;

/* Sort scratch of one thread. */
typedef struct sort_scratch {
  uint64_t *ka, *kb;
  size_t kcap;
} sort_scratch;

/* A tile's rows sorted in parts on a pool (a lone tile: the codec's pool
** encodes its chunks, this one puts its genes in order first). */
typedef struct sort_par {
  rowbuf *rb;
  const uint32_t *remap;
  uint32_t n_genes;
  uint64_t *cut;          /* n parts + 1 cell boundaries, balanced by nonzeros */
  sort_scratch *sc;       /* per part */
  int *rc;                /* per part */
  cv_err *errs;           /* per part */
} sort_par;

static void sort_part(void *arg, size_t k) {
  sort_par *sp = arg;
  sp->rc[k] = cv_sort_rows(sp->rb->indptr, sp->rb->indices, sp->rb->data, sp->cut[k], sp->cut[k + 1], sp->remap,
                           sp->n_genes, &sp->sc[k].ka, &sp->sc[k].kb, &sp->sc[k].kcap, &sp->errs[k]);
}

/* Removes the entries of genes not stored (index UINT32_MAX: --genes intersect). */
static void drop_genes(rowbuf *rb) {
  uint64_t out = 0, a = 0;
  for (uint64_t i = 0; i < rb->n_rows; i++) {
    uint64_t b = rb->indptr[i + 1];
    for (uint64_t k = a; k < b; k++)
      if (rb->indices[k] != UINT32_MAX) {
        rb->indices[out] = rb->indices[k];
        rb->data[out] = rb->data[k];
        out++;
      }
    a = b;
    rb->indptr[i + 1] = out;
  }
}

/* Sorts and encodes the tile of slot s (on any thread; no SQLite, no HDF5).  s->remap (a
** tile kept by pass 1, in local gene ids) is applied here.  pool: NULL, or (a lone tile)
** the pool that sorts its rows in parts, with sc[] and errs[] one per part; freed here. */
static int encode_slot(pipe_t *pp, slot *s, sort_scratch *sc, dc_pool *pool, cv_err *errs) {
  const uint32_t *remap = s->remap;
  s->remap = NULL;
  if (pp->dropping) { /* dropped entries are marked by the remap: map first, then compact, then sort */
    if (remap) {
      uint64_t m = s->rb.indptr[s->rb.n_rows];
      for (uint64_t k = 0; k < m; k++) s->rb.indices[k] = remap[s->rb.indices[k]];
      remap = NULL;
    }
    drop_genes(&s->rb);
  }
  int parts = pool ? dc_pool_size(pool) : 1, sorted = 1;
  if (parts > SORT_PARTS) parts = SORT_PARTS;
  if ((uint64_t)parts > s->rb.n_rows) parts = 1;
  if (parts <= 1) {
    sorted = !cv_sort_rows(s->rb.indptr, s->rb.indices, s->rb.data, 0, s->rb.n_rows, remap, pp->n_genes, &sc[0].ka,
                           &sc[0].kb, &sc[0].kcap, &s->err);
  } else {
    uint64_t cut[SORT_PARTS + 1];
    int rc[SORT_PARTS];
    uint64_t nnz = s->rb.indptr[s->rb.n_rows];
    cut[0] = 0;
    cut[parts] = s->rb.n_rows;
    for (int k = 1; k < parts; k++) { /* the first cell at or past k/parts of the nonzeros */
      uint64_t target = nnz / (uint64_t)parts * (uint64_t)k, lo = cut[k - 1], hi = s->rb.n_rows;
      while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (s->rb.indptr[mid] >= target) hi = mid; else lo = mid + 1;
      }
      cut[k] = lo;
    }
    sort_par sp = {&s->rb, remap, pp->n_genes, cut, sc, rc, errs};
    dc_pool_for(pool, (size_t)parts, sort_part, &sp);
    for (int k = 0; k < parts && sorted; k++)
      if (rc[k]) {
        memcpy(&s->err, &errs[k], sizeof s->err);
        sorted = 0;
      }
  }
  if (pool) { /* its threads end before the codec's start: they take over their malloc arenas (and the
              ** memory the sort freed in them) instead of new ones, which are fresh pages */
    for (int k = 1; k < SORT_PARTS; k++) {
      free(sc[k].ka);
      free(sc[k].kb);
      memset(&sc[k], 0, sizeof sc[k]);
    }
    dc_pool_free(pool);
  }
  if (!sorted) return 0;
  dc_csr csr = {(uint32_t)s->rb.n_rows, pp->n_genes, s->rb.indptr, s->rb.indices, s->rb.data};
  dc_error de;
  memset(&de, 0, sizeof de);
  s->out = NULL;
  if (dc_tile_encode(&csr, &pp->opts, &s->out, &s->out_len, &de) != DC_OK) {
    cv_fail(&s->err, "encoding tile %lld: %s", (long long)s->tile, de.msg);
    return 0;
  }
  return 1;
}

static void *worker(void *arg) {
  pipe_t *pp = arg;
  sort_scratch sc = {NULL, NULL, 0};
  pthread_mutex_lock(&pp->mu);
  for (;;) {
    slot *s = NULL;
    for (int i = 0; i < pp->n_slots; i++)
      if (pp->slots[i].state == S_READY && (!s || pp->slots[i].tile < s->tile)) s = &pp->slots[i];
    if (!s) {
      if (pp->stop) break;
      pthread_cond_wait(&pp->work, &pp->mu);
      continue;
    }
    s->state = S_BUSY;
    pthread_mutex_unlock(&pp->mu);
    int ok = encode_slot(pp, s, &sc, NULL, NULL);
    pthread_mutex_lock(&pp->mu);
    s->state = ok ? S_DONE : S_ERR;
    pthread_cond_broadcast(&pp->done);
  }
  pthread_mutex_unlock(&pp->mu);
  free(sc.ka);
  free(sc.kb);
  return NULL;
}

static void wait_done(pipe_t *pp) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 200000000L;
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(&pp->done, &pp->mu, &ts);
}

/* Tile [c0, c1) into rb; *remap set when rb holds local gene ids (the tile pass 1 kept). */
static int read_tile(h5file *files, int nf, const uint64_t *first, const genes *g, uint64_t c0, uint64_t c1,
                     rowbuf *rb, rowbuf *cached, const uint32_t **remap, cv_err *e) {
  *remap = NULL;
  if (cached && cached->n_rows == c1 - c0) { /* the single input's last tile, read by pass 1 */
    rowbuf t = *rb;
    *rb = *cached;
    *cached = t;
    rowbuf_free(cached);
    *remap = g->fmap[0];   /* applied by encode_slot, with the sort */
    return 0;
  }
  rowbuf_clear(rb);
  for (int f = 0; f < nf; f++) {
    uint64_t a = first[f], b = first[f] + files[f].n_obs;
    if (b <= c0 || a >= c1) continue;
    uint64_t r0 = c0 > a ? c0 - a : 0, r1 = (c1 < b ? c1 : b) - a;
    if (h5ad_read_rows(&files[f], r0, r1, g->fmap[f], rb, e)) return -1;
  }
  return 0;
}

/* tstart[t] .. tstart[t+1]: the cells of tile t (n_tiles + 1 entries). */
int cv_pass2(h5file *files, int nf, const uint64_t *first, const uint64_t *tstart, uint64_t n_tiles,
             const genes *g, const cv_opts *o, rowbuf *last, dsw *w, uint64_t *nnz_out, uint64_t *bytes_out,
             progress *pg, cv_err *e) {
  int threads = o->threads > 0 ? o->threads : cv_ncores();
  /* one tile: this thread encodes it (the codec spreads its chunks over `threads`) */
  int workers = n_tiles <= 1 ? 0 : (uint64_t)threads < n_tiles ? threads : (int)n_tiles;
  pipe_t pp;
  memset(&pp, 0, sizeof pp);
  pthread_mutex_init(&pp.mu, NULL);
  pthread_cond_init(&pp.work, NULL);
  pthread_cond_init(&pp.done, NULL);
  pp.n_slots = workers + 1;
  pp.slots = calloc((size_t)pp.n_slots, sizeof *pp.slots);
  pp.n_genes = g->n;
  pp.dropping = g->dropping;
  dc_encode_opts_default(&pp.opts);
  if (o->codec) pp.opts.codec = o->codec;
  if (o->level_set) pp.opts.level = o->level;
  pp.opts.n_chunks = o->chunks;
  pp.opts.chunk_cells = o->chunk_cells;
  pp.opts.threads = workers == 0 ? threads : threads / workers > 1 ? threads / workers : 1;
  pthread_t *tid = calloc((size_t)workers + 1, sizeof *tid);
  sort_scratch sc[SORT_PARTS];
  cv_err *serrs = calloc(SORT_PARTS, sizeof *serrs);
  memset(sc, 0, sizeof sc);
  /* a lone tile: its rows sorted on `threads` threads (the workers sort their own tiles) */
  dc_pool *spool = workers == 0 && threads > 1 ? dc_pool_new(threads < SORT_PARTS ? threads : SORT_PARTS) : NULL;
  int started = 0, rc = -1;
  if (!pp.slots || !tid || !serrs) { cv_fail(e, "out of memory"); goto done; }
  for (; started < workers; started++)
    if (pthread_create(&tid[started], NULL, worker, &pp) != 0) { cv_fail(e, "cannot start a thread"); goto done; }
  uint64_t next_read = 0, next_write = 0, nnz = 0, bytes = 0;
  pthread_mutex_lock(&pp.mu);
  while (next_write < n_tiles) {
    slot *w0 = &pp.slots[next_write % (uint64_t)pp.n_slots];
    if (w0->state == S_ERR) {
      memcpy(e, &w0->err, sizeof *e);
      pthread_mutex_unlock(&pp.mu);
      goto done;
    }
    if (w0->state == S_DONE) {
      pthread_mutex_unlock(&pp.mu);
      uint64_t tn = w0->rb.indptr[w0->rb.n_rows];
      dc_tile_hdr hdr;
      dc_error de;
      uint32_t chunks = 0;
      if (dc_tile_parse(w0->out, w0->out_len, &hdr, &de) == DC_OK) chunks = hdr.n_chunks;
      else { cv_fail(e, "tile %llu: the encoder's output does not parse: %s", (unsigned long long)next_write, de.msg); goto done; }
      if (o->tiles_to ? dsw_tile(o->tiles_to, o->tile_base + (int64_t)next_write, o->cell_base + (int64_t)w0->first_cell,
                                 (int64_t)w0->rb.n_rows, (int64_t)tn, chunks, w0->out, w0->out_len, e)
                      : dsw_tile(w, (int64_t)next_write, (int64_t)w0->first_cell, (int64_t)w0->rb.n_rows, (int64_t)tn,
                                 chunks, w0->out, w0->out_len, e))
        goto done;
      nnz += tn;
      bytes += w0->out_len;
      free(w0->out);
      w0->out = NULL;
      cv_prog_show(pg, w0->first_cell + w0->rb.n_rows);
      pthread_mutex_lock(&pp.mu);
      w0->state = S_FREE;
      next_write++;
      continue;
    }
    if (cv_interrupted) {
      pthread_mutex_unlock(&pp.mu);
      cv_check_interrupt(e);
      goto done;
    }
    slot *r = &pp.slots[next_read % (uint64_t)pp.n_slots];
    if (next_read < n_tiles && r->state == S_FREE) {
      pthread_mutex_unlock(&pp.mu);
      uint64_t c0 = tstart[next_read], c1 = tstart[next_read + 1];
      r->tile = (int64_t)next_read;
      r->first_cell = c0;
      if (read_tile(files, nf, first, g, c0, c1, &r->rb, next_read + 1 == n_tiles ? last : NULL, &r->remap, e))
        goto done;
      pthread_mutex_lock(&pp.mu);
      if (workers == 0) {
        pthread_mutex_unlock(&pp.mu);
        int ok = encode_slot(&pp, r, sc, spool, serrs);
        spool = NULL;
        pthread_mutex_lock(&pp.mu);
        r->state = ok ? S_DONE : S_ERR;
      } else {
        r->state = S_READY;
        pthread_cond_signal(&pp.work);
      }
      next_read++;
      continue;
    }
    wait_done(&pp);
  }
  pthread_mutex_unlock(&pp.mu);
  *nnz_out = nnz;
  *bytes_out = bytes;
  rc = 0;
done:
  pthread_mutex_lock(&pp.mu);
  pp.stop = 1;
  pthread_cond_broadcast(&pp.work);
  pthread_mutex_unlock(&pp.mu);
  for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
  for (int i = 0; pp.slots && i < pp.n_slots; i++) {
    rowbuf_free(&pp.slots[i].rb);
    free(pp.slots[i].out);
  }
  free(pp.slots);
  free(tid);
  for (int k = 0; k < SORT_PARTS; k++) {
    free(sc[k].ka);
    free(sc[k].kb);
  }
  free(serrs);
  dc_pool_free(spool);
  pthread_mutex_destroy(&pp.mu);
  pthread_cond_destroy(&pp.work);
  pthread_cond_destroy(&pp.done);
  return rc;
}
