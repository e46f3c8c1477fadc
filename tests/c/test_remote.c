/*
** test_remote.c — the pure logic of the remote-file VFS (ext/remote_logic.c, compiled
** in here directly): block range math, retry policy and backoff, throttle, validators,
** Content-Range parsing, the in-memory block cache, cache names and the eviction plan,
** s3:// URLs, the checks on a range response, and where a reader reads in order.
*/
#include "dctest.h"
#include "../../ext/remote_logic.c"

static void test_blocks(void) {
  int64_t a, b;
  /* a read inside one block */
  DCT_CHECK(dc_blocks_for(10, 100, 4096, 100000, &a, &b) && a == 0 && b == 0);
  /* across a border */
  DCT_CHECK(dc_blocks_for(4000, 200, 4096, 100000, &a, &b) && a == 0 && b == 1);
  /* exactly one block, aligned */
  DCT_CHECK(dc_blocks_for(4096, 4096, 4096, 100000, &a, &b) && a == 1 && b == 1);
  /* the last, short block; a read running past the end is clipped */
  DCT_CHECK(dc_blocks_for(99000, 5000, 4096, 100000, &a, &b) && a == 24 && b == 24);
  DCT_CHECK(dc_block_len(24, 4096, 100000) == 100000 - 24 * 4096);
  DCT_CHECK(dc_block_len(23, 4096, 100000) == 4096);
  DCT_CHECK(dc_block_len(25, 4096, 100000) == 0);
  /* nothing in the file */
  DCT_CHECK(!dc_blocks_for(100000, 10, 4096, 100000, &a, &b));
  DCT_CHECK(!dc_blocks_for(5, 0, 4096, 100000, &a, &b));
  DCT_CHECK(!dc_blocks_for(-1, 10, 4096, 100000, &a, &b));
  /* extremes: no sum or product may overflow (fuzz_remote found dc_block_len's) */
  DCT_CHECK(dc_blocks_for(99999, INT64_MAX, 4096, 100000, &a, &b) && a == 24 && b == 24);
  DCT_CHECK(dc_blocks_for(INT64_MAX - 1, INT64_MAX, 1, INT64_MAX, &a, &b) && a == INT64_MAX - 1 && b == INT64_MAX - 1);
  DCT_CHECK(dc_block_len(INT64_MAX / 2, 1 << 20, 100000) == 0 && dc_block_len(INT64_MAX, INT64_MAX, INT64_MAX) == 0);
  DCT_CHECK(dc_block_len(0, INT64_MAX, INT64_MAX) == INT64_MAX && dc_block_len(1, 2, 0) == 0 && dc_block_len(0, 2, -5) == 0);
}

static void test_readahead(void) {
  DCT_CHECK(dc_readahead_blocks(0, 16) == 1);
  DCT_CHECK(dc_readahead_blocks(1, 16) == 2);
  DCT_CHECK(dc_readahead_blocks(3, 16) == 8);
  DCT_CHECK(dc_readahead_blocks(4, 16) == 16);
  DCT_CHECK(dc_readahead_blocks(40, 16) == 16);
  DCT_CHECK(dc_readahead_blocks(5, 12) == 12);
  DCT_CHECK(dc_readahead_blocks(5, 0) == 1);
}

/* a whole read through the tracker: blocks first .. last of a page of amt bytes */
static void ro_page(dc_readorder *o, int64_t first, int64_t last, int64_t amt) {
  dc_readorder_read(o, first, last, amt, 16384);
  for (int64_t b = first; b <= last; b++) dc_readorder_at(o, b);
}

