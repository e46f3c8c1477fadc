/*
** fuzz_remote.c — libFuzzer target for the remote VFS's pure logic (ext/remote_logic.c, the
** functions that take what a server or a user sends): each never crashes, never reads or writes
** outside its buffers, and what it accepts is consistent.  The first input byte picks the entry
** point; the rest is its input.
**   0  dc_parse_content_range (a Content-Range header): accepted means 0 <= start <= end, and
**      total -1 ("*") or past end; then dc_range_check of a response that carries it, with the
**      status, the offset asked for and the bytes that came taken from the input: OK only for a
**      206 whose Content-Range starts at the offset asked for and whose body is that range's
**      length, never more than was asked for; why is a string within its buffer.
**   1  dc_header_value into buffers of 1..64 bytes: a string within the buffer, no blank or
**      CR/LF at either end, a prefix of the input's trimmed value.
**   2  dc_s3_error (an error response's body, possibly cut short) into buffers of 1..300 bytes.
**   3  dc_s3_url (a user's s3:// name, endpoint and region from the input): a string within its
**      buffer that starts with the endpoint's scheme or https://, or 0 with a reason.
**   4  dc_partstore: puts and gets of byte ranges of a few file versions; a file's byte at an
**      offset is a function of the version and the offset, so every get that answers must give
**      exactly those bytes, and a get of the range just put always answers.
**   5  dc_sharedcache: claims, publishes, puts, gets and drop_fills over blocks of a few
**      versions, the same oracle per block; a block being filled is never visible.
**   6  dc_blocks_for / dc_block_len / dc_validator_differs on integers and strings from the input.
** Seeds: tests/fuzz/corpus/fuzz_remote (LLVMFuzzerInitialize writes a few where missing).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "dc_remote.h"

#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(stderr, "fuzz_remote: %s:%d: %s\n", __FILE__, __LINE__, #c);       \
      abort();                                                                   \
    }                                                                            \
  } while (0)

typedef struct { const uint8_t *p; size_t n; } src;
static uint64_t take(src *s, int bytes) {       /* little-endian, 0 past the end */
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)(s->n ? (s->n--, *s->p++) : 0) << (8 * i);
  return v;
}
/* a NUL-terminated copy of up to max bytes of the input, up to a 0 byte (which it consumes) */
static char *take_str(src *s, size_t max) {
  size_t k = 0;
  while (k < s->n && k < max && s->p[k]) k++;
  char *o = malloc(k + 1);
  CHECK(o);
  memcpy(o, s->p, k);
  o[k] = 0;
  s->p += k; s->n -= k;
  if (s->n) { s->p++; s->n--; }
  return o;
}
static void string_within(const char *b, size_t n) { CHECK(n > 0 && memchr(b, 0, n) != NULL); }

static void content_range(src *s) {
  char *v = take_str(s, 200);
  int64_t a = -7, b = -7, t = -7;
  int ok = dc_parse_content_range(v, &a, &b, &t);
  if (ok) CHECK(a >= 0 && b >= a && (t == -1 || t > b));
  else CHECK(a == -7 && b == -7 && t == -7);          /* untouched when refused */
  dc_range_resp r;
  memset(&r, 0, sizeof r);
  static const long statuses[] = {200, 206, 416, 404, 500, 503, 301, 0};
  r.status = statuses[take(s, 1) % 8];
  r.first = (int)(take(s, 1) & 1);
  r.off = (int64_t)(take(s, 8) >> 2);
  r.len = (int64_t)(take(s, 4) % (1u << 24)) + 1;
  r.overflow = (int)(take(s, 1) & 1);
  r.got = r.overflow ? r.len : (int64_t)(take(s, 4) % ((uint64_t)r.len + 1));   /* the transfer stops at len */
  r.have_cr = ok;
  r.cr_start = ok ? a : 0;
  r.cr_end = ok ? b : 0;
  if (ok && (take(s, 1) & 1)) r.off = a;           /* often the offset asked for */
  char why[200];
  int transport = -1;
  int k = dc_range_check(&r, &transport, why, sizeof why);
  string_within(why, sizeof why);
  CHECK(transport == 0 || transport == 1);
  CHECK(k == DC_RESP_OK || k == DC_RESP_WHOLE || k == DC_RESP_EMPTY || k == DC_RESP_BAD);
  if (k == DC_RESP_OK) {
    CHECK(r.status == 206 && r.have_cr && r.cr_start == r.off && !r.overflow);
    CHECK(r.got <= r.len && (uint64_t)r.got == (uint64_t)r.cr_end - (uint64_t)r.cr_start + 1);
    CHECK(why[0] == 0);
  }
  if (k == DC_RESP_WHOLE) CHECK(r.status == 200 && r.first && r.got < r.len && !r.overflow);
  if (k == DC_RESP_EMPTY) CHECK(r.status == 416 && r.first);
  if (k == DC_RESP_BAD) CHECK(why[0] != 0);
  free(v);
}

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static void header_value(src *s) {
  size_t out_n = 1 + take(s, 1) % 64;
  char *out = malloc(out_n);
  CHECK(out);
  size_t n = s->n;
  const char *v = (const char *)s->p;
  dc_header_value(v, n, out, out_n);
  string_within(out, out_n);
  size_t k = strlen(out);
  /* the reference: skip leading blanks (space, tab), drop trailing blanks and CR/LF */
  size_t lo = 0, hi = n;
  while (lo < hi && (v[lo] == ' ' || v[lo] == '\t')) lo++;
  while (hi > lo && blank(v[hi - 1])) hi--;
  size_t want = hi - lo < out_n - 1 ? hi - lo : out_n - 1;
  if (!memchr(v + lo, 0, want)) {                   /* a value without NUL bytes: exactly its prefix */
    CHECK(k == want && memcmp(out, v + lo, k) == 0);
    if (k) CHECK(out[0] != ' ' && out[0] != '\t');
    if (k == hi - lo && k) CHECK(!blank(out[k - 1]));
  }
  free(out);
}

