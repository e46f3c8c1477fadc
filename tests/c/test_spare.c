/*
** test_spare.c — the process-wide reserve of freed working buffers (ext/spare.c, compiled in
** here): a freed large buffer is handed back to the next allocation that fits, small ones and
** ones over the budget are freed, a small request does not pin a large buffer, and a forked
** child starts with an empty reserve (it frees what it inherited) while the parent keeps its.
*/
#include "dctest.h"
#include <sys/wait.h>
#include <unistd.h>
#include "../../ext/spare.c"

static void test_a_freed_buffer_is_reused(void) {
  dc_spare_trim();
  size_t n = 3 * DC_SPARE_MIN;
  uint8_t *a = dc_spare_alloc(n);
  DCT_CHECK(a != NULL && ((uintptr_t)a & 15) == 0);
  memset(a, 7, n);
  dc_spare_free(a);
  int nb = 0;
  DCT_CHECK(dc_spare_bytes(&nb) == n && nb == 1);
  uint8_t *b = dc_spare_alloc(n - 100);       /* fits: the same buffer */
  DCT_CHECK(b == a);
  DCT_CHECK(dc_spare_bytes(&nb) == 0 && nb == 0);
  dc_spare_free(b);
  uint8_t *c = dc_spare_alloc(n / 2 - 1);     /* under half its size: not that one */
  DCT_CHECK(c != a);
  DCT_CHECK(dc_spare_bytes(&nb) == n && nb == 1);
  dc_spare_free(c);
  uint8_t *d = dc_spare_alloc(n + 1);         /* larger than any: fresh */
  DCT_CHECK(d != a && d != c);
  dc_spare_free(d);
  dc_spare_trim();
  DCT_CHECK(dc_spare_bytes(&nb) == 0 && nb == 0);
}

static void test_small_and_over_budget_buffers_are_freed(void) {
  dc_spare_trim();
  int nb = 0;
  void *s = dc_spare_alloc(DC_SPARE_MIN - 1);
  dc_spare_free(s);
  DCT_CHECK(dc_spare_bytes(&nb) == 0 && nb == 0);
  void *big = dc_spare_alloc(DC_SPARE_MAX_BYTES + 1);
  DCT_CHECK(big != NULL);
  dc_spare_free(big);
  DCT_CHECK(dc_spare_bytes(&nb) == 0);
  /* the budget: buffers of a quarter of it, five freed, four kept */
  void *q[5];
  for (int i = 0; i < 5; i++) q[i] = dc_spare_alloc(DC_SPARE_MAX_BYTES / 4);
  for (int i = 0; i < 5; i++) dc_spare_free(q[i]);
  DCT_CHECK(dc_spare_bytes(&nb) == DC_SPARE_MAX_BYTES && nb == 4);
  /* the slots: as many buffers as it has, no more */
  dc_spare_trim();
  void *m[DC_SPARE_SLOTS + 3];
  for (int i = 0; i < DC_SPARE_SLOTS + 3; i++) m[i] = dc_spare_alloc(DC_SPARE_MIN);
  for (int i = 0; i < DC_SPARE_SLOTS + 3; i++) dc_spare_free(m[i]);
  DCT_CHECK(dc_spare_bytes(&nb) == (size_t)DC_SPARE_SLOTS * DC_SPARE_MIN && nb == DC_SPARE_SLOTS);
  dc_spare_free(NULL);
  dc_spare_trim();
}

static void test_a_forked_child_starts_empty(void) {
  dc_spare_trim();
  void *a = dc_spare_alloc(2 * DC_SPARE_MIN);
  dc_spare_free(a);
  int nb = 0;
  DCT_CHECK(dc_spare_bytes(&nb) == 2 * DC_SPARE_MIN && nb == 1);
  pid_t pid = fork();
  if (pid == 0) {
    int cn = -1;
    size_t cb = dc_spare_bytes(&cn);          /* the parent's list, freed here */
    void *x = dc_spare_alloc(2 * DC_SPARE_MIN);
    int ok = cb == 0 && cn == 0 && x != NULL;
    dc_spare_free(x);                           /* the child's own reserve from here on */
    ok = ok && dc_spare_bytes(&cn) == 2 * DC_SPARE_MIN && cn == 1;
    DCT_CHILD_EXIT(ok ? 0 : 1);
  }
  int st = 0;
  DCT_CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  DCT_CHECK(dc_spare_bytes(&nb) == 2 * DC_SPARE_MIN && nb == 1);   /* the parent's is untouched */
  DCT_CHECK(dc_spare_alloc(2 * DC_SPARE_MIN) == a);
  dc_spare_free(a);
  dc_spare_trim();
}

#ifdef SPARE_ASAN
/* under ASan: a buffer in the reserve is poisoned, one handed back only as far as asked */
static void test_poisoned_while_spare(void) {
  dc_spare_trim();
  uint8_t *a = dc_spare_alloc(2 * DC_SPARE_MIN);
  dc_spare_free(a);
  DCT_CHECK(__asan_address_is_poisoned(a) && __asan_address_is_poisoned(a + 2 * DC_SPARE_MIN - 1));
  uint8_t *b = dc_spare_alloc(2 * DC_SPARE_MIN - 64);
  DCT_CHECK(b == a);
  DCT_CHECK(!__asan_address_is_poisoned(b) && !__asan_address_is_poisoned(b + 2 * DC_SPARE_MIN - 65));
  DCT_CHECK(__asan_address_is_poisoned(b + 2 * DC_SPARE_MIN - 64));
  dc_spare_free(b);
  dc_spare_trim();
}
#endif

int main(void) {
#ifdef SPARE_ASAN
  DCT_RUN(test_poisoned_while_spare);
#endif
  DCT_RUN(test_a_freed_buffer_is_reused);
  DCT_RUN(test_small_and_over_budget_buffers_are_freed);
  DCT_RUN(test_a_forked_child_starts_empty);
  return dct_done();
}
