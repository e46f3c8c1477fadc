/*
** cells_ivl.c — cell intervals of a `cells` query (see cells_ivl.h).  Pure C: no SQLite.
*/
#include "cells_ivl.h"

#include <math.h>
#include <stdlib.h>

void cells_int_interval(int op, const cells_val *v, int64_t n, int64_t *lo, int64_t *hi) {
  double r;
  if (v->t == CELLS_V_INTEGER) r = v->i < -1 ? -1.0 : v->i > n + 1 ? (double)(n + 1) : (double)v->i;
  else r = !(v->f >= -1) ? -1.0 : v->f > (double)(n + 1) ? (double)(n + 1) : v->f;   /* NaN: -1 */
  double fl = floor(r), ce = ceil(r);
  *lo = 0; *hi = n;
  switch (op) {
    case DC_OP_EQ: if (fl == r) { *lo = (int64_t)r; *hi = (int64_t)r + 1; } else { *lo = *hi = 0; } break;
    case DC_OP_LT: *hi = (int64_t)ce; break;
    case DC_OP_LE: *hi = (int64_t)fl + 1; break;
    case DC_OP_GT: *lo = (int64_t)fl + 1; break;
    case DC_OP_GE: *lo = (int64_t)ce; break;
  }
  if (*lo < 0) *lo = 0;
  if (*hi > n) *hi = n;
  if (*hi < *lo) *hi = *lo;
}

int cells_term_intervals(const cells_term *t, int is_tile, int64_t n_cells, const int64_t *tile_first,
                         int64_t n_tiles, int has_tiles, cells_ivl **out, int *nout) {
  int64_t n = is_tile ? n_tiles : n_cells;
  cells_ivl *v = NULL;
  int nv = 0;
  *out = NULL;
  *nout = 0;
  if (is_tile && !has_tiles) {
    /* tile is NULL everywhere: only IS NULL holds */
    v = malloc(sizeof *v);
    if (!v) return -1;
    if (t->op == DC_OP_ISNULL && n_cells > 0) { v[0].lo = 0; v[0].hi = n_cells; nv = 1; }
    *out = v; *nout = nv;
    return 0;
  }
  if (t->op == DC_OP_IN) {
    v = malloc(((size_t)t->niset + 1) * sizeof *v);
    if (!v) return -1;
    for (int j = 0; j < t->niset; j++) {
      int64_t x = t->iset[j];
      if (x < 0 || x >= n) continue;
      if (nv && v[nv - 1].hi == x + 1) continue;       /* duplicate */
      if (nv && v[nv - 1].hi == x) { v[nv - 1].hi = x + 1; continue; }
      v[nv].lo = x; v[nv].hi = x + 1; nv++;
    }
  } else {
    v = malloc(sizeof *v);
    if (!v) return -1;
    const cells_val *x = &t->v[0];
    int64_t lo = 0, hi = 0;
    if (t->op == DC_OP_NOTNULL) { lo = 0; hi = n; }
    else if (t->op == DC_OP_ISNULL || x->t == CELLS_V_NULL) { lo = hi = 0; }
    else if (x->t == CELLS_V_TEXT || x->t == CELLS_V_BLOB) {   /* a number < text < blob */
      if (t->op == DC_OP_LT || t->op == DC_OP_LE) { lo = 0; hi = n; }
    } else {
      cells_int_interval(t->op, x, n, &lo, &hi);
    }
    if (hi > lo) { v[0].lo = lo; v[0].hi = hi; nv = 1; }
  }
  if (is_tile) {
    for (int j = 0; j < nv; j++) { v[j].lo = tile_first[v[j].lo]; v[j].hi = tile_first[v[j].hi]; }
    int m = 0;   /* drop empty tiles, merge neighbours */
    for (int j = 0; j < nv; j++) {
      if (v[j].hi <= v[j].lo) continue;
      if (m && v[m - 1].hi == v[j].lo) v[m - 1].hi = v[j].hi;
      else v[m++] = v[j];
    }
    nv = m;
  }
  *out = v;
  *nout = nv;
  return 0;
}

int cells_ivl_intersect(cells_ivl **a, int *na, const cells_ivl *b, int nb) {
  cells_ivl *r = malloc(((size_t)*na + (size_t)nb + 1) * sizeof *r);
  if (!r) return -1;
  const cells_ivl *x = *a;
  int i = 0, j = 0, m = 0;
  while (i < *na && j < nb) {
    int64_t lo = x[i].lo > b[j].lo ? x[i].lo : b[j].lo;
    int64_t hi = x[i].hi < b[j].hi ? x[i].hi : b[j].hi;
    if (lo < hi) { r[m].lo = lo; r[m].hi = hi; m++; }
    if (x[i].hi < b[j].hi) i++; else j++;
  }
  free(*a);
  *a = r;
  *na = m;
  return 0;
}

uint32_t cells_ivl_rows(const cells_ivl *iv, int niv, int from, int64_t pos, int64_t bstart, int64_t bend,
                        uint32_t *sel) {
  uint32_t m = 0;
  for (int j = from; j < niv && iv[j].lo < bend; j++) {
    int64_t lo = iv[j].lo > pos ? iv[j].lo : pos;
    if (lo < bstart) lo = bstart;
    int64_t hi = iv[j].hi < bend ? iv[j].hi : bend;
    for (int64_t x = lo; x < hi; x++) sel[m++] = (uint32_t)(x - bstart);
  }
  return m;
}