static void s3_error(src *s) {
  size_t out_n = 1 + take(s, 2) % 300;
  char *out = malloc(out_n);
  CHECK(out);
  /* the body in a buffer of its own size, so that a read past it is caught */
  char *body = malloc(s->n ? s->n : 1);
  CHECK(body);
  memcpy(body, s->p, s->n);
  if (dc_s3_error(body, s->n, out, out_n)) {
    string_within(out, out_n);
    for (const char *c = out; *c; c++) CHECK((unsigned char)*c >= 0x20 || *c == 0);
  }
  free(body);
  free(out);
}

static void s3_url(src *s) {
  size_t n = 1 + take(s, 2) % 3000, why_n = 1 + take(s, 1) % 200;
  char *name = take_str(s, 2500), *endpoint = take_str(s, 300), *region = take_str(s, 40);
  char *out = malloc(n), *why = malloc(why_n);
  CHECK(out && why);
  int use_ep = (int)(take(s, 1) & 1);
  if (dc_s3_url(name, use_ep ? endpoint : NULL, region, out, n, why, why_n)) {
    string_within(out, n);
    if (use_ep && *endpoint) CHECK(strncmp(out, endpoint, 1) == 0);
    else CHECK(strncmp(out, "https://", 8) == 0);
    /* the key is percent-encoded: no byte of the URL past the bucket is blank or non-ASCII */
    for (const unsigned char *c = (const unsigned char *)out + strlen(out); c-- > (const unsigned char *)out;) {
      if (*c == '/') break;
      CHECK(*c > 0x20 && *c < 0x7f);
    }
  } else {
    string_within(why, why_n);
  }
  free(name); free(endpoint); free(region); free(out); free(why);
}

/* the byte at offset off of file version key */
static uint8_t file_byte(uint64_t key, int64_t off) {
  uint64_t x = key * 0x9e3779b97f4a7c15ull ^ (uint64_t)off * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  return (uint8_t)(x * 0x94d049bb133111ebull >> 56);
}
static void fill(uint8_t *b, uint64_t key, int64_t lo, int64_t n) {
  for (int64_t i = 0; i < n; i++) b[i] = file_byte(key, lo + i);
}
static void same(const uint8_t *b, uint64_t key, int64_t lo, int64_t n) {
  for (int64_t i = 0; i < n; i++) CHECK(b[i] == file_byte(key, lo + i));
}

static void partstore(src *s) {
  int64_t cap = 1 + (int64_t)(take(s, 2) % 20000);
  dc_partstore *ps = dc_partstore_new(cap);
  CHECK(ps);
  static uint8_t buf[70000], got[70000];
  while (s->n) {
    int op = (int)(take(s, 1) % 3);
    uint64_t key = 1 + take(s, 1) % 3;
    int64_t lo = (int64_t)(take(s, 3) % 100000), n = (int64_t)(take(s, 2) % 30000);
    if (op == 0) {                    /* put: then its own range (when kept) answers */
      fill(buf, key, lo, n);
      dc_partstore_put(ps, key, lo, buf, n);
      if (n >= 1 && n <= cap) {
        CHECK(dc_partstore_get(ps, key, lo, n, got));
        same(got, key, lo, n);
      }
    } else {                          /* get: an answer is the file's bytes */
      memset(got, 0xa5, sizeof got);
      if (dc_partstore_get(ps, key, lo, n, op == 1 ? got : NULL)) {
        CHECK(n >= 1);
        if (op == 1) same(got, key, lo, n);
      }
    }
  }
  dc_partstore_free(ps);
}

