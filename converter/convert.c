/*
** convert.c — h5ad files to one deltacells dataset: the driver (cv_convert), its progress
** line, the source labels and dc_meta.  Genes and pass 1 are convert_genes.c's, pass 2
** convert_tiles.c's, the obs and var columns convert_cols.c's (convert_int.h).
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

#include "convert_int.h"

#define VERSION "deltacells 0.1"

/* ------------------------------------------------------------ progress */
void cv_prog_start(progress *p, int on, const char *label, uint64_t total) {
  p->on = on;
  p->label = label;
  p->total = total;
  p->t0 = cv_now();
  p->last = 0;
}

void cv_prog_show(progress *p, uint64_t done) {
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
void cv_prog_cols(progress *p, int col, int ncols, uint64_t done, uint64_t n) {
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

void cv_prog_end(progress *p) {
  if (p->on) fprintf(stderr, "\r%-78s\r", "");
}

/* ------------------------------------------------------------ meta */
void cv_json_str(sqlite3_str *s, const char *v) {
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
/* The path labels are made from: as given, but a directory given as "." or ".." (an .mtx
** directory converted from inside it) by its real path, so that it is named. */
static char *label_path(const char *p) {
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') n--;
  size_t b = n;
  while (b > 0 && p[b - 1] != '/') b--;
  int dots = (n - b == 1 && p[b] == '.') || (n - b == 2 && p[b] == '.' && p[b + 1] == '.');
  char *r = dots ? realpath(p, NULL) : NULL;
  return r ? r : strdup(p);
}

static int make_labels(h5file *files, int nf, cv_err *e) {
  size_t *len = calloc((size_t)nf + 1, sizeof *len);
  int *k = calloc((size_t)nf + 1, sizeof *k);
  char **lp = calloc((size_t)nf + 1, sizeof *lp);
  int bad = !len || !k || !lp;
  for (int f = 0; f < nf && !bad; f++) bad = !(lp[f] = label_path(files[f].path));
  if (bad) {
    for (int f = 0; lp && f < nf; f++) free(lp[f]);
    free(len); free(k); free(lp);
    return cv_fail(e, "out of memory");
  }
  for (int f = 0; f < nf; f++) {
    len[f] = strlen(lp[f]);
    while (len[f] > 1 && lp[f][len[f] - 1] == '/') len[f]--;
    k[f] = 1;
  }
  for (int changed = 1; changed;) {
    changed = 0;
    for (int f = 0; f < nf; f++) {
      const char *a = path_tail(lp[f], len[f], k[f]);
      size_t al = (size_t)(lp[f] + len[f] - a);
      for (int h = 0; h < nf; h++) {
        if (h == f || (len[h] == len[f] && memcmp(lp[h], lp[f], len[f]) == 0)) continue;
        const char *b = path_tail(lp[h], len[h], k[h]);
        size_t bl = (size_t)(lp[h] + len[h] - b);
        if (al == bl && memcmp(a, b, al) == 0) {
          if (a != lp[f]) { k[f]++; changed = 1; }
          if (b != lp[h]) { k[h]++; changed = 1; }
          if (changed) break;
        }
      }
    }
  }
  for (int f = 0; f < nf; f++) {
    const char *a = path_tail(lp[f], len[f], k[f]);
    free(files[f].label);
    if (!(files[f].label = strndup(a, (size_t)(lp[f] + len[f] - a)))) {
      for (int g = 0; g < nf; g++) free(lp[g]);
      free(len); free(k); free(lp);
      return cv_fail(e, "out of memory");
    }
  }
  for (int f = 0; f < nf; f++) free(lp[f]);
  free(lp);
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
      if (!h5ad_strip_gene_names(&files[f], 0)) continue;   /* most files: no map of their names */
      int64_t r0 = count_repeats(&files[f]);
      uint64_t k = h5ad_strip_gene_names(&files[f], 1);
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
      if (k == files[f].n_vars) { /* nothing but other features: keep them, and say so */
        free(m);
        fprintf(stderr, "deltacells: note: %s: no feature is typed 'Gene Expression' (e.g. '%s'), so all %llu are "
                "kept as genes (scanpy's read_10x_h5 would keep none)\n", files[f].path, ex,
                (unsigned long long)k);
        continue;
      }
      if (!g.gone && !(g.gone = calloc((size_t)nf, sizeof *g.gone))) { free(m); cv_fail(e, "out of memory"); goto done; }
      g.gone[f] = m;
      g.dropping = 1;
      fprintf(stderr, "deltacells: note: %s: %llu features that are not 'Gene Expression' (e.g. '%s') are left out, "
              "as scanpy's read_10x_h5 does (--all-features keeps them, told apart by the genes column "
              "feature_types)\n", files[f].path, (unsigned long long)k, ex);
    }
  if (cv_genes_join(&g, files, nf, o, e)) goto done;
  cv_genes_overlap(&g, files, nf, o->quiet, o->min_overlap > 0 ? o->min_overlap : 0.5, o->genes_intersect);
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
  cv_prog_start(&pg, show, "pass 1/3 (gene totals)", n_cells);
  double tp1 = cv_now();
  int r1 = cv_pass1(files, nf, &g, o->tile_cells, spool_dir, &nnz1, &last, &pg, e);
  free(spool_dir);
  cv_prog_end(&pg);
  if (r1 || cv_genes_renumber(&g, files, nf, o->n_fixed_genes, e)) goto done;

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
  if (dsw_open(&w, o->out, o->dataset_id_set ? &o->dataset_id : NULL, dc_page_size_for(nnz1), e)) goto done;
  w.genes_level = o->genes_level;
  w.obs_level = o->obs_level;
  w.no_sync = o->no_sync;
  uint64_t nnz = 0, xbytes = 0, obytes = 0;
  int64_t gbytes = 0;
  cv_prog_start(&pg, show, "pass 2/3 (tiles)", n_cells);
  double tp2 = cv_now();
  int r2 = cv_pass2(files, nf, first, tstart, n_tiles, &g, o, &last, &w, &nnz, &xbytes, &pg, e);
  cv_prog_end(&pg);
  if (r2) goto done;
  if (nnz != nnz1) {
    cv_fail(e, "internal: pass 2 read %llu nonzeros, pass 1 %llu", (unsigned long long)nnz, (unsigned long long)nnz1);
    goto done;
  }
  double tg = cv_now();
  if (cv_write_genes(files, nf, &g, o, &w, &gbytes, e)) goto done;
  cv_prog_start(&pg, show, "pass 3/3 (obs)", n_cells);
  double tp3 = cv_now();
  int r3 = cv_write_obs(files, nf, first, n_cells, &w, &obytes, &pg, e);
  cv_prog_end(&pg);
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
    cv_json_str(src, full ? full : files[f].path);
    free(full);
    sqlite3_str_appendall(src, ",\"source\":");
    cv_json_str(src, files[f].label ? files[f].label : files[f].path);
    sqlite3_str_appendall(src, ",\"kind\":");
    cv_json_str(src, files[f].kind ? files[f].kind : "h5ad");
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
              dsw_meta_int(&w, "chunks", o->chunks, e) || dsw_meta_int(&w, "chunk_cells", o->chunk_cells, e) ||
              dsw_meta_int(&w, "tile_cells", o->tile_cells, e) ||
              dsw_meta_int(&w, "obs_block_cells", OBS_BLOCK, e) ||
              dsw_meta_int(&w, "genes_block", o->genes_block ? o->genes_block : DC_GENES_BLOCK, e) ||
              dsw_meta_text(&w, "sources", sources, e) || cv_meta_export(&w, files, nf, e) ||
              (o->n_fixed_genes && dsw_meta_text(&w, "gene_numbering", "stable", e)) ||
              dsw_meta_text(&w, "created_by", VERSION, e)) ? -1 : 0;
  sqlite3_free(sources);
  if (mr) goto done;
  if (cv_check_interrupt(e)) goto done;
  double tf = cv_now();
  if (dsw_finish(&w, o->out, o->force, e)) goto done;
  if (getenv("DELTACELLS_TIMING"))
    fprintf(stderr, "convert: inputs opened %.3f s, gene totals %.3f s, tiles %.3f s, genes %.3f s, obs + meta %.3f s, "
            "commit %.3f s\n", tp1 - t0, tp2 - tp1, tg - tp2, tp3 - tg, tf - tp3, cv_now() - tf);
  if (!o->quiet) {
    int64_t fb = cv_file_size(o->out);
    printf("%s: %llu cells x %u genes, %llu nonzeros in %llu tiles; expression %.2f MB (%.2f bits/nonzero), "
           "obs %.2f MB, file %.2f MB; %.1f s (gene totals %.1f s, tiles %.1f s, genes+obs %.1f s)\n", o->out, (unsigned long long)n_cells, g.n,
           (unsigned long long)nnz, (unsigned long long)n_tiles, (double)xbytes / 1e6,
           nnz ? 8.0 * (double)xbytes / (double)nnz : 0.0, (double)obytes / 1e6, (double)fb / 1e6, cv_now() - t0, tp2 - tp1, tg - tp2,
           cv_now() - tg);
  }
  rc = 0;
done:
  if (rc) dsw_abort(&w);
  rowbuf_free(&last);
  cv_genes_free(&g, nf);
  for (int f = 0; f < opened; f++) h5ad_close(&files[f]);
  free(files);
  free(first);
  free(ftile);
  free(tstart);
  return rc;
}
