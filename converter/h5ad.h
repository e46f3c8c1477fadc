/*
** h5ad.h — reading what anndata writes (HDF5 C library; nothing else here): h5ad.c opens
** an input, h5ad_frame.c reads its obs/var frames, h5ad_rows.c its matrix by rows,
** h5ad_hdf5.c holds the HDF5 helpers they share.
**
** An h5ad_file is one input: its matrix (X, layers/NAME or raw/X) read by
** rows, its obs and var data frames read by column in slices.  Encodings
** read (anndata's on-disk spec, 0.1.0/0.2.0, and the older forms):
**   matrix   csr_matrix / csc_matrix groups (encoding-type, or h5sparse_format
**            of old files) with data/indices/indptr; dense 2-D datasets; data
**            of any integer or float type (floats must hold integers).
**   frames   dataframe groups: `_index` attribute names the index; columns
**            from `column-order`; each column is
**              categorical group (codes + categories; codes < 0 = missing),
**              nullable-integer / nullable-boolean group (values + mask),
**              a dataset of ints, floats (NaN = missing), bools (enum) or
**              strings (variable or fixed length), or
**              an integer dataset with a `categories` attribute that refers to
**              a categories dataset (anndata < 0.8, obs/__categories/NAME).
**
** Memory: nothing reads a whole matrix.  CSR and dense rows are read in slabs
** of at most CV_SLAB values.  CSC is transposed once through a spool file of
** 12 bytes per nonzero (created unlinked beside the output) with at most
** CV_SPOOL_RAM bytes of buffers (never less than 48 KiB per tile), then read
** back one tile at a time.
*/
#ifndef CV_H5AD_H
#define CV_H5AD_H
#include <hdf5.h>
#include <stdint.h>
#include "cv_util.h"

#define CV_SLAB (1u << 20)               /* values per HDF5 read of X        */
/* values per HDF5 read of CSR rows: the slab is copied into the tile's buffer at once, so
** it is kept small (2 x 512 KiB, cache-sized): a large one was mostly fresh memory, whose
** first touch is slow */
#define CV_ROW_SLAB (1u << 16)
#define CV_SPOOL_RAM ((size_t)64 << 20)  /* CSC transpose buffers            */

/* Column kinds: the values of DC_OBS_* in dc_obs.h. */
enum { CVK_CATEGORY = 1, CVK_INT = 2, CVK_REAL = 3, CVK_BOOL = 4, CVK_TEXT = 5 };
const char *cv_kind_name(int kind);

/* One block of values of one column (the layout dc_obs_values takes). */
typedef struct colbuf {
  int kind;
  uint32_t n;
  size_t cap;
  int32_t *codes;     /* category: -1 = NULL */
  int64_t *i64;       /* int */
  uint8_t *valid;     /* int: 0 = NULL */
  double *f64;        /* real: NaN = NULL */
  int8_t *b8;         /* bool: -1 = NULL */
  const char **text;  /* text: NULL = NULL (valid after colbuf_text_done) */
  uint32_t *text_len;
  uint64_t *text_off; /* text: offsets into arena while filling */
  char *arena;
  size_t arena_len, arena_cap;
} colbuf;
int colbuf_reset(colbuf *b, int kind, size_t n, cv_err *e);
int colbuf_text_set(colbuf *b, size_t i, const char *s, size_t len, cv_err *e);
void colbuf_text_null(colbuf *b, size_t i);
void colbuf_text_done(colbuf *b);
void colbuf_free(colbuf *b);

enum { ENC_NUM = 1, ENC_STR, ENC_CAT, ENC_CAT_OLD, ENC_NULLABLE };

typedef struct h5col {
  char *name;
  int kind;           /* CVK_* */
  int enc;            /* ENC_* */
  hid_t dset;         /* values, codes or strings */
  hid_t mask;         /* nullable: mask dataset (1 = missing), or -1 */
  char **cats;        /* category: labels */
  uint32_t n_cats;
  int ordered;        /* category: its `ordered` attribute is true */
  char dtype[8];      /* int, real: the values' type as numpy names it ("int32", "float32"; "" if none);
                      ** category: its categories' type where they are not strings ("int16",
                      ** "uint64", "float32" (float16 too), "bool", ...: cv_cat_dtype_known's;
                      ** their labels are the numbers as text) */
} h5col;

typedef struct h5frame {
  char path[32];      /* "obs", "var", "raw/var" */
  uint64_t n_rows;
  h5col index;        /* the `_index` column */
  int n_cols;
  h5col *cols;
} h5frame;

/* MAT_SPOOL: entries in any order (a Matrix Market file, tenx.c) put into the
** transpose spool by the input's reader in pass 1, then read like CSC. */
/* MAT_DENSE_T: a dense matrix stored genes x cells (loom), read by column
** stripes of f->stripe cells. */
enum { MAT_CSR = 1, MAT_CSC, MAT_DENSE, MAT_SPOOL, MAT_DENSE_T };

typedef struct spool_run { uint64_t off; uint32_t n; } spool_run;
typedef struct spool_bucket {
  spool_run *runs; size_t n_runs, cap_runs;
  uint32_t *buf; size_t n_buf;   /* pending entries (3 u32 each)          */
  uint64_t nnz;
} spool_bucket;

