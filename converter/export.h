/*
** export.h — `deltacells export` (a dataset, or a selection of it, back to an
** h5ad file that anndata reads) and `deltacells genes` (the genes with their
** stored and original order); what the converter records for them.
*/
#ifndef CV_EXPORT_H
#define CV_EXPORT_H
#include "cv_util.h"
#include "dataset.h"
#include "h5ad.h"

typedef struct ex_opts {
  const char *path;        /* the dataset */
  const char *out;         /* the h5ad to write */
  const char *where;       /* NULL or an SQL expression over the cells table */
  const char *genes_file;  /* NULL or a file of gene names, one a line */
  const char *obs;         /* NULL (every obs column) or a comma list ("" = none) */
  const char *order;       /* NULL or "original" (default) or "stored" */
  int force, quiet;
} ex_opts;

int cv_export(const ex_opts *o, cv_err *e);

/* `genes`: one line per gene (gene_id, orig_index, name, total_counts,
** n_cells), in stored order or (original = 1) in the input's order; json: one
** JSON object. */
int cv_genes(const char *path, int json, int original, cv_err *e);

/* At conversion: dc_meta gene_order ('union': genes.orig_index holds each
** gene's place in the union of the inputs' var) and x_dtype (the inputs' X
** dtype, numpy's name, united when they differ). */
int cv_meta_export(dsw *w, h5file *files, int nf, cv_err *e);

#endif
