/*
** export_int.h — what the files of `export` and `genes` share (export.c: driver and X;
** export_frames.c: obs, var and --genes; export_genes.c: the dataset and its genes table;
** export_h5.c: HDF5 elements).  Prefix ex_.
*/
#ifndef CV_EXPORT_INT_H
#define CV_EXPORT_INT_H
#include <hdf5.h>
#include <sqlite3.h>
#include <stdint.h>
#include "cv_dtype.h"
#include "cv_util.h"
#include "export.h"

/* ---- export_genes.c: the dataset read back */
/* Opens the dataset read-only with the extension loaded; *version: its format version. */
int ex_open(const char *path, sqlite3 **db, int64_t *version, cv_err *e);
/* dc_meta's value of key (sqlite3_malloc()ed text, or NULL); as an integer, or dflt. */
char *ex_meta(sqlite3 *db, const char *key);
int64_t ex_meta_int(sqlite3 *db, const char *key, int64_t dflt);
/* The genes table in memory, by gene_id: every column as SQLite returns it. */
enum { GK_INT = 1, GK_REAL, GK_TEXT };
typedef struct gcolumn {
  char *name;
  int kind;          /* GK_*: the widest kind of its values */
  int64_t *i;
  double *f;
  char **t;
  uint8_t *null;
  int64_t n_null;
} gcolumn;

typedef struct gtable {
  int64_t n;
  int n_cols;
  gcolumn *cols;
  int c_name, c_total, c_ncells, c_orig;  /* column numbers, or -1 */
  int64_t *orig;     /* gene_id -> original position (orig_index, or gene_id) */
  int has_orig;
  /* why the original order cannot be used although the dataset says it records one (or the
  ** other way round: cv_gene_order_problem), "" when there is nothing wrong */
  char orig_problem[CV_GENE_ORDER_WHY];
} gtable;

int ex_gtable_load(sqlite3 *db, const char *path, gtable *g, cv_err *e);
void ex_gtable_free(gtable *g);
/* Gene ids in the input's original order (gene_id order when not recorded); malloc()ed. */
int64_t *ex_genes_in_original_order(const gtable *g);

/* ---- export_h5.c: HDF5 elements as anndata writes them */
hid_t ex_vlstr(void);      /* variable-length UTF-8 strings */
hid_t ex_booltype(void);   /* numpy's bool as h5py writes it: an int8 enum FALSE/TRUE */
int ex_attr_str(hid_t o, const char *name, const char *v);
int ex_attr_strs(hid_t o, const char *name, const char *const *v, size_t n);
int ex_attr_i64s(hid_t o, const char *name, const int64_t *v, size_t n);
int ex_attr_bool(hid_t o, const char *name, int v);
hid_t ex_num_type(const char *d, int kind);   /* dc_meta obs_dtypes' name -> HDF5 file type, or -1 */
/* encoding-type and encoding-version attributes */
int ex_enc(hid_t o, const char *type, const char *version);
/* A group, encoded as type/version when type is not NULL. */
hid_t ex_group(hid_t loc, const char *name, const char *type, const char *version);
/* A 1-D dataset of n elements of file type ft (chunked and extendible when ext). */
hid_t ex_dset(hid_t loc, const char *name, hid_t ft, hsize_t n, int ext, const char *type, const char *version);
/* Writes n elements (memory type mt) at [off, off + n); extends first when ext. */
int ex_dset_put(hid_t d, hid_t mt, const void *buf, hsize_t off, hsize_t n, int ext);
/* A column of strings of n rows, all at once (var). */
int ex_put_strings(hid_t loc, const char *name, const char *const *v, hsize_t n);

/* ---- export_frames.c: obs, var, the genes selected */
/* The genes an export writes, in output column order. */
typedef struct xgenes {
  int64_t n_out;
  int64_t *ids;      /* output column -> gene_id */
  int32_t *col;      /* gene_id -> output column, or -1 */
} xgenes;

/* --genes FILE: names in file order; a name listed twice takes its next
** occurrence in the dataset (duplicate names stay apart). */
int ex_genes_from_file(const gtable *g, const int64_t *orig_order, const char *file, xgenes *x, cv_err *e);
/* One obs column being written, with a block of its rows. */
enum { OK_CAT = 1, OK_INT, OK_REAL, OK_BOOL, OK_TEXT };
typedef struct xcol {
  char *name;
  char *out;           /* its name in the h5ad: the inputs' name (dc_meta obs_names) or name;
                       ** 'Unnamed: I' for an empty name, I its place among the obs columns */
  int unnamed;         /* out was made up for an empty name (export says so) */
  int ordered;         /* an ordered categorical (dc_meta obs_ordered) */
  char dtype[8];           /* int, real: the type in the files where narrower (dc_meta obs_dtypes);
                           ** category: its categories' type where numbers (obs_cat_dtypes); else "" */
  int kind;
  int64_t col;         /* cells_columns.col */
  int64_t nulls;       /* over the whole dataset: decides nullable encodings */
  char **cats;
  uint32_t n_cats;
  cv_map codes;        /* label -> code */
  hid_t d, m;          /* values (codes) and mask datasets */
  hid_t tg;            /* a text column with NULLs: its categorical group (categories written last) */
  size_t cats_cap;
  hid_t ft;            /* file type of d */
  /* a block of rows */
  int64_t *i64;
  double *f64;
  int32_t *c32;
  int8_t *b8, *mask;
  char **txt;
} xcol;
/* The obs columns to write (list: NULL for all, or a comma list; "" for none). */
int ex_obs_columns(sqlite3 *db, const char *path, const char *list, xcol **out, int *n_out, cv_err *e);
void ex_xcol_free(xcol *c);
/* The names n frame columns (stored names) get in the h5ad (dc_meta `key`: obs_names,
** var_names; an empty one 'Unnamed: I', unnamed[i] set then). */
int ex_file_names(sqlite3 *db, const char *key, const char *const *stored, int n, char **out, uint8_t *unnamed,
                  cv_err *e);
/* The obs frame of the selected cells, in cell_id order, through the cells table. */
int ex_write_obs(sqlite3 *db, const ex_opts *o, hid_t root, xcol *cols, int nc, int64_t n_sel, hid_t bt, cv_err *e);
/* The var frame of the exported genes (x), from the genes table. */
int ex_write_var(sqlite3 *db, const ex_opts *o, hid_t root, const gtable *g, const xgenes *x, hid_t bt, cv_err *e);

#endif
