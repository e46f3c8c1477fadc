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

typedef struct slot {
  int state;
  int64_t tile;
  uint64_t first_cell;
  rowbuf rb;
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

/* Puts each cell's genes in increasing order (genes were renumbered): per
** cell, (gene << 32 | count) keys sorted by an LSD radix sort on the gene
** bits, 8 bits a pass (insertion sort for short cells).  Cell by cell, so the
** work stays in cache; linear in nnz. */
static int sort_tile(rowbuf *rb, uint32_t n_genes, uint64_t **ka, uint64_t **kb, size_t *kcap, cv_err *e) {
  uint64_t maxlen = 0;
  for (uint64_t i = 0; i < rb->n_rows; i++)
    if (rb->indptr[i + 1] - rb->indptr[i] > maxlen) maxlen = rb->indptr[i + 1] - rb->indptr[i];
  size_t c1 = *kcap, c2 = *kcap;
  if (cv_grow((void **)ka, &c1, (size_t)maxlen + 1, sizeof **ka, e) ||
      cv_grow((void **)kb, &c2, (size_t)maxlen + 1, sizeof **kb, e))
    return -1;
  *kcap = c1 < c2 ? c1 : c2;
  int passes = 0;
  for (uint32_t g = n_genes ? n_genes - 1 : 0; g; g >>= 8) passes++;
  for (uint64_t i = 0; i < rb->n_rows; i++) {
    uint64_t a = rb->indptr[i], n = rb->indptr[i + 1] - a;
    uint32_t *ix = rb->indices + a, *vx = rb->data + a;
    uint64_t k;
    for (k = 1; k < n && ix[k] > ix[k - 1]; k++) {}
    if (k >= n) continue; /* already in order */
    uint64_t *x = *ka, *y = *kb;
    for (k = 0; k < n; k++) x[k] = (uint64_t)ix[k] << 32 | vx[k];
    if (n <= 32) {
      for (k = 1; k < n; k++) {
        uint64_t t = x[k];
        uint64_t j = k;
        for (; j > 0 && x[j - 1] > t; j--) x[j] = x[j - 1];
        x[j] = t;
      }
    } else {
      for (int p = 0; p < passes; p++) {
        uint32_t cnt[257];
        memset(cnt, 0, sizeof cnt);
        int sh = 32 + 8 * p;
        for (k = 0; k < n; k++) cnt[((x[k] >> sh) & 255) + 1]++;
        for (int d = 0; d < 256; d++) cnt[d + 1] += cnt[d];
        for (k = 0; k < n; k++) y[cnt[(x[k] >> sh) & 255]++] = x[k];
        uint64_t *t = x;
        x = y;
        y = t;
      }
    }
    for (k = 0; k < n; k++) {
      ix[k] = (uint32_t)(x[k] >> 32);
      vx[k] = (uint32_t)x[k];
    }
  }
  return 0;
}

/* Sorts and encodes the tile of slot s (on any thread; no SQLite, no HDF5). */
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

static int encode_slot(pipe_t *pp, slot *s, uint64_t **ka, uint64_t **kb, size_t *kcap) {
  if (pp->dropping) drop_genes(&s->rb);
  if (sort_tile(&s->rb, pp->n_genes, ka, kb, kcap, &s->err)) return 0;
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
  uint64_t *ka = NULL, *kb = NULL;
  size_t kcap = 0;
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
    int ok = encode_slot(pp, s, &ka, &kb, &kcap);
    pthread_mutex_lock(&pp->mu);
    s->state = ok ? S_DONE : S_ERR;
    pthread_cond_broadcast(&pp->done);
  }
  pthread_mutex_unlock(&pp->mu);
  free(ka);
  free(kb);
  return NULL;
}

static void wait_done(pipe_t *pp) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 200000000L;
  if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_cond_timedwait(&pp->done, &pp->mu, &ts);
}

static int read_tile(h5file *files, int nf, const uint64_t *first, const genes *g, uint64_t c0, uint64_t c1,
                     rowbuf *rb, rowbuf *cached, cv_err *e) {
  if (cached && cached->n_rows == c1 - c0) { /* the single input's last tile, read by pass 1 */
    rowbuf t = *rb;
    *rb = *cached;
    *cached = t;
    rowbuf_free(cached);
    uint64_t m = rb->indptr[rb->n_rows];
    for (uint64_t k = 0; k < m; k++) rb->indices[k] = g->fmap[0][rb->indices[k]];
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
  pp.opts.threads = workers == 0 ? threads : threads / workers > 1 ? threads / workers : 1;
  pthread_t *tid = calloc((size_t)workers + 1, sizeof *tid);
  uint64_t *ka = NULL, *kb = NULL;
  size_t kcap = 0;
  int started = 0, rc = -1;
  if (!pp.slots || !tid) { cv_fail(e, "out of memory"); goto done; }
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
      if (read_tile(files, nf, first, g, c0, c1, &r->rb, next_read + 1 == n_tiles ? last : NULL, e)) goto done;
      pthread_mutex_lock(&pp.mu);
      if (workers == 0) {
        pthread_mutex_unlock(&pp.mu);
        int ok = encode_slot(&pp, r, &ka, &kb, &kcap);
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
  free(ka);
  free(kb);
  pthread_mutex_destroy(&pp.mu);
  pthread_cond_destroy(&pp.work);
  pthread_cond_destroy(&pp.done);
  return rc;
}
