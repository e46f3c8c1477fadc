/*
** fuzz_obs.c — libFuzzer target: dc_obs_decode on arbitrary bytes never
** crashes, never reads out of bounds, and a block it accepts is consistent
** (NULL count, offsets within the text); dc_obs_decode_to gives the same
** verdict and values and writes only inside the region it asks for, and
** dc_obs_block_copy of the block gives the same bytes as that region.  The first input byte chooses the
** kind and dictionary size the reader expects; the rest is the blob.  Seeds
** of every kind and method are made by the encoder: LLVMFuzzerInitialize
** writes them into the first corpus directory on the command line (files
** seed-*, written only where missing), so `build/fuzz/fuzz_obs DIR` starts
** from real blocks of every kind, width, method, with and without NULLs
** and zstd, not from nothing.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dc_obs.h"

static dc_obs_decoder *dec;

/* The selector byte of an input: kind = 1 + b % 5, n_categories = (b >> 3) * 9. */
static uint8_t selector(int kind, uint32_t n_categories) {
  uint32_t q = (n_categories + 8) / 9;
  for (uint32_t x = q * 8; x < q * 8 + 8; x++)
    if ((int)(x % 5) == kind - 1) return (uint8_t)x;
  return 0;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static void write_seed(const char *dir, const char *name, const dc_obs_values *v, int level) {
  char path[4096];
  snprintf(path, sizeof path, "%s/seed-%s-n%u-l%d", dir, name, v->n, level);
  struct stat st;
  if (stat(path, &st) == 0) return;
  uint8_t *blob = NULL;
  size_t len = 0;
  dc_error err;
  if (dc_obs_encode(v, level, &blob, &len, NULL, &err) != DC_OK) { fprintf(stderr, "seed %s: %s\n", name, err.msg); abort(); }
  FILE *f = fopen(path, "wb");
  if (f) {
    uint8_t sel = selector(v->kind, v->kind == DC_OBS_CATEGORY ? v->n_categories : 0);
    fwrite(&sel, 1, 1, f);
    fwrite(blob, 1, len, f);
    fclose(f);
  }
  free(blob);
}

/* Blocks of every kind and method (the encoder picks the method; the data
** make each one the smallest), at three sizes and two levels. */
static void write_seeds(const char *dir) {
  static const uint32_t sizes[3] = {1, 97, 5000};
  const uint32_t N = 5000;
  int32_t *codes = malloc(N * sizeof *codes);
  int64_t *i64 = malloc(N * sizeof *i64);
  uint8_t *valid = malloc(N);
  double *f64 = malloc(N * sizeof *f64);
  int8_t *b8 = malloc(N);
  const char **text = malloc(N * sizeof *text);
  uint32_t *tlen = malloc(N * sizeof *tlen);
  char *arena = malloc((size_t)N * 24);
  if (!codes || !i64 || !valid || !f64 || !b8 || !text || !tlen || !arena) abort();
  for (int s = 0; s < 3; s++) {
    uint32_t n = sizes[s];
    for (int nulls = 0; nulls < 2; nulls++) {
      for (int level = 1; level <= 9; level += 8) {
        dc_obs_values v;
        char name[64];
        /* category: few codes (u8), many (u16), NULLs as -1 */
        static const uint32_t ncat[2] = {4, 270};
        for (int c = 0; c < 2; c++) {
          for (uint32_t i = 0; i < n; i++) codes[i] = nulls && rnd() % 7 == 0 ? -1 : (int32_t)(rnd() % ncat[c]);
          memset(&v, 0, sizeof v);
          v.kind = DC_OBS_CATEGORY; v.n = n; v.codes = codes; v.n_categories = ncat[c];
          snprintf(name, sizeof name, "category%u-nulls%d", ncat[c], nulls);
          write_seed(dir, name, &v, level);
        }
        /* int: random (FOR), increasing (DELTA), constant, wide */
        for (int m = 0; m < 4; m++) {
          int64_t acc = (int64_t)(rnd() % 1000);
          for (uint32_t i = 0; i < n; i++) {
            acc += (int64_t)(rnd() % 5);
            i64[i] = m == 0 ? (int64_t)(rnd() % 3000) : m == 1 ? acc : m == 2 ? 42 : (int64_t)rnd();
            valid[i] = !(nulls && rnd() % 5 == 0);
          }
          memset(&v, 0, sizeof v);
          v.kind = DC_OBS_INT; v.n = n; v.i64 = i64; v.valid = nulls ? valid : NULL;
          snprintf(name, sizeof name, "int%d-nulls%d", m, nulls);
          write_seed(dir, name, &v, level);
        }
        /* real: binary64, binary32-exact, whole numbers; NaN = NULL */
        for (int m = 0; m < 3; m++) {
          for (uint32_t i = 0; i < n; i++) {
            double x = (double)(rnd() % 100000) / 7.0;
            f64[i] = m == 0 ? x : m == 1 ? (double)(float)x : (double)(rnd() % 500);
            if (nulls && rnd() % 6 == 0) f64[i] = NAN;
          }
          memset(&v, 0, sizeof v);
          v.kind = DC_OBS_REAL; v.n = n; v.f64 = f64;
          snprintf(name, sizeof name, "real%d-nulls%d", m, nulls);
          write_seed(dir, name, &v, level);
        }
        /* bool */
        for (uint32_t i = 0; i < n; i++) b8[i] = nulls && rnd() % 4 == 0 ? -1 : (int8_t)(rnd() % 2);
        memset(&v, 0, sizeof v);
        v.kind = DC_OBS_BOOL; v.n = n; v.b8 = b8;
        snprintf(name, sizeof name, "bool-nulls%d", nulls);
        write_seed(dir, name, &v, level);
        /* text: words, and barcodes (the DNA method) */
        for (int m = 0; m < 2; m++) {
          for (uint32_t i = 0; i < n; i++) {
            char *t = arena + (size_t)i * 24;
            uint32_t l = 0;
            if (m == 0) { l = (uint32_t)(rnd() % 12); for (uint32_t j = 0; j < l; j++) t[j] = (char)('a' + rnd() % 26); }
            else { l = 16; for (uint32_t j = 0; j < 14; j++) t[j] = "ACGT"[rnd() % 4]; t[14] = '-'; t[15] = '1'; }
            t[l] = 0;
            text[i] = nulls && rnd() % 9 == 0 ? NULL : t;
            tlen[i] = l;
          }
          memset(&v, 0, sizeof v);
          v.kind = DC_OBS_TEXT; v.n = n; v.text = text; v.text_len = tlen;
          snprintf(name, sizeof name, "text%d-nulls%d", m, nulls);
          write_seed(dir, name, &v, level);
        }
      }
    }
  }
  free(codes); free(i64); free(valid); free(f64); free(b8); free(text); free(tlen); free(arena);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  for (int i = 1; i < *argc; i++) {
    const char *a = (*argv)[i];
    struct stat st;
    if (a[0] != '-' && stat(a, &st) == 0 && S_ISDIR(st.st_mode)) {
      write_seeds(a);
      break;
    }
  }
  return 0;
}

typedef struct region { void *p; size_t bytes; } region;
static void *exact_alloc(void *arg, size_t bytes) {
  region *r = arg;
  if (r->p) abort();   /* at most one call per decode */
  r->bytes = bytes;
  r->p = malloc(bytes ? bytes : 1);
  return r->p;
}

/* 1 when two decodes of one blob hold the same values */
static int same_block(const dc_obs_block *a, const dc_obs_block *b) {
  if (a->kind != b->kind || a->n != b->n || a->null_count != b->null_count) return 0;
  size_t n = a->n;
  switch (a->kind) {
    case DC_OBS_CATEGORY: return memcmp(a->codes, b->codes, n * 4) == 0;
    case DC_OBS_INT: case DC_OBS_BOOL: return memcmp(a->i64, b->i64, n * 8) == 0 && memcmp(a->valid, b->valid, n) == 0;
    case DC_OBS_REAL: return memcmp(a->f64, b->f64, n * 8) == 0;
    default:
      return memcmp(a->text_off, b->text_off, (n + 1) * 8) == 0 && memcmp(a->valid, b->valid, n) == 0 &&
             memcmp(a->text, b->text, (size_t)a->text_off[n]) == 0;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dec) dec = dc_obs_decoder_new();
  if (size < 1) return 0;
  dc_obs_expect ex;
  ex.kind = 1 + data[0] % 5;
  ex.n_categories = (uint32_t)(data[0] >> 3) * 9;
  uint32_t n = 0;
  int kind = 0;
  dc_error err;
  /* the reader knows n from its block row: take the header's when plausible */
  if (dc_obs_peek(data + 1, size - 1, &kind, &n, NULL, &err) != DC_OK || n > 100000) n = 100;
  ex.n = n;
  dc_obs_block b, b2;
  int rc = dc_obs_decode(dec, data + 1, size - 1, &ex, &b, &err);
  /* dc_obs_decode_to into a region of exactly the bytes it asks for (ASan sees any write past
  ** it): the same verdict, and the same arrays (b's stay the decoder's: decode_to leaves them) */
  region r = {NULL, 0};
  dc_error err2;
  int rc2 = dc_obs_decode_to(dec, data + 1, size - 1, &ex, exact_alloc, &r, &b2, &err2);
  if (rc2 != rc || (rc2 == DC_OK && !same_block(&b, &b2))) abort();
  if (rc == DC_OK) {   /* dc_obs_block_copy of b: decode_to's bytes, in a region of exactly its size */
    size_t sz = dc_obs_block_size(&b);
    uint8_t *cp = malloc(sz ? sz : 1);
    dc_obs_block b3;
    if (!cp || sz != r.bytes) abort();
    dc_obs_block_copy(&b, cp, &b3);
    if ((sz && memcmp(cp, r.p, sz)) || !same_block(&b, &b3)) abort();
    free(cp);
  }
  free(r.p);
  if (rc != DC_OK) {
    if (!err.msg[0]) abort();
    return 0;
  }
  uint32_t nulls = 0;
  for (uint32_t i = 0; i < b.n; i++) {
    switch (b.kind) {
      case DC_OBS_CATEGORY:
        if (b.codes[i] < -1 || (ex.n_categories && b.codes[i] >= (int32_t)ex.n_categories)) abort();
        nulls += b.codes[i] == -1;
        break;
      case DC_OBS_REAL: nulls += isnan(b.f64[i]) != 0; break;
      case DC_OBS_TEXT:
        if (b.text_off[i + 1] < b.text_off[i]) abort();
        if (b.text_off[i + 1] > b.text_off[i]) (void)*(volatile const char *)(b.text + b.text_off[i + 1] - 1);
        nulls += !b.valid[i];
        break;
      default: nulls += !b.valid[i]; break;
    }
  }
  if (nulls != b.null_count) abort();
  return 0;
}
