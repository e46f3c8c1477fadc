/*
** convert_genes.c — the genes of a conversion (see convert_int.h): joined by name across the
** inputs, counted by pass 1 (every matrix read once), renumbered by decreasing counts.
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

/* ------------------------------------------------------------ genes */
void cv_genes_free(genes *g, int n_files) {
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

int cv_genes_join(genes *g, h5file *files, int nf, const cv_opts *o, cv_err *e) {
  size_t cap = 0;
  g->fmap = calloc((size_t)nf, sizeof *g->fmap);
  if (!g->fmap) return cv_fail(e, "out of memory");
  if (o->n_fixed_genes) { /* append: the dataset's genes first, in its order (file UINT32_MAX: in no input) */
    size_t n = o->n_fixed_genes;
    g->name = calloc(n, sizeof *g->name);
    g->file = malloc(n * sizeof *g->file);
    g->local = malloc(n * sizeof *g->local);
    g->total = calloc(n, sizeof *g->total);
    g->ncells = calloc(n, sizeof *g->ncells);
    g->nfiles = calloc(n, sizeof *g->nfiles);
    uint32_t *rep = o->fixed_rep ? NULL : malloc(n * sizeof *rep);
    if (!g->name || !g->file || !g->local || !g->total || !g->ncells || !g->nfiles || (!o->fixed_rep && !rep)) {
      free(rep);
      return cv_fail(e, "out of memory");
    }
    if (!o->fixed_rep && cv_gene_repeats(o->fixed_genes, n, NULL, NULL, rep, e)) { free(rep); return -1; }
    const uint32_t *fr = o->fixed_rep ? o->fixed_rep : rep;
    cap = n;
    for (uint32_t i = 0; i < o->n_fixed_genes; i++) {
      const char *nm = o->fixed_genes[i];
      uint32_t k = fr[i];
      size_t kl = strlen(nm) + 16;
      char *key = malloc(kl);
      if (!key) { free(rep); return cv_fail(e, "out of memory"); }
      if (k) snprintf(key, kl, "%s\x01%u", nm, k);
      else snprintf(key, kl, "%s", nm);
      g->name[i] = strdup(nm);
      g->file[i] = UINT32_MAX;
      g->local[i] = 0;
      g->n = g->n_all = i + 1;
      int bad = !g->name[i] || cv_map_put(&g->map, key, i, e);
      free(key);
      if (bad) { free(rep); return cv_fail(e, "out of memory"); }
    }
    free(rep);
  }
  uint32_t *rep = NULL;
  size_t rep_cap = 0;
  for (int f = 0; f < nf; f++) {
    g->fmap[f] = malloc((files[f].n_vars + 1) * sizeof(uint32_t));
    if (!g->fmap[f]) { free(rep); return cv_fail(e, "out of memory"); }
    const uint8_t *gone = g->gone ? g->gone[f] : NULL;
    /* the k-th gene of a name in this file's var order (features left out not counted) */
    if (cv_grow((void **)&rep, &rep_cap, (size_t)files[f].n_vars + 1, sizeof *rep, e) ||
        cv_gene_repeats((const char *const *)files[f].var_names, files[f].n_vars, gone, NULL, rep, e)) {
      free(rep);
      return -1;
    }
    for (uint64_t j = 0; j < files[f].n_vars; j++) {
      const char *nm = files[f].var_names[j];
      if (gone && gone[j]) { g->fmap[f][j] = UINT32_MAX; continue; }
      uint32_t k = rep[j];
      size_t kl = strlen(nm) + 16;
      char kbuf[512], *key = kl <= sizeof kbuf ? kbuf : malloc(kl);
      if (!key) { free(rep); return cv_fail(e, "out of memory"); }
      if (k) snprintf(key, kl, "%s\x01%u", nm, k);
      else snprintf(key, kl, "%s", nm);
      uint32_t id;
      if (!cv_map_get(&g->map, key, &id)) {
        id = g->n;
        if (g->n >= INT32_MAX) {
          if (key != kbuf) free(key);
          free(rep);
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
          free(rep);
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
          free(rep);
          return cv_fail(e, "out of memory");
        }
      }
      if (key != kbuf) free(key);
      if (g->file[id] == UINT32_MAX) { g->file[id] = (uint32_t)f; g->local[id] = (uint32_t)j; } /* a fixed gene: its var row */
      g->fmap[f][j] = id;
      g->nfiles[id]++; /* once per file: a repeat in the file has a key of its own */
    }
  }
  free(rep);
  for (uint32_t i = 0; i < g->n; i++) g->n_shared += g->nfiles[i] == (uint32_t)nf;
  return 0;
}

/* Several inputs: how many genes all of them share, and per input the
** fraction of its genes that are shared; a warning below min_frac. */
void cv_genes_overlap(const genes *g, h5file *files, int nf, int quiet, double min_frac, int intersect) {
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
int cv_genes_renumber(genes *g, h5file *files, int nf, uint32_t n_fixed, cv_err *e) {
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
  cv_prog_show(c->pg, c->base + (c->nnz ? (uint64_t)((double)nnz_done / (double)c->nnz * (double)c->n_obs) : 0));
}

/* With one CSR or dense input of at most one tile, the tile read here is kept
** in *last (local gene ids) and pass 2 takes it instead of reading it again. */
int cv_pass1(h5file *files, int nf, genes *g, uint32_t T, const char *spool_dir, uint64_t *nnz_out,
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
        cv_prog_show(pg, base + r1);
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
