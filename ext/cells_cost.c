/*
** cells_cost.c — the cost model of `cells` (see cells_cost.h).  Pure C: no SQLite.
*/
#include "cells_cost.h"

/* rows of a block meeting (op, v) estimated from its statistics, for a numeric column */
static double est_block_num(const cells_bstat *s, int64_t n, int op, const cells_val *v) {
  if (!s->has) return 0;
  double nn = (double)(n - s->null_count);
  double lo = s->mn.real ? s->mn.f : (double)s->mn.i, hi = s->mx.real ? s->mx.f : (double)s->mx.i;
  double x = v->t == CELLS_V_INTEGER ? (double)v->i : v->f;
  if (op == DC_OP_EQ) {
    if (x < lo || x > hi) return 0;
    double span = hi - lo;
    return span <= 0 ? nn : nn / (span + 1 < 100 ? span + 1 : 100);
  }
  double frac = hi > lo ? (x - lo) / (hi - lo) : (x >= lo ? 1 : 0);
  if (frac < 0) frac = 0;
  if (frac > 1) frac = 1;
  return (op == DC_OP_LT || op == DC_OP_LE) ? nn * frac : nn * (1 - frac);
}

/* rows of the category column equal to text, from the blocks' min/max and present bitmaps */
static double est_category_eq(const cells_est_table *tb, const cells_est_col *oc, const char *z, int zn) {
  int64_t code = -1;
  for (uint32_t q = 0; q < oc->dict->n; q++) {
    int dn;
    const char *d = cells_dict_str(oc->dict, q, &dn);
    if (cells_bincmp(d, dn, z, zn) == 0) { code = q; break; }
  }
  double est = 0;
  for (int64_t b = 0; code >= 0 && oc->bs && b < tb->n_blocks; b++) {
    const cells_bstat *bs = &oc->bs[b];
    int64_t bn = tb->blk_first[b + 1] - tb->blk_first[b];
    if (!bs->has || code < bs->mn.i || code > bs->mx.i) continue;
    if (bs->present) {
      if (code / 8 >= bs->present_len || !((bs->present[code / 8] >> (code % 8)) & 1)) continue;
      int pc = 0;
      for (int j = 0; j < bs->present_len; j++) pc += __builtin_popcount(bs->present[j]);
      est += (double)(bn - bs->null_count) / (pc ? pc : 1);
    } else {
      est += (double)(bn - bs->null_count) / (double)(bs->mx.i - bs->mn.i + 1);
    }
  }
  return est;
}

void cells_est_init(cells_est *e, const cells_est_table *tb) {
  e->rows = e->scan = tb->n_cells;
  e->unique = 0;
  e->n_filter_cols = 0;
}

void cells_est_term(cells_est *e, const cells_est_table *tb, int col, const cells_est_col *oc, int op,
                    const cells_val *num, const char *text, int text_n) {
  double N = tb->n_cells, sel = 1.0;
  if (col == CELLS_COL_CELL_ID) {
    if (op == DC_OP_EQ) { sel = N > 0 ? 1.0 / N : 1; e->unique = 1; e->scan = e->scan < 64 ? e->scan : 64; }
    else if (op == DC_OP_IN) { sel = N > 0 ? 20.0 / N : 1; e->scan = e->scan < 64 * 20 ? e->scan : 64 * 20; }
    else if (op == DC_OP_ISNULL) sel = 0;
    else if (op != DC_OP_NOTNULL) {
      double f = 0.3;
      if (num && N > 0) {
        double x = num->t == CELLS_V_INTEGER ? (double)num->i : num->f;
        f = (op == DC_OP_LT || op == DC_OP_LE) ? x / N : 1 - x / N;
        if (f < 0) f = 0;
        if (f > 1) f = 1;
      }
      sel = f;
      e->scan *= f > 0.001 ? f : 0.001;
    }
  } else if (col == CELLS_COL_TILE) {
    double nt = tb->n_tiles > 0 ? (double)tb->n_tiles : 1;
    if (op == DC_OP_EQ) { sel = 1 / nt; e->scan *= sel; }
    else if (op == DC_OP_IN) { sel = 3 / nt < 1 ? 3 / nt : 1; e->scan *= sel; }
    else if (op == DC_OP_ISNULL) sel = tb->has_tiles ? 0 : 1;
    else if (op != DC_OP_NOTNULL) { sel = 0.3; e->scan *= sel; }
  } else if (oc) {
    e->n_filter_cols++;
    double nulls = N > 0 ? (double)oc->null_count / N : 0;
    if (nulls > 1) nulls = 1;
    if (op == DC_OP_ISNULL) sel = nulls;
    else if (op == DC_OP_NOTNULL) sel = 1 - nulls;
    else if (oc->kind == DC_OBS_CATEGORY) {
      double ncat = oc->n_categories ? (double)oc->n_categories : 1;
      sel = (1 - nulls) / ncat;
      if (op == DC_OP_IN) sel *= 3;
      else if (op != DC_OP_EQ) sel = 0.3;
      else if (text && oc->dict && N > 0) sel = est_category_eq(tb, oc, text, text_n) / N;
    } else if (oc->kind == DC_OBS_TEXT) {
      sel = op == DC_OP_EQ ? (N > 0 ? 1 / N : 1) : op == DC_OP_IN ? (N > 0 ? 5 / N : 1) : 0.3;
    } else if (oc->kind == DC_OBS_BOOL) {
      sel = (1 - nulls) * 0.5;
    } else {
      sel = (1 - nulls) * (op == DC_OP_EQ ? 0.01 : op == DC_OP_IN ? 0.03 : 0.3);
      if (num && N > 0 && op != DC_OP_IN) {
        double est = 0;
        for (int64_t b = 0; b < tb->n_blocks; b++)
          est += est_block_num(&oc->bs[b], tb->blk_first[b + 1] - tb->blk_first[b], op, num);
        sel = est / N;
      }
    }
  }
  e->rows *= sel;
}

double cells_est_rows(const cells_est *e) {
  return e->rows < 1 ? 1 : e->rows;
}

double cells_est_cost(const cells_est *e, int used_cols) {
  double rows = cells_est_rows(e), scan = e->scan < 1 ? 1 : e->scan;
  /* decoding the scanned cells of each filtered column, then a row cost */
  return scan * 0.02 * (e->n_filter_cols + (e->unique ? 0 : 1)) + rows * (1.0 + 0.2 * used_cols) + 10;
}
