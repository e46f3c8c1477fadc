/*
** merge.h — datasets that change: `append` (h5ad files into an existing
** dataset, in place, one transaction) and `merge` (datasets into a new one).
** See merge_cmd.c, merge.c and docs/converter.md.
*/
#ifndef CV_MERGE_H
#define CV_MERGE_H
#include "convert.h"
#include "cv_util.h"

typedef struct cv_append_opts {
  const char *dataset;
  const char **inputs;
  int n_inputs;
  const char *layer;    /* as convert */
  int raw;
  const char *gene_key;
  int threads;
  int quiet;
} cv_append_opts;

int cv_append(const cv_append_opts *o, cv_err *e);

typedef struct cv_merge_opts {
  const char **inputs;  /* datasets; the first one's settings and gene ids are kept */
  int n_inputs;
  const char *out;
  int threads;
  int force, quiet;
} cv_merge_opts;

int cv_merge(const cv_merge_opts *o, cv_err *e);

/* Gene names in order for convert --gene-order: a dataset's genes (by gene_id; *reps: which
** gene of its name each is, cv_dataset_gene_reps), or a text file of one name per line
** (surrounding whitespace and empty lines dropped; *reps NULL: counted in the file's order).
** malloc()ed. */
int cv_gene_order_load(const char *path, char ***names, uint32_t **reps, uint32_t *n, cv_err *e);

#endif

typedef struct cv_annotate_opts {
  const char *dataset;
  const char *table;     /* CSV file: a header row, then one row per cell */
  const char *key;       /* "name" (cells.name, the obs index) or "cell_id" */
  const char **types;    /* n_types "COLUMN=KIND" (category, text, int, real, bool) */
  int n_types;
  int quiet;
  const char *schema;    /* NULL, or a JSON file: per column {"categories": [...], "ordered": bool,
                            "dtype": "uint8" ..., "categories_dtype": "int64" | "float64" | "bool"} */
} cv_annotate_opts;

int cv_annotate(const cv_annotate_opts *o, cv_err *e);
