/*
** convert.c — h5ad files to one deltacells dataset.
**
** 1. Open every input and check its structure.  Genes are joined by name (or
**    --gene-key): the k-th occurrence of a name in one file joins the k-th
**    occurrence in another, so duplicate names in a file stay apart.
** 2. Pass 1 reads every matrix once (by rows; CSC by columns into the
**    transpose spool) and sums counts and cells per gene.  Genes are renumbered
**    by decreasing total counts, ties by first appearance (file, then var order).
** 3. Pass 2 reads tiles of --tile-cells cells on this thread (HDF5 is not
**    thread-safe), while worker threads put each tile's genes in the new order
**    and encode it with dc_tile_encode; this thread writes tiles in order.  At
**    most workers + 1 tiles are in memory.
** 4. Genes (with the var columns), then obs by column in blocks of 65,536 cells
**    (dc_obs_encode), then dc_meta; the writer commits and renames.
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

#define OBS_BLOCK 65536u
#define VERSION "deltacells 0.1"

/* ------------------------------------------------------------ progress */
typedef struct progress {
  int on;
  const char *label;
  uint64_t total;
  double t0, last;
} progress;

static void prog_start(progress *p, int on, const char *label, uint64_t total) {
  p->on = on;
  p->label = label;
  p->total = total;
  p->t0 = cv_now();
  p->last = 0;
}

static void prog_show(progress *p, uint64_t done) {
  if (!p->on) return;
  double now = cv_now();
  if (now - p->last < 0.25 && done < p->total) return;
  p->last = now;
  double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 ? (double)(p->total - done) / rate : 0;
  fprintf(stderr, "\r%s: %llu / %llu cells  %.0f cells/s  ETA %dm%02ds   ", p->label,
          (unsigned long long)done, (unsigned long long)p->total, rate, (int)eta / 60, (int)eta % 60);
  fflush(stderr);
}

/* Pass 3: column col (0-based) of ncols, done of n cells in it; the rate and
** ETA over all columns. */
static void prog_cols(progress *p, int col, int ncols, uint64_t done, uint64_t n) {
  if (!p->on) return;
  double now = cv_now();
  if (now - p->last < 0.25 && !(col + 1 == ncols && done >= n)) return;
  p->last = now;
  double all = (double)n * ncols, sofar = (double)n * col + (double)done, el = now - p->t0;
  double rate = el > 0 ? sofar / el : 0, eta = rate > 0 ? (all - sofar) / rate : 0;
  fprintf(stderr, "\r%s: column %d of %d, %llu / %llu cells  ETA %dm%02ds   ", p->label, col + 1, ncols,
          (unsigned long long)done, (unsigned long long)n, (int)eta / 60, (int)eta % 60);
  fflush(stderr);
}

static void prog_end(progress *p) {
  if (p->on) fprintf(stderr, "\r%-78s\r", "");
}

/* ------------------------------------------------------------ genes */
typedef struct genes {
  uint32_t n;           /* genes stored (after --genes intersect) */
  uint32_t n_all;       /* genes joined (the union): global ids 0..n_all-1 */
  uint32_t n_shared;    /* genes in every input */
  uint32_t *nfiles;     /* by global id: how many inputs have it */
  uint8_t *keep;        /* NULL (all kept), or by global id: 1 if stored */
  uint8_t **gone;       /* NULL, or per file NULL or by local gene: 1 if left out (10x
                           features that are not gene expression) */
  int dropping;         /* some entries are left out of the tiles (keep or gone) */
  char **name;          /* by global id (order of first appearance) */
  uint32_t *file, *local; /* where it first appears */
  uint64_t *total, *ncells;
  uint32_t *rank;       /* global id -> dataset gene id */
  uint32_t *order;      /* dataset gene id -> global id */
  uint32_t **fmap;      /* per file: local gene -> dataset gene id */
  cv_map map;
} genes;

static void genes_free(genes *g, int n_files) {
  for (uint32_t i = 0; i < g->n_all; i++) free(g->name[i]);
  free(g->name); free(g->nfiles); free(g->keep); free(g->file); free(g->local); free(g->total); free(g->ncells);
  free(g->rank); free(g->order);
  if (g->fmap) for (int f = 0; f < n_files; f++) free(g->fmap[f]);
  if (g->gone) for (int f = 0; f < n_files; f++) free(g->gone[f]);
  free(g->gone);
  free(g->fmap);
  cv_map_free(&g->map);
  memset(g, 0, sizeof *g);
}

