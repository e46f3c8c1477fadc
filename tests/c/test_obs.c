/*
** test_obs.c — the obs block library: round trips of every kind (dc_obs_decode and
** dc_obs_decode_to), statistics, argument errors, and corrupt blobs (every truncation,
** every byte flipped).
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* dctest.h's DCT_CHECK trips -Wmisleading-indentation when expanded at deeper indents */
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#include "dctest.h"
#include "dc_obs.h"

static uint64_t rng_s = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
  rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17;
  return rng_s;
}

/* dc_obs_decode_to's allocator for the tests: malloc, remembering the region and its size
** (fail: return NULL, as out-of-memory) */
typedef struct talloc { uint8_t *p; size_t bytes; int calls, fail; } talloc;
static void *test_alloc(void *arg, size_t bytes) {
  talloc *t = arg;
  t->calls++;
  t->bytes = bytes;
  if (t->fail) return NULL;
  t->p = malloc(bytes ? bytes : 1);
  return t->p;
}

static int block_equals(const dc_obs_values *v, const dc_obs_block *b, uint32_t *at);

/* dc_obs_decode_to of a blob that decodes: the same values as dc_obs_decode, in one region
** of dc_obs_block_bytes laid out as dc_obs.h says; an allocator that fails gives DC_ENOMEM */
static void check_decode_to(const dc_obs_values *v, dc_obs_decoder *d, const uint8_t *blob, size_t len) {
  dc_obs_expect ex = {v->kind, v->n, v->n_categories};
  dc_obs_block b;
  dc_error err;
  talloc t = {0};
  int rc = dc_obs_decode_to(d, blob, len, &ex, test_alloc, &t, &b, &err);
  DCT_CHECKF(rc == DC_OK, "decode_to: %s", err.msg);
  DCT_CHECK(t.calls == 1);
  if (rc == DC_OK) {
    uint32_t at, n = v->n;
    DCT_CHECKF(block_equals(v, &b, &at), "decode_to: value %u differs", at);
    uint64_t tl = v->kind == DC_OBS_TEXT ? b.text_off[n] : 0;
    DCT_CHECK(t.bytes == dc_obs_block_bytes(v->kind, n, tl));
    const uint8_t *r = t.p;
    switch (v->kind) {
      case DC_OBS_CATEGORY: DCT_CHECK((const uint8_t *)b.codes == r); break;
      case DC_OBS_INT: case DC_OBS_BOOL: DCT_CHECK((const uint8_t *)b.i64 == r && b.valid == r + (size_t)n * 8); break;
      case DC_OBS_REAL: DCT_CHECK((const uint8_t *)b.f64 == r); break;
      case DC_OBS_TEXT:
        DCT_CHECK((const uint8_t *)b.text_off == r && b.valid == r + ((size_t)n + 1) * 8 &&
                  (const uint8_t *)b.text == r + ((size_t)n + 1) * 8 + n);
        break;
    }
    /* dc_obs_block_copy of dc_obs_decode's block: the same bytes as decode_to's region */
    dc_obs_block b1, c1;
    DCT_CHECK(dc_obs_decode(d, blob, len, &ex, &b1, &err) == DC_OK);
    DCT_CHECK(dc_obs_block_size(&b1) == t.bytes);
    uint8_t *cp = malloc(t.bytes ? t.bytes : 1);
    dc_obs_block_copy(&b1, cp, &c1);
    DCT_CHECK(!memcmp(cp, t.p, t.bytes));
    DCT_CHECKF(block_equals(v, &c1, &at), "block_copy: value %u differs", at);
    DCT_CHECK(c1.kind == b1.kind && c1.n == b1.n && c1.null_count == b1.null_count);
    free(cp);
  }
  free(t.p);
  talloc f = {.fail = 1};
  DCT_CHECK(dc_obs_decode_to(d, blob, len, &ex, test_alloc, &f, &b, &err) == DC_ENOMEM && f.calls == 1);
  DCT_CHECK(dc_obs_decode_to(d, blob, len, &ex, NULL, NULL, &b, &err) == DC_EARG);
}

