/*
** dctest.h — the tiny harness of the C tests.
**
** A test file defines functions `static void test_NAME(void)` and lists them in main():
**
**     int main(void) { DCT_RUN(test_roundtrip); DCT_RUN(test_corrupt); return dct_done(); }
**
** Each DCT_RUN prints "ok NAME", "FAIL NAME: file:line: expression" or, when the test called
** DCT_SKIP("reason", ...) and no check failed, "skip NAME: reason" (e.g. a CPU feature the
** machine lacks); tests/run_all.sh counts them.  The binary exits non-zero if any test failed.
** A test that skips returns right after DCT_SKIP: a skip says the test checked nothing.
*/
#ifndef DCTEST_H
#define DCTEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A forked child leaves with DCT_CHILD_EXIT(code), i.e. _exit(code).  In the instrumented build of
** `make coverage` (-DDC_COVERAGE) it first writes its coverage counters (gcc's __gcov_dump), which
** _exit() would drop: what the child ran then counts. */
#ifdef DC_COVERAGE
#include <unistd.h>
void __gcov_dump(void);
#define DCT_CHILD_EXIT(code) do { int dct_code_ = (code); __gcov_dump(); _exit(dct_code_); } while (0)
#else
#define DCT_CHILD_EXIT(code) _exit(code)
#endif

static int dct_failed_now, dct_skipped_now, dct_n_pass, dct_n_fail, dct_n_skip;
static char dct_where[512], dct_skip_why[256];

#define DCT_CHECK(cond) do { if (!(cond)) { if (!dct_failed_now) { \
    snprintf(dct_where, sizeof dct_where, "%s:%d: %s", __FILE__, __LINE__, #cond); } \
    dct_failed_now = 1; } } while (0)
#define DCT_CHECKF(cond, ...) do { if (!(cond)) { if (!dct_failed_now) { \
    int dct_k = snprintf(dct_where, sizeof dct_where, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
    if (dct_k > 0 && (size_t)dct_k < sizeof dct_where) snprintf(dct_where + dct_k, sizeof dct_where - (size_t)dct_k, __VA_ARGS__); } \
    dct_failed_now = 1; } } while (0)
#define DCT_SKIP(...) do { dct_skipped_now = 1; \
    snprintf(dct_skip_why, sizeof dct_skip_why, __VA_ARGS__); } while (0)
#define DCT_RUN(fn) do { dct_failed_now = 0; dct_skipped_now = 0; fn(); \
    if (dct_failed_now) { dct_n_fail++; printf("FAIL %s: %s\n", #fn, dct_where); } \
    else if (dct_skipped_now) { dct_n_skip++; printf("skip %s: %s\n", #fn, dct_skip_why); } \
    else { dct_n_pass++; printf("ok %s\n", #fn); } fflush(stdout); } while (0)

static int dct_done(void) {
  printf("# %d passed, %d failed, %d skipped\n", dct_n_pass, dct_n_fail, dct_n_skip);
  return dct_n_fail ? 1 : 0;
}
#endif