static int genes_join(genes *g, h5file *files, int nf, const cv_opts *o, cv_err *e) {
  size_t cap = 0;
  g->fmap = calloc((size_t)nf, sizeof *g->fmap);
  if (!g->fmap) return cv_fail(e, "out of memory");
  if (o->n_fixed_genes) { /* append: the dataset's genes first, in its order (file UINT32_MAX: in no input) */
    cv_map occ = {0};
    size_t n = o->n_fixed_genes;
    g->name = calloc(n, sizeof *g->name);
    g->file = malloc(n * sizeof *g->file);
    g->local = malloc(n * sizeof *g->local);
    g->total = calloc(n, sizeof *g->total);
    g->ncells = calloc(n, sizeof *g->ncells);
    g->nfiles = calloc(n, sizeof *g->nfiles);
    if (!g->name || !g->file || !g->local || !g->total || !g->ncells || !g->nfiles) return cv_fail(e, "out of memory");
    cap = n;
    for (uint32_t i = 0; i < o->n_fixed_genes; i++) {
      const char *nm = o->fixed_genes[i];
      uint32_t k = 0, *seen = cv_map_ref(&occ, nm);
      if (seen) k = ++*seen;
      else if (cv_map_put(&occ, nm, 0, e)) { cv_map_free(&occ); return -1; }
      size_t kl = strlen(nm) + 16;
      char *key = malloc(kl);
      if (!key) { cv_map_free(&occ); return cv_fail(e, "out of memory"); }
      if (k) snprintf(key, kl, "%s\x01%u", nm, k);
      else snprintf(key, kl, "%s", nm);
      g->name[i] = strdup(nm);
      g->file[i] = UINT32_MAX;
      g->local[i] = 0;
      g->n = g->n_all = i + 1;
      int bad = !g->name[i] || cv_map_put(&g->map, key, i, e);
      free(key);
      if (bad) { cv_map_free(&occ); return cv_fail(e, "out of memory"); }
    }
    cv_map_free(&occ);
  }
  for (int f = 0; f < nf; f++) {
    cv_map occ = {0};
    g->fmap[f] = malloc((files[f].n_vars + 1) * sizeof(uint32_t));
    if (!g->fmap[f]) return cv_fail(e, "out of memory");
    for (uint64_t j = 0; j < files[f].n_vars; j++) {
      const char *nm = files[f].var_names[j];
      if (g->gone && g->gone[f] && g->gone[f][j]) { g->fmap[f][j] = UINT32_MAX; continue; }
      uint32_t k = 0, *seen = cv_map_ref(&occ, nm);
      if (seen) {
        k = ++*seen; /* the k-th repeat of a name in this file */
      } else if (cv_map_put(&occ, nm, 0, e)) {
        cv_map_free(&occ);
        return -1;
      }
      size_t kl = strlen(nm) + 16;
      char kbuf[512], *key = kl <= sizeof kbuf ? kbuf : malloc(kl);
      if (!key) { cv_map_free(&occ); return cv_fail(e, "out of memory"); }
      if (k) snprintf(key, kl, "%s\x01%u", nm, k);
      else snprintf(key, kl, "%s", nm);
      uint32_t id;
      if (!cv_map_get(&g->map, key, &id)) {
        id = g->n;
        if (g->n >= INT32_MAX) {
          if (key != kbuf) free(key);
          cv_map_free(&occ);
          return cv_fail(e, "too many genes");
        }
        size_t c1 = cap, c2 = cap, c3 = cap, c4 = cap, c5 = cap, c6 = cap;
        if (cv_grow((void **)&g->name, &c1, g->n + 1, sizeof *g->name, e) ||
            cv_grow((void **)&g->file, &c2, g->n + 1, sizeof *g->file, e) ||
            cv_grow((void **)&g->local, &c3, g->n + 1, sizeof *g->local, e) ||
            cv_grow((void **)&g->total, &c4, g->n + 1, sizeof *g->total, e) ||
            cv_grow((void **)&g->ncells, &c5, g->n + 1, sizeof *g->ncells, e) ||
            cv_grow((void **)&g->nfiles, &c6, g->n + 1, sizeof *g->nfiles, e)) {
          if (key != kbuf) free(key);
          cv_map_free(&occ);
          return -1;
        }
        cap = c1;
        g->name[id] = strdup(nm);
        g->file[id] = (uint32_t)f;
        g->local[id] = (uint32_t)j;
        g->total[id] = g->ncells[id] = 0;
        g->nfiles[id] = 0;
        g->n++;
        g->n_all = g->n;
        if (!g->name[id] || cv_map_put(&g->map, key, id, e)) {
          if (key != kbuf) free(key);
          cv_map_free(&occ);
          return cv_fail(e, "out of memory");
        }
      }
      if (key != kbuf) free(key);
      g->fmap[f][j] = id;
      g->nfiles[id]++; /* once per file: a repeat in the file has a key of its own */
    }
    cv_map_free(&occ);
  }
  for (uint32_t i = 0; i < g->n; i++) g->n_shared += g->nfiles[i] == (uint32_t)nf;
  return 0;
}

/* Several inputs: how many genes all of them share, and per input the
** fraction of its genes that are shared; a warning below min_frac. */
static void genes_overlap(const genes *g, h5file *files, int nf, int quiet, double min_frac, int intersect) {
  if (nf < 2) return;
  if (!quiet)
    printf("genes: %u in the union of %d inputs, %u in every one of them%s\n", g->n_all, nf, g->n_shared,
           intersect ? " (--genes intersect: only those are stored)" : "");
  int low = 0;
  double worst = 1;
  const char *wname = NULL;
  for (int f = 0; f < nf; f++) {
    uint64_t sh = 0, some = 0, ng = 0;
    for (uint64_t j = 0; j < files[f].n_vars; j++) {
      if (g->fmap[f][j] == UINT32_MAX) continue;
      ng++;
      uint32_t k = g->nfiles[g->fmap[f][j]];
      sh += k == (uint32_t)nf;
      some += k > 1;
    }
    double fr = ng ? (double)sh / (double)ng : 1.0, fo = ng ? (double)some / (double)ng : 1.0;
    if (!quiet)
      printf("  %s: %llu genes; %.1f%% in every input, %.1f%% in at least one other\n", files[f].path,
             (unsigned long long)ng, 100.0 * fr, 100.0 * fo);
    if (fr < min_frac) {
      low++;
      if (fo < worst || !wname) { worst = fo; wname = files[f].path; }
    }
  }
  fflush(stdout);
  if (low)
    fprintf(stderr, "deltacells: warning: the inputs share few genes: %u genes are in all %d inputs; %d input%s share%s "
            "less than %.0f%% of %s genes (the most apart: %s, with %.1f%% of its genes in any other input).  Different species, or genes named differently (symbols vs "
            "Ensembl ids: --gene-key gene_ids)?%s\n", g->n_shared, nf, low, low > 1 ? "s" : "", low > 1 ? "" : "s",
            100.0 * min_frac, low > 1 ? "their" : "its", wname, 100.0 * worst,
            intersect ? "" : " The union is stored (--genes intersect keeps the shared genes only).");
}

static const genes *sort_ctx;
static uint32_t sort_fixed;   /* genes 0 .. sort_fixed-1 keep their ids (append) */
static int cmp_rank(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  if (x < sort_fixed || y < sort_fixed) return x < y ? -1 : x > y;
  if (sort_ctx->total[x] != sort_ctx->total[y]) return sort_ctx->total[x] > sort_ctx->total[y] ? -1 : 1;
  return x < y ? -1 : x > y;
}

/* Dataset gene ids: the n_fixed genes given first (convert --gene-order, append) in their
** order, then by decreasing total counts; with g->keep, the genes not kept get UINT32_MAX
** (their entries are dropped from the tiles). */
static int genes_renumber(genes *g, h5file *files, int nf, uint32_t n_fixed, cv_err *e) {
  g->order = malloc((g->n_all + 1) * sizeof *g->order);
  g->rank = malloc((g->n_all + 1) * sizeof *g->rank);
  if (!g->order || !g->rank) return cv_fail(e, "out of memory");
  uint32_t n = 0;
  for (uint32_t i = 0; i < g->n_all; i++) {
    g->rank[i] = UINT32_MAX;
    if (!g->keep || g->keep[i]) g->order[n++] = i;
  }
  g->n = n;
  sort_ctx = g;
  sort_fixed = n_fixed;
  qsort(g->order, g->n, sizeof *g->order, cmp_rank);
  for (uint32_t r = 0; r < g->n; r++) g->rank[g->order[r]] = r;
  for (int f = 0; f < nf; f++)
    for (uint64_t j = 0; j < files[f].n_vars; j++)
      if (g->fmap[f][j] != UINT32_MAX) g->fmap[f][j] = g->rank[g->fmap[f][j]];
  return 0;
}

