/*
** cells_filter.c — comparison semantics, block pruning and row kernels of `cells`
** (see cells_filter.h).  Pure C: no SQLite.
*/
#include "cells_filter.h"
#include "dc_spare.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define IS_SPACE(c) ((c) == ' ' || ((c) >= '\t' && (c) <= '\r'))

static inline int bincmp(const char *a, int na, const char *b, int nb) {
  int n = na < nb ? na : nb;
  int c = n ? memcmp(a, b, (size_t)n) : 0;
  if (c) return c < 0 ? -1 : 1;
  return (na > nb) - (na < nb);
}

static int maybe_numeric(const char *s, int n) {
  int i = 0;
  while (i < n && IS_SPACE(s[i])) i++;
  if (i >= n) return 0;
  char c = s[i];
  if ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.') return 1;
  /* infinity renders as "Inf" (the sign is caught above) */
  if (n - i >= 3 && !memcmp(s + i, "Inf", 3)) {
    for (i += 3; i < n; i++) if (!IS_SPACE(s[i])) return 0;
    return 1;
  }
  return 0;
}

static inline int cmp_i_f(int64_t i, double r) {
  if (r < -9223372036854775808.0) return 1;
  if (r >= 9223372036854775808.0) return -1;
  if (r != r) return 1;   /* NaN never reaches here from SQLite (it is NULL); be total anyway */
  int64_t y = (int64_t)r;
  if (i < y) return -1;
  if (i > y) return 1;
  double s = (double)i;
  if (s < r) return -1;
  if (s > r) return 1;
  return 0;
}

static inline int cmp_num(int real, int64_t li, double lf, const cells_val *v) {
  if (v->t == CELLS_V_INTEGER) {
    if (!real) return (li > v->i) - (li < v->i);
    return -cmp_i_f(v->i, lf);
  }
  if (!real) return cmp_i_f(li, v->f);
  return (lf > v->f) - (lf < v->f);
}

static int op_holds(int op, int c) {
  switch (op) {
    case DC_OP_EQ: case DC_OP_IN: return c == 0;
    case DC_OP_LT: return c < 0;
    case DC_OP_LE: return c <= 0;
    case DC_OP_GT: return c > 0;
    case DC_OP_GE: return c >= 0;
  }
  return 0;
}

/* the first index in a sorted array whose element is >= x */
#define LOWER_BOUND(arr, n, x, out) do { size_t lo_ = 0, hi_ = (size_t)(n); \
    while (lo_ < hi_) { size_t m_ = lo_ + (hi_ - lo_) / 2; if ((arr)[m_] < (x)) lo_ = m_ + 1; else hi_ = m_; } \
    (out) = lo_; } while (0)

static inline int num_match(const cells_term *t, int real, int64_t li, double lf) {
  if (t->op == DC_OP_NOTNULL) return 1;
  if (t->op == DC_OP_ISNULL) return 0;
  if (t->op == DC_OP_IN) {
    size_t at;
    if (!real) {
      LOWER_BOUND(t->iset, t->niset, li, at);
      return at < (size_t)t->niset && t->iset[at] == li;
    }
    LOWER_BOUND(t->fset, t->nfset, lf, at);
    return at < (size_t)t->nfset && t->fset[at] == lf;
  }
  const cells_val *v = &t->v[0];
  if (v->t == CELLS_V_NULL) return 0;
  if (v->t == CELLS_V_TEXT || v->t == CELLS_V_BLOB) return t->op == DC_OP_LT || t->op == DC_OP_LE;
  return op_holds(t->op, cmp_num(real, li, lf, v));
}

