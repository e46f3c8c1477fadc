/*
** test_agg_groups.c — the groups of dc_aggregate (ext/agg_groups.c, pure C: compiled in here
** directly): one group per distinct typed value (integers and reals apart, -0.0 with 0.0, text
** and blobs by bytes, NULL once), numbers stable across the map's growth, copies of the bytes,
** and the output order (dictionary ranks, numbers, text, blobs, NULL last).
*/
#include "dctest.h"
#include "../../ext/agg_groups.c"

static int64_t gi(dc_groups *m, int64_t i) { return dc_groups_get(m, DC_GV_INTEGER, i, 0, NULL, 0); }
static int64_t gf(dc_groups *m, double f) { return dc_groups_get(m, DC_GV_FLOAT, 0, f, NULL, 0); }
static int64_t gt(dc_groups *m, const char *s) { return dc_groups_get(m, DC_GV_TEXT, 0, 0, s, (int)strlen(s)); }
static int64_t gb(dc_groups *m, const void *s, int n) { return dc_groups_get(m, DC_GV_BLOB, 0, 0, s, n); }
static int64_t gn(dc_groups *m) { return dc_groups_get(m, DC_GV_NULL, 0, 0, NULL, 0); }

static void test_distinct_values(void) {
  dc_groups m;
  dc_groups_init(&m);
  DCT_CHECK(gi(&m, 5) == 0);
  DCT_CHECK(gf(&m, 5.0) == 1);                 /* a real is not the integer of the same value */
  DCT_CHECK(gt(&m, "5") == 2);                 /* nor is text */
  DCT_CHECK(gb(&m, "5", 1) == 3);              /* and a blob is not text */
  DCT_CHECK(gn(&m) == 4);
  DCT_CHECK(gn(&m) == 4 && gi(&m, 5) == 0 && gf(&m, 5.0) == 1 && gt(&m, "5") == 2 && gb(&m, "5", 1) == 3);
  DCT_CHECK(gf(&m, 0.0) == 5 && gf(&m, -0.0) == 5);
  DCT_CHECK(gt(&m, "") == 6 && gt(&m, "") == 6 && gb(&m, "", 0) == 7 && gb(&m, NULL, 0) == 7);
  DCT_CHECK(gt(&m, "T cell") == 8 && gt(&m, "T cells") == 9 && gt(&m, "t cell") == 10);
  char z[3] = {'a', 0, 'b'};                   /* bytes after a NUL count */
  DCT_CHECK(gb(&m, z, 3) == 11 && gb(&m, z, 1) == 12 && gb(&m, z, 3) == 11);
  DCT_CHECK(m.n == 13 && m.null_group == 4);
  dc_groups_free(&m);
  DCT_CHECK(m.n == 0 && m.g == NULL && m.null_group == -1);
}

static void test_copies_and_growth(void) {
  dc_groups m;
  dc_groups_init(&m);
  char buf[32];
  for (int k = 0; k < 5000; k++) {             /* the map grows many times over */
    snprintf(buf, sizeof buf, "label-%d", k);
    DCT_CHECK(gt(&m, buf) == k);
    memset(buf, 'x', sizeof buf - 1);          /* the caller's bytes change: the map kept a copy */
  }
  for (int k = 0; k < 5000; k += 7) {
    snprintf(buf, sizeof buf, "label-%d", k);
    DCT_CHECK(gt(&m, buf) == k);
    DCT_CHECK(strcmp((const char *)m.g[k].s, buf) == 0 && m.g[k].n == (int)strlen(buf));
  }
  for (int64_t k = 0; k < 3000; k++) DCT_CHECK(gi(&m, k * 1000003) == 5000 + k);
  DCT_CHECK(gi(&m, 2 * 1000003) == 5002 && gn(&m) == 8000 && gn(&m) == 8000);
  uint32_t n = 0;
  dc_gval *g = dc_groups_take(&m, &n);
  DCT_CHECK(n == 8001 && g && m.g == NULL && m.n == 0);
  dc_groups_free(&m);
  dc_gvals_free(g, n);
}

static void test_order(void) {
  dc_groups m;
  dc_groups_init(&m);
  gn(&m);                      /* 0 */
  gt(&m, "b");                 /* 1 */
  gi(&m, 10);                  /* 2 */
  gb(&m, "a", 1);              /* 3 */
  gf(&m, 2.5);                 /* 4 */
  gt(&m, "a");                 /* 5 */
  gi(&m, -3);                  /* 6 */
  gt(&m, "ab");                /* 7 */
  uint32_t ord[8];
  for (uint32_t k = 0; k < 8; k++) ord[k] = k;
  qsort_r(ord, 8, sizeof *ord, dc_group_cmp, m.g);
  /* numbers by value, then text, then blobs, NULL last */
  uint32_t want[8] = {6, 4, 2, 5, 7, 1, 3, 0};
  for (int k = 0; k < 8; k++) DCT_CHECKF(ord[k] == want[k], "position %d: group %u", k, ord[k]);
  /* dictionary ranks (a category column's codes) come first, in rank order, before values */
  m.g[1].rank = 0;             /* "b" */
  m.g[7].rank = 1;             /* "ab" */
  for (uint32_t k = 0; k < 8; k++) ord[k] = k;
  qsort_r(ord, 8, sizeof *ord, dc_group_cmp, m.g);
  uint32_t want2[8] = {1, 7, 6, 4, 2, 5, 3, 0};
  for (int k = 0; k < 8; k++) DCT_CHECKF(ord[k] == want2[k], "ranked, position %d: group %u", k, ord[k]);
  dc_groups_free(&m);
}

int main(void) {
  DCT_RUN(test_distinct_values);
  DCT_RUN(test_copies_and_growth);
  DCT_RUN(test_order);
  return dct_done();
}
