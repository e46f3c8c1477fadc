/*
** convert_int.h — what the files of `convert` share (convert.c: the driver; convert_genes.c:
** genes and pass 1; convert_tiles.c: pass 2; convert_cols.c: obs and var columns).
*/
#ifndef CV_CONVERT_INT_H
#define CV_CONVERT_INT_H
#include <sqlite3.h>
#include <stdint.h>
#include "convert.h"
#include "cv_util.h"
#include "dataset.h"
#include "h5ad.h"

#define OBS_BLOCK 65536u   /* cells per obs block */

/* ---- convert.c */
/* The progress line on stderr (when on): a fraction of total, or column col of ncols. */
typedef struct progress {
  int on;
  const char *label;
  uint64_t total;
  double t0, last;
} progress;

void cv_prog_start(progress *p, int on, const char *label, uint64_t total);
void cv_prog_show(progress *p, uint64_t done);
void cv_prog_cols(progress *p, int col, int ncols, uint64_t done, uint64_t n);
void cv_prog_end(progress *p);
/* v as a JSON string appended to s. */
void cv_json_str(sqlite3_str *s, const char *v);

/* ---- convert_genes.c */
/* The genes of the inputs, joined. */
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

void cv_genes_free(genes *g, int n_files);
/* Joins the inputs' genes by name (the k-th occurrence of a name in one input joins the k-th
** in another); o->fixed_genes (append) come first. */
int cv_genes_join(genes *g, h5file *files, int nf, const cv_opts *o, cv_err *e);
/* Several inputs: how many genes all of them share, and per input the
** fraction of its genes that are shared; a warning below min_frac. */
void cv_genes_overlap(const genes *g, h5file *files, int nf, int quiet, double min_frac, int intersect);
/* Dataset gene ids: the n_fixed genes given first (convert --gene-order, append) in their
** order, then by decreasing total counts; with g->keep, the genes not kept get UINT32_MAX
** (their entries are dropped from the tiles). */
int cv_genes_renumber(genes *g, h5file *files, int nf, uint32_t n_fixed, cv_err *e);
/* Pass 1: every matrix read once (CSC into the transpose spool in spool_dir), counts and cells
** summed per gene, *nnz_out the nonzeros.  With one CSR or dense input of at most one tile
** (T cells), the tile read is kept in *last (local gene ids) for pass 2. */
int cv_pass1(h5file *files, int nf, genes *g, uint32_t T, const char *spool_dir, uint64_t *nnz_out,
             rowbuf *last, progress *pg, cv_err *e);

/* ---- convert_tiles.c */
/* Pass 2: the tiles (tstart[t] .. tstart[t+1]: the cells of tile t), read, put in gene order,
** encoded and written; first[f]: input f's first cell. */
int cv_pass2(h5file *files, int nf, const uint64_t *first, const uint64_t *tstart, uint64_t n_tiles,
             const genes *g, const cv_opts *o, rowbuf *last, dsw *w, uint64_t *nnz_out, uint64_t *bytes_out,
             progress *pg, cv_err *e);

/* ---- convert_cols.c */
/* The obs columns of the inputs, united, in blocks of OBS_BLOCK cells; *obs_bytes: stored bytes. */
int cv_write_obs(h5file *files, int nf, const uint64_t *first, uint64_t n_cells, dsw *w,
                 uint64_t *obs_bytes, progress *pg, cv_err *e);
/* The genes table: name, total_counts, n_cells, then the union of the inputs' var columns. */
int cv_write_genes(h5file *files, int nf, const genes *g, const cv_opts *o, dsw *w, int64_t *bytes_out,
                   cv_err *e);

#endif