static int text_match(const cells_term *t, const char *s, int n) {
  if (t->op == DC_OP_NOTNULL) return 1;
  if (t->op == DC_OP_ISNULL) return 0;
  if (t->op == DC_OP_IN) {
    if (!t->exact && t->in_has_number && maybe_numeric(s, n)) return 1;
    int lo = 0, hi = t->ntset;
    while (lo < hi) {
      int m = (lo + hi) / 2;
      if (bincmp(t->tset[m]->s, t->tset[m]->n, s, n) < 0) lo = m + 1; else hi = m;
    }
    return lo < t->ntset && bincmp(t->tset[lo]->s, t->tset[lo]->n, s, n) == 0;
  }
  const cells_val *v = &t->v[0];
  switch (v->t) {
    case CELLS_V_NULL: return 0;
    case CELLS_V_BLOB: return t->op == DC_OP_LT || t->op == DC_OP_LE;   /* text < blob */
    case CELLS_V_TEXT: {
      int r = op_holds(t->op, bincmp(s, n, v->s, v->n));
      if (!r && !t->exact && (t->op == DC_OP_LT || t->op == DC_OP_LE) && maybe_numeric(s, n)) r = 1;
      return r;
    }
    default: {   /* a number */
      if (!t->exact) {
        if (t->op == DC_OP_GT || t->op == DC_OP_GE) return 1;
        if (maybe_numeric(s, n)) return 1;
      }
      return op_holds(t->op, bincmp(s, n, v->s, v->n));
    }
  }
}

/* the public names (cells_filter.h); the file itself calls the static ones, which the
** compiler inlines into the kernels (a global function of a -fPIC object is not inlined:
** it could be interposed) */
int cells_bincmp(const char *a, int na, const char *b, int nb) { return bincmp(a, na, b, nb); }
int cells_maybe_numeric(const char *s, int n) { return maybe_numeric(s, n); }
int cells_cmp_i_f(int64_t i, double r) { return cmp_i_f(i, r); }
int cells_cmp_num(int real, int64_t li, double lf, const cells_val *v) { return cmp_num(real, li, lf, v); }
int cells_num_match(const cells_term *t, int real, int64_t li, double lf) { return num_match(t, real, li, lf); }
int cells_text_match(const cells_term *t, const char *s, int n) { return text_match(t, s, n); }

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static int cmp_valp(const void *a, const void *b) {
  const cells_val *x = *(cells_val *const *)a, *y = *(cells_val *const *)b;
  return bincmp(x->s, x->n, y->s, y->n);
}

static int is_text_kind(int kind) { return kind == DC_OBS_CATEGORY || kind == DC_OBS_TEXT; }

int cells_term_prepare(cells_term *t, const cells_dict *dict) {
  int text = is_text_kind(t->kind);
  if (t->op == DC_OP_IN) {
    if (text) {
      t->tset = malloc(((size_t)t->nv + 1) * sizeof(cells_val *));
      if (!t->tset) return -1;
      for (int j = 0; j < t->nv; j++) {
        cells_val *v = &t->v[j];
        if (v->t == CELLS_V_NULL || v->t == CELLS_V_BLOB) continue;   /* never equal to text */
        if (v->t != CELLS_V_TEXT) t->in_has_number = 1;
        t->tset[t->ntset++] = v;
      }
      qsort(t->tset, (size_t)t->ntset, sizeof(cells_val *), cmp_valp);
    } else if (t->kind == DC_OBS_REAL) {
      t->fset = malloc(((size_t)t->nv + 1) * sizeof(double));
      if (!t->fset) return -1;
      for (int j = 0; j < t->nv; j++) {
        const cells_val *v = &t->v[j];
        if (v->t == CELLS_V_FLOAT) t->fset[t->nfset++] = v->f;
        else if (v->t == CELLS_V_INTEGER && cmp_i_f(v->i, (double)v->i) == 0) t->fset[t->nfset++] = (double)v->i;
      }
      qsort(t->fset, (size_t)t->nfset, sizeof(double), cmp_dbl);
    } else {
      t->iset = malloc(((size_t)t->nv + 1) * sizeof(int64_t));
      if (!t->iset) return -1;
      for (int j = 0; j < t->nv; j++) {
        const cells_val *v = &t->v[j];
        if (v->t == CELLS_V_INTEGER) t->iset[t->niset++] = v->i;
        else if (v->t == CELLS_V_FLOAT && v->f >= -9223372036854775808.0 && v->f < 9223372036854775808.0 &&
                 cmp_i_f((int64_t)v->f, v->f) == 0)
          t->iset[t->niset++] = (int64_t)v->f;
      }
      qsort(t->iset, (size_t)t->niset, sizeof(int64_t), cmp_i64);
    }
  }
  if (t->kind == DC_OBS_CATEGORY) {
    if (!dict) return -1;
    t->acc = malloc((size_t)dict->n + 1);
    if (!t->acc) return -1;
    t->acc[0] = t->op == DC_OP_ISNULL;
    if (t->op == DC_OP_EQ && t->v[0].t == CELLS_V_TEXT && dict->n > 64) {
      /* one value: find its code(s) without comparing every entry twice */
      memset(t->acc + 1, 0, dict->n);
      for (uint32_t q = 0; q < dict->n; q++) {
        int dn;
        const char *d = cells_dict_str(dict, q, &dn);
        if (dn == t->v[0].n && (dn == 0 || memcmp(d, t->v[0].s, (size_t)dn) == 0)) t->acc[q + 1] = 1;
      }
    } else {
      for (uint32_t q = 0; q < dict->n; q++) {
        int dn;
        const char *d = cells_dict_str(dict, q, &dn);
        t->acc[q + 1] = (uint8_t)text_match(t, d, dn);
      }
    }
  }
  return 0;
}