/* encodes v, decodes it back, checks every value and the statistics;
** returns the blob (caller frees) or NULL */
static uint8_t *roundtrip(const dc_obs_values *v, int level, size_t *len_out) {
  uint8_t *blob = NULL;
  size_t len = 0;
  dc_obs_stats st;
  dc_error err;
  int rc = dc_obs_encode(v, level, &blob, &len, &st, &err);
  DCT_CHECKF(rc == DC_OK, "encode: %s", err.msg);
  if (rc) { dc_obs_stats_clear(&st); return NULL; }
  dc_obs_decoder *d = dc_obs_decoder_new();
  dc_obs_block b;
  dc_obs_expect ex = {v->kind, v->n, v->n_categories};
  rc = dc_obs_decode(d, blob, len, &ex, &b, &err);
  DCT_CHECKF(rc == DC_OK, "decode: %s", err.msg);
  if (rc == DC_OK) {
    DCT_CHECK(b.kind == v->kind && b.n == v->n && b.null_count == st.null_count);
    uint32_t nulls = 0;
    int first = 1;
    int64_t mn = 0, mx = 0;
    double fmn = 0, fmx = 0;
    for (uint32_t i = 0; i < v->n; i++) {
      switch (v->kind) {
        case DC_OBS_CATEGORY:
          DCT_CHECKF(b.codes[i] == v->codes[i], "value %u: %d != %d", i, b.codes[i], v->codes[i]);
          if (v->codes[i] < 0) nulls++;
          else { if (first || v->codes[i] < mn) mn = v->codes[i]; if (first || v->codes[i] > mx) mx = v->codes[i]; first = 0; }
          break;
        case DC_OBS_INT: {
          int valid = !v->valid || v->valid[i];
          DCT_CHECKF(b.valid[i] == valid, "value %u validity", i);
          if (valid) {
            DCT_CHECKF(b.i64[i] == v->i64[i], "value %u: %lld != %lld", i, (long long)b.i64[i], (long long)v->i64[i]);
            if (first || v->i64[i] < mn) mn = v->i64[i];
            if (first || v->i64[i] > mx) mx = v->i64[i];
            first = 0;
          } else nulls++;
          break;
        }
        case DC_OBS_BOOL:
          DCT_CHECK(b.valid[i] == (v->b8[i] != -1));
          if (v->b8[i] != -1) {
            DCT_CHECK(b.i64[i] == v->b8[i]);
            if (first || v->b8[i] < mn) mn = v->b8[i];
            if (first || v->b8[i] > mx) mx = v->b8[i];
            first = 0;
          } else nulls++;
          break;
        case DC_OBS_REAL:
          if (isnan(v->f64[i])) { DCT_CHECK(isnan(b.f64[i])); nulls++; }
          else {
            DCT_CHECKF(memcmp(&b.f64[i], &v->f64[i], 8) == 0, "value %u: %.17g != %.17g", i, b.f64[i], v->f64[i]);
            if (first || v->f64[i] < fmn) fmn = v->f64[i];
            if (first || v->f64[i] > fmx) fmx = v->f64[i];
            first = 0;
          }
          break;
        case DC_OBS_TEXT:
          DCT_CHECK(b.valid[i] == (v->text[i] != NULL));
          if (v->text[i]) {
            size_t l = v->text_len ? v->text_len[i] : strlen(v->text[i]);
            DCT_CHECKF(b.text_off[i + 1] - b.text_off[i] == l && memcmp(b.text + b.text_off[i], v->text[i], l) == 0,
                       "value %u text", i);
            first = 0;
          } else {
            nulls++;
            DCT_CHECK(b.text_off[i + 1] == b.text_off[i]);
          }
          break;
      }
    }
    DCT_CHECKF(st.null_count == nulls, "null_count %u != %u", st.null_count, nulls);
    DCT_CHECK(st.has_minmax == !first);
    if (!first && v->kind != DC_OBS_REAL && v->kind != DC_OBS_TEXT) DCT_CHECK(st.min_i == mn && st.max_i == mx);
    if (!first && v->kind == DC_OBS_REAL) DCT_CHECK(st.min_f == fmn && st.max_f == fmx);
    check_decode_to(v, d, blob, len);
  }
  dc_obs_decoder_free(d);
  dc_obs_stats_clear(&st);
  *len_out = len;
  return blob;
}

