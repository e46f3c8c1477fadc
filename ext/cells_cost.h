/*
** cells_cost.h — the cost model of `cells`: how many rows a plan returns and how many cells
** it scans, from the block statistics, for xBestIndex's estimatedRows and estimatedCost.
**
** Pure C: no SQLite.  Estimates only: no answer depends on them, only the join order.
*/
#ifndef CELLS_COST_H
#define CELLS_COST_H
#include <stdint.h>
#include "cells_filter.h"

/* What the table knows (zeros before its statistics are loaded). */
typedef struct cells_est_table {
  double n_cells;             /* the row count assumed (1e6 when unknown) */
  int64_t n_blocks;
  const int64_t *blk_first;   /* [n_blocks + 1], or NULL */
  int64_t n_tiles;
  int has_tiles;
} cells_est_table;

/* One stored obs column (for a term on an obs column). */
typedef struct cells_est_col {
  int kind;                   /* DC_OBS_* */
  uint32_t n_categories;
  int64_t null_count;
  const cells_bstat *bs;      /* [n_blocks] of this column, or NULL */
  const cells_dict *dict;     /* category: the dictionary once loaded, or NULL */
} cells_est_col;

/* The running estimate of a plan. */
typedef struct cells_est {
  double rows;                /* rows returned */
  double scan;                /* cells decoded */
  int unique;                 /* cell_id = ?: one row at most */
  int n_filter_cols;          /* obs columns filtered */
} cells_est;

void cells_est_init(cells_est *e, const cells_est_table *tb);
/* Adds term (col, op) to the estimate: oc for an obs column (else NULL); num, a numeric
** right-hand side when known (else NULL); text/text_n, a TEXT right-hand side when known
** (else NULL). */
void cells_est_term(cells_est *e, const cells_est_table *tb, int col, const cells_est_col *oc, int op,
                    const cells_val *num, const char *text, int text_n);
/* The final row estimate (at least 1) and cost for a statement reading used_cols columns. */
double cells_est_rows(const cells_est *e);
double cells_est_cost(const cells_est *e, int used_cols);
#endif
