/*
** cells_ivl.h — the cells a `cells` query walks: cell intervals from cell_id and tile
** terms, their intersection, the rows of a block they cover (the block of a cell is
** dc_last_le of dc_search.h).
**
** Pure C: no SQLite.  Intervals are half open, [lo, hi), sorted and disjoint.
*/
#ifndef CELLS_IVL_H
#define CELLS_IVL_H
#include <stdint.h>
#include "cells_filter.h"
#include "dc_search.h"   /* dc_last_le */

typedef struct cells_ivl { int64_t lo, hi; } cells_ivl;

/* The integers x in [0, n) with x OP v (v numeric: CELLS_V_INTEGER or _FLOAT; op one of
** =, <, <=, >, >=), as [*lo, *hi) (empty: *lo == *hi). */
void cells_int_interval(int op, const cells_val *v, int64_t n, int64_t *lo, int64_t *hi);

/* The cells that a term on cell_id (is_tile 0) or on tile (is_tile 1: tile_first[0..n_tiles]
** the first cell of each tile and the end; when has_tiles is 0, tile is NULL everywhere)
** allows among n_cells cells: a malloc'd array in *out (free it), *nout intervals.  -1 on
** out-of-memory.  t must be prepared (an IN list's sorted set). */
int cells_term_intervals(const cells_term *t, int is_tile, int64_t n_cells, const int64_t *tile_first,
                         int64_t n_tiles, int has_tiles, cells_ivl **out, int *nout);

/* *a := *a ∩ b (both sorted and disjoint); *a is reallocated.  -1 on out-of-memory (*a kept). */
int cells_ivl_intersect(cells_ivl **a, int *na, const cells_ivl *b, int nb);

/* The rows of the block of cells [bstart, bend) covered by intervals iv[from..niv) at or
** after cell pos, written to sel (room for bend - bstart) as offsets from bstart; returns
** how many. */
uint32_t cells_ivl_rows(const cells_ivl *iv, int niv, int from, int64_t pos, int64_t bstart, int64_t bend,
                        uint32_t *sel);
#endif