void cells_term_clear(cells_term *t) {
  for (int j = 0; j < t->nv; j++) free(t->v[j].s);
  free(t->v);
  free(t->acc);
  free(t->iset);
  free(t->fset);
  free(t->tset);
  memset(t, 0, sizeof *t);
}

/* Whether a block whose min compares cmn and max compares cmx (<0, 0, >0) with the term's
** value can hold a row satisfying op. */
static int minmax_may_match(int op, int cmn, int cmx) {
  switch (op) {
    case DC_OP_EQ: return cmn <= 0 && cmx >= 0;
    case DC_OP_LT: return cmn < 0;
    case DC_OP_LE: return cmn <= 0;
    case DC_OP_GT: return cmx > 0;
    case DC_OP_GE: return cmx >= 0;
  }
  return 1;
}

int cells_block_may_match(const cells_term *t, uint32_t n_categories, const cells_bstat *s) {
  if (!t->kind) return 1;   /* cell_id and tile: decided by intervals */
  if (t->op == DC_OP_ISNULL) return s->null_count > 0;
  if (!s->has) return 0;            /* every value NULL */
  if (t->op == DC_OP_NOTNULL) return 1;
  switch (t->kind) {
    case DC_OBS_CATEGORY: {
      if (s->present) {
        for (int j = 0; j < s->present_len; j++) {
          uint8_t m = s->present[j];
          while (m) {
            int bit = __builtin_ctz(m);
            uint32_t code = (uint32_t)j * 8 + (uint32_t)bit;
            if (code < n_categories && t->acc[code + 1]) return 1;
            m &= (uint8_t)(m - 1);
          }
        }
        return 0;
      }
      for (int64_t code = s->mn.i; code <= s->mx.i; code++)
        if (code >= 0 && code < (int64_t)n_categories && t->acc[code + 1]) return 1;
      return 0;
    }
    case DC_OBS_TEXT: {
      if (!t->exact) return 1;
      if (t->op == DC_OP_IN) {
        for (int j = 0; j < t->ntset; j++)
          if (bincmp(t->tset[j]->s, t->tset[j]->n, s->mn.s, s->mn.n) >= 0 &&
              bincmp(t->tset[j]->s, t->tset[j]->n, s->mx.s, s->mx.n) <= 0) return 1;
        return 0;
      }
      const cells_val *v = &t->v[0];
      if (v->t == CELLS_V_NULL) return 0;
      if (v->t == CELLS_V_BLOB) return t->op == DC_OP_LT || t->op == DC_OP_LE;
      int cmn = bincmp(s->mn.s, s->mn.n, v->s, v->n), cmx = bincmp(s->mx.s, s->mx.n, v->s, v->n);
      return minmax_may_match(t->op, cmn, cmx);
    }
    default: {   /* int, bool, real: numeric */
      if (t->op == DC_OP_IN) {
        if (t->kind == DC_OBS_REAL) {
          for (int j = 0; j < t->nfset; j++) {
            cells_val v = {CELLS_V_FLOAT, 0, t->fset[j], NULL, 0};
            if (cmp_num(s->mn.real, s->mn.i, s->mn.f, &v) <= 0 && cmp_num(s->mx.real, s->mx.i, s->mx.f, &v) >= 0)
              return 1;
          }
        } else {
          for (int j = 0; j < t->niset; j++) {
            cells_val v = {CELLS_V_INTEGER, t->iset[j], 0, NULL, 0};
            if (cmp_num(s->mn.real, s->mn.i, s->mn.f, &v) <= 0 && cmp_num(s->mx.real, s->mx.i, s->mx.f, &v) >= 0)
              return 1;
          }
        }
        return 0;
      }
      const cells_val *v = &t->v[0];
      if (v->t == CELLS_V_NULL) return 0;
      if (v->t == CELLS_V_TEXT || v->t == CELLS_V_BLOB) return t->op == DC_OP_LT || t->op == DC_OP_LE;
      int cmn = cmp_num(s->mn.real, s->mn.i, s->mn.f, v), cmx = cmp_num(s->mx.real, s->mx.i, s->mx.f, v);
      return minmax_may_match(t->op, cmn, cmx);
    }
  }
}

