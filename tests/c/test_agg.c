/*
** test_agg.c — the aggregation core (ext/agg/dc_agg.c) against a naive
** reference computed here from the same CSR: every chunk of encoded tiles
** decoded and accumulated on a pool and serially, with and without a gene
** panel and log1p, pre-decoded input, reuse after reset, huge counts, and
** the errors (a group out of range, a tile with more genes than the
** dataset, a corrupt chunk).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "dctest.h"
#include "dc_testutil.h"
#include "dc_agg.h"

typedef struct ref {
  uint32_t G, J;
  uint64_t *ncells, *sum, *nexpr;
  double *lsum;
} ref;

static void ref_free(ref *r) { free(r->ncells); free(r->sum); free(r->nexpr); free(r->lsum); }

/* naive: per cell, per nonzero; panel may be NULL */
static void ref_make(ref *r, const dct_mat *m, const int32_t *group, uint32_t G, const int32_t *panel, uint32_t J,
                     double scale) {
  r->G = G; r->J = J;
  r->ncells = calloc(G ? G : 1, 8);
  r->sum = calloc((size_t)G * J + 1, 8);
  r->nexpr = calloc((size_t)G * J + 1, 8);
  r->lsum = calloc((size_t)G * J + 1, 8);
  for (uint32_t c = 0; c < m->n_cells; c++) {
    int32_t g = group[c];
    if (g < 0) continue;
    r->ncells[g]++;
    double total = 0;
    for (uint64_t e = m->indptr[c]; e < m->indptr[c + 1]; e++) total += m->data[e];
    for (uint64_t e = m->indptr[c]; e < m->indptr[c + 1]; e++) {
      int64_t j = panel ? (int64_t)panel[m->indices[e]] : (int64_t)m->indices[e];
      if (j < 0) continue;
      size_t k = (size_t)g * J + (size_t)j;
      r->sum[k] += m->data[e];
      r->nexpr[k] += m->data[e] > 0;
      if (m->data[e]) r->lsum[k] += log1p(m->data[e] / total * scale);
    }
  }
}

static int rel_close(double a, double b) {
  double d = fabs(a - b), s = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  return d <= 1e-12 * s || d < 1e-300;
}

/* compares; returns the first mismatch description or NULL */
static const char *compare(const dc_agg_result *res, const ref *r, int log1p_on) {
  static char why[200];
  if (res->n_groups != r->G || res->n_out != r->J) return "shape";
  for (uint32_t g = 0; g < r->G; g++) {
    if (res->n_cells[g] != r->ncells[g]) { snprintf(why, sizeof why, "n_cells of group %u", g); return why; }
    for (uint32_t j = 0; j < r->J; j++) {
      size_t k = (size_t)g * r->J + j;
      if (res->acc[2 * k] != r->sum[k]) { snprintf(why, sizeof why, "sum (%u, %u)", g, j); return why; }
      if (res->acc[2 * k + 1] != r->nexpr[k]) { snprintf(why, sizeof why, "n_expr (%u, %u)", g, j); return why; }
      if (log1p_on && !rel_close(res->sum_log1p[k], r->lsum[k])) {
        snprintf(why, sizeof why, "sum_log1p (%u, %u): %.17g vs %.17g", g, j, res->sum_log1p[k], r->lsum[k]);
        return why;
      }
    }
  }
  return NULL;
}

/* One tile encoded from m; jobs for its chunks pointing into group. */
typedef struct tile {
  uint8_t *buf;
  size_t len;
  dc_tile_hdr hdr;
} tile;

static int tile_make(tile *t, const dct_mat *m, uint32_t n_chunks) {
  dc_error err;
  if (dct_encode(m, 0, n_chunks, 1, &t->buf, &t->len, &err) != DC_OK) return -1;
  return dc_tile_parse(t->buf, t->len, &t->hdr, &err) == DC_OK ? 0 : -1;
}

static size_t jobs_make(dc_agg_job *jobs, const tile *t, const int32_t *group) {
  for (uint32_t c = 0; c < t->hdr.n_chunks; c++) {
    memset(&jobs[c], 0, sizeof jobs[c]);
    jobs[c].buf = t->buf;
    jobs[c].len = t->len;
    jobs[c].hdr = &t->hdr;
    jobs[c].chunk = c;
    jobs[c].group = group + t->hdr.chunk[c].first_cell;
  }
  return t->hdr.n_chunks;
}

