/*
** merge_store.h — what the commands that change datasets (append, merge: merge.c,
** merge_cmd.c; annotate.c) share: a dataset's dc_meta, its stored obs and genes columns read
** into memory and written back as sealed blocks, seals computed again.  All of it works on
** an open connection (main: the dataset written; another schema: one read).
*/
#ifndef CV_MERGE_STORE_H
#define CV_MERGE_STORE_H
#include <sqlite3.h>
#include <stdint.h>
#include "cv_util.h"
#include "dataset.h"
#include "dc_obs.h"

/* SQL: cv_fail with "what: SQLite's message" (-1); sqlite3_exec; a statement from a
** sqlite3_mprintf format (NULL after cv_fail). */
int cv_sql_fail(sqlite3 *db, cv_err *e, const char *what);
int cv_exec(sqlite3 *db, const char *sql, cv_err *e);
sqlite3_stmt *cv_prep(sqlite3 *db, cv_err *e, const char *fmt, ...);
/* (Re)writes main's page map of its tiles (DC_TILES_PAGES, dc_format.h; pagemap.c): last, once the
** tiles are in, in the writer's transaction.  0 also where SQLite has no dbstat (no map). */
int cv_write_pagemap(sqlite3 *db, cv_err *e);
/* The map still fits the file after a schema change that moved no tile page (annotate): records
** the schema_version it holds for (a no-op without a map). */
int cv_pagemap_still(sqlite3 *db, cv_err *e);
/* The state of main's page map, for `info`: 1 current (written under the file's schema_version),
** 0 retired (a VACUUM or another schema change since; *held gets the version it was written under),
** -1 none (a dataset written before the map, or by an SQLite without dbstat). */
int cv_pagemap_state(sqlite3 *db, int64_t *held);

/* A dataset's dc_meta (defaults where older datasets lack a key). */
typedef struct dsinfo {
  const char *path;
  const char *out;         /* where main is written when not at path (merge: its output), for errors */
  const char *label;       /* what errors call it, if not path (append: the files appended) */
  int64_t version, n_cells, n_genes, nnz, n_tiles, level, chunks, chunk_cells, tile_cells, obs_block, genes_block;
  char codec[32];
  uint64_t id;
  uint64_t genes_id;       /* the id main's genes blocks are sealed under: id, except in merge until
                           ** the first's genes are written again under its new id */
  char *sources;           /* JSON array */
  int n_sources;
} dsinfo;
/* Reads schema's dc_meta into m (m->sources malloc()ed); fails on a format version other than
** DC_FORMAT_VERSION. */
int cv_read_meta(sqlite3 *db, const char *schema, const char *path, dsinfo *m, cv_err *e);

/* The values of one column, of one kind, growing. */
typedef struct vals {
  int kind;
  uint64_t n, cap;
  int32_t *codes;
  int64_t *i64;
  uint8_t *valid;
  double *f64;
  int8_t *b8;
  char **text;
  uint32_t *tlen;
} vals;
/* One value, given as the typed parts a source has; NULL when is_null. */
typedef struct val1 {
  int kind, is_null;
  int64_t i;         /* int, bool, category code (already in the target's codes) */
  double f;
  const char *s;     /* text, or a category's label */
  uint32_t len;
} val1;
void cv_vals_free(vals *v);
int cv_vals_reserve(vals *v, uint64_t need, cv_err *e);
/* Appends a NULL. */
int cv_vals_null(vals *v, cv_err *e);
/* Appends x to v, cast to v's kind. */
int cv_vals_push(vals *v, const val1 *x, cv_err *e);
/* Values [off, off+k) of v as the encoder takes them. */
dc_obs_values cv_vals_slice(const vals *v, uint64_t off, uint32_t k, uint32_t n_categories);
/* Appends every value of a stored column (cells or genes, blocks from block b0) to dst,
** cast; a category's codes go through remap (NULL: unchanged) and labels. */
int cv_load_column(sqlite3 *db, const char *schema, const char *table, int64_t col, int kind, uint32_t n_cat,
                   int64_t b0, char *const *labels, const int32_t *remap, vals *dst, const char *what, cv_err *e);
/* Column 0 of main's table as text: the gene names (table "genes") or the cell names ("cells",
** obs '_index'); NULL for a missing name.  On failure nv is freed. */
int cv_load_names(sqlite3 *db, const char *table, const char *path, vals *nv, cv_err *e);
/* rep[i]: which gene of its name schema's gene i is (cv_gene_repeats), counted in the dataset's
** original order: genes.orig_index (each gene's place in the union of the inputs' var), or
** gene_id where the dataset records none.  names: its genes' names (cv_load_names); orig: its
** orig_index column where the caller has it loaded (NULL: read here, if the dataset has one). */
int cv_dataset_gene_reps(sqlite3 *db, const char *schema, const char *path, const vals *names, const vals *orig, uint32_t *rep,
                         cv_err *e);