static void sharedcache(src *s) {
  int slots = 1 + (int)(take(s, 1) % 6);
  int64_t cap = 1 + (int64_t)(take(s, 2) % 5000);
  int64_t bsize = cap + cap / 4 + 1;                    /* the file's blocks: some over cap */
  dc_sharedcache *c = dc_sharedcache_new(slots, cap);
  CHECK(c);
  static uint8_t buf[8000], got[8000];
  struct { uint8_t *b; int slot; uint64_t key; int64_t idx, len; } fills[8];
  int nf = 0;
  while (s->n) {
    int op = (int)(take(s, 1) % 6);
    uint64_t key = 1 + take(s, 1) % 3;
    int64_t idx = (int64_t)(take(s, 1) % 8);
    int64_t len = 1 + (int64_t)((key * 131 + (uint64_t)idx * 977) % (uint64_t)bsize);   /* fixed per block */
    if (op == 0) {                                      /* put */
      fill(buf, key, idx * bsize, len);
      dc_sharedcache_put(c, key, idx, buf, len);
      if (len <= cap && nf < slots) CHECK(dc_sharedcache_has(c, key, idx, len));   /* a slot was free to take */
    } else if (op == 1 && nf < 8) {                     /* claim: not visible until published */
      int slot = -2, had = dc_sharedcache_has(c, key, idx, len);
      uint8_t *b = dc_sharedcache_claim(c, key, idx, len, &slot);
      if (b) {
        CHECK(slot >= 0 && slot < slots && !had && len <= cap);
        memset(b, 0x5a, (size_t)len);                  /* garbage until it is filled */
        CHECK(!dc_sharedcache_has(c, key, idx, len));
        fills[nf].b = b; fills[nf].slot = slot; fills[nf].key = key; fills[nf].idx = idx; fills[nf].len = len;
        nf++;
      } else {
        CHECK(slot == -1);
      }
    } else if (op == 2) {                               /* a fork: the fills in progress never finish */
      dc_sharedcache_drop_fills(c);
      for (int k = 0; k < nf; k++) CHECK(!dc_sharedcache_has(c, fills[k].key, fills[k].idx, fills[k].len) ||
                                         dc_sharedcache_get(c, fills[k].key, fills[k].idx, fills[k].len, 0,
                                                            fills[k].len, got));
      nf = 0;
    } else if (op == 3) {                               /* get: an answer is the file's bytes */
      int64_t off = (int64_t)(take(s, 2) % (uint64_t)(len + 1)), n = (int64_t)(take(s, 2) % (uint64_t)(len + 1));
      memset(got, 0xa5, sizeof got);
      if (dc_sharedcache_get(c, key, idx, len, off, n, got)) {
        CHECK(off + n <= len);
        same(got, key, idx * bsize + off, n);
      }
    } else if (op == 4) {                               /* has agrees with get */
      int h = dc_sharedcache_has(c, key, idx, len);
      memset(got, 0xa5, sizeof got);
      CHECK(h == dc_sharedcache_get(c, key, idx, len, 0, len, got));
      if (h) same(got, key, idx * bsize, len);
    } else if (op == 5 && nf) {                         /* fill and publish the newest claim */
      nf--;
      fill(fills[nf].b, fills[nf].key, fills[nf].idx * bsize, fills[nf].len);
      dc_sharedcache_publish(c, fills[nf].slot, fills[nf].key, fills[nf].idx, fills[nf].len);
      CHECK(dc_sharedcache_has(c, fills[nf].key, fills[nf].idx, fills[nf].len));
    }
  }
  dc_sharedcache_free(c);
}