static void corrupt_all(const dc_obs_values *v, int level);

/* 1 when the decoded block b holds exactly the values of v (NULLs where v has them);
** else 0 with *at the first value that differs (v->n for the kind, n or null count) */
static int block_equals(const dc_obs_values *v, const dc_obs_block *b, uint32_t *at) {
  *at = v->n;
  if (b->kind != v->kind || b->n != v->n) return 0;
  uint32_t nulls = 0;
  for (uint32_t i = 0; i < v->n; i++) {
    int same = 1, null = 0;
    switch (v->kind) {
      case DC_OBS_CATEGORY:
        null = v->codes[i] < 0;
        same = b->codes[i] == (null ? -1 : v->codes[i]);
        break;
      case DC_OBS_INT:
        null = v->valid && !v->valid[i];
        same = b->valid[i] == !null && (null || b->i64[i] == v->i64[i]);
        break;
      case DC_OBS_BOOL:
        null = v->b8[i] == -1;
        same = b->valid[i] == !null && (null || b->i64[i] == v->b8[i]);
        break;
      case DC_OBS_REAL:
        null = isnan(v->f64[i]);
        same = null ? isnan(b->f64[i]) : memcmp(&b->f64[i], &v->f64[i], 8) == 0;
        break;
      case DC_OBS_TEXT: {
        null = v->text[i] == NULL;
        size_t l = null ? 0 : v->text_len ? v->text_len[i] : strlen(v->text[i]);
        same = b->valid[i] == !null && b->text_off[i + 1] - b->text_off[i] == l &&
               (l == 0 || memcmp(b->text + b->text_off[i], v->text[i], l) == 0);
        break;
      }
      default:
        return 0;
    }
    if (!same) { *at = i; return 0; }
    nulls += (uint32_t)null;
  }
  return b->null_count == nulls;
}

static void test_category_widths(void) {
  uint32_t ncats[] = {1, 30, 255, 256, 300, 65535, 65536, 70000};
  int expect_method[] = {1, 1, 1, 2, 2, 2, 3, 3};
  uint32_t n = 5000;
  int32_t *codes = malloc(n * sizeof *codes);
  for (size_t k = 0; k < sizeof ncats / sizeof *ncats; k++) {
    for (uint32_t i = 0; i < n; i++) codes[i] = rnd() % 17 == 0 ? -1 : (int32_t)(rnd() % ncats[k]);
    codes[0] = (int32_t)ncats[k] - 1;   /* the width follows the largest code */
    dc_obs_values v = {.kind = DC_OBS_CATEGORY, .n = n, .codes = codes, .n_categories = ncats[k]};
    size_t len;
    uint8_t *blob = roundtrip(&v, 3, &len);
    if (blob) DCT_CHECKF(blob[6] == expect_method[k], "%u categories: method %d", ncats[k], blob[6]);
    free(blob);
  }
  free(codes);
}