/* keep of 7 cells in a group (at random), the rest in none (-1) */
static int32_t *random_groups_keep(uint32_t n, uint32_t G, uint64_t seed, uint32_t keep) {
  int32_t *g = malloc((size_t)n * 4 + 4);
  uint64_t s = seed;
  for (uint32_t i = 0; i < n; i++) g[i] = dct_rng(&s) % 7 >= keep ? -1 : (int32_t)(dct_rng(&s) % G);
  return g;
}
static int32_t *random_groups(uint32_t n, uint32_t G, uint64_t seed) { return random_groups_keep(n, G, seed, 6); }

static void check_case_keep(int kind, const int32_t *panel, uint32_t J, int log1p_on, int threads, uint32_t keep);
static void check_case(int kind, const int32_t *panel, uint32_t J, int log1p_on, int threads) {
  check_case_keep(kind, panel, J, log1p_on, threads, 6);
}

/* keep: of 7 cells in a group; at most three quarters in a group makes a rans chunk decoded in part */
static void check_case_keep(int kind, const int32_t *panel, uint32_t J, int log1p_on, int threads, uint32_t keep) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 11 + (uint64_t)kind, 700, 300, 0.3, kind, 0.05, 0.01) == 0);
  uint32_t G = 5;
  int32_t *group = random_groups_keep(m.n_cells, G, 3, keep);
  tile t;
  DCT_CHECK(tile_make(&t, &m, 6) == 0);
  dc_agg_job jobs[DC_MAX_CHUNKS];
  size_t nj = jobs_make(jobs, &t, group);
  dc_pool *pool = threads ? dc_pool_new(threads) : NULL;
  dc_agg_opts o = { m.n_genes, panel, J, log1p_on, 1e4, threads ? threads : 1 };
  dc_error err;
  dc_agg *a = dc_agg_new(&o, &err);
  DCT_CHECK(a != NULL);
  DCT_CHECK(dc_agg_set_groups(a, G, &err) == DC_OK);
  int rc = dc_agg_run(a, pool, jobs, nj);
  DCT_CHECKF(rc == DC_OK, "%s", jobs[0].err.msg);
  dc_agg_result res;
  DCT_CHECK(dc_agg_finish(a, &res, &err) == DC_OK);
  ref r;
  ref_make(&r, &m, group, G, panel, J, 1e4);
  const char *why = compare(&res, &r, log1p_on);
  DCT_CHECKF(why == NULL, "kind %d panel %d log1p %d threads %d: %s", kind, panel != NULL, log1p_on, threads,
             why ? why : "");
  /* again after a reset: the same numbers (nothing left over) */
  DCT_CHECK(dc_agg_reset(a, &o, &err) == DC_OK);
  DCT_CHECK(dc_agg_set_groups(a, G, &err) == DC_OK);
  DCT_CHECK(dc_agg_run(a, pool, jobs, nj) == DC_OK);
  DCT_CHECK(dc_agg_finish(a, &res, &err) == DC_OK);
  why = compare(&res, &r, log1p_on);
  DCT_CHECKF(why == NULL, "after reset: %s", why ? why : "");
  ref_free(&r);
  dc_agg_free(a);
  dc_pool_free(pool);
  free(t.buf);
  free(group);
  dct_mat_free(&m);
}

static void test_all_genes(void) {
  for (int threads = 0; threads <= 3; threads += 3)
    for (int lg = 0; lg <= 1; lg++) check_case(DCT_SMALL, NULL, 300, lg, threads);
}

static void test_huge_counts(void) {
  check_case(DCT_HUGE, NULL, 300, 0, 2);
  check_case(DCT_HUGE, NULL, 300, 1, 0);
}

static void test_panel(void) {
  int32_t panel[300];
  uint32_t J = 0;
  for (int g = 299; g >= 0; g--) panel[g] = g % 3 == 0 ? (int32_t)J++ : -1;   /* reversed order */
  for (int lg = 0; lg <= 1; lg++) {
    check_case(DCT_MIXED, panel, J, lg, 2);
    check_case(DCT_MIXED, panel, J, lg, 0);
  }
  int32_t empty[300];
  for (int g = 0; g < 300; g++) empty[g] = -1;
  check_case(DCT_SMALL, empty, 0, 1, 2);
}