/* Seals every block of main's obs column col again, keyed by new_id (after
** its n_categories, or the dataset id, changed).  old_id: checks each first. */
int cv_reseal_blocks(sqlite3 *db, uint64_t old_id, int64_t old_ncat, uint64_t new_id, int64_t col, const char *name,
                     int kind, int64_t ncat, cv_err *e);

/* A writer (dataset.h) over main of an open connection (the dataset at path, named in its
** errors), for its insert helpers; dsw_over_end finalizes its statements. */
int dsw_over(dsw *w, sqlite3 *db, const char *path, uint64_t id, cv_err *e);
void dsw_over_end(dsw *w);
/* COMMIT of the dataset at path; a failure names it and the reason (a full disk: disk full). */
int cv_commit(sqlite3 *db, const char *path, cv_err *e);
/* After a command writing the dataset at path through db failed on an SQLite error (its last
** call): a message e that does not begin with path gets it in front, and for a full disk or an
** I/O error the reason and that nothing was written. */
void cv_name_dataset(sqlite3 *db, const char *path, cv_err *e);
/* Ends the open transaction of db without its changes, also when SQLite has already abandoned
** it after a full disk or an I/O error (the file is then restored before this returns, not by
** whoever opens it next). */
void cv_rollback(sqlite3 *db);
/* Writes vals v (the cells first .. first + v.n - 1, first a block boundary) as blocks of col
** (B cells each). */
int cv_write_blocks(dsw *w, int64_t col, const char *name, int64_t ncat, int64_t first, const vals *v, int64_t B,
                    cv_err *e);
/* cells_dict rows [from, ncat) of column col: labels[from .. ncat-1] */
int cv_write_dict_rows(sqlite3 *db, int64_t col, char *const *labels, int64_t from, int64_t ncat, cv_err *e);
/* cells_columns' row of col, from its blocks and dictionary (checksum: the dictionary's seal) */
int cv_write_column_row(sqlite3 *db, uint64_t id, int64_t col, const char *name, int kind, char *const *labels,
                        int64_t ncat, cv_err *e);
/* The code of label s in labels (n of them, map m), added when new. */
int cv_add_label(char ***labels, int64_t *n, cv_map *m, const char *s, int32_t *code, cv_err *e);

/* The obs columns of a dataset (schema's cells_columns, with their dictionaries). */
typedef struct dcol {
  int64_t col;
  char *name;
  int kind;
  int64_t ncat;
  char **labels;
} dcol;
/* Reads schema's obs columns (and dictionaries, each checked against its seal under id). */
int cv_read_cols(sqlite3 *db, const char *schema, const char *path, uint64_t id, dcol **out, int *n_out, cv_err *e);
int cv_check_block_seals(sqlite3 *db, const char *schema, uint64_t id, const dcol *c, int64_t b0, const char *path,
                         cv_err *e);
/* Checks the seals of genes column col's blocks (name and kind: its genes_columns row) under id. */
int cv_check_genes_seals(sqlite3 *db, const char *schema, uint64_t id, int64_t col, const char *name, int kind,
                         const char *path, cv_err *e);
/* Fails naming the first column of schema's `table`_blocks ("cells", "genes") that `table`_columns lacks. */
int cv_check_stray_blocks(sqlite3 *db, const char *schema, const char *table, const char *path, cv_err *e);
void cv_dcols_free(dcol *c, int n);
/* The name of an obs kind ("?" for none). */
const char *cv_obs_kind_label(int k);

/* Copies every row of schema's tiles_data (of the dataset at path) into main's, tile and
** first_cell moved on by tile_off and cell_off, blobs as they are; each row's seal is checked
** under old_id and computed again under new_id.  One reused buffer: no fresh memory per blob. */
int cv_copy_tiles(sqlite3 *db, const char *schema, const char *path, uint64_t old_id, uint64_t new_id, int64_t tile_off,
                  int64_t cell_off, cv_err *e);

/* merge_meta.c: main's dc_meta entries about its columns (their types in the files, ordered
** categoricals, var categories, renamed columns) and X's dtype united with src's, before
** cv_merge_into unites the columns themselves.  Returns 0 or -1. */
int cv_merge_meta(sqlite3 *db, dsw *w, cv_err *e);

/* merge.c: adds dataset spath (ATTACHed as `src`) to main, in the caller's transaction (which
** then detaches `src`); D is updated.  slabel: what errors call spath (NULL: spath). */
int cv_merge_into(sqlite3 *db, dsinfo *D, const char *spath, const char *slabel, int keep_ok, int tiles_in, int threads,
                  int *reencoded, cv_err *e);

#endif