static void test_readorder(void) {
  dc_readorder o;
  /* 32 KiB pages of 2 blocks of 16 KiB: a scan of blobs, each row's leaf page lying after the
  ** row's overflow chain (SQLite reads the leaf page first, then the chain from behind) */
  dc_readorder_init(&o);
  DCT_CHECK(!dc_readorder_in_order(&o, 0));               /* nothing read yet */
  ro_page(&o, 46, 47, 32768);                              /* a chain's first page */
  ro_page(&o, 48, 49, 32768);                              /* the next: reads on from there */
  DCT_CHECK(o.next == 50 && o.page_blocks == 2);
  for (int64_t b = 50; b < 58; b += 2) {
    DCT_CHECK(dc_readorder_in_order(&o, b));
    ro_page(&o, b, b + 1, 32768);
  }
  DCT_CHECK(o.next == 58);
  /* the next row's leaf page, past its chain: out of order, the place stays */
  ro_page(&o, 72, 73, 32768);
  DCT_CHECK(o.next == 58);
  /* its chain begins one page after the place (the previous row's leaf page, 58-59, was read
  ** before its own chain): in order */
  DCT_CHECK(dc_readorder_in_order(&o, 60));
  ro_page(&o, 60, 61, 32768);
  DCT_CHECK(o.next == 62);
  /* with one block per page only one block between is in order */
  dc_readorder_init(&o);
  ro_page(&o, 10, 10, 4096);
  DCT_CHECK(dc_readorder_in_order(&o, 11) && dc_readorder_in_order(&o, 12) && !dc_readorder_in_order(&o, 13));
  /* pages far apart: never in order, and the place does not move */
  dc_readorder_init(&o);
  ro_page(&o, 100, 100, 4096);
  ro_page(&o, 500, 500, 4096);
  ro_page(&o, 900, 900, 4096);
  ro_page(&o, 300, 300, 4096);
  DCT_CHECK(o.next == 101 && !dc_readorder_in_order(&o, 301));
  /* after going elsewhere, two reads one after the other there: the reader's new place */
  ro_page(&o, 301, 301, 4096);
  DCT_CHECK(o.next == 302 && dc_readorder_in_order(&o, 302));
  /* a small read (the header's change counter) does not change the page size */
  dc_readorder_init(&o);
  ro_page(&o, 0, 1, 32768);
  dc_readorder_read(&o, 0, 0, 100, 16384);
  DCT_CHECK(o.page_blocks == 2);
}

static void test_retry_policy(void) {
  DCT_CHECK(dc_retryable(1, 0));
  DCT_CHECK(dc_retryable(0, 500) && dc_retryable(0, 503) && dc_retryable(0, 429) && dc_retryable(0, 408));
  DCT_CHECK(!dc_retryable(0, 404) && !dc_retryable(0, 403) && !dc_retryable(0, 200) && !dc_retryable(0, 416));
  DCT_CHECK(dc_backoff_ms(1, 100, 2000) == 100);
  DCT_CHECK(dc_backoff_ms(2, 100, 2000) == 200);
  DCT_CHECK(dc_backoff_ms(4, 100, 2000) == 800);
  DCT_CHECK(dc_backoff_ms(10, 100, 2000) == 2000);
  DCT_CHECK(dc_backoff_ms(1000, 100, 2000) == 2000);
}

static void test_throttle(void) {
  dc_throttle t = {0.05, 150e6};
  double w = dc_throttle_wait(&t, 1500000, 0.0);          /* 50 ms + 10 ms */
  DCT_CHECKF(w > 0.0599 && w < 0.0601, "%f", w);
  w = dc_throttle_wait(&t, 1500000, 0.02);                /* 20 ms already spent */
  DCT_CHECKF(w > 0.0399 && w < 0.0401, "%f", w);
  DCT_CHECK(dc_throttle_wait(&t, 1500000, 1.0) == 0);      /* slower than the emulation */
  dc_throttle u = {0, 0};
  DCT_CHECK(dc_throttle_wait(&u, 1 << 30, 0) == 0);
}