typedef struct h5file {
  char *path;
  hid_t fid;
  char mpath[300];    /* matrix path: "X", "layers/NAME" or "raw/X" */
  int fmt;            /* MAT_* */
  int data_float;     /* data is a float type */
  hid_t data, indices, indptr;
  uint64_t n_obs, n_vars, nnz;
  h5frame obs, var;
  char **var_names;   /* var index (or --gene-key column) as text */
  /* slabs of indices/data as read (in the narrowest native type that needs
  ** no HDF5 conversion: see h5ad_rows.c) */
  int ity, vty;
  void *sind, *sval;
  size_t scap;
  uint64_t *rowkeys;  /* a row with unsorted gene indices: (gene << 32 | entry), sorted */
  size_t rowkeys_cap;
  /* CSC spool */
  int spool_fd;
  uint64_t spool_off, spool_len;
  cv_split split;      /* the file's tiles: one spool bucket each */
  size_t n_buckets, bucket_cap;
  spool_bucket *buckets;
  uint32_t *cached;   /* the loaded bucket */
  uint64_t cached_nnz;
  int64_t cached_b;
  uint64_t stripe;    /* MAT_DENSE_T: cells per read (a multiple of the chunk width) */
  uint32_t *stamp;    /* MAT_SPOOL: per local gene, the last row + 1 that had it (repeats) */
  char *label;        /* the `source` column's value: the shortest ending of the path that
                         no other input shares (its base name, mostly); set by convert */
  const char *kind;   /* what the input is: "h5ad", "10x h5", "10x mtx" (messages, dc_meta) */
  void *ext;          /* another reader's state (tenx.c), freed by ext_free */
  void (*ext_free)(void *);
} h5file;

/* "no layer NAME", listing the file's layers (h5ad and loom alike) and the closest name.  Returns -1. */
int h5ad_no_layer(hid_t fid, const char *path, const char *layer, cv_err *e);

/* Opens an input and checks its structure (matrix, shapes, frames).
** layer: NULL, or a layer name; raw: read raw/X and raw/var.
** gene_key: NULL (var index), or a var column giving the gene names. */
int h5ad_open(const char *path, const char *layer, int raw, const char *gene_key,
              h5file *f, cv_err *e);
void h5ad_close(h5file *f);

/* Removes surrounding whitespace (isspace) from f->var_names in place (a
** name that is all blank stays as it is); returns how many names changed.
** With apply 0, only counts the names it would change. */
uint64_t h5ad_strip_gene_names(h5file *f, int apply);

/* The parts of h5ad_open that the other readers (tenx.c) share. */
/* Opens column `name` of group g as a frame column of n_rows values (fpath:
** the group's path, for messages).  0, -1, or 1 (unsupported type: skipped). */
int h5ad_col_open(h5file *f, hid_t g, const char *fpath, const char *name, uint64_t n_rows, h5col *c,
                  cv_err *e);
/* Opens data/indices/indptr of sparse group x (f->fmt MAT_CSR or MAT_CSC,
** shape rows x columns as stored) and checks their types and lengths. */
int h5ad_sparse_open(h5file *f, hid_t x, const int64_t shape[2], cv_err *e);
/* Reads f->var_names from the var index, or from var column gene_key. */
int h5ad_gene_names(h5file *f, const char *gene_key, cv_err *e);
/* Opens the data frame at path ("obs", "var", "raw/var"): its index and the columns of its
** column-order (unsupported ones skipped with a warning).  h5ad_frame_free frees it. */
int h5ad_frame_open(h5file *f, const char *path, h5frame *fr, cv_err *e);
void h5ad_frame_free(h5frame *fr);

/* Rows appended to a CSR buffer.  Values are validated and zeros dropped. */
typedef struct rowbuf {
  uint64_t n_rows;
  uint64_t *indptr;   /* n_rows + 1, indptr[0] = 0 */
  uint32_t *indices;
  uint32_t *data;
  size_t cap_rows, cap_nnz;
} rowbuf;
void rowbuf_clear(rowbuf *rb);
void rowbuf_free(rowbuf *rb);

/* Appends rows [r0, r1) of the matrix (CSR or dense; CSC after
** h5ad_csc_spool, one tile's rows at a time).  gmap: NULL, or local gene ->
** dataset gene id applied to the indices appended (order kept). */
int h5ad_read_rows(h5file *f, uint64_t r0, uint64_t r1, const uint32_t *gmap,
                   rowbuf *rb, cv_err *e);

/* CSC only: reads the matrix once by columns, sums counts per gene into
** total[]/ncells[] (local genes), and spools the entries by tile, the file's
** tiles being cv_split_make(n_obs, tile_cells) (tiles never span two
** inputs).  dir: where the spool file goes. */
int h5ad_csc_spool(h5file *f, const char *dir, uint32_t tile_cells, uint64_t *total, uint64_t *ncells,
                   void (*progress)(void *, uint64_t), void *parg, cv_err *e);

/* The transpose spool by itself (h5ad_csc_spool, and readers of other
** inputs whose entries come in any order): begin (the file's tiles being
** cv_split_make(n_obs, tile_cells)), put entries (cell r, local gene j,
** count v > 0), end; h5ad_read_rows then reads a tile's rows.  The entries of
** a row come out in the order they were put. */
int h5ad_spool_begin(h5file *f, const char *dir, uint32_t tile_cells, cv_err *e);
int h5ad_spool_put(h5file *f, uint32_t r, uint32_t j, uint32_t v, cv_err *e);
int h5ad_spool_end(h5file *f, cv_err *e);

/* Reads rows [start, start+n) of column c of a frame, as the column's kind. */
int h5ad_col_read(h5file *f, const h5col *c, uint64_t start, size_t n, colbuf *out,
                  cv_err *e);
/* Name of cell `row` (for messages); writes "row N" if it cannot be read. */
void h5ad_cell_name(h5file *f, uint64_t row, char *buf, size_t n);

#endif
