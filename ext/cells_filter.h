/*
** cells_filter.h — how a `cells` WHERE term decides a row: SQLite's comparison semantics
** over decoded obs blocks, pruning of blocks by their stored statistics, the row kernels.
**
** Pure C: no SQLite (the glue, ext/vtab_cells.c, turns sqlite3_values into cells_vals
** after applying the column's affinity with SQLite's own sqlite3_value_numeric_type).
** Semantics (see the header of ext/vtab_cells.c for when a term is exact or a prefilter):
** numbers compare exactly across integer and real (as SQLite compares them); a number is
** less than any text, text less than any blob; NULL matches no comparison; text compares
** by bytes (BINARY); a prefilter on a TEXT column keeps every row that could match under
** any affinity of the right-hand side.
**
** Allocation: what these functions allocate (term sets, a value order, a cells_val's
** bytes) is malloc'd and freed by them (cells_term_clear).
*/
#ifndef CELLS_FILTER_H
#define CELLS_FILTER_H
#include <stddef.h>
#include <stdint.h>
#include "dc_obs.h"
#include "cells_plan.h"
#include "cells_blocks.h"

/* Value types: the same numbers as SQLite's SQLITE_INTEGER .. SQLITE_NULL. */
enum { CELLS_V_INTEGER = 1, CELLS_V_FLOAT = 2, CELLS_V_TEXT = 3, CELLS_V_BLOB = 4, CELLS_V_NULL = 5 };

/* A value of a term: for numeric columns after numeric affinity; for TEXT columns as given,
** with s/n its text form (numbers as SQLite renders them).  s is malloc'd (or NULL). */
typedef struct cells_val {
  int t;                  /* CELLS_V_* */
  int64_t i;
  double f;
  char *s;
  int n;
} cells_val;

/* A stored min or max of a block (numeric: real ? f : i; text: s/n). */
typedef struct cells_mm {
  int real;
  int64_t i;
  double f;
  char *s;
  int n;
} cells_mm;

/* The stored statistics of one block of one column (a cells_blocks row). */
typedef struct cells_bstat {
  int64_t null_count;
  int has;                /* min/max present (not every value NULL) */
  cells_mm mn, mx;
  uint8_t *present;       /* category: bitmap of the codes present, or NULL */
  int present_len;
  int64_t seal;           /* the row's checksum (format version 3) */
  int seal_read;          /* seal loaded (read with the block, not with the statistics) */
  int verified;           /* seal checked against the blob's header */
} cells_bstat;

/* The dictionary of a category column: value of code i is buf + start(i), len(i), each
** value followed by one NUL: start(0) = 0, start(i) = off[i] + 1, end = off[i + 1]. */
typedef struct cells_dict {
  uint32_t n;
  const char *buf;
  const uint32_t *off;    /* [n + 1] */
} cells_dict;

static inline const char *cells_dict_str(const cells_dict *d, uint32_t i, int *n) {
  uint32_t s = i ? d->off[i] + 1 : 0;
  *n = (int)(d->off[i + 1] - s);
  return d->buf + s;
}

/* One term of a plan, with its values and what cells_term_prepare derives from them. */
typedef struct cells_term {
  int col;                /* schema column */
  int op;                 /* DC_OP_* */
  int exact;              /* 0: prefilter (a superset; SQLite re-checks) */
  int arg;                /* argv index, 0-based */
  int kind;               /* the column's DC_OBS_* kind; 0 for cell_id and tile (integers) */
  cells_val *v;           /* [nv] (IN: the list; IS [NOT] NULL: one NULL) */
  int nv;
  /* prepared */
  uint8_t *acc;           /* category: [n_categories + 1], acceptance of code + 1 (0: NULL) */
  int64_t *iset; int niset;   /* numeric IN, integer column: sorted */
  double *fset; int nfset;    /* numeric IN, real column: sorted */
  cells_val **tset; int ntset;/* text IN: sorted by bytes */
  int in_has_number;          /* text IN: a number among the values */
} cells_term;

/* Byte-wise comparison of two strings (memcmp, then length): <0, 0, >0 as -1, 0, 1. */
int cells_bincmp(const char *a, int na, const char *b, int nb);
/* Could this text read as a number under numeric affinity, or be a number as SQLite
** renders it ("Inf")?  Errs on the side of yes. */
int cells_maybe_numeric(const char *s, int n);
/* Exact comparison of an integer and a double, as SQLite compares them. */
int cells_cmp_i_f(int64_t i, double r);
/* A number (real ? lf : li) against a numeric value v (CELLS_V_INTEGER or _FLOAT). */
int cells_cmp_num(int real, int64_t li, double lf, const cells_val *v);

/* A non-NULL number of a numeric column / a non-NULL text of a text column against term t. */
int cells_num_match(const cells_term *t, int real, int64_t li, double lf);
int cells_text_match(const cells_term *t, const char *s, int n);

/* Prepares term t (values set, kind set): sorted sets of an IN list and, for a category
** column, the acceptance table of its dictionary (dict must be given then).  -1 on
** out-of-memory.  cells_term_clear frees what the term holds (its values too). */
int cells_term_prepare(cells_term *t, const cells_dict *dict);
void cells_term_clear(cells_term *t);

/* Can a block with statistics s hold a row meeting term t (of a stored column of kind
** t->kind with n_categories categories)?  Statistics only: 1 = maybe, 0 = no. */
int cells_block_may_match(const cells_term *t, uint32_t n_categories, const cells_bstat *s);

/* A selection of rows of one block: row offsets in increasing order.  full: every row of
** the block, 0 .. n-1, which idx need not hold (no list is written for a whole block; the
** kernels read none, and cells_sel_row gives row j). */
typedef struct cells_sel {
  uint32_t *idx; uint32_t n; size_t cap;
  int full;               /* every row of the block, in order (idx not read) */
  uint64_t *bm; size_t bm_cap;   /* scratch bitmap over the rows of a block */
} cells_sel;
void cells_sel_free(cells_sel *s);
static inline uint32_t cells_sel_row(const cells_sel *s, uint32_t j) { return s->full ? j : s->idx[j]; }

/* Keeps the rows of selection s of block d (a decoded block of t's column) that meet term
** t.  visit: one number for every term of one pass over the block (a cursor's visit; take
** the next of c->visits).  A selective comparison on an int or real block in a second
** visit builds the block's value order (counted in cache c) and then costs two binary
** searches; within one visit (x BETWEEN a AND b is two terms) the block is scanned, since a
** query that filters a block once gains nothing from sorting it.  -1 on out-of-memory. */
int cells_filter_block(const cells_term *t, cells_dblock *d, cells_bcache *c, cells_sel *s, uint64_t visit);
/* The same, one row at a time over the block's values, without the value order. */
void cells_filter_rows(const cells_term *t, const dc_obs_block *blk, cells_sel *s);
#endif