static void test_validators(void) {
  dc_validator a = {"\"abc\"", "Mon, 01 Jan 2024 00:00:00 GMT", 1000}, r = a;
  char why[256];
  DCT_CHECK(!dc_validator_differs(&a, &r, why, sizeof why));
  strcpy(r.etag, "\"abd\"");
  DCT_CHECK(dc_validator_differs(&a, &r, why, sizeof why) && strstr(why, "ETag"));
  r = a; strcpy(r.last_modified, "Tue, 02 Jan 2024 00:00:00 GMT");
  DCT_CHECK(dc_validator_differs(&a, &r, why, sizeof why) && strstr(why, "Last-Modified"));
  r = a; r.size = 1001;
  DCT_CHECK(dc_validator_differs(&a, &r, why, sizeof why) && strstr(why, "size"));
  r = a; r.etag[0] = 0; r.last_modified[0] = 0; r.size = -1;  /* nothing sent: nothing compared */
  DCT_CHECK(!dc_validator_differs(&a, &r, why, sizeof why));
  int64_t s, e, t;
  DCT_CHECK(dc_parse_content_range("bytes 0-1023/5000", &s, &e, &t) && s == 0 && e == 1023 && t == 5000);
  DCT_CHECK(dc_parse_content_range("bytes 4096-4999/*", &s, &e, &t) && t == -1);
  DCT_CHECK(!dc_parse_content_range("bytes */5000", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 10-5/5000", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 0-5000/5000", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("items 0-1/2", &s, &e, &t));
  /* numbers past 2^62 (no file is that large; their sums would overflow), signs and blanks
  ** inside the range (strtoll would take them) are refused (fuzz_remote found the first) */
  DCT_CHECK(!dc_parse_content_range("bytes 0-9223372036854775807/*", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 0-4611686018427387904/*", &s, &e, &t));
  DCT_CHECK(dc_parse_content_range("bytes 0-4611686018427387903/4611686018427387904", &s, &e, &t) &&
            e == 4611686018427387903LL && t == 4611686018427387904LL);
  DCT_CHECK(!dc_parse_content_range("bytes 0-10/99999999999999999999", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes +0-10/20", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 0- 10/20", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 0-10/ 20", &s, &e, &t));
  DCT_CHECK(!dc_parse_content_range("bytes 0-+10/20", &s, &e, &t));
  char v[16];
  dc_header_value("  \"x\"\r\n", 7, v, sizeof v);
  DCT_CHECK(strcmp(v, "\"x\"") == 0);
  dc_header_value(" 0123456789abcdefghij", 21, v, sizeof v);   /* cut to fit */
  DCT_CHECK(strlen(v) == 15);
}

static void test_blockcache(void) {
  dc_blockcache *c = dc_blockcache_new(2, 16);
  DCT_CHECK(c != NULL);
  if (!c) return;
  int64_t len;
  DCT_CHECK(dc_blockcache_get(c, 0, &len) == NULL);
  uint8_t *s = dc_blockcache_slot(c, 0);
  memset(s, 'a', 16);
  DCT_CHECK(dc_blockcache_get(c, 0, &len) == NULL);              /* not held before commit */
  dc_blockcache_commit(c, 0, 16);
  s = dc_blockcache_slot(c, 1); memset(s, 'b', 10); dc_blockcache_commit(c, 1, 10);
  const uint8_t *g = dc_blockcache_get(c, 0, &len);               /* 0 is now the most recent */
  DCT_CHECK(g && len == 16 && g[15] == 'a');
  s = dc_blockcache_slot(c, 2); memset(s, 'c', 16); dc_blockcache_commit(c, 2, 16);   /* evicts 1 */
  DCT_CHECK(dc_blockcache_get(c, 1, &len) == NULL);
  g = dc_blockcache_get(c, 0, &len);
  DCT_CHECK(g && g[0] == 'a');
  g = dc_blockcache_get(c, 2, &len);
  DCT_CHECK(g && g[0] == 'c' && len == 16);
  /* a lookup between taking a slot and committing it does not lose the slot */
  s = dc_blockcache_slot(c, 5); memset(s, 'e', 16);
  DCT_CHECK(dc_blockcache_get(c, 2, &len) != NULL);
  dc_blockcache_commit(c, 5, 16);
  g = dc_blockcache_get(c, 5, &len);
  DCT_CHECK(g && g[0] == 'e');
  uint8_t *s6 = dc_blockcache_slot(c, 6);              /* must not hand out 5's buffer */
  DCT_CHECK(s6 != s);
  dc_blockcache_clear(c);
  DCT_CHECK(dc_blockcache_get(c, 2, &len) == NULL);
  dc_blockcache_free(c);
  DCT_CHECK(dc_blockcache_new(0, 16) == NULL);
}

static void test_sharedcache(void) {
  dc_sharedcache *c = dc_sharedcache_new(2, 8);
  DCT_CHECK(c != NULL);
  if (!c) return;
  uint8_t b[8], o[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)('a' + i);
  dc_sharedcache_put(c, 1, 0, b, 8);                        /* "abcdefgh" */
  memset(b, 'B', 8); dc_sharedcache_put(c, 2, 0, b, 8);    /* same block, another file version */
  DCT_CHECK(dc_sharedcache_get(c, 1, 0, 8, 0, 8, o) && o[0] == 'a' && o[7] == 'h');
  memset(o, 0, 8);                                          /* part of a block: bytes 3..4 only */
  DCT_CHECK(dc_sharedcache_get(c, 1, 0, 8, 3, 2, o) && o[0] == 'd' && o[1] == 'e' && o[2] == 0);
  DCT_CHECK(dc_sharedcache_get(c, 1, 0, 8, 8, 0, o));       /* an empty part at the end */
  DCT_CHECK(!dc_sharedcache_get(c, 1, 0, 8, 7, 2, o) && !dc_sharedcache_get(c, 1, 0, 8, -1, 1, o) &&
            !dc_sharedcache_get(c, 1, 0, 8, 9, 0, o));      /* a part outside the block */
  DCT_CHECK(!dc_sharedcache_get(c, 1, 0, 7, 0, 7, o));      /* a length that differs is a miss */
  DCT_CHECK(dc_sharedcache_get(c, 2, 0, 8, 0, 8, o) && o[0] == 'B');
  DCT_CHECK(dc_sharedcache_has(c, 1, 0, 8) && dc_sharedcache_has(c, 2, 0, 8));
  DCT_CHECK(!dc_sharedcache_has(c, 1, 0, 7) && !dc_sharedcache_has(c, 3, 0, 8) && !dc_sharedcache_has(c, 1, 1, 8));
  memset(b, 'c', 8); dc_sharedcache_put(c, 1, 5, b, 8);    /* evicts (1,0), the least recent */
  DCT_CHECK(!dc_sharedcache_get(c, 1, 0, 8, 0, 8, o) && !dc_sharedcache_has(c, 1, 0, 8));
  DCT_CHECK(dc_sharedcache_get(c, 1, 5, 8, 0, 8, o) && o[7] == 'c');
  memset(b, 'z', 8); dc_sharedcache_put(c, 1, 5, b, 8);    /* held already: kept as it was */
  DCT_CHECK(dc_sharedcache_get(c, 1, 5, 8, 0, 8, o) && o[0] == 'c');
  uint8_t big[9] = {0};
  dc_sharedcache_put(c, 3, 0, big, 9);                      /* over cap: not kept */
  DCT_CHECK(!dc_sharedcache_get(c, 3, 0, 9, 0, 9, big));

  /* in two steps: a slot being filled is invisible and never picked again */
  int s1, s2, s3;
  uint8_t *d1 = dc_sharedcache_claim(c, 7, 0, 8, &s1);     /* evicts (2,0), the least recent */
  DCT_CHECK(d1 != NULL && s1 >= 0 && !dc_sharedcache_has(c, 2, 0, 8) && !dc_sharedcache_has(c, 7, 0, 8));
  uint8_t *d2 = dc_sharedcache_claim(c, 7, 1, 8, &s2);     /* the other slot: (1,5) goes */
  DCT_CHECK(d2 != NULL && s2 >= 0 && s2 != s1 && d2 != d1 && !dc_sharedcache_has(c, 1, 5, 8));
  DCT_CHECK(dc_sharedcache_claim(c, 7, 2, 8, &s3) == NULL && s3 == -1);   /* both being filled */
  DCT_CHECK(dc_sharedcache_claim(c, 7, 0, 9, &s3) == NULL && s3 == -1);   /* over cap */
  if (d1 && d2) {
    memset(d1, '1', 8); memset(d2, '2', 8);
    dc_sharedcache_publish(c, s1, 7, 0, 8);
    DCT_CHECK(dc_sharedcache_get(c, 7, 0, 8, 0, 8, o) && o[0] == '1' && !dc_sharedcache_has(c, 7, 1, 8));
    dc_sharedcache_publish(c, s2, 7, 1, 8);
    DCT_CHECK(dc_sharedcache_get(c, 7, 1, 8, 0, 8, o) && o[0] == '2');
    DCT_CHECK(dc_sharedcache_claim(c, 7, 1, 8, &s3) == NULL && s3 == -1);   /* held already */
  }
  /* a fork during a fill: the child's copy of the slot becomes empty, and a late publish of it
  ** is ignored */
  uint8_t *d3 = dc_sharedcache_claim(c, 8, 0, 8, &s3);
  DCT_CHECK(d3 != NULL && s3 >= 0);
  dc_sharedcache_drop_fills(c);
  dc_sharedcache_publish(c, s3, 8, 0, 8);
  DCT_CHECK(!dc_sharedcache_has(c, 8, 0, 8));
  int s4;
  DCT_CHECK(dc_sharedcache_claim(c, 8, 0, 8, &s4) != NULL && s4 == s3);   /* the empty slot first */
  dc_sharedcache_free(c);
}

static void test_cache_names_and_eviction(void) {
  dc_validator a = {"\"e1\"", "", 100}, b = a;
  strcpy(b.etag, "\"e2\"");
  DCT_CHECK(dc_cache_key("http://h/x", &a) != dc_cache_key("http://h/x", &b));
  DCT_CHECK(dc_cache_key("http://h/x", &a) != dc_cache_key("http://h/y", &a));
  DCT_CHECK(dc_cache_key("http://h/x", &a) == dc_cache_key("http://h/x", &a));
  char n[96];
  dc_cache_name(n, sizeof n, 0xabcull, 1 << 20, 7);
  DCT_CHECK(strcmp(n, "dc-0000000000000abc-1024k-7.blk") == 0);
  dc_cachefile f[4] = {{100, 30, 0}, {100, 10, 1}, {100, 40, 2}, {100, 20, 3}};
  int k = dc_evict_plan(f, 4, 250, 100);          /* 500 -> at most 250: delete the 3 oldest */
  DCT_CHECK(k == 3 && f[0].idx == 1 && f[1].idx == 3 && f[2].idx == 0);
  dc_cachefile g[2] = {{100, 1, 0}, {100, 2, 1}};
  DCT_CHECK(dc_evict_plan(g, 2, 1000, 100) == 0);
  DCT_CHECK(dc_evict_plan(g, 2, 50, 100) == 2);    /* even all gone it does not fit */
  DCT_CHECK(dc_evict_plan(NULL, 0, 50, 10) == 0);   /* an empty directory */
}

static void test_partstore(void) {
  DCT_CHECK(dc_partstore_new(0) == NULL);
  dc_partstore *s = dc_partstore_new(10);
  DCT_CHECK(s != NULL);
  if (!s) return;
  uint8_t o[12];
  DCT_CHECK(!dc_partstore_get(s, 1, 0, 1, o));              /* empty */
  dc_partstore_put(s, 1, 100, (const uint8_t *)"abcdef", 6); /* bytes 100..105 of version 1: ring [0, 6) */
  DCT_CHECK(dc_partstore_get(s, 1, 100, 6, o) && !memcmp(o, "abcdef", 6));
  memset(o, 0, sizeof o);
  DCT_CHECK(dc_partstore_get(s, 1, 102, 3, o) && !memcmp(o, "cde", 3) && o[3] == 0);
  DCT_CHECK(dc_partstore_get(s, 1, 101, 2, NULL));           /* only the answer */
  DCT_CHECK(!dc_partstore_get(s, 1, 99, 2, o) && !dc_partstore_get(s, 1, 105, 2, o) &&
            !dc_partstore_get(s, 2, 100, 6, o) && !dc_partstore_get(s, 1, 100, 0, o) &&
            !dc_partstore_get(s, 1, -1, 1, o));              /* across an end, another version, empty */
  dc_partstore_put(s, 1, 200, (const uint8_t *)"WXYZ", 4);  /* ring [6, 10) */
  DCT_CHECK(dc_partstore_get(s, 1, 200, 4, o) && !memcmp(o, "WXYZ", 4) && dc_partstore_get(s, 1, 100, 6, NULL));
  dc_partstore_put(s, 2, 100, (const uint8_t *)"123", 3);   /* no room at the end: ring [0, 3), overwrites the first */
  DCT_CHECK(!dc_partstore_get(s, 1, 100, 1, o) && dc_partstore_get(s, 1, 200, 4, NULL));
  DCT_CHECK(dc_partstore_get(s, 2, 100, 3, o) && !memcmp(o, "123", 3));
  dc_partstore_put(s, 2, 300, (const uint8_t *)"pq", 2);    /* ring [3, 5) */
  /* wrapping again while the oldest part (version 1's, at [6, 10)) lies past the new one: every
  ** part the new one overwrites goes, not only the oldest */
  dc_partstore_put(s, 3, 0, (const uint8_t *)"qrstuv", 6);  /* 5 + 6 > 10: ring [0, 6) */
  DCT_CHECK(!dc_partstore_get(s, 2, 100, 1, o) && !dc_partstore_get(s, 2, 300, 1, o));
  DCT_CHECK(dc_partstore_get(s, 1, 200, 4, o) && !memcmp(o, "WXYZ", 4));
  DCT_CHECK(dc_partstore_get(s, 3, 0, 6, o) && !memcmp(o, "qrstuv", 6));
  uint8_t big[11] = {0};
  dc_partstore_put(s, 4, 0, big, 11);                       /* over cap: not kept, nothing goes */
  DCT_CHECK(!dc_partstore_get(s, 4, 0, 1, o) && dc_partstore_get(s, 3, 0, 6, NULL));
  dc_partstore_free(s);
  /* at most DC_PARTS_MAX parts: the oldest goes */
  s = dc_partstore_new(4 * DC_PARTS_MAX);
  DCT_CHECK(s != NULL);
  if (!s) return;
  for (int i = 0; i <= DC_PARTS_MAX; i++) {
    uint8_t b[2] = {(uint8_t)i, (uint8_t)(i >> 8)};
    dc_partstore_put(s, 9, 10 * (int64_t)i, b, 2);
  }
  DCT_CHECK(!dc_partstore_get(s, 9, 0, 2, o));
  DCT_CHECK(dc_partstore_get(s, 9, 10, 2, o) && o[0] == 1);
  DCT_CHECK(dc_partstore_get(s, 9, 10 * (int64_t)DC_PARTS_MAX, 2, o) && o[0] == (uint8_t)DC_PARTS_MAX);
  dc_partstore_free(s);
}

static void test_s3(void) {
  char u[256], why[128];
  DCT_CHECK(dc_s3_url("s3://bkt/dir/a.dcdb", "http://127.0.0.1:9000/", "eu-west-1", u, sizeof u, why, sizeof why));
  DCT_CHECK(strcmp(u, "http://127.0.0.1:9000/bkt/dir/a.dcdb") == 0);
  DCT_CHECK(dc_s3_url("s3://bkt/a.dcdb", NULL, "eu-west-1", u, sizeof u, why, sizeof why));
  DCT_CHECK(strcmp(u, "https://bkt.s3.eu-west-1.amazonaws.com/a.dcdb") == 0);
  /* a key as S3 names it, encoded for the URL as SigV4 encodes it ('/' kept) */
  DCT_CHECK(dc_s3_url("s3://bkt/d/a+b=c (1)%41;\xc3\xbc~_.-.dcdb", "http://h:1", NULL, u, sizeof u, why, sizeof why));
  DCT_CHECK(strcmp(u, "http://h:1/bkt/d/a%2Bb%3Dc%20%281%29%2541%3B%C3%BC~_.-.dcdb") == 0);
  DCT_CHECK(!dc_s3_url("s3://bkt", NULL, NULL, u, sizeof u, why, sizeof why) && strstr(why, "BUCKET/KEY"));
  DCT_CHECK(!dc_s3_url("s3:///key", NULL, NULL, u, sizeof u, why, sizeof why));
  DCT_CHECK(dc_is_remote_name("https://x/y") && dc_is_remote_name("HTTP://x") && dc_is_remote_name("s3://b/k"));
  DCT_CHECK(!dc_is_remote_name("/tmp/x.dcdb") && !dc_is_remote_name("ftp://x") && !dc_is_remote_name(NULL));
}

/* the checks on what a range GET returned (http_transport.c acts on the verdict) */
static void test_range_check(void) {
  char why[200];
  int tr;
  /* bytes 100..199 asked for and got */
  dc_range_resp ok = {0, 206, 0, 100, 100, 100, 1, 100, 199};
  DCT_CHECK(dc_range_check(&ok, &tr, why, sizeof why) == DC_RESP_OK && tr == 0 && why[0] == 0);
  /* the last, short block: the server clips the range to the file (Content-Range says so) */
  dc_range_resp clip = {0, 206, 0, 100, 100, 40, 1, 100, 139};
  DCT_CHECK(dc_range_check(&clip, &tr, why, sizeof why) == DC_RESP_OK);
  /* a short body: a transport fault (retried) */
  dc_range_resp shortb = {0, 206, 0, 100, 100, 60, 1, 100, 199};
  DCT_CHECK(dc_range_check(&shortb, &tr, why, sizeof why) == DC_RESP_BAD && tr == 1);
  DCT_CHECKF(strcmp(why, "short body: 60 of 100 bytes") == 0, "%s", why);
  DCT_CHECK(dc_retryable(tr, 206));
  /* more than asked for */
  dc_range_resp over = {1, 206, 0, 0, 100, 100, 1, 0, 99};
  DCT_CHECK(dc_range_check(&over, &tr, why, sizeof why) == DC_RESP_BAD && tr == 0 && strstr(why, "more than the 100"));
  /* Content-Range missing or for other bytes */
  dc_range_resp nocr = {0, 206, 0, 100, 100, 100, 0, 0, 0};
  DCT_CHECK(dc_range_check(&nocr, &tr, why, sizeof why) == DC_RESP_BAD && strstr(why, "Content-Range"));
  dc_range_resp othercr = {0, 206, 0, 100, 100, 100, 1, 0, 99};
  DCT_CHECK(dc_range_check(&othercr, &tr, why, sizeof why) == DC_RESP_BAD && strstr(why, "Content-Range"));
  /* HTTP 200 to a later request: the server ignores ranges (not retried) */
  dc_range_resp norange = {0, 200, 0, 100, 100, 100, 0, 0, 0};
  DCT_CHECK(dc_range_check(&norange, &tr, why, sizeof why) == DC_RESP_BAD && strstr(why, "ignored the Range"));
  DCT_CHECK(!dc_retryable(tr, 200));
  /* at open, HTTP 200 with fewer bytes than asked for: the whole small file */
  dc_range_resp whole = {0, 200, 1, 0, 4096, 700, 0, 0, 0};
  DCT_CHECK(dc_range_check(&whole, &tr, why, sizeof why) == DC_RESP_WHOLE);
  /* ... but with as many bytes as asked for it may be a larger file served whole: refused */
  dc_range_resp big = {0, 200, 1, 0, 4096, 4096, 0, 0, 0};
  DCT_CHECK(dc_range_check(&big, &tr, why, sizeof why) == DC_RESP_BAD);
  /* 416 at open: an empty file; later it is an HTTP error */
  dc_range_resp empty = {0, 416, 1, 0, 4096, 0, 0, 0, 0};
  DCT_CHECK(dc_range_check(&empty, &tr, why, sizeof why) == DC_RESP_EMPTY);
  empty.first = 0;
  DCT_CHECK(dc_range_check(&empty, &tr, why, sizeof why) == DC_RESP_BAD && strcmp(why, "HTTP 416") == 0);
  /* 503: a server error, retried */
  dc_range_resp busy = {0, 503, 0, 0, 10, 0, 0, 0, 0};
  DCT_CHECK(dc_range_check(&busy, &tr, why, sizeof why) == DC_RESP_BAD && tr == 0 && dc_retryable(tr, 503));
}

static void test_s3_error(void) {
  char out[120];
  const char *x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SignatureDoesNotMatch</Code>"
                  "<Message>The request signature we calculated does not match\n  the signature &amp; key you provided.</Message>"
                  "<RequestId>1</RequestId></Error>";
  DCT_CHECK(dc_s3_error(x, strlen(x), out, sizeof out) == 1);
  DCT_CHECKF(strcmp(out, "SignatureDoesNotMatch: The request signature we calculated does not match the signature & key you provided.") == 0, "%s", out);
  /* no Message: the code alone; cut short before </Code>, or not XML: nothing */
  const char *c = "<Error><Code>AccessDenied</Code></Error>";
  DCT_CHECK(dc_s3_error(c, strlen(c), out, sizeof out) == 1 && strcmp(out, "AccessDenied") == 0);
  DCT_CHECK(dc_s3_error(c, 20, out, sizeof out) == 0);
  DCT_CHECK(dc_s3_error("<html>403 Forbidden</html>", 26, out, sizeof out) == 0);
  DCT_CHECK(dc_s3_error(x, strlen(x), out, 0) == 0);
  /* a small out is cut, still terminated */
  char small[8];
  DCT_CHECK(dc_s3_error(c, strlen(c), small, sizeof small) == 1 && strcmp(small, "AccessD") == 0);
  /* an error status is the reason even when its body overflowed the range asked for */
  char why[64];
  int tr;
  dc_range_resp big403 = {1, 403, 1, 0, 100, 100, 0, 0, 0};
  DCT_CHECK(dc_range_check(&big403, &tr, why, sizeof why) == DC_RESP_BAD && strcmp(why, "HTTP 403") == 0 && !dc_retryable(tr, 403));
}

/* versions a process confirmed: who (URL and credential), freshness, replacement, forgetting */
static void test_known(void) {
  dc_knownset s;
  memset(&s, 0, sizeof s);
  uint64_t a = dc_known_who("https://h/a.dcdb", NULL), a_signed = dc_known_who("https://h/a.dcdb", "AK:SK");
  DCT_CHECK(a != a_signed && a == dc_known_who("https://h/a.dcdb", ""));
  DCT_CHECK(a != dc_known_who("https://h/b.dcdb", NULL));
  dc_validator v1 = {"\"e1\"", "", 1000}, v2 = {"\"e2\"", "", 1000};
  DCT_CHECK(dc_known_get(&s, a, 10.0, 30) == NULL);
  dc_known_put(&s, a, &v1, 1000, 10.0);
  const dc_known *e = dc_known_get(&s, a, 39.0, 30);
  DCT_CHECK(e && e->size == 1000 && strcmp(e->val.etag, "\"e1\"") == 0);
  DCT_CHECK(dc_known_get(&s, a, 40.5, 30) == NULL);       /* older than fresh_s */
  DCT_CHECK(dc_known_get(&s, a, 11.0, 0) == NULL);        /* fresh_s 0: never */
  DCT_CHECK(dc_known_get(&s, a, 9.0, 30) == NULL);        /* a clock before the confirmation */
  DCT_CHECK(dc_known_get(&s, a_signed, 11.0, 30) == NULL); /* another credential */
  dc_known_seen(&s, a, &v2, 35.0);                        /* another version: no confirmation */
  DCT_CHECK(dc_known_get(&s, a, 40.5, 30) == NULL);
  dc_known_seen(&s, a, &v1, 35.0);                        /* the same: confirmed again */
  DCT_CHECK(dc_known_get(&s, a, 60.0, 30) != NULL);
  dc_validator partial = {"", "", -1};                    /* a response without validators matches */
  dc_known_seen(&s, a, &partial, 50.0);
  DCT_CHECK(dc_known_get(&s, a, 79.0, 30) != NULL);
  dc_known_put(&s, a, &v2, 2000, 51.0);                   /* replaced, not added */
  DCT_CHECK(s.n == 1 && dc_known_get(&s, a, 52.0, 30)->size == 2000);
  dc_known_forget(&s, a);
  DCT_CHECK(s.n == 0 && dc_known_get(&s, a, 52.0, 30) == NULL);
  dc_known_forget(&s, a);                                 /* nothing to forget */
  DCT_CHECK(s.n == 0);
  /* full: the entry confirmed longest ago goes */
  char url[64];
  for (int i = 0; i < DC_KNOWN_MAX; i++) {
    snprintf(url, sizeof url, "https://h/%d", i);
    dc_known_put(&s, dc_known_who(url, NULL), &v1, 1000, 100.0 + (i == 3 ? -50 : i));
  }
  DCT_CHECK(s.n == DC_KNOWN_MAX);
  dc_known_put(&s, a, &v1, 1000, 200.0);
  DCT_CHECK(s.n == DC_KNOWN_MAX && dc_known_get(&s, a, 201.0, 30) != NULL);
  DCT_CHECK(dc_known_get(&s, dc_known_who("https://h/3", NULL), 60.0, 1000) == NULL);
  DCT_CHECK(dc_known_get(&s, dc_known_who("https://h/2", NULL), 110.0, 1000) != NULL);
}

int main(void) {
  DCT_RUN(test_blocks);
  DCT_RUN(test_readahead);
  DCT_RUN(test_readorder);
  DCT_RUN(test_retry_policy);
  DCT_RUN(test_throttle);
  DCT_RUN(test_validators);
  DCT_RUN(test_blockcache);
  DCT_RUN(test_sharedcache);
  DCT_RUN(test_partstore);
  DCT_RUN(test_cache_names_and_eviction);
  DCT_RUN(test_s3);
  DCT_RUN(test_range_check);
  DCT_RUN(test_s3_error);
  DCT_RUN(test_known);
  return dct_done();
}