void cells_sel_free(cells_sel *s) {
  free(s->idx);
  free(s->bm);
  memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ value order */

/* Order-preserving keys: unsigned comparison of the keys is the values' order (int64 with
** its sign bit flipped; a double's bits flipped whole when negative, else its sign bit set,
** so -0.0 sorts just before +0.0, which are equal values). */
static inline uint64_t key_i(int64_t v) { return (uint64_t)v ^ ((uint64_t)1 << 63); }
static inline uint64_t key_f(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return (u >> 63) ? ~u : u | ((uint64_t)1 << 63);
}

/* Sorts rows r[0..m) by key k[0..m) (both permuted alike), stable, with an LSD radix sort of
** byte digits: a byte that all keys share costs no pass.  kt, rt: scratch of m each; cnt:
** scratch of 8 x 256 counts.  The result is in k, r. */
static void radix_sort(uint64_t *k, uint32_t *r, uint64_t *kt, uint32_t *rt, uint32_t m, uint32_t (*cnt)[256]) {
  enum { D = 8 };
  memset(cnt, 0, D * sizeof *cnt);
  for (uint32_t j = 0; j < m; j++)
    for (int d = 0; d < D; d++) cnt[d][(k[j] >> (8 * d)) & 255]++;
  uint64_t *ks = k, *kd = kt;
  uint32_t *rs = r, *rd = rt;
  for (int d = 0; d < D; d++) {
    if (m == 0 || cnt[d][(ks[0] >> (8 * d)) & 255] == m) continue;   /* one digit for all */
    uint32_t pos[256], sum = 0;
    for (int v = 0; v < 256; v++) { pos[v] = sum; sum += cnt[d][v]; }
    for (uint32_t j = 0; j < m; j++) {
      uint32_t q = pos[(ks[j] >> (8 * d)) & 255]++;
      kd[q] = ks[j];
      rd[q] = rs[j];
    }
    uint64_t *tk = ks; ks = kd; kd = tk;
    uint32_t *tr = rs; rs = rd; rd = tr;
  }
  if (ks != k) { memcpy(k, ks, (size_t)m * sizeof *k); memcpy(r, rs, (size_t)m * sizeof *r); }
}

/* builds d->order (int or real block): its non-NULL rows by value (rows of the same value in
** row order, -0.0 before +0.0); -1 on out-of-memory */
static int build_order(cells_bcache *c, cells_dblock *d) {
  const dc_obs_block *b = &d->blk;
  int real = b->kind == DC_OBS_REAL;
  size_t n = b->n ? b->n : 1;
  /* keys (2n), rows (n) and counts in the cache's scratch, whose pages stay touched */
  uint64_t *k = cells_bcache_scratch(c, 2 * n * sizeof *k + n * sizeof(uint32_t) + 8 * 256 * sizeof(uint32_t));
  uint32_t *ord = dc_spare_alloc(n * sizeof *ord);   /* freed with the block (dc_spare_free) */
  if (!k || !ord) { dc_spare_free(ord); return -1; }
  uint32_t *rt = (uint32_t *)(k + 2 * n);
  uint32_t (*cnt)[256] = (uint32_t (*)[256])(rt + n);
  uint32_t m = 0;
  for (uint32_t r = 0; r < b->n; r++) {
    if (real) { if (!isnan(b->f64[r])) { k[m] = key_f(b->f64[r]); ord[m++] = r; } }
    else if (b->valid[r]) { k[m] = key_i(b->i64[r]); ord[m++] = r; }
  }
  radix_sort(k, ord, k + n, rt, m, cnt);
  d->order = ord;
  d->n_order = m;
  cells_bcache_grow(c, d, (size_t)b->n * sizeof *ord);
  return 0;
}

/* first j in [0, n_order) whose value x has cmp(x, v) >= 0 (strict = 0) or > 0 (strict = 1) */
static uint32_t order_bound(const cells_dblock *d, const cells_val *v, int strict) {
  int real = d->blk.kind == DC_OBS_REAL;
  uint32_t lo = 0, hi = d->n_order;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2, r = d->order[mid];
    int c = real ? cmp_num(1, 0, d->blk.f64[r], v) : cmp_num(0, d->blk.i64[r], 0, v);
    if (strict ? c > 0 : c >= 0) hi = mid; else lo = mid + 1;
  }
  return lo;
}