/* ------------------------------------------------------------ pass 1 */
typedef struct p1ctx { progress *pg; uint64_t base, n_obs, nnz; } p1ctx;
static void csc_progress(void *arg, uint64_t nnz_done) {
  p1ctx *c = arg;
  prog_show(c->pg, c->base + (c->nnz ? (uint64_t)((double)nnz_done / (double)c->nnz * (double)c->n_obs) : 0));
}

/* With one CSR or dense input of at most one tile, the tile read here is kept
** in *last (local gene ids) and pass 2 takes it instead of reading it again. */
static int pass1(h5file *files, int nf, genes *g, uint32_t T, const char *spool_dir, uint64_t *nnz_out,
                 rowbuf *last, progress *pg, cv_err *e) {
  rowbuf rb = {0};
  uint64_t base = 0, nnz = 0;
  int rc = -1;
  for (int f = 0; f < nf; f++) {
    h5file *h = &files[f];
    uint64_t *tot = calloc(h->n_vars + 1, sizeof *tot), *nc = calloc(h->n_vars + 1, sizeof *nc);
    if (!tot || !nc) { free(tot); free(nc); cv_fail(e, "out of memory"); goto done; }
    if (h->fmt == MAT_CSC) {
      p1ctx c = {pg, base, h->n_obs, h->nnz};
      if (h5ad_csc_spool(h, spool_dir, T, tot, nc, csc_progress, &c, e)) { free(tot); free(nc); goto done; }
    } else if (h->fmt == MAT_SPOOL) {
      p1ctx c = {pg, base, h->n_obs, h->nnz};
      if (tenx_mtx_spool(h, spool_dir, T, tot, nc, csc_progress, &c, e)) { free(tot); free(nc); goto done; }
    } else {
      for (uint64_t r = 0; r < h->n_obs; r += T) {
        uint64_t r1 = r + T < h->n_obs ? r + T : h->n_obs;
        rowbuf_clear(&rb);
        if (cv_check_interrupt(e) || h5ad_read_rows(h, r, r1, NULL, &rb, e)) { free(tot); free(nc); goto done; }
        uint64_t m = rb.indptr[rb.n_rows];
        for (uint64_t k = 0; k < m; k++) {
          tot[rb.indices[k]] += rb.data[k];
          nc[rb.indices[k]]++;
        }
        prog_show(pg, base + r1);
      }
    }
    for (uint64_t j = 0; j < h->n_vars; j++) {
      uint32_t id = g->fmap[f][j];
      if (id == UINT32_MAX) continue; /* a feature left out */
      g->total[id] += tot[j];
      g->ncells[id] += nc[j];
      if (!g->keep || g->keep[id]) nnz += nc[j];
    }
    free(tot);
    free(nc);
    base += h->n_obs;
  }
  *nnz_out = nnz;
  if (nf == 1 && (files[0].fmt == MAT_CSR || files[0].fmt == MAT_DENSE || files[0].fmt == MAT_DENSE_T) &&
      files[0].n_obs > 0 && files[0].n_obs <= T) {
    *last = rb; /* the only tile: no second read, and no more memory than pass 2 needs anyway */
    memset(&rb, 0, sizeof rb);
  }
  rc = 0;
done:
  rowbuf_free(&rb);
  return rc;
}

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
static int pass2(h5file *files, int nf, const uint64_t *first, const uint64_t *tstart, uint64_t n_tiles,
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
      prog_show(pg, w0->first_cell + w0->rb.n_rows);
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

/* ------------------------------------------------------------ columns */
/* One output column (obs or var), united over the inputs. */
typedef struct ocol {
  char *name;
  int kind;
  int is_source;
  const h5col **src;    /* per file, or NULL where the file lacks it */
  char **labels;        /* category: the united dictionary */
  uint32_t n_labels;
  cv_map dict;
  int32_t **remap;      /* per file: local code -> united code */
} ocol;

static void ocols_free(ocol *c, int n, int nf) {
  for (int i = 0; c && i < n; i++) {
    free(c[i].name);
    free(c[i].src);
    for (uint32_t k = 0; k < c[i].n_labels; k++) free(c[i].labels[k]);
    free(c[i].labels);
    cv_map_free(&c[i].dict);
    if (c[i].remap) for (int f = 0; f < nf; f++) free(c[i].remap[f]);
    free(c[i].remap);
  }
  free(c);
}

/* The kind of a column seen with kinds a and b in two files. */
static int merge_kind(int a, int b) {
  if (a == b) return a;
  if ((a == CVK_INT && b == CVK_BOOL) || (a == CVK_BOOL && b == CVK_INT)) return CVK_INT;
  int an = a == CVK_INT || a == CVK_BOOL || a == CVK_REAL, bn = b == CVK_INT || b == CVK_BOOL || b == CVK_REAL;
  if (an && bn) return CVK_REAL;
  return CVK_TEXT;
}

static int add_label(ocol *c, const char *s, uint32_t *code, cv_err *e) {
  if (cv_map_get(&c->dict, s, code)) return 0;
  size_t cap = c->n_labels;
  if (cv_grow((void **)&c->labels, &cap, c->n_labels + 1, sizeof *c->labels, e)) return -1;
  if (!(c->labels[c->n_labels] = strdup(s))) return cv_fail(e, "out of memory");
  *code = c->n_labels;
  if (cv_map_put(&c->dict, s, c->n_labels, e)) return -1;
  c->n_labels++;
  return 0;
}

/* 1 if name is taken (case-insensitive, as SQL column names are). */
static int name_taken(const char *nm, ocol *cols, int n, const char *const *reserved) {
  for (int i = 0; reserved && reserved[i]; i++) if (strcasecmp(nm, reserved[i]) == 0) return 1;
  for (int i = 0; i < n; i++) if (cols[i].name && strcasecmp(nm, cols[i].name) == 0) return 1;
  return 0;
}

static char *unique_name(const char *nm, ocol *cols, int n, const char *const *reserved) {
  if (!name_taken(nm, cols, n, reserved)) return strdup(nm);
  size_t len = strlen(nm) + 16;
  char *b = malloc(len);
  for (int k = 1; b; k++) {
    snprintf(b, len, "%s_%d", nm, k);
    if (!name_taken(b, cols, n, reserved)) break;
  }
  return b;
}

/* Unites columns: the frame's index first when with_index, then each column
** name in order of first appearance. */
static int ocols_build(h5file *files, int nf, int var, int with_index, int with_source,
                       const char *const *reserved, ocol **out, int *n_out, cv_err *e) {
  int cap = 2 + with_source;
  for (int f = 0; f < nf; f++) cap += (var ? files[f].var.n_cols : files[f].obs.n_cols);
  ocol *c = calloc((size_t)cap, sizeof *c);
  int n = 0;
  if (!c) return cv_fail(e, "out of memory");
  const char **raw = calloc((size_t)cap, sizeof *raw); /* names as in the files */
  if (!raw) { free(c); return cv_fail(e, "out of memory"); }
  if (with_index) {
    c[0].src = calloc((size_t)nf, sizeof *c[0].src);
    if (!c[0].src) goto oom;
    for (int f = 0; f < nf; f++) c[0].src[f] = var ? &files[f].var.index : &files[f].obs.index;
    c[0].kind = CVK_TEXT;
    c[0].name = strdup("_index");
    raw[0] = "";
    n = 1;
  }
  for (int f = 0; f < nf; f++) {
    h5frame *fr = var ? &files[f].var : &files[f].obs;
    for (int j = 0; j < fr->n_cols; j++) {
      int i;
      for (i = with_index; i < n; i++) if (strcmp(raw[i], fr->cols[j].name) == 0) break;
      if (i == n) {
        c[n].src = calloc((size_t)nf, sizeof *c[n].src);
        if (!c[n].src) goto oom;
        c[n].kind = fr->cols[j].kind;
        raw[n] = fr->cols[j].name;
        n++;
      } else {
        c[i].kind = merge_kind(c[i].kind, fr->cols[j].kind);
      }
      c[i].src[f] = &fr->cols[j];
    }
  }
  if (with_source) {
    c[n].src = calloc((size_t)nf, sizeof *c[n].src);
    if (!c[n].src) goto oom;
    c[n].kind = CVK_CATEGORY;
    c[n].is_source = 1;
    raw[n] = "source";
    n++;
  }
  for (int i = with_index; i < n; i++) {
    c[i].name = unique_name(raw[i], c, i, reserved);
    if (!c[i].name) goto oom;
    if (strcmp(c[i].name, raw[i]) != 0)
      fprintf(stderr, "deltacells: note: column '%s' is stored as '%s' (the name is taken)\n", raw[i], c[i].name);
  }
  /* dictionaries of categorical columns, in order of first appearance */
  for (int i = 0; i < n; i++) {
    if (c[i].kind != CVK_CATEGORY) continue;
    c[i].remap = calloc((size_t)nf, sizeof *c[i].remap);
    if (!c[i].remap) goto oom;
    for (int f = 0; f < nf; f++) {
      uint32_t code;
      if (c[i].is_source) {
        if (add_label(&c[i], files[f].label ? files[f].label : files[f].path, &code, e)) goto fail;
        if (!(c[i].remap[f] = malloc(sizeof(int32_t)))) goto oom;
        c[i].remap[f][0] = (int32_t)code; /* a file given twice has one label */
        continue;
      }
      const h5col *s = c[i].src[f];
      if (!s) continue;
      c[i].remap[f] = malloc((s->n_cats + 1) * sizeof(int32_t));
      if (!c[i].remap[f]) goto oom;
      for (uint32_t k = 0; k < s->n_cats; k++) {
        if (add_label(&c[i], s->cats[k], &code, e)) goto fail;
        c[i].remap[f][k] = (int32_t)code;
      }
    }
  }
  free(raw);
  *out = c;
  *n_out = n;
  return 0;
oom:
  cv_fail(e, "out of memory");
fail:
  free(raw);
  ocols_free(c, n + 1, nf);
  return -1;
}

static void fmt_num_real(double v, char *buf, size_t n) {
  for (int p = 15; p <= 17; p++) {
    snprintf(buf, n, "%.*g", p, v);
    if (strtod(buf, NULL) == v) break;
  }
}

/* Copies values [0, src->n) of file f into out at off, converted to c->kind. */
static int cast_into(const ocol *c, int f, const h5col *sc, const colbuf *src, colbuf *out, size_t off,
                     size_t n, cv_err *e) {
  for (size_t i = 0; i < n; i++) {
    size_t o = off + i;
    int null = 1;
    int64_t iv = 0;
    double dv = NAN;
    const char *tv = NULL;
    size_t tl = 0;
    char buf[64];
    if (c->is_source) {
      out->codes[o] = c->remap[f][0];
      continue;
    }
    if (src) {
      switch (src->kind) {
        case CVK_CATEGORY:
          if (src->codes[i] >= 0) {
            null = 0;
            iv = src->codes[i];
            tv = sc->cats[iv];
            tl = strlen(tv);
          }
          break;
        case CVK_INT:
          if (src->valid[i]) { null = 0; iv = src->i64[i]; dv = (double)iv; }
          break;
        case CVK_REAL:
          if (!isnan(src->f64[i])) { null = 0; dv = src->f64[i]; }
          break;
        case CVK_BOOL:
          if (src->b8[i] >= 0) { null = 0; iv = src->b8[i]; dv = (double)iv; }
          break;
        case CVK_TEXT:
          if (src->text[i]) { null = 0; tv = src->text[i]; tl = src->text_len[i]; }
          break;
      }
    }
    switch (c->kind) {
      case CVK_CATEGORY: out->codes[o] = null ? -1 : c->remap[f][iv]; break;
      case CVK_INT: out->valid[o] = !null; out->i64[o] = null ? 0 : iv; break;
      case CVK_REAL: out->f64[o] = null ? NAN : dv; break;
      case CVK_BOOL: out->b8[o] = null ? -1 : (int8_t)iv; break;
      case CVK_TEXT:
        if (null) { colbuf_text_null(out, o); break; }
        if (!tv) {
          if (src->kind == CVK_REAL) fmt_num_real(dv, buf, sizeof buf);
          else if (src->kind == CVK_BOOL) snprintf(buf, sizeof buf, "%s", iv ? "True" : "False");
          else snprintf(buf, sizeof buf, "%lld", (long long)iv);
          tv = buf;
          tl = strlen(buf);
        }
        if (colbuf_text_set(out, o, tv, tl, e)) return -1;
        break;
    }
  }
  return 0;
}

/* Fills out with cells [c0, c0+n) of column c over all files. */
static int fill_block(h5file *files, int nf, const uint64_t *first, const ocol *c, uint64_t c0, size_t n,
                      colbuf *tmp, colbuf *out, cv_err *e) {
  if (colbuf_reset(out, c->kind, n, e)) return -1;
  for (int f = 0; f < nf; f++) {
    uint64_t a = first[f], b = first[f] + files[f].n_obs;
    if (b <= c0 || a >= c0 + n) continue;
    uint64_t r0 = c0 > a ? c0 - a : 0, r1 = (c0 + n < b ? c0 + n : b) - a;
    size_t off = (size_t)(a + r0 - c0), k = (size_t)(r1 - r0);
    const h5col *sc = c->src[f];
    if (sc && !c->is_source) {
      if (h5ad_col_read(&files[f], sc, r0, k, tmp, e)) return cv_prefix(e, "obs column '%s'", sc->name);
    }
    if (cast_into(c, f, sc, (sc && !c->is_source) ? tmp : NULL, out, off, k, e)) return -1;
  }
  if (c->kind == CVK_TEXT) colbuf_text_done(out);
  return 0;
}

/* The converter's kinds are the obs library's (v.kind = c->kind below, and the seal values
** from cv_sealval_of_stat). */
_Static_assert((int)CVK_CATEGORY == (int)DC_OBS_CATEGORY && (int)CVK_INT == (int)DC_OBS_INT &&
                   (int)CVK_REAL == (int)DC_OBS_REAL && (int)CVK_TEXT == (int)DC_OBS_TEXT,
               "converter kinds = obs kinds");
static int write_obs(h5file *files, int nf, const uint64_t *first, uint64_t n_cells, dsw *w,
                     uint64_t *obs_bytes, progress *pg, cv_err *e) {
  static const char *const reserved[] = {"_index", "cell_id", "name", "tile", NULL};
  ocol *cols = NULL;
  int n = 0, rc = -1;
  colbuf tmp = {0}, out = {0};
  if (ocols_build(files, nf, 0, 1, nf > 1, reserved, &cols, &n, e)) return -1;
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    ocol *c = &cols[i];
    int64_t nulls = 0, bytes = 0;
    for (uint64_t b = 0; b * OBS_BLOCK < n_cells || (b == 0 && n_cells == 0); b++) {
      uint64_t c0 = b * OBS_BLOCK;
      size_t k = (size_t)(n_cells - c0 < OBS_BLOCK ? n_cells - c0 : OBS_BLOCK);
      if (n_cells == 0) break;
      if (cv_check_interrupt(e) || fill_block(files, nf, first, c, c0, k, &tmp, &out, e)) goto done;
      dc_obs_values v;
      memset(&v, 0, sizeof v);
      v.kind = c->kind;
      v.n = (uint32_t)k;
      v.codes = out.codes;
      v.n_categories = c->n_labels;
      v.i64 = out.i64;
      v.valid = out.valid;
      v.f64 = out.f64;
      v.b8 = out.b8;
      v.text = out.text;
      v.text_len = out.text_len;
      if (dsw_obs_block(w, i, c->name, (int64_t)b, (int64_t)c0, &v, &nulls, &bytes, e)) goto done;
      prog_cols(pg, i, n, c0 + k, n_cells);
    }
    dc_blockplace pl = {"cells", i, c->name, c->kind, c->kind == CVK_CATEGORY ? (int64_t)c->n_labels : -1, 0, 0, 0, 0};
    dc_seal ds;
    dc_seal_dict_begin(&ds, w->dataset_id, &pl);
    for (uint32_t k = 0; k < c->n_labels; k++) {
      size_t l = strlen(c->labels[k]);
      dc_seal_bytes(&ds, c->labels[k], l);
      if (dsw_dict(w, i, k, c->labels[k], l, e)) { int64_t x; dc_seal_end(&ds, &x); goto done; }
      bytes += l;
    }
    int64_t dseal = 0;
    if (dc_seal_end(&ds, &dseal)) { cv_fail(e, "out of memory"); goto done; }
    if (dsw_column(w, i, c->name, cv_kind_name(c->kind), c->kind == CVK_CATEGORY ? (int64_t)c->n_labels : -1,
                   (int64_t)nulls, (int64_t)bytes, dseal, e))
      goto done;
    total += bytes;
  }
  *obs_bytes = total;
  rc = 0;
done:
  colbuf_free(&tmp);
  colbuf_free(&out);
  ocols_free(cols, n, nf);
  return rc;
}