static void test_category_present(void) {
  int32_t codes[] = {3, -1, 3, 9, 17, -1};
  dc_obs_values v = {.kind = DC_OBS_CATEGORY, .n = 6, .codes = codes, .n_categories = 40};
  dc_obs_stats st;
  dc_error err;
  DCT_CHECK(dc_obs_stats_compute(&v, &st, &err) == DC_OK);
  DCT_CHECK(st.null_count == 2 && st.min_i == 3 && st.max_i == 17);
  DCT_CHECK(st.present_len == 3);   /* trimmed after the byte of code 17 */
  if (st.present_len == 3) DCT_CHECK(st.present[0] == 0x08 && st.present[1] == 0x02 && st.present[2] == 0x02);
  dc_obs_stats_clear(&st);
  /* all NULL: no min/max, no bitmap */
  int32_t nul[] = {-1, -1};
  v.codes = nul; v.n = 2;
  DCT_CHECK(dc_obs_stats_compute(&v, &st, &err) == DC_OK);
  DCT_CHECK(!st.has_minmax && st.present == NULL && st.null_count == 2);
  dc_obs_stats_clear(&st);
  /* a huge dictionary: the bitmap is not recorded */
  int32_t big[] = {5, 1000000};
  v.codes = big; v.n_categories = 2000000;
  DCT_CHECK(dc_obs_stats_compute(&v, &st, &err) == DC_OK);
  DCT_CHECK(st.present == NULL && st.present_len == 0 && st.max_i == 1000000);
  dc_obs_stats_clear(&st);
}

static void test_category_size(void) {
  /* 30 categories at random: close to log2(30) = 4.9 bits a value */
  uint32_t n = 65536;
  int32_t *codes = malloc(n * sizeof *codes);
  for (uint32_t i = 0; i < n; i++) codes[i] = (int32_t)(rnd() % 30);
  dc_obs_values v = {.kind = DC_OBS_CATEGORY, .n = n, .codes = codes, .n_categories = 30};
  size_t len;
  free(roundtrip(&v, 9, &len));
  DCT_CHECKF(len * 8.0 / n < 5.3, "%.2f bits a value", len * 8.0 / n);
  /* sorted by category (runs): nearly free */
  for (uint32_t i = 0; i < n; i++) codes[i] = (int32_t)(i * 30ull / n);
  free(roundtrip(&v, 9, &len));
  DCT_CHECKF(len < 400, "%zu bytes for runs", len);
  free(codes);
}

static void test_int(void) {
  uint32_t n = 4000;
  int64_t *x = malloc(n * sizeof *x);
  uint8_t *valid = malloc(n);
  size_t len;
  /* counts: FOR, a few hundred to tens of thousands */
  for (uint32_t i = 0; i < n; i++) { x[i] = 500 + (int64_t)(rnd() % 40000); valid[i] = rnd() % 9 != 0; }
  dc_obs_values v = {.kind = DC_OBS_INT, .n = n, .i64 = x};
  uint8_t *b = roundtrip(&v, 3, &len);
  free(b);
  DCT_CHECKF(len < n * 2 + 200, "%zu bytes for 16-bit counts", len);
  v.valid = valid;
  free(roundtrip(&v, 3, &len));
  /* increasing: DELTA wins */
  for (uint32_t i = 0; i < n; i++) x[i] = 1000000000000LL + i * 3 + (int64_t)(rnd() % 3);
  v.valid = NULL;
  b = roundtrip(&v, 3, &len);
  if (b) DCT_CHECKF(b[6] == 4, "method %d for increasing ints", b[6]);
  free(b);
  /* extremes: the full int64 range */
  for (uint32_t i = 0; i < n; i++) x[i] = (int64_t)rnd();
  x[0] = INT64_MIN; x[1] = INT64_MAX; x[2] = INT64_MIN; x[3] = 0;
  free(roundtrip(&v, 1, &len));
  v.valid = valid;
  free(roundtrip(&v, 1, &len));
  /* constant, all NULL, single, empty */
  for (uint32_t i = 0; i < n; i++) x[i] = -7;
  v.valid = NULL;
  free(roundtrip(&v, 3, &len));
  DCT_CHECKF(len < 64, "%zu bytes for a constant", len);
  memset(valid, 0, n);
  v.valid = valid;
  free(roundtrip(&v, 3, &len));
  v.n = 1; v.valid = NULL;
  free(roundtrip(&v, 3, &len));
  v.n = 0;
  free(roundtrip(&v, 3, &len));
  free(x);
  free(valid);
}

