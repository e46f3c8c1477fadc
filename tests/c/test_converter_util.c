/*
** test_converter_util.c — the converter's helpers that need neither HDF5 nor SQLite:
** the name -> id hash map (gene joining, category dictionaries), UTF-8 validation,
** error message prefixes, buffer growth, the row sort of convert and merge.
*/
#include "../../converter/cv_util.c"
#include "dctest.h"

static void test_map_many(void) {
  cv_map m = {0};
  cv_err e;
  char key[32];
  for (uint32_t i = 0; i < 100000; i++) {
    snprintf(key, sizeof key, "GENE%u", i);
    DCT_CHECK(cv_map_put(&m, key, i * 3, &e) == 0);
  }
  DCT_CHECK(m.n == 100000);
  for (uint32_t i = 0; i < 100000; i += 7) {
    uint32_t v = 0;
    snprintf(key, sizeof key, "GENE%u", i);
    DCT_CHECKF(cv_map_get(&m, key, &v) == 1 && v == i * 3, "key %s -> %u", key, v);
  }
  uint32_t v = 99;
  DCT_CHECK(cv_map_get(&m, "GENE100000", &v) == 0 && v == 99);
  DCT_CHECK(cv_map_get(&m, "", &v) == 0);
  uint32_t *ref = cv_map_ref(&m, "GENE5");
  DCT_CHECK(ref && *ref == 15);
  *ref = 7;
  DCT_CHECK(cv_map_get(&m, "GENE5", &v) == 1 && v == 7);
  cv_map_free(&m);
  DCT_CHECK(m.cap == 0 && cv_map_get(&m, "GENE5", &v) == 0);
}

static void test_map_unicode_and_empty(void) {
  cv_map m = {0};
  cv_err e;
  DCT_CHECK(cv_map_put(&m, "", 1, &e) == 0);
  DCT_CHECK(cv_map_put(&m, "基因", 2, &e) == 0);
  DCT_CHECK(cv_map_put(&m, "Gène", 3, &e) == 0);
  uint32_t v;
  DCT_CHECK(cv_map_get(&m, "", &v) && v == 1);
  DCT_CHECK(cv_map_get(&m, "基因", &v) && v == 2);
  DCT_CHECK(cv_map_get(&m, "Gène", &v) && v == 3);
  DCT_CHECK(!cv_map_get(&m, "Gene", &v));
  cv_map_free(&m);
}

static void test_utf8(void) {
  DCT_CHECK(cv_utf8_valid("plain", 5));
  DCT_CHECK(cv_utf8_valid("na\xc3\xafve", 6));
  DCT_CHECK(cv_utf8_valid("\xe7\xbb\x86\xe8\x83\x9e", 6));
  DCT_CHECK(cv_utf8_valid("\xf0\x9f\xa7\xac", 4));
  DCT_CHECK(!cv_utf8_valid("\xc3", 1));           /* truncated */
  DCT_CHECK(!cv_utf8_valid("\xc0\x80", 2));       /* overlong */
  DCT_CHECK(!cv_utf8_valid("\xff", 1));
  DCT_CHECK(!cv_utf8_valid("\xe7\xbb", 2));
  DCT_CHECK(cv_utf8_valid("", 0));
}

