/*
** dctest.h — the tiny harness of the C tests.
**
** A test file defines functions `static void test_NAME(void)` and lists them in main():
**
**     int main(void) { DCT_RUN(test_roundtrip); DCT_RUN(test_corrupt); return dct_done(); }
**
** Each DCT_RUN prints "ok NAME" or "FAIL NAME: file:line: expression", which
** tests/run_all.sh counts; the binary exits non-zero if any test failed.
*/
#ifndef DCTEST_H
#define DCTEST_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dct_failed_now, dct_n_pass, dct_n_fail;
static char dct_where[512];

#define DCT_CHECK(cond) do { if (!(cond)) { if (!dct_failed_now) { \
    snprintf(dct_where, sizeof dct_where, "%s:%d: %s", __FILE__, __LINE__, #cond); } \
    dct_failed_now = 1; } } while (0)
#define DCT_CHECKF(cond, ...) do { if (!(cond)) { if (!dct_failed_now) { \
    int dct_k = snprintf(dct_where, sizeof dct_where, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
    if (dct_k > 0 && (size_t)dct_k < sizeof dct_where) snprintf(dct_where + dct_k, sizeof dct_where - (size_t)dct_k, __VA_ARGS__); } \
    dct_failed_now = 1; } } while (0)
#define DCT_RUN(fn) do { dct_failed_now = 0; fn(); \
    if (dct_failed_now) { dct_n_fail++; printf("FAIL %s: %s\n", #fn, dct_where); } \
    else { dct_n_pass++; printf("ok %s\n", #fn); } fflush(stdout); } while (0)

static int dct_done(void) {
  printf("# %d passed, %d failed\n", dct_n_pass, dct_n_fail);
  return dct_n_fail ? 1 : 0;
}
#endif