static void test_real(void) {
  uint32_t n = 3000;
  double *x = malloc(n * sizeof *x);
  size_t len;
  uint8_t *b;
  dc_obs_values v = {.kind = DC_OBS_REAL, .n = n, .f64 = x};
  /* full doubles with NaN */
  for (uint32_t i = 0; i < n; i++) x[i] = rnd() % 13 == 0 ? NAN : (double)(rnd() % 100000) / 7919.0;
  b = roundtrip(&v, 3, &len);
  if (b) DCT_CHECK(b[6] == 1);
  free(b);
  /* values from float32: stored in 4 bytes */
  for (uint32_t i = 0; i < n; i++) x[i] = (double)(float)((double)(rnd() % 100000) / 7919.0);
  b = roundtrip(&v, 3, &len);
  if (b) DCT_CHECKF(b[6] == 2, "method %d for float32 values", b[6]);
  free(b);
  DCT_CHECKF(len <= n * 4 + 100, "%zu bytes", len);
  /* integral values (cluster numbers as float): integer methods */
  for (uint32_t i = 0; i < n; i++) x[i] = (double)(rnd() % 12);
  x[5] = NAN;
  b = roundtrip(&v, 3, &len);
  if (b) DCT_CHECKF(b[6] == 3 || b[6] == 4, "method %d for integral reals", b[6]);
  free(b);
  /* specials: -0.0 and infinities survive bit for bit; NaN payloads are NULL */
  x[0] = -0.0; x[1] = INFINITY; x[2] = -INFINITY; x[3] = 1e300; x[4] = -5e-324;
  uint64_t qnan = 0x7ff8000000000123ull;
  memcpy(&x[6], &qnan, 8);
  free(roundtrip(&v, 3, &len));
  x[0] = -0.0;
  for (uint32_t i = 1; i < n; i++) x[i] = (double)i;
  free(roundtrip(&v, 3, &len));   /* -0.0 is not an integer here */
  x[0] = 9223372036854775807.0;   /* 2^63: outside int64 */
  free(roundtrip(&v, 3, &len));
  for (uint32_t i = 0; i < n; i++) x[i] = NAN;
  free(roundtrip(&v, 3, &len));
  free(x);
}

static void test_bool(void) {
  uint32_t n = 1001;
  int8_t *x = malloc(n);
  size_t len;
  for (uint32_t i = 0; i < n; i++) x[i] = (int8_t)(rnd() % 3) - 1;
  dc_obs_values v = {.kind = DC_OBS_BOOL, .n = n, .b8 = x};
  free(roundtrip(&v, 3, &len));
  for (uint32_t i = 0; i < n; i++) x[i] = (int8_t)(rnd() & 1);
  free(roundtrip(&v, 3, &len));
  DCT_CHECKF(len <= 24 + n / 8 + 16, "%zu bytes", len);
  free(x);
}