/* ------------------------------------------------------------ genes table */
/* The genes table, column by column (docs/format.md section 1): name,
** total_counts, n_cells, then the union of the inputs' var columns.  A gene
** takes a var column's value from the first input that has the gene (NULL
** where that input lacks the column).  Stored kinds: int (int, and bool as
** 0/1), real, text (text, and categorical as its labels). */
static int stored_kind(int kind) {
  switch (kind) {
    case CVK_INT: case CVK_BOOL: return DC_OBS_INT;
    case CVK_REAL: return DC_OBS_REAL;
    default: return DC_OBS_TEXT;
  }
}

static void json_str(sqlite3_str *s, const char *v);

static int write_genes(h5file *files, int nf, const genes *g, const cv_opts *o, dsw *w, int64_t *bytes_out,
                       cv_err *e) {
  static const char *const reserved[] = {"gene_id", "name", "total_counts", "n_cells", "orig_index", NULL};
  ocol *cols = NULL;
  int n = 0, rc = -1;
  colbuf *conv = NULL, tmp = {0};      /* conv[f]: file f's var column in the united kind */
  uint32_t ng = g->n, block = o->genes_block ? o->genes_block : DC_GENES_BLOCK;
  uint64_t nn = (uint64_t)ng + 1;
  const char **tv = malloc(nn * sizeof *tv);
  uint32_t *tl = malloc(nn * sizeof *tl);
  int64_t *iv = malloc(nn * sizeof *iv);
  uint8_t *valid = malloc(nn);
  double *fv = malloc(nn * sizeof *fv);
  int64_t bytes = 0, b = 0;
  int with_index = o->gene_key != NULL; /* the var index kept as a column when names come from a key */
  if (!tv || !tl || !iv || !valid || !fv) { cv_fail(e, "out of memory"); goto done; }
  /* the fixed columns */
  {
    dc_obs_values v;
    memset(&v, 0, sizeof v);
    v.n = ng;
    v.kind = DC_OBS_TEXT;
    for (uint32_t id = 0; id < ng; id++) {
      tv[id] = g->name[g->order[id]];
      tl[id] = (uint32_t)strlen(tv[id]);
    }
    v.text = tv;
    v.text_len = tl;
    if (dsw_genes_column(w, 0, "name", &v, block, &b, e)) goto done;
    bytes += b;
    memset(&v, 0, sizeof v);
    v.n = ng;
    v.kind = DC_OBS_INT;
    v.i64 = iv;
    for (uint32_t id = 0; id < ng; id++) iv[id] = (int64_t)g->total[g->order[id]];
    if (dsw_genes_column(w, 1, "total_counts", &v, block, &b, e)) goto done;
    bytes += b;
    for (uint32_t id = 0; id < ng; id++) iv[id] = (int64_t)g->ncells[g->order[id]];
    if (dsw_genes_column(w, 2, "n_cells", &v, block, &b, e)) goto done;
    bytes += b;
    /* the original order (dc_meta gene_order 'union'): a gene's global id is its place in the
    ** union of the inputs' var, first input first, each in its var order */
    for (uint32_t id = 0; id < ng; id++) iv[id] = (int64_t)g->order[id];
    if (dsw_genes_column(w, 3, "orig_index", &v, block, &b, e)) goto done;
    bytes += b;
  }
  if (ocols_build(files, nf, 1, with_index, 0, reserved, &cols, &n, e)) goto done;
  if (with_index) {
    free(cols[0].name);
    cols[0].name = unique_name("var_index", cols + 1, n - 1, reserved);
    if (!cols[0].name) { cv_fail(e, "out of memory"); goto done; }
    if (dsw_meta_text(w, "var_index_column", cols[0].name, e)) goto done; /* export's var index */
  }
  conv = calloc((size_t)nf, sizeof *conv);
  if (!conv) { cv_fail(e, "out of memory"); goto done; }
  for (int i = 0; i < n; i++) {
    const ocol *c = &cols[i];
    for (int f = 0; f < nf; f++) {
      const h5col *sc = c->src[f];
      if (!sc) continue;
      size_t k = (size_t)files[f].n_vars;
      if (h5ad_col_read(&files[f], sc, 0, k, &tmp, e)) {
        cv_prefix(e, "%s column '%s'", files[f].var.path, sc->name);
        goto done;
      }
      if (colbuf_reset(&conv[f], c->kind, k, e) || cast_into(c, f, sc, &tmp, &conv[f], 0, k, e)) goto done;
      if (c->kind == CVK_TEXT) colbuf_text_done(&conv[f]);
    }
    dc_obs_values v;
    memset(&v, 0, sizeof v);
    v.n = ng;
    v.kind = stored_kind(c->kind);
    for (uint32_t id = 0; id < ng; id++) {
      uint32_t gl = g->order[id], f = g->file[gl], j = g->local[gl];
      const colbuf *src = f != UINT32_MAX && c->src[f] ? &conv[f] : NULL;
      tv[id] = NULL;
      tl[id] = 0;
      valid[id] = 0;
      iv[id] = 0;
      fv[id] = NAN;
      if (!src) continue;
      switch (c->kind) {
        case CVK_CATEGORY:
          if (src->codes[j] >= 0) { tv[id] = c->labels[src->codes[j]]; tl[id] = (uint32_t)strlen(tv[id]); }
          break;
        case CVK_TEXT:
          if (src->text[j]) { tv[id] = src->text[j]; tl[id] = src->text_len[j]; }
          break;
        case CVK_INT:
          if (src->valid[j]) { valid[id] = 1; iv[id] = src->i64[j]; }
          break;
        case CVK_BOOL:
          if (src->b8[j] >= 0) { valid[id] = 1; iv[id] = src->b8[j]; }
          break;
        case CVK_REAL: fv[id] = src->f64[j]; break;
      }
    }
    v.text = tv;
    v.text_len = tl;
    v.i64 = iv;
    v.valid = valid;
    v.f64 = fv;
    if (dsw_genes_column(w, 4 + i, c->name, &v, block, &b, e)) goto done;
    bytes += b;
  }
  { /* categorical var columns are stored as text: dc_meta var_categories keeps their categories
    ** (in order) so that export writes them back as categoricals */
    sqlite3_str *js = sqlite3_str_new(NULL);
    int any = 0;
    sqlite3_str_appendchar(js, 1, '{');
    for (int i = 0; i < n; i++) {
      if (cols[i].kind != CVK_CATEGORY) continue;
      if (any++) sqlite3_str_appendchar(js, 1, ',');
      json_str(js, cols[i].name);
      sqlite3_str_appendall(js, ":[");
      for (uint32_t k = 0; k < cols[i].n_labels; k++) {
        if (k) sqlite3_str_appendchar(js, 1, ',');
        json_str(js, cols[i].labels[k]);
      }
      sqlite3_str_appendchar(js, 1, ']');
    }
    sqlite3_str_appendchar(js, 1, '}');
    char *jt = sqlite3_str_finish(js);
    int jr = !jt ? cv_fail(e, "out of memory") : any ? dsw_meta_text(w, "var_categories", jt, e) : 0;
    sqlite3_free(jt);
    if (jr) goto done;
  }
  if (bytes_out) *bytes_out = bytes;
  rc = 0;
done:
  if (conv) for (int f = 0; f < nf; f++) colbuf_free(&conv[f]);
  free(conv);
  colbuf_free(&tmp);
  free(tv); free(tl); free(iv); free(valid); free(fv);
  ocols_free(cols, n, nf);
  return rc;
}