/* Selections of some cells per chunk (a cell type's pseudobulk): chunks decoded in part
** (their other cells' cell loop skipped) at 0-5 of 7 cells, whole at 6 of 7 */
static void test_sparse_selection(void) {
  int32_t panel[300];
  uint32_t J = 0;
  for (int g = 0; g < 300; g++) panel[g] = g % 4 == 1 ? (int32_t)J++ : -1;
  for (uint32_t keep = 0; keep <= 6; keep++)
    for (int lg = 0; lg <= 1; lg++) {
      check_case_keep(DCT_MIXED, NULL, 300, lg, keep % 2 ? 3 : 0, keep);
      check_case_keep(DCT_SMALL, panel, J, lg, 2, keep);
    }
  check_case_keep(DCT_HUGE, NULL, 300, 1, 2, 1);
}

/* Two tiles of one dataset, groups growing between the runs, and a
** pre-decoded chunk: the totals are those of the whole matrix. */
static void test_groups_grow_and_decoded_input(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 5, 400, 120, 0.4, DCT_SMALL, 0.02, 0.0) == 0);
  int32_t *group = random_groups(m.n_cells, 3, 9);
  for (uint32_t c = 200; c < 400; c++) if (group[c] >= 0) group[c] += 3;   /* groups 3..5 appear later */
  dct_mat h1 = m, h2 = m;                       /* cells 0..199 and 200..399 */
  h1.n_cells = 200;
  uint64_t *ip2 = malloc(201 * 8);
  for (int c = 0; c <= 200; c++) ip2[c] = m.indptr[200 + c] - m.indptr[200];
  h2.n_cells = 200;
  h2.indptr = ip2;
  h2.indices = m.indices + m.indptr[200];
  h2.data = m.data + m.indptr[200];
  tile t1;
  DCT_CHECK(tile_make(&t1, &h1, 4) == 0);
  dc_agg_opts o = { m.n_genes, NULL, m.n_genes, 1, 1e4, 2 };
  dc_error err;
  dc_agg *a = dc_agg_new(&o, &err);
  dc_pool *pool = dc_pool_new(2);
  dc_agg_job jobs[DC_MAX_CHUNKS];
  size_t nj = jobs_make(jobs, &t1, group);
  DCT_CHECK(dc_agg_set_groups(a, 3, &err) == DC_OK);
  DCT_CHECK(dc_agg_run(a, pool, jobs, nj) == DC_OK);
  /* second half as decoded rows (int64 indptr, int32 arrays) */
  int64_t *ip = malloc(201 * 8);
  int32_t *ix = malloc((ip2[200] + 1) * 4), *vx = malloc((ip2[200] + 1) * 4);
  for (int c = 0; c <= 200; c++) ip[c] = (int64_t)ip2[c];
  for (uint64_t e = 0; e < ip2[200]; e++) { ix[e] = (int32_t)h2.indices[e]; vx[e] = (int32_t)h2.data[e]; }
  dc_agg_job dj;
  memset(&dj, 0, sizeof dj);
  dj.n_cells = 200; dj.indptr = ip; dj.indices = ix; dj.values = vx; dj.group = group + 200;
  DCT_CHECK(dc_agg_set_groups(a, 6, &err) == DC_OK);
  DCT_CHECK(dc_agg_run(a, pool, &dj, 1) == DC_OK);
  dc_agg_result res;
  DCT_CHECK(dc_agg_finish(a, &res, &err) == DC_OK);
  ref r;
  ref_make(&r, &m, group, 6, NULL, m.n_genes, 1e4);
  const char *why = compare(&res, &r, 1);
  DCT_CHECKF(why == NULL, "%s", why ? why : "");
  ref_free(&r);
  dc_agg_free(a);
  dc_pool_free(pool);
  free(ip); free(ix); free(vx); free(ip2); free(t1.buf); free(group);
  dct_mat_free(&m);
}