static void test_errors(void) {
  cv_err e;
  DCT_CHECK(cv_fail(&e, "%s: bad %d", "x.h5ad", 3) == -1);
  DCT_CHECK(strcmp(e.msg, "x.h5ad: bad 3") == 0);
  DCT_CHECK(cv_prefix(&e, "column '%s'", "age") == -1);
  DCT_CHECK(strcmp(e.msg, "column 'age': x.h5ad: bad 3") == 0);
  char big[5000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = 0;
  cv_fail(&e, "%s", big);
  cv_prefix(&e, "%s", big);
  DCT_CHECK(strlen(e.msg) < sizeof e.msg);
}

static void test_grow(void) {
  cv_err e;
  uint32_t *p = NULL;
  size_t cap = 0;
  DCT_CHECK(cv_grow((void **)&p, &cap, 10, sizeof *p, &e) == 0 && cap >= 10 && p);
  for (size_t i = 0; i < 10; i++) p[i] = (uint32_t)i;
  DCT_CHECK(cv_grow((void **)&p, &cap, 100000, sizeof *p, &e) == 0 && cap >= 100000);
  DCT_CHECK(p[9] == 9);
  size_t c2 = cap;
  DCT_CHECK(cv_grow((void **)&p, &cap, 5, sizeof *p, &e) == 0 && cap == c2);
  free(p);
}

/* cv_sort_row: every digit plan (one to three passes, 8- and 11-bit caps, digits split
** evenly) sorts rows of distinct random genes, carrying each value with its gene, in place;
** a sorted row is left as it is.  Against a reference: mark the genes, read them in order. */
static uint64_t sr_state = 88172645463325252ull;
static uint64_t sr_rand(void) {
  sr_state ^= sr_state << 13;
  sr_state ^= sr_state >> 7;
  sr_state ^= sr_state << 17;
  return sr_state;
}
static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}
static void test_sort_row(void) {
  const uint32_t genes[] = {1, 2, 200, 256, 257, 1500, 2048, 6000, 65536, 70000, 1u << 22, (1u << 24) + 3, 4000000000u};
  const uint64_t lens[] = {0, 1, 2, 31, 32, 33, 47, 48, 300, 2047, 2048, 5000};
  uint32_t *ix = malloc(5000 * sizeof *ix), *vx = malloc(5000 * sizeof *vx), *want = malloc(5000 * sizeof *want);
  uint64_t *ka = malloc(5000 * sizeof *ka), *kb = malloc(5000 * sizeof *kb);
  DCT_CHECK(ix && vx && want && ka && kb);
  for (size_t gi = 0; gi < sizeof genes / sizeof *genes; gi++)
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
      uint32_t ng = genes[gi];
      uint64_t n = lens[li];
      if (n > ng) continue;
      /* n distinct genes: a random increasing run (n draws from [0, ng - n] sorted, the k-th
      ** raised by k: selection sampling walked all ng genes, 4e9 of them for the last), then
      ** shuffled */
      uint64_t k;
      for (k = 0; k < n; k++) ka[k] = sr_rand() % ((uint64_t)ng - n + 1);
      qsort(ka, n, sizeof *ka, cmp_u64);
      for (k = 0; k < n; k++) want[k] = (uint32_t)(ka[k] + k);
      for (k = 0; k < n; k++) ix[k] = want[k];
      for (k = n; k > 1; k--) {
        uint64_t j = sr_rand() % k;
        uint32_t t = ix[k - 1];
        ix[k - 1] = ix[j];
        ix[j] = t;
      }
      for (k = 0; k < n; k++) vx[k] = ix[k] ^ 0x9e3779b9u;
      cv_sort_row(ix, vx, n, ng, ka, kb);
      int ok = 1;
      for (k = 0; k < n; k++) ok &= ix[k] == want[k] && vx[k] == (want[k] ^ 0x9e3779b9u);
      DCT_CHECKF(ok, "%llu genes, a row of %llu", (unsigned long long)ng, (unsigned long long)n);
      cv_sort_row(ix, vx, n, ng, ka, kb);   /* sorted already */
      for (k = 0; k < n; k++) ok &= ix[k] == want[k] && vx[k] == (want[k] ^ 0x9e3779b9u);
      DCT_CHECKF(ok, "sorted again: %llu genes, a row of %llu", (unsigned long long)ng, (unsigned long long)n);
    }
  free(ix); free(vx); free(want); free(ka); free(kb);
}

static void test_interrupt_flag(void) {
  cv_err e;
  cv_interrupted = 0;
  DCT_CHECK(cv_check_interrupt(&e) == 0);
  cv_interrupted = SIGINT;
  DCT_CHECK(cv_check_interrupt(&e) == -1 && strstr(e.msg, "interrupted"));
  cv_interrupted = 0;
}

/* The tiles of one input: consecutive, of tile_cells cells, the last shorter;
** cv_split_tile inverts cv_split_start. */
static void test_split(void) {
  const uint64_t ns[] = {0, 1, 9, 10, 11, 25, 10000, 10001, 123457};
  const uint32_t ts[] = {1, 3, 10, 10000, 4000000000u};
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t b = 0; b < sizeof ts / sizeof *ts; b++) {
      uint64_t n = ns[a];
      uint32_t t = ts[b];
      cv_split s = cv_split_make(n, t);
      DCT_CHECKF(s.k == (n + t - 1) / t, "n %llu tile %u: %llu tiles", (unsigned long long)n, t, (unsigned long long)s.k);
      DCT_CHECK(cv_split_start(&s, 0) == 0 && cv_split_start(&s, s.k) == n);
      for (uint64_t k = 0; k < s.k; k++) {
        uint64_t a0 = cv_split_start(&s, k), a1 = cv_split_start(&s, k + 1);
        DCT_CHECKF(a1 > a0 && a1 - a0 <= t && (k + 1 == s.k || a1 - a0 == t), "n %llu tile %u: tile %llu",
                   (unsigned long long)n, t, (unsigned long long)k);
        DCT_CHECK(cv_split_tile(&s, a0) == k && cv_split_tile(&s, a1 - 1) == k);
      }
    }
}