/* ------------------------------------------------------------ meta */
static void json_str(sqlite3_str *s, const char *v) {
  sqlite3_str_appendchar(s, 1, '"');
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (*p == '"' || *p == '\\') sqlite3_str_appendf(s, "\\%c", *p);
    else if (*p < 0x20) sqlite3_str_appendf(s, "\\u%04x", *p);
    else sqlite3_str_appendchar(s, 1, (char)*p);
  }
  sqlite3_str_appendchar(s, 1, '"');
}

/* How many of a file's gene names repeat an earlier one (-1: out of memory). */
static int64_t count_repeats(const h5file *f) {
  cv_map m = {0};
  cv_err e;
  int64_t n = 0;
  for (uint64_t j = 0; j < f->n_vars; j++) {
    if (cv_map_ref(&m, f->var_names[j])) n++;
    else if (cv_map_put(&m, f->var_names[j], 0, &e)) { n = -1; break; }
  }
  cv_map_free(&m);
  return n;
}

/* ------------------------------------------------------------ source labels */
/* The last k components of path (trailing slashes ignored); the whole path
** when it has fewer. */
static const char *path_tail(const char *path, size_t len, int k) {
  const char *p = path + len;
  for (int c = 0; p > path; p--) {
    if (p[-1] == '/' && ++c == k) return p;
  }
  return path;
}

