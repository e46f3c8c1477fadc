/*
** verify.h — what the files of `verify` share (verify.c: the command and its table-level
** checks; verify_cols.c: the stored columns): where faults go, and the column checks.
*/
#ifndef CV_VERIFY_H
#define CV_VERIFY_H
#include <sqlite3.h>
#include <stdint.h>
#include "cv_util.h"
#include "dc_obs.h"

#define VERIFY_SHOW 20   /* faults printed; the rest are counted */

/* Where verify's faults go: one line each (the first VERIFY_SHOW), then a count. */
typedef struct vrep {
  const char *path;
  int json;
  int64_t n;                  /* faults found */
  char *msg[VERIFY_SHOW];     /* the first ones (sqlite3_malloc'd) */
  int sealed;                 /* format version >= 3 with a good dataset_id */
  uint64_t dataset_id;
} vrep;

/* One fault (an sqlite3_mprintf format): printed to stderr unless json, kept while fewer
** than VERIFY_SHOW, counted. */
void cv_vfault(vrep *r, const char *fmt, ...);
#define VFAULT(...) cv_vfault(rep, __VA_ARGS__)
/* sqlite3_step for verify's loops: 1 for a row; 0 at the end, and also on an error, which is
** then a fault naming `what` (a read that fails is never the end of the rows). */
int cv_vstep(sqlite3 *db, vrep *rep, sqlite3_stmt *s, const char *what);

/* Version 1: the plain genes table.  Returns the rows read, or -1. */
int64_t cv_verify_genes_v1(sqlite3 *db, vrep *rep, int64_t n_genes, int64_t *tc, int64_t *cc);
/* Version 2: the genes table's blocks (genes_columns, genes_blocks); total_counts and n_cells
** into tc, cc; repeated names counted in *dup_names.  Returns n_genes when the name and count
** columns decoded, or -1. */
int64_t cv_verify_genes_v2(sqlite3 *db, vrep *rep, int64_t n_genes, dc_obs_decoder *odec, int64_t *tc,
                           int64_t *cc, int64_t *dup_names);
/* cells_columns, cells_dict and cells_blocks: every row the cells table reads.  Returns the
** blocks checked. */
int64_t cv_verify_obs(sqlite3 *db, vrep *rep, int64_t n_cells, dc_obs_decoder *odec);

#endif