/* "did you mean": the closest name within max(2, len/3) edits, case-insensitive. */
static void test_closest(void) {
  const char *layers[] = {"counts", "spliced", "unspliced"};
  DCT_CHECK(strcmp(cv_closest("count", layers, 3), "counts") == 0);
  DCT_CHECK(strcmp(cv_closest("COUNTS", layers, 3), "counts") == 0);
  DCT_CHECK(strcmp(cv_closest("unsplicd", layers, 3), "unspliced") == 0);
  DCT_CHECK(cv_closest("zzzzzzzz", layers, 3) == NULL);
  DCT_CHECK(cv_closest("x", layers, 0) == NULL);
  const char *cols[] = {"gene_ids", "feature_types"};
  DCT_CHECK(strcmp(cv_closest("gene_id", cols, 2), "gene_ids") == 0);
  DCT_CHECK(strcmp(cv_closest("featuretype", cols, 2), "feature_types") == 0);
}

static void test_list_names(void) {
  char buf[64];
  const char *a[] = {"x", "y"};
  cv_list_names(buf, sizeof buf, a, 2);
  DCT_CHECK(strcmp(buf, "'x', 'y'") == 0);
  cv_list_names(buf, sizeof buf, a, 0);
  DCT_CHECK(strcmp(buf, "none") == 0);
  const char *many[40];
  for (int i = 0; i < 40; i++) many[i] = "layer_name";
  cv_list_names(buf, sizeof buf, many, 40);
  DCT_CHECK(strlen(buf) < sizeof buf && strstr(buf, "(40 in all)") != NULL);
}

/* cv_gene_repeats: the k-th gene of a name, in the list's order or in the order of orig
** (ties by index), genes skipped left out of the count */
static void test_gene_repeats(void) {
  cv_err e;
  const char *names[] = {"X", "A", "X", NULL, "X", "", "A"};
  uint32_t rep[7];
  DCT_CHECK(cv_gene_repeats(names, 7, NULL, NULL, rep, &e) == 0);
  uint32_t want[] = {0, 0, 1, 0, 2, 1, 1};   /* NULL is "" */
  for (int i = 0; i < 7; i++) DCT_CHECKF(rep[i] == want[i], "list order: gene %d: %u", i, rep[i]);
  /* the original order: 4, 0, 2 for the X's (the stored order of a dataset differs from it) */
  int64_t orig[] = {1, 5, 2, 6, 0, 3, 4};
  DCT_CHECK(cv_gene_repeats(names, 7, NULL, orig, rep, &e) == 0);
  uint32_t want_o[] = {1, 1, 2, 1, 0, 0, 0};
  for (int i = 0; i < 7; i++) DCT_CHECKF(rep[i] == want_o[i], "orig order: gene %d: %u", i, rep[i]);
  int64_t tie[] = {7, 7, 7, 7, 7, 7, 7};   /* equal places: by index */
  DCT_CHECK(cv_gene_repeats(names, 7, NULL, tie, rep, &e) == 0);
  for (int i = 0; i < 7; i++) DCT_CHECKF(rep[i] == want[i], "ties: gene %d: %u", i, rep[i]);
  uint8_t skip[] = {1, 0, 0, 0, 0, 0, 0};
  DCT_CHECK(cv_gene_repeats(names, 7, skip, NULL, rep, &e) == 0);
  DCT_CHECK(rep[0] == UINT32_MAX && rep[2] == 0 && rep[4] == 1);
  /* many names, many repeats: every (name, k) once */
  enum { N = 50000 };
  static char buf[N][16];
  static const char *many[N];
  static uint32_t r[N];
  for (int i = 0; i < N; i++) { snprintf(buf[i], sizeof buf[i], "G%d", (i * 7919) % 1000); many[i] = buf[i]; }
  DCT_CHECK(cv_gene_repeats(many, N, NULL, NULL, r, &e) == 0);
  uint32_t seen[1000] = {0};
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= r[i] == seen[(i * 7919) % 1000]++;
  DCT_CHECK(ok);
  DCT_CHECK(cv_gene_repeats(many, 0, NULL, NULL, r, &e) == 0);
}

int main(void) {
  DCT_RUN(test_gene_repeats);
  DCT_RUN(test_closest);
  DCT_RUN(test_list_names);
  DCT_RUN(test_split);
  DCT_RUN(test_map_many);
  DCT_RUN(test_map_unicode_and_empty);
  DCT_RUN(test_utf8);
  DCT_RUN(test_errors);
  DCT_RUN(test_grow);
  DCT_RUN(test_sort_row);
  DCT_RUN(test_interrupt_flag);
  return dct_done();
}