/* files[f].label: the shortest ending of each input's path (whole components)
** that no other input with a different path has: the base name unless two
** inputs share it (10x outputs all have the same names), then the parent
** directory too, and so on.  The same path given twice keeps one label. */
static int make_labels(h5file *files, int nf, cv_err *e) {
  size_t *len = calloc((size_t)nf + 1, sizeof *len);
  int *k = calloc((size_t)nf + 1, sizeof *k);
  if (!len || !k) { free(len); free(k); return cv_fail(e, "out of memory"); }
  for (int f = 0; f < nf; f++) {
    len[f] = strlen(files[f].path);
    while (len[f] > 1 && files[f].path[len[f] - 1] == '/') len[f]--;
    k[f] = 1;
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (int f = 0; f < nf; f++) {
      const char *a = path_tail(files[f].path, len[f], k[f]);
      size_t al = (size_t)(files[f].path + len[f] - a);
      for (int h = 0; h < nf; h++) {
        if (h == f || (len[h] == len[f] && memcmp(files[h].path, files[f].path, len[f]) == 0)) continue;
        const char *b = path_tail(files[h].path, len[h], k[h]);
        size_t bl = (size_t)(files[h].path + len[h] - b);
        if (al == bl && memcmp(a, b, al) == 0) {
          if (a != files[f].path) { k[f]++; changed = 1; }
          if (b != files[h].path) { k[h]++; changed = 1; }
          if (changed) break;
        }
      }
    }
  }
  for (int f = 0; f < nf; f++) {
    const char *a = path_tail(files[f].path, len[f], k[f]);
    free(files[f].label);
    if (!(files[f].label = strndup(a, (size_t)(files[f].path + len[f] - a)))) {
      free(len);
      free(k);
      return cv_fail(e, "out of memory");
    }
  }
  free(len);
  free(k);
  return 0;
}