static void test_text(void) {
  uint32_t n = 2000;
  char **s = calloc(n, sizeof *s);
  const char *pool[] = {"", "B cell", "NK", "CD4 T", "\xc3\xa9t\xc3\xa9", "\xf0\x9f\xa7\xac cell", "a\0b"};
  uint32_t *lens = malloc(n * sizeof *lens);
  for (uint32_t i = 0; i < n; i++) {
    if (rnd() % 10 == 0) { s[i] = NULL; lens[i] = 0; continue; }
    uint32_t k = (uint32_t)(rnd() % 7);
    s[i] = (char *)pool[k];
    lens[i] = k == 6 ? 3 : (uint32_t)strlen(pool[k]);
  }
  dc_obs_values v = {.kind = DC_OBS_TEXT, .n = n, .text = (const char *const *)s, .text_len = lens};
  size_t len;
  free(roundtrip(&v, 3, &len));
  dc_obs_stats st;
  dc_error err;
  DCT_CHECK(dc_obs_stats_compute(&v, &st, &err) == DC_OK);
  DCT_CHECK(st.min_len == 0);                                  /* "" sorts first */
  DCT_CHECK(st.max_len == 9 && memcmp(st.max_s, "\xf0\x9f", 2) == 0);  /* byte order */
  dc_obs_stats_clear(&st);
  /* barcodes, strlen lengths */
  char *bc = malloc((size_t)n * 19);
  for (uint32_t i = 0; i < n; i++) {
    for (int j = 0; j < 16; j++) bc[i * 19 + j] = "ACGT"[rnd() & 3];
    memcpy(bc + i * 19 + 16, "-1", 3);
    s[i] = bc + i * 19;
  }
  v.text_len = NULL;
  uint8_t *blob = roundtrip(&v, 9, &len);
  if (blob) DCT_CHECKF(blob[6] == 2, "method %d for barcodes", blob[6]);   /* 2-bit bases */
  free(blob);
  DCT_CHECKF(len < n * 4 + 200, "%zu bytes for %u barcodes", len, n);
  /* bases with other text mixed in: N, lower case, empty, bases only, NULLs */
  const char *odd[] = {"ACGTN-1", "acgt", "", "GGGG", "TTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTTT", "A", "-1", "CCA\xc3\xa9"};
  for (uint32_t i = 0; i < n; i++) s[i] = i % 11 == 5 ? NULL : i % 3 ? bc + i * 19 : (char *)odd[i % 8];
  blob = roundtrip(&v, 3, &len);
  if (blob) DCT_CHECKF(blob[6] == 2, "method %d for mostly barcodes", blob[6]);
  free(blob);
  v.n = 300;   /* every byte flipped / truncated */
  corrupt_all(&v, 3);
  v.n = n;
  free(bc);
  free(s);
  free(lens);
}

/* Blocks over 256 KiB at the genes table's levels (16, 19): zstd then compresses with match-finder
** tables of the window's size (obs_encode.c compress_sized); each round trips, and is smaller than
** at level 3.  Gene-like names (60,000, about 9 bytes each) and their totals as ints. */
static void test_large_blocks(void) {
  uint32_t n = 60000;
  char *buf = malloc((size_t)n * 16);
  char **s = malloc(n * sizeof *s);
  int64_t *iv = malloc(n * sizeof *iv);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t r = rnd();
    s[i] = buf + (size_t)i * 16;
    if (r % 3 == 0) snprintf(s[i], 16, "AC%06u.%u", (unsigned)(r >> 8) % 1000000u, (unsigned)(r >> 40) % 3u + 1);
    else snprintf(s[i], 16, "%c%c%c%u", 'A' + (int)((r >> 8) % 26), 'A' + (int)((r >> 16) % 26),
                  'A' + (int)((r >> 24) % 26), (unsigned)(r >> 32) % 200u);
    iv[i] = (int64_t)(1000000u >> (i / 4000u)) - (int64_t)(i % 4000u);
  }
  dc_obs_values t = {.kind = DC_OBS_TEXT, .n = n, .text = (const char *const *)s};
  dc_obs_values v = {.kind = DC_OBS_INT, .n = n, .i64 = iv};
  size_t lt3 = 0, li3 = 0, lt = 0, li = 0;
  free(roundtrip(&t, 3, &lt3));
  free(roundtrip(&v, 3, &li3));
  for (int level = 16; level <= 19; level += 3) {
    free(roundtrip(&t, level, &lt));
    free(roundtrip(&v, level, &li));
    DCT_CHECKF(lt < lt3 && li <= li3, "level %d: %zu and %zu bytes, level 3: %zu and %zu", level, lt, li, lt3, li3);
  }
  free(iv);
  free(s);
  free(buf);
}