static void test_errors(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 21, 100, 50, 0.3, DCT_SMALL, 0.0, 0.0) == 0);
  int32_t *group = random_groups(m.n_cells, 2, 1);
  tile t;
  DCT_CHECK(tile_make(&t, &m, 2) == 0);
  dc_agg_job jobs[DC_MAX_CHUNKS];
  size_t nj = jobs_make(jobs, &t, group);
  dc_error err;
  /* bad options */
  dc_agg_opts bad = { 50, NULL, 40, 0, 1e4, 1 };
  DCT_CHECK(dc_agg_new(&bad, &err) == NULL && err.code == DC_EARG);
  int32_t panel[50];
  for (int g = 0; g < 50; g++) panel[g] = g == 7 ? 5 : -1;
  dc_agg_opts badp = { 50, panel, 3, 0, 1e4, 1 };
  DCT_CHECK(dc_agg_new(&badp, &err) == NULL && strstr(err.msg, "gene 7") != NULL);
  /* a group beyond the groups declared */
  dc_agg_opts o = { 50, NULL, 50, 0, 1e4, 2 };
  dc_agg *a = dc_agg_new(&o, &err);
  DCT_CHECK(dc_agg_set_groups(a, 1, &err) == DC_OK);
  int rc = dc_agg_run(a, NULL, jobs, nj);
  DCT_CHECK(rc == DC_EARG);
  DCT_CHECKF(strstr(jobs[0].err.msg, "group 1") != NULL || strstr(jobs[1].err.msg, "group 1") != NULL, "%s",
             jobs[0].err.msg);
  /* a tile with more genes than the dataset */
  dc_agg_opts small = { 40, NULL, 40, 0, 1e4, 2 };
  DCT_CHECK(dc_agg_reset(a, &small, &err) == DC_OK);
  DCT_CHECK(dc_agg_set_groups(a, 2, &err) == DC_OK);
  DCT_CHECK(dc_agg_run(a, NULL, jobs, nj) == DC_ECORRUPT);
  DCT_CHECK(strstr(jobs[0].err.msg, "genes") != NULL);
  /* a corrupt chunk: the decoder's error, naming the chunk */
  DCT_CHECK(dc_agg_reset(a, &o, &err) == DC_OK);
  DCT_CHECK(dc_agg_set_groups(a, 2, &err) == DC_OK);
  t.buf[t.hdr.chunk[1].offset + t.hdr.chunk[1].length / 2] ^= 0x5a;
  dc_pool *pool = dc_pool_new(2);
  rc = dc_agg_run(a, pool, jobs, nj);
  DCT_CHECK(rc == DC_ECORRUPT);
  DCT_CHECK(jobs[0].rc == DC_OK && jobs[1].rc == DC_ECORRUPT);
  DCT_CHECKF(strstr(jobs[1].err.msg, "chunk 1") != NULL, "%s", jobs[1].err.msg);
  /* the same damage in a chunk decoded in part (one cell in 7 in a group) */
  int32_t *few = random_groups_keep(m.n_cells, 2, 1, 1);
  nj = jobs_make(jobs, &t, few);
  DCT_CHECK(dc_agg_reset(a, &o, &err) == DC_OK);
  DCT_CHECK(dc_agg_set_groups(a, 2, &err) == DC_OK);
  rc = dc_agg_run(a, pool, jobs, nj);
  DCT_CHECK(rc == DC_ECORRUPT);
  DCT_CHECK(jobs[0].rc == DC_OK && jobs[1].rc == DC_ECORRUPT);
  DCT_CHECKF(strstr(jobs[1].err.msg, "chunk 1") != NULL, "%s", jobs[1].err.msg);
  free(few);
  /* a chunk number beyond the tile */
  jobs[0].chunk = 9;
  DCT_CHECK(dc_agg_run(a, NULL, jobs, 1) == DC_EARG);
  dc_pool_free(pool);
  dc_agg_free(a);
  free(t.buf);
  free(group);
  dct_mat_free(&m);
}

int main(void) {
  DCT_RUN(test_all_genes);
  DCT_RUN(test_huge_counts);
  DCT_RUN(test_panel);
  DCT_RUN(test_sparse_selection);
  DCT_RUN(test_groups_grow_and_decoded_input);
  DCT_RUN(test_errors);
  return dct_done();
}