/* A selective comparison on an int or real block through its value order: marks the
** matching rows in a bitmap and keeps those.  1 if it filtered, 0 to leave it to the scan,
** -1 on out-of-memory. */
static int filter_by_order(const cells_term *t, cells_dblock *d, cells_bcache *c, cells_sel *s, uint64_t visit) {
  const cells_val *v = &t->v[0];
  if (t->op == DC_OP_IN || t->op == DC_OP_ISNULL || t->op == DC_OP_NOTNULL) return 0;
  if (v->t != CELLS_V_INTEGER && v->t != CELLS_V_FLOAT) return 0;
  if (!d->order) {
    if (!d->range_visit) d->range_visit = visit;
    if (d->range_visit == visit) return 0;      /* the first visit scans */
    if (build_order(c, d)) return -1;
  }
  uint32_t a = 0, z = d->n_order;
  switch (t->op) {
    case DC_OP_LT: z = order_bound(d, v, 0); break;
    case DC_OP_LE: z = order_bound(d, v, 1); break;
    case DC_OP_GT: a = order_bound(d, v, 1); break;
    case DC_OP_GE: a = order_bound(d, v, 0); break;
    case DC_OP_EQ: a = order_bound(d, v, 0); z = order_bound(d, v, 1); break;
  }
  if (z < a) z = a;
  if ((uint64_t)(z - a) * 8 > s->n) return 0;   /* not selective: scan */
  size_t words = ((size_t)d->blk.n + 63) / 64;
  if (words > s->bm_cap) {
    uint64_t *q = realloc(s->bm, words * sizeof *q);
    if (!q) return -1;
    s->bm = q;
    s->bm_cap = words;
  }
  memset(s->bm, 0, words * sizeof *s->bm);
  for (uint32_t j = a; j < z; j++) s->bm[d->order[j] >> 6] |= (uint64_t)1 << (d->order[j] & 63);
  uint32_t m = 0;
  if (s->full) {
    for (size_t w = 0; w < words; w++) {
      uint64_t x = s->bm[w];
      while (x) { s->idx[m++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(x)); x &= x - 1; }
    }
  } else {
    for (uint32_t j = 0; j < s->n; j++) {
      uint32_t r = s->idx[j];
      s->idx[m] = r;
      m += (s->bm[r >> 6] >> (r & 63)) & 1;
    }
  }
  s->n = m;
  s->full = 0;
  return 1;
}