/* ------------------------------------------------------------ driver */
int cv_convert(const cv_opts *o, cv_err *e) {
  int nf = o->n_inputs, rc = -1, opened = 0;
  h5file *files = calloc((size_t)nf, sizeof *files);
  uint64_t *first = calloc((size_t)nf + 1, sizeof *first);
  uint64_t *ftile = calloc((size_t)nf + 1, sizeof *ftile), *tstart = NULL;
  genes g;
  dsw w;
  progress pg;
  rowbuf last = {0};
  memset(&g, 0, sizeof g);
  memset(&w, 0, sizeof w);
  double t0 = cv_now();
  int show = !o->quiet && isatty(2);
  if (!files || !first || !ftile) { free(files); free(first); free(ftile); return cv_fail(e, "out of memory"); }
  struct stat st;
  if (stat(o->out, &st) == 0) {
    if (S_ISDIR(st.st_mode)) { cv_fail(e, "%s: is a directory", o->out); goto done; }
    if (!o->force) { cv_fail(e, "%s: exists (use --force to replace it)", o->out); goto done; }
  }
  for (int f = 0; f < nf; f++) {
    for (int k = 0; k < f; k++) {
      struct stat a, b;
      if (stat(o->inputs[f], &a) == 0 && stat(o->inputs[k], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        fprintf(stderr, "deltacells: warning: %s is given twice; its cells are stored twice\n", o->inputs[f]);
    }
    if (stat(o->inputs[f], &st) == 0 && stat(o->out, &st) == 0) {
      struct stat a;
      stat(o->inputs[f], &a);
      if (a.st_dev == st.st_dev && a.st_ino == st.st_ino) { cv_fail(e, "%s: the output would replace an input", o->out); goto done; }
    }
    opened = f + 1;
    if (cv_input_open(o->inputs[f], o->layer, o->raw, o->gene_key, &files[f], e)) goto done;
    first[f + 1] = first[f] + files[f].n_obs;
  }
  uint64_t n_cells = first[nf];
  if (make_labels(files, nf, e)) goto done;
  if (!o->keep_gene_whitespace)
    for (int f = 0; f < nf; f++) {
      int64_t r0 = count_repeats(&files[f]);
      uint64_t k = h5ad_strip_gene_names(&files[f]);
      if (!k) continue;
      int64_t r1 = count_repeats(&files[f]);
      char more[200] = "";
      if (r0 >= 0 && r1 > r0)
        snprintf(more, sizeof more, "; %lld of them now repeat another name of the file ('TAZ' and ' TAZ'), kept apart "
                 "as two genes of that name", (long long)(r1 - r0));
      fprintf(stderr, "deltacells: note: %s: %llu gene names had surrounding whitespace, removed ('  TAZ' is stored "
              "as 'TAZ'; --keep-gene-whitespace keeps names as they are)%s\n", files[f].path, (unsigned long long)k, more);
    }
  if (!o->all_features) /* 10x inputs: gene expression only, as scanpy's read_10x_h5/mtx */
    for (int f = 0; f < nf; f++) {
      if (!files[f].kind || strncmp(files[f].kind, "10x", 3) != 0) continue;
      uint8_t *m = NULL;
      char ex[128];
      uint64_t k = tenx_other_features(&files[f], &m, ex, sizeof ex);
      if (!k) continue;
      if (k == files[f].n_vars) { /* nothing but other features: keep them */
        free(m);
        continue;
      }
      if (!g.gone && !(g.gone = calloc((size_t)nf, sizeof *g.gone))) { free(m); cv_fail(e, "out of memory"); goto done; }
      g.gone[f] = m;
      g.dropping = 1;
      fprintf(stderr, "deltacells: note: %s: %llu features that are not 'Gene Expression' (e.g. '%s') are left out, "
              "as scanpy's read_10x_h5 does (--all-features keeps them, told apart by the genes column "
              "feature_types)\n", files[f].path, (unsigned long long)k, ex);
    }
  if (genes_join(&g, files, nf, o, e)) goto done;
  genes_overlap(&g, files, nf, o->quiet, o->min_overlap > 0 ? o->min_overlap : 0.5, o->genes_intersect);
  if (o->genes_intersect && nf > 1) {
    if (!g.n_shared) { cv_fail(e, "--genes intersect: no gene is in every input; nothing to store"); goto done; }
    if (!(g.keep = malloc(g.n_all + 1))) { cv_fail(e, "out of memory"); goto done; }
    g.dropping = 1;
    for (uint32_t i = 0; i < g.n_all; i++) g.keep[i] = g.nfiles[i] == (uint32_t)nf;
  }

  /* pass 1 */
  char *od = strdup(o->out);
  if (!od) { cv_fail(e, "out of memory"); goto done; }
  char *spool_dir = strdup(dirname(od));
  free(od);
  if (!spool_dir) { cv_fail(e, "out of memory"); goto done; }
  uint64_t nnz1 = 0;
  prog_start(&pg, show, "pass 1/3 (gene totals)", n_cells);
  double tp1 = cv_now();
  int r1 = pass1(files, nf, &g, o->tile_cells, spool_dir, &nnz1, &last, &pg, e);
  free(spool_dir);
  prog_end(&pg);
  if (r1 || genes_renumber(&g, files, nf, o->n_fixed_genes, e)) goto done;

  /* the tiles: each input split on its own (no tile spans two inputs) */
  uint64_t n_tiles = 0;
  for (int f = 0; f < nf; f++) {
    cv_split sp = cv_split_make(files[f].n_obs, o->tile_cells);
    ftile[f] = n_tiles;
    n_tiles += sp.k;
  }
  ftile[nf] = n_tiles;
  tstart = malloc((n_tiles + 1) * sizeof *tstart);
  if (!tstart) { cv_fail(e, "out of memory"); goto done; }
  for (int f = 0; f < nf; f++) {
    cv_split sp = cv_split_make(files[f].n_obs, o->tile_cells);
    for (uint64_t t = 0; t < sp.k; t++) tstart[ftile[f] + t] = first[f] + cv_split_start(&sp, t);
  }
  tstart[n_tiles] = n_cells;

  /* pass 2 */
  if (dsw_open(&w, o->out, o->dataset_id_set ? &o->dataset_id : NULL, e)) goto done;
  w.genes_level = o->genes_level;
  w.no_sync = o->no_sync;
  uint64_t nnz = 0, xbytes = 0, obytes = 0;
  int64_t gbytes = 0;
  prog_start(&pg, show, "pass 2/3 (tiles)", n_cells);
  double tp2 = cv_now();
  int r2 = pass2(files, nf, first, tstart, n_tiles, &g, o, &last, &w, &nnz, &xbytes, &pg, e);
  prog_end(&pg);
  if (r2) goto done;
  if (nnz != nnz1) {
    cv_fail(e, "internal: pass 2 read %llu nonzeros, pass 1 %llu", (unsigned long long)nnz, (unsigned long long)nnz1);
    goto done;
  }
  if (write_genes(files, nf, &g, o, &w, &gbytes, e)) goto done;
  prog_start(&pg, show, "pass 3/3 (obs)", n_cells);
  double tp3 = cv_now();
  int r3 = write_obs(files, nf, first, n_cells, &w, &obytes, &pg, e);
  prog_end(&pg);
  if (r3) goto done;

  /* dc_meta */
  dc_encode_opts dflt;
  dc_encode_opts_default(&dflt);
  int codec = o->codec ? o->codec : dflt.codec;
  sqlite3_str *src = sqlite3_str_new(NULL);
  sqlite3_str_appendchar(src, 1, '[');
  for (int f = 0; f < nf; f++) {
    sqlite3_str_appendall(src, f ? ",{\"file\":" : "{\"file\":");
    char *full = realpath(files[f].path, NULL);  /* the full path: `source` holds the label */
    json_str(src, full ? full : files[f].path);
    free(full);
    sqlite3_str_appendall(src, ",\"source\":");
    json_str(src, files[f].label ? files[f].label : files[f].path);
    sqlite3_str_appendall(src, ",\"kind\":");
    json_str(src, files[f].kind ? files[f].kind : "h5ad");
    sqlite3_str_appendf(src, ",\"matrix\":\"%s\",\"n_cells\":%llu,\"first_cell\":%llu,\"first_tile\":%llu,"
                        "\"n_tiles\":%llu}", files[f].mpath, (unsigned long long)files[f].n_obs,
                        (unsigned long long)first[f], (unsigned long long)ftile[f],
                        (unsigned long long)(ftile[f + 1] - ftile[f]));
  }
  sqlite3_str_appendchar(src, 1, ']');
  char *sources = sqlite3_str_finish(src);
  int mr = !sources ? cv_fail(e, "out of memory")
           : (dsw_meta_int(&w, "format_version", DC_FORMAT_VERSION, e) || dsw_meta_int(&w, "n_cells", (int64_t)n_cells, e) ||
              dsw_meta_int(&w, "n_genes", g.n, e) || dsw_meta_int(&w, "nnz", (int64_t)nnz, e) ||
              dsw_meta_int(&w, "n_tiles", (int64_t)n_tiles, e) ||
              dsw_meta_text(&w, "codec", dc_codec_name(codec), e) ||
              dsw_meta_int(&w, "level", o->level_set ? o->level : 0, e) ||
              dsw_meta_int(&w, "chunks", o->chunks, e) || dsw_meta_int(&w, "tile_cells", o->tile_cells, e) ||
              dsw_meta_int(&w, "obs_block_cells", OBS_BLOCK, e) ||
              dsw_meta_int(&w, "genes_block", o->genes_block ? o->genes_block : DC_GENES_BLOCK, e) ||
              dsw_meta_text(&w, "sources", sources, e) || cv_meta_export(&w, files, nf, e) ||
              (o->n_fixed_genes && dsw_meta_text(&w, "gene_numbering", "stable", e)) ||
              dsw_meta_text(&w, "created_by", VERSION, e)) ? -1 : 0;
  sqlite3_free(sources);
  if (mr) goto done;
  if (cv_check_interrupt(e)) goto done;
  if (dsw_finish(&w, o->out, o->force, e)) goto done;
  if (!o->quiet) {
    int64_t fb = cv_file_size(o->out);
    printf("%s: %llu cells x %u genes, %llu nonzeros in %llu tiles; expression %.2f MB (%.2f bits/nonzero), "
           "obs %.2f MB, file %.2f MB; %.1f s (gene totals %.1f s, tiles %.1f s, genes+obs %.1f s)\n", o->out, (unsigned long long)n_cells, g.n,
           (unsigned long long)nnz, (unsigned long long)n_tiles, (double)xbytes / 1e6,
           nnz ? 8.0 * (double)xbytes / (double)nnz : 0.0, (double)obytes / 1e6, (double)fb / 1e6, cv_now() - t0, tp2 - tp1, tp3 - tp2,
           cv_now() - tp3);
  }
  rc = 0;
done:
  if (rc) dsw_abort(&w);
  rowbuf_free(&last);
  genes_free(&g, nf);
  for (int f = 0; f < opened; f++) h5ad_close(&files[f]);
  free(files);
  free(first);
  free(ftile);
  free(tstart);
  return rc;
}
