/*
** cells_plan.h — what `cells`' plans name, for the shared plan codec (dc_plan.h, where the
** grammar is): the table's columns and its words.  Pure C: no SQLite.
**
**   #3 "cell_type" = ?1, #5 "n_genes" > ?2 prefilter, ORDER BY cell_id, LIMIT ?3
*/
#ifndef CELLS_PLAN_H
#define CELLS_PLAN_H
#include "dc_plan.h"

/* The columns of the table's schema: these three, then one per stored obs column. */
enum { CELLS_COL_CELL_ID = 0, CELLS_COL_NAME = 1, CELLS_COL_TILE = 2, CELLS_COL_OBS0 = 3 };

/* Kinds of plan items: a term, or one of cells' words (CELLS_PLAN_WORDS, in this order). */
enum { CELLS_ITEM_TERM = DC_ITEM_TERM, CELLS_ITEM_LIMIT, CELLS_ITEM_OFFSET, CELLS_ITEM_ORDER };
#define CELLS_PLAN_WORDS {{"LIMIT", 1}, {"OFFSET", 1}, {"ORDER BY cell_id", 0}}
#endif