/* --------------------------------------------------------------- kernels */

/* keeps the rows r of the selection for which KEEP (an expression of r, 0 or 1) is 1: over
** rows 0 .. n-1 for a full selection (no list to read), else over the list */
#define KEEP_ROWS(KEEP)                                                                   \
  do {                                                                                    \
    if (full)                                                                             \
      for (uint32_t j = 0; j < n; j++) { uint32_t r = j; sel[m] = r; m += (KEEP); }         \
    else                                                                                  \
      for (uint32_t j = 0; j < n; j++) { uint32_t r = sel[j]; sel[m] = r; m += (KEEP); }   \
  } while (0)

void cells_filter_rows(const cells_term *t, const dc_obs_block *blk, cells_sel *s) {
  const int full = s->full;
  s->full = 0;
  uint32_t *sel = s->idx, n = s->n, m = 0;
  switch (blk->kind) {
    case DC_OBS_CATEGORY: {
      const uint8_t *acc = t->acc;
      const int32_t *codes = blk->codes;
      KEEP_ROWS(acc[codes[r] + 1]);
      break;
    }
    case DC_OBS_INT: case DC_OBS_BOOL: {
      const int64_t *x = blk->i64;
      const uint8_t *valid = blk->valid;
      if (t->op == DC_OP_ISNULL) { KEEP_ROWS(!valid[r]); break; }
      if (t->op == DC_OP_NOTNULL) { KEEP_ROWS(valid[r]); break; }
      if (t->op == DC_OP_EQ && t->v[0].t == CELLS_V_INTEGER) {
        int64_t want = t->v[0].i;
        KEEP_ROWS(valid[r] && x[r] == want);
        break;
      }
      KEEP_ROWS(valid[r] && num_match(t, 0, x[r], 0));
      break;
    }
    case DC_OBS_REAL: {
      const double *x = blk->f64;
      if (t->op == DC_OP_ISNULL) { KEEP_ROWS(isnan(x[r]) != 0); break; }
      if (t->op == DC_OP_NOTNULL) { KEEP_ROWS(!isnan(x[r])); break; }
      if (t->op != DC_OP_IN && t->v[0].t == CELLS_V_FLOAT) {
        double w = t->v[0].f;
        switch (t->op) {   /* NaN (NULL) fails every comparison */
          case DC_OP_EQ: KEEP_ROWS(x[r] == w); break;
          case DC_OP_LT: KEEP_ROWS(x[r] < w); break;
          case DC_OP_LE: KEEP_ROWS(x[r] <= w); break;
          case DC_OP_GT: KEEP_ROWS(x[r] > w); break;
          case DC_OP_GE: KEEP_ROWS(x[r] >= w); break;
        }
        break;
      }
      KEEP_ROWS(!isnan(x[r]) && num_match(t, 1, 0, x[r]));
      break;
    }
    case DC_OBS_TEXT: {
      const uint8_t *valid = blk->valid;
      if (t->op == DC_OP_ISNULL) { KEEP_ROWS(!valid[r]); break; }
      KEEP_ROWS(valid[r] && text_match(t, blk->text + blk->text_off[r], (int)(blk->text_off[r + 1] - blk->text_off[r])));
      break;
    }
  }
  s->n = m;
}
#undef KEEP_ROWS

int cells_filter_block(const cells_term *t, cells_dblock *d, cells_bcache *c, cells_sel *s, uint64_t visit) {
  if (d->blk.kind == DC_OBS_INT || d->blk.kind == DC_OBS_REAL) {
    int r = filter_by_order(t, d, c, s, visit);
    if (r) return r < 0 ? -1 : 0;
  }
  cells_filter_rows(t, &d->blk, s);
  return 0;
}
