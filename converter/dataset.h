/*
** dataset.h — writing a deltacells dataset file (SQLite; docs/format.md section 1).
**
** The writer creates a new database at a temporary path beside the output,
** writes everything inside one transaction (journal off: the file is thrown
** away whole on any failure), declares the virtual tables, commits, syncs and
** renames it over the output.  Only the thread that opened it calls it.
*/
#ifndef CV_DATASET_H
#define CV_DATASET_H
#include <sqlite3.h>
#include <stdint.h>
#include "cv_util.h"
#include "dc_obs.h"
#include "dc_seal.h"

typedef struct dsw {
  sqlite3 *db;
  char *tmp_path;
  char *out_path;
  sqlite3_stmt *ins_tile, *ins_block, *ins_dict, *ins_col, *ins_gblock, *ins_gcol, *ins_meta;
  uint64_t dataset_id;     /* dc_meta.dataset_id, the key of every seal (dc_seal.h) */
  int lock_fd;             /* the temporary file, flock()ed while this writer lives */
  int genes_level;         /* zstd level of genes_blocks; 0: the default (19) */
  int obs_level;           /* zstd level of cells_blocks; 0: dc_obs's default (9) */
  int no_sync;             /* a scratch dataset (append's): no fsync at dsw_finish */
} dsw;

/* cv_fail for SQLite's error rc (message m) while doing `what` to the dataset out: a full disk
** and an I/O error say so, and that nothing was written (every writer works in one transaction). */
int dsw_db_fail(const char *out, cv_err *e, const char *what, int rc, const char *m);

/* The parts of out_path: its directory and the prefix `.NAME.tmp-` of its temporary files
** (malloc()ed; -1 and both NULL when out of memory). */
int dsw_temp_prefix(const char *out_path, char **dir, char **prefix);
/* The error of a file that SQLite opened but whose dc_meta format_version could not be read
** (db's last error): "damaged or truncated" for a malformed SQLite file, else "not a
** deltacells dataset".  Returns -1. */
int dsw_fail_no_meta(sqlite3 *db, const char *path, cv_err *e);
/* fsync() of a file (dir 0) or a directory (dir 1): 0, or -1 with errno. */
int dsw_fsync_path(const char *path, int dir);

/* Removes the temporary files `.NAME.tmp-XXXXXX` (and their -journal, -wal)
** that earlier writers of out_path left behind when they were killed: only
** those no live writer holds the lock of.  Returns how many were removed. */
int dsw_remove_stale(const char *out_path);

/* Creates the temporary database beside out_path (first removing stale ones
** of earlier killed writers, dsw_remove_stale), holds an flock() on it until
** dsw_finish/dsw_abort, begins the transaction
** and writes dc_meta.dataset_id: *dataset_id, or a fresh random one when NULL.  dsw_tile,
** dsw_genes_column and dsw_obs_block seal their rows; dsw_column takes the
** dictionary's seal, which the caller computes with dc_seal.h. */
int dsw_open(dsw *w, const char *out_path, const uint64_t *dataset_id, int page_size, cv_err *e);
int dsw_meta_int(dsw *w, const char *key, int64_t v, cv_err *e);
int dsw_meta_text(dsw *w, const char *key, const char *v, cv_err *e);
/* The dc_meta objects keyed by the stored name of an obs (var) column (docs/format.md), as an
** SQL list; obs_ordered is the array that names obs columns. */
#define DSW_META_OBS_OBJECTS "('obs_names', 'obs_dtypes', 'obs_cat_dtypes')"
#define DSW_META_VAR_OBJECTS "('var_names', 'var_dtypes', 'var_categories', 'var_cat_dtypes')"
/* Obs column `name` (its stored name) goes from dc_meta's obs objects and obs_ordered: it is
** replaced by a column that is neither renamed, nor ordered, nor of a type the inputs had. */
int dsw_meta_forget_obs(sqlite3 *db, const char *name, cv_err *e);
int dsw_tile(dsw *w, int64_t tile, int64_t first_cell, int64_t n_cells, int64_t nnz, int64_t chunks,
             const void *blob, size_t len, cv_err *e);
/* One column of the genes table (genes_columns row col, genes_blocks rows):
** v holds the values of every gene in gene_id order (v->kind: DC_OBS_TEXT,
** INT, BOOL or REAL), stored in blocks of `block` genes.  *bytes_out (may be
** NULL) gets the stored bytes. */
int dsw_genes_column(dsw *w, int64_t col, const char *name, const dc_obs_values *v, uint32_t block,
                     int64_t *bytes_out, cv_err *e);
/* Several genes columns at once: their blocks encoded on `threads` threads (1: this one), then
** written in order, as dsw_genes_column would write each.  cols[i].bytes gets column i's stored
** bytes. */
typedef struct dsw_gcol {
  int64_t col;
  const char *name;
  dc_obs_values v;
  int64_t bytes;
} dsw_gcol;
int dsw_genes_columns(dsw *w, dsw_gcol *cols, int n, uint32_t block, int threads, cv_err *e);
int dsw_column(dsw *w, int64_t col, const char *name, const char *kind, int64_t n_categories,
               int64_t null_count, int64_t bytes, int64_t dict_seal, cv_err *e);
int dsw_dict(dsw *w, int64_t col, int64_t code, const char *value, size_t len, cv_err *e);
/* Block b of obs column col (cells_blocks): the values v of cells first .. first + v->n - 1,
** encoded, with their statistics and seal (n_categories: v->n_categories for a category).
** Adds the block's null count to *nulls and its stored bytes (data + present) to *bytes
** (either may be NULL). */
int dsw_obs_block(dsw *w, int64_t col, const char *name, int64_t b, int64_t first, const dc_obs_values *v,
                  int64_t *nulls, int64_t *bytes, cv_err *e);
/* Declares the virtual tables, commits, closes, syncs and renames to out_path.
** force: replace an existing out_path (else fail if it exists). */
int dsw_finish(dsw *w, const char *out_path, int force, cv_err *e);
/* Discards the temporary file (any state). */
void dsw_abort(dsw *w);

/* Size of a file, or -1. */
int64_t cv_file_size(const char *path);
/* Column i of the statement's current row as a dc_sealval (pointers into the row). */
dc_sealval cv_sealval_of_column(sqlite3_stmt *st, int i);
/* A block's min (max = 0) or max as a dc_sealval, as the converters write it (NULL when the
** block has none); pointers into st. */
dc_sealval cv_sealval_of_stat(int kind, const dc_obs_stats *st, int max);

#endif