static void arithmetic(src *s) {
  /* any 64-bit values: no sum or product of them may overflow */
  int64_t off = (int64_t)take(s, 8), len = (int64_t)take(s, 8), bsize = (int64_t)take(s, 8), fsize = (int64_t)take(s, 8);
  int64_t first = -5, last = -5;
  if (dc_blocks_for(off, len, bsize, fsize, &first, &last)) {
    CHECK(off >= 0 && len > 0 && bsize > 0 && off < fsize);
    CHECK(first == off / bsize && first <= last && last <= (fsize - 1) / bsize);
    CHECK(last == (len > fsize - off ? fsize - 1 : off + len - 1) / bsize);
    int64_t bl = dc_block_len(last, bsize, fsize);
    CHECK(bl == (last < (fsize - 1) / bsize ? bsize : (fsize - 1) % bsize + 1));   /* whole, or the file's last */
  } else {
    CHECK(first == -5 && last == -5);
  }
  int64_t idx = (int64_t)take(s, 8), bl = dc_block_len(idx, bsize, fsize);
  CHECK(bl >= 0 && (bsize <= 0 || bl <= bsize));
  if (bl) CHECK(idx >= 0 && idx <= (fsize - 1) / bsize);
  dc_validator a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  char *e1 = take_str(s, sizeof a.etag - 1), *e2 = take_str(s, sizeof b.etag - 1);
  char *m1 = take_str(s, sizeof a.last_modified - 1), *m2 = take_str(s, sizeof b.last_modified - 1);
  strcpy(a.etag, e1); strcpy(b.etag, e2); strcpy(a.last_modified, m1); strcpy(b.last_modified, m2);
  a.size = (int64_t)take(s, 2) - 1; b.size = (int64_t)take(s, 2) - 1;
  char why[120];
  why[0] = 0;
  int d = dc_validator_differs(&a, &b, why, sizeof why);
  string_within(why, sizeof why);
  int want = (b.etag[0] && strcmp(a.etag, b.etag) != 0) || (b.last_modified[0] && strcmp(a.last_modified, b.last_modified) != 0) ||
             (a.size >= 0 && b.size >= 0 && a.size != b.size);
  CHECK(d == want);
  if (d) CHECK(why[0] != 0);
  CHECK(dc_validator_differs(&a, &a, why, sizeof why) == 0);
  free(e1); free(e2); free(m1); free(m2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  src s = {data + 1, size - 1};
  switch (data[0] % 7) {
    case 0: content_range(&s); break;
    case 1: header_value(&s); break;
    case 2: s3_error(&s); break;
    case 3: s3_url(&s); break;
    case 4: partstore(&s); break;
    case 5: sharedcache(&s); break;
    default: arithmetic(&s); break;
  }
  return 0;
}

static void seed(const char *dir, const char *name, const void *b, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/seed-%s", dir, name);
  struct stat st;
  if (stat(path, &st) == 0) return;
  FILE *f = fopen(path, "wb");
  if (!f) return;
  fwrite(b, 1, n, f);
  fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  const char *dir = NULL;
  for (int i = 1; i < *argc; i++)
    if ((*argv)[i][0] != '-') { dir = (*argv)[i]; break; }
  struct stat st;
  if (!dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  static const char cr[] = "\0bytes 0-1048575/123456789\0\x01\x01\0\0\0\0\0\0\0\0\0\0\x10\0\0\x01";
  seed(dir, "content-range", cr, sizeof cr - 1);
  static const char hv[] = "\x01\x20  \"abc-123\"  \r\n";
  seed(dir, "header", hv, sizeof hv - 1);
  static const char s3e[] = "\x02\x40\x01<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code><Message>The key &amp; "
                            "&lt;x&gt; does not exist</Message></Error>";
  seed(dir, "s3-error", s3e, sizeof s3e - 1);
  static const char s3u[] = "\x03\x00\x04\x80s3://bucket/a b+c=(d)%/e.dcdb\0http://127.0.0.1:9000/\0eu-west-1\0\x01";
  seed(dir, "s3-url", s3u, sizeof s3u - 1);
  static const char pst[] = "\x04\x10\x27\x00\x01\x10\x00\x00\x00\x04\x01\x01\x10\x00\x00\x00\x04\x00\x02\x00\x00\x00"
                            "\x00\x30\x00\x01\x01\x20\x00\x00\x00\x02";
  seed(dir, "partstore", pst, sizeof pst - 1);
  static const char shc[] = "\x05\x03\x00\x10\x00\x01\x01\x00\x00\x03\x01\x01\x00\x00\x10\x00\x01\x01\x01\x02\x00\x05"
                            "\x02\x02\x00\x00\x04\x02\x02\x00\x00\x04\x01\x01\x00\x00";
  seed(dir, "sharedcache", shc, sizeof shc - 1);
  static const char ar[] = "\x06\x00\x10\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x10\x00"
                           "\x00\x00\x00\x00\x00\x00\x40\x00\x00\x00\x00\x00\x00\x00\"v1\"\0\"v2\"\0Mon\0Tue\0\x05\x00\x05\x00";
  seed(dir, "arith", ar, sizeof ar - 1);
  return 0;
}