static void test_bad_args(void) {
  uint8_t *blob = NULL;
  size_t len;
  dc_error err;
  int32_t codes[] = {0, 5};
  dc_obs_values v = {.kind = DC_OBS_CATEGORY, .n = 2, .codes = codes, .n_categories = 5};
  DCT_CHECK(dc_obs_encode(&v, 3, &blob, &len, NULL, &err) == DC_EARG && blob == NULL);
  DCT_CHECKF(strstr(err.msg, "value 1") != NULL, "%s", err.msg);
  codes[1] = -2;
  DCT_CHECK(dc_obs_encode(&v, 3, &blob, &len, NULL, &err) == DC_EARG);
  int8_t b[] = {0, 2};
  dc_obs_values vb = {.kind = DC_OBS_BOOL, .n = 2, .b8 = b};
  DCT_CHECK(dc_obs_encode(&vb, 3, &blob, &len, NULL, &err) == DC_EARG);
  const char *t[] = {"ok", "\xc3("};
  dc_obs_values vt = {.kind = DC_OBS_TEXT, .n = 2, .text = t};
  DCT_CHECK(dc_obs_encode(&vt, 3, &blob, &len, NULL, &err) == DC_EARG);
  DCT_CHECKF(strstr(err.msg, "UTF-8") != NULL, "%s", err.msg);
  const char *t2[] = {"\xed\xa0\x80"};   /* a surrogate */
  vt.text = t2; vt.n = 1;
  DCT_CHECK(dc_obs_encode(&vt, 3, &blob, &len, NULL, &err) == DC_EARG);
  dc_obs_values vk = {.kind = 9, .n = 0};
  DCT_CHECK(dc_obs_encode(&vk, 3, &blob, &len, NULL, &err) == DC_EARG);
  dc_obs_values vn = {.kind = DC_OBS_INT, .n = DC_OBS_MAX_N + 1};
  DCT_CHECK(dc_obs_encode(&vn, 3, &blob, &len, NULL, &err) == DC_EARG);
  DCT_CHECK(dc_obs_kind_from_name("real") == DC_OBS_REAL && strcmp(dc_obs_kind_name(DC_OBS_TEXT), "text") == 0);
  DCT_CHECK(dc_obs_kind_from_name("float") == 0 && dc_obs_kind_name(0) == NULL);
}

/* every truncation and every single byte flipped: an error, or (never for
** the header) the same values; never a crash. */
static void corrupt_all(const dc_obs_values *v, int level) {
  uint8_t *blob = NULL;
  size_t len;
  dc_error err;
  if (dc_obs_encode(v, level, &blob, &len, NULL, &err) != DC_OK) { DCT_CHECK(0); return; }
  dc_obs_decoder *d = dc_obs_decoder_new();
  dc_obs_expect ex = {v->kind, v->n, v->n_categories};
  dc_obs_block b;
  for (size_t l = 0; l < len; l++) {
    uint8_t *c = malloc(l ? l : 1);
    memcpy(c, blob, l);
    int rc = dc_obs_decode(d, c, l, &ex, &b, &err);
    DCT_CHECKF(rc == DC_ECORRUPT, "truncated to %zu: rc %d", l, rc);
    DCT_CHECK(err.msg[0] != 0);
    free(c);
  }
  uint8_t *c = malloc(len);
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit += 3) {
      memcpy(c, blob, len);
      c[i] ^= (uint8_t)(1u << bit);
      int rc = dc_obs_decode(d, c, len, &ex, &b, &err);
      /* decode_to: the same verdict; the region (when asked for) is the caller's to free */
      talloc t = {0};
      dc_obs_block b2;
      dc_error err2;
      DCT_CHECKF(dc_obs_decode_to(d, c, len, &ex, test_alloc, &t, &b2, &err2) == rc, "byte %zu bit %d: decode_to differs", i, bit);
      free(t.p);
      if (i < 24 && i != 4) DCT_CHECKF(rc == DC_ECORRUPT, "byte %zu bit %d: rc %d", i, bit, rc);
      else if (i == 4) DCT_CHECK(rc == DC_EUNSUPPORTED);
      else {
        DCT_CHECKF(rc == DC_ECORRUPT || rc == DC_OK, "byte %zu: rc %d", i, rc);
        uint32_t at;
        if (rc == DC_OK) DCT_CHECKF(block_equals(v, &b, &at), "byte %zu bit %d: decoded, but value %u differs", i, bit, at);
      }
    }
  }
  /* the comparison itself: the intact blob decodes to v's values */
  uint32_t at;
  DCT_CHECK(dc_obs_decode(d, blob, len, &ex, &b, &err) == DC_OK);
  DCT_CHECKF(block_equals(v, &b, &at), "intact blob: value %u differs", at);
  /* the expectations of the reader are checked too */
  dc_obs_expect bad = ex;
  bad.n++;
  DCT_CHECK(dc_obs_decode(d, blob, len, &bad, &b, &err) == DC_ECORRUPT && strstr(err.msg, "values") != NULL);
  bad = ex;
  bad.kind = v->kind == DC_OBS_INT ? DC_OBS_REAL : DC_OBS_INT;
  DCT_CHECK(dc_obs_decode(d, blob, len, &bad, &b, &err) == DC_ECORRUPT && strstr(err.msg, "kind") != NULL);
  free(c);
  free(blob);
  dc_obs_decoder_free(d);
}

