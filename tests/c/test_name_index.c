/*
** test_name_index.c — the names-to-ids index of the `genes` table (ext/name_index.c, pure
** C: compiled in here directly): every id of a name in increasing order, NULL names never
** found, empty names, absent names, against a scan over many names with repeats.
*/
#include "dctest.h"
#include "../../ext/name_index.c"

static void test_small(void) {
  /* ids: 0 "CD3E", 1 NULL, 2 "", 3 "MS4A1", 4 "CD3E", 5 "CD3", 6 "" */
  const char text[] = "CD3EMS4A1CD3ECD3";
  uint64_t off[8] = {0, 4, 4, 4, 9, 13, 16, 16};
  uint8_t valid[7] = {1, 0, 1, 1, 1, 1, 1};
  dc_nameidx x;
  DCT_CHECK(dc_nameidx_build(&x, text, off, valid, 7) == 0);
  int64_t id = dc_nameidx_first(&x, "CD3E", 4);
  DCT_CHECK(id == 0 && x.next[0] == 4 && x.next[4] == -1);
  DCT_CHECK(dc_nameidx_first(&x, "CD3", 3) == 5 && x.next[5] == -1);
  DCT_CHECK(dc_nameidx_first(&x, "", 0) == 2 && x.next[2] == 6);
  DCT_CHECK(dc_nameidx_first(&x, "MS4A1", 5) == 3);
  DCT_CHECK(dc_nameidx_first(&x, "CD3EX", 5) == -1 && dc_nameidx_first(&x, "cd3e", 4) == -1);
  dc_nameidx_free(&x);
  DCT_CHECK(dc_nameidx_first(&x, "CD3E", 4) == -1);   /* an empty index finds nothing */
  DCT_CHECK(dc_nameidx_build(&x, text, off, valid, 0) == 0 && dc_nameidx_first(&x, "", 0) == -1);
  dc_nameidx_free(&x);
}

static void test_many(void) {
  enum { N = 5000 };
  static char text[N * 8];
  static uint64_t off[N + 1];
  static uint8_t valid[N];
  uint64_t r = 7;
  off[0] = 0;
  for (int i = 0; i < N; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    valid[i] = (r >> 60) != 0;
    int len = 0;
    if (valid[i]) len = snprintf(text + off[i], 8, "g%u", (unsigned)((r >> 33) % 1500));
    off[i + 1] = off[i] + (uint64_t)len;
  }
  dc_nameidx x;
  DCT_CHECK(dc_nameidx_build(&x, text, off, valid, N) == 0);
  int checked = 0;
  for (unsigned g = 0; g < 1600; g++) {
    char s[8];
    int len = snprintf(s, sizeof s, "g%u", g);
    int64_t id = dc_nameidx_first(&x, s, (uint64_t)len);
    for (int i = 0; i < N; i++) {   /* the ids named s, in order, against a scan */
      if (!valid[i] || off[i + 1] - off[i] != (uint64_t)len || memcmp(text + off[i], s, (size_t)len)) continue;
      DCT_CHECKF(id == i, "g%u: %lld where %d", g, (long long)id, i);
      if (id != i) break;
      id = x.next[id];
      checked++;
    }
    DCT_CHECKF(id == -1, "g%u: more ids than named", g);
  }
  DCT_CHECK(checked > N / 2);
  dc_nameidx_free(&x);
}

int main(void) {
  DCT_RUN(test_small);
  DCT_RUN(test_many);
  return dct_done();
}