static void test_corrupt(void) {
  uint32_t n = 300;
  int32_t codes[300];
  int64_t x[300];
  uint8_t valid[300];
  double f[300];
  int8_t bo[300];
  const char *t[300];
  for (uint32_t i = 0; i < n; i++) {
    codes[i] = rnd() % 7 == 0 ? -1 : (int32_t)(rnd() % 20);
    x[i] = (int64_t)(rnd() % 1000);
    valid[i] = rnd() % 5 != 0;
    f[i] = rnd() % 6 == 0 ? NAN : (double)(rnd() % 1000) / 3.0;
    bo[i] = (int8_t)(rnd() % 3) - 1;
    t[i] = rnd() % 4 == 0 ? NULL : rnd() % 2 ? "NK" : "B cell";
  }
  dc_obs_values vc = {.kind = DC_OBS_CATEGORY, .n = n, .codes = codes, .n_categories = 20};
  dc_obs_values vi = {.kind = DC_OBS_INT, .n = n, .i64 = x, .valid = valid};
  dc_obs_values vf = {.kind = DC_OBS_REAL, .n = n, .f64 = f};
  dc_obs_values vb = {.kind = DC_OBS_BOOL, .n = n, .b8 = bo};
  dc_obs_values vt = {.kind = DC_OBS_TEXT, .n = n, .text = t};
  for (int level = 1; level <= 3; level += 2) {  /* compressed payloads */
    corrupt_all(&vc, level);
    corrupt_all(&vi, level);
    corrupt_all(&vf, level);
    corrupt_all(&vb, level);
    corrupt_all(&vt, level);
  }
  /* stored (incompressible) payloads */
  for (uint32_t i = 0; i < n; i++) { x[i] = (int64_t)rnd(); valid[i] = 1; }
  corrupt_all(&vi, 3);
  /* a category code beyond the dictionary */
  uint8_t *blob;
  size_t len;
  dc_error err;
  DCT_CHECK(dc_obs_encode(&vc, 3, &blob, &len, NULL, &err) == DC_OK);
  dc_obs_decoder *d = dc_obs_decoder_new();
  dc_obs_block b;
  dc_obs_expect ex = {DC_OBS_CATEGORY, n, 10};
  DCT_CHECK(dc_obs_decode(d, blob, len, &ex, &b, &err) == DC_ECORRUPT && strstr(err.msg, "categor") != NULL);
  DCT_CHECK(b.codes == NULL);
  free(blob);
  dc_obs_decoder_free(d);
}

int main(void) {
  DCT_RUN(test_category_widths);
  DCT_RUN(test_category_present);
  DCT_RUN(test_category_size);
  DCT_RUN(test_int);
  DCT_RUN(test_real);
  DCT_RUN(test_bool);
  DCT_RUN(test_text);
  DCT_RUN(test_large_blocks);
  DCT_RUN(test_bad_args);
  DCT_RUN(test_corrupt);
  return dct_done();
}
