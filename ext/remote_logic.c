/*
** remote_logic.c — pure logic of the remote-file VFS (see dc_remote.h).
** No SQLite, no libcurl, no I/O.
*/
#include "dc_remote.h"
#include "dc_codec.h"     /* dc_mem_alloc_huge */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int dc_blocks_for(int64_t off, int64_t len, int64_t bsize, int64_t fsize, int64_t *first, int64_t *last) {
  if (off < 0 || len <= 0 || bsize <= 0 || off >= fsize) return 0;
  int64_t end = len > fsize - off ? fsize : off + len;   /* exclusive; fsize - off > 0: no overflow */
  *first = off / bsize;
  *last = (end - 1) / bsize;
  return 1;
}

int64_t dc_block_len(int64_t idx, int64_t bsize, int64_t fsize) {
  if (idx < 0 || bsize <= 0 || fsize <= 0 || idx > (fsize - 1) / bsize) return 0;   /* no idx * bsize overflow */
  int64_t start = idx * bsize;
  return fsize - start < bsize ? fsize - start : bsize;
}

int64_t dc_readahead_blocks(int run, int64_t max_blocks) {
  int64_t n = 1;
  for (int i = 0; i < run && n < max_blocks; i++) n *= 2;
  if (n > max_blocks) n = max_blocks;
  return n < 1 ? 1 : n;
}

void dc_readorder_init(dc_readorder *o) {
  o->next = o->alt = -1;
  o->page_blocks = 1;
}

int dc_readorder_in_order(const dc_readorder *o, int64_t b) {
  return o->next >= 0 && b >= o->next && b <= o->next + o->page_blocks;
}

void dc_readorder_read(dc_readorder *o, int64_t first, int64_t last, int64_t amt, int64_t bsize) {
  if (amt >= 512 && bsize > 0) {              /* a page (smaller reads: the header's fields) */
    int64_t pb = (amt + bsize - 1) / bsize;
    o->page_blocks = pb > 1 ? pb : 1;
  }
  if (dc_readorder_in_order(o, first)) return;
  if (o->alt >= 0 && first >= o->alt && first <= o->alt + 1) o->next = first;
  else o->alt = last + 1;
}

void dc_readorder_at(dc_readorder *o, int64_t b) {
  if (o->next < 0 || dc_readorder_in_order(o, b)) o->next = b + 1;
}

int dc_retryable(int transport, long status) {
  if (transport) return 1;
  return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

int64_t dc_backoff_ms(int attempt, int64_t base_ms, int64_t max_ms) {
  if (attempt < 1) attempt = 1;
  int64_t d = base_ms;
  for (int i = 1; i < attempt && d < max_ms; i++) d *= 2;
  return d > max_ms ? max_ms : d;
}

double dc_throttle_wait(const dc_throttle *t, int64_t bytes, double elapsed_s) {
  double want = t->latency_s;
  if (t->bytes_per_s > 0) want += (double)bytes / t->bytes_per_s;
  double w = want - elapsed_s;
  return w > 0 ? w : 0;
}

int dc_validator_differs(const dc_validator *a, const dc_validator *r, char *why, size_t n) {
  if (r->etag[0] && strcmp(a->etag, r->etag) != 0) {
    snprintf(why, n, "the file changed on the server (ETag %s at open, now %s)", a->etag[0] ? a->etag : "(none)",
             r->etag);
    return 1;
  }
  if (r->last_modified[0] && strcmp(a->last_modified, r->last_modified) != 0) {
    snprintf(why, n, "the file changed on the server (Last-Modified %s at open, now %s)",
             a->last_modified[0] ? a->last_modified : "(none)", r->last_modified);
    return 1;
  }
  if (r->size >= 0 && a->size >= 0 && r->size != a->size) {
    snprintf(why, n, "the file changed on the server (size %lld at open, now %lld)", (long long)a->size,
             (long long)r->size);
    return 1;
  }
  return 0;
}

/* Offsets past 2^62 (4 EiB) name no file: refused, so that no sum of them can overflow. */
#define CR_MAX (1LL << 62)

int dc_parse_content_range(const char *v, int64_t *start, int64_t *end, int64_t *total) {
  while (*v == ' ') v++;
  if (strncasecmp(v, "bytes", 5) != 0) return 0;
  v += 5;
  while (*v == ' ') v++;
  char *e;
  if (*v < '0' || *v > '9') return 0;         /* digits only: no sign, no blanks (strtoll takes both) */
  long long s = strtoll(v, &e, 10);
  if (*e != '-' || s < 0 || s >= CR_MAX) return 0;
  v = e + 1;
  if (*v < '0' || *v > '9') return 0;
  long long x = strtoll(v, &e, 10);
  if (*e != '/' || x < s || x >= CR_MAX) return 0;
  v = e + 1;
  long long t;
  if (*v == '*') t = -1;
  else {
    if (*v < '0' || *v > '9') return 0;
    t = strtoll(v, &e, 10);
    if (t <= x || t > CR_MAX) return 0;
  }
  *start = s; *end = x; *total = t;
  return 1;
}

void dc_header_value(const char *v, size_t n, char *out, size_t out_n) {
  while (n && (*v == ' ' || *v == '\t')) { v++; n--; }
  while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
  if (n >= out_n) n = out_n - 1;
  memcpy(out, v, n);
  out[n] = 0;
}

struct dc_blockcache {
  int slots;
  int64_t bsize;
  int64_t *idx;        /* -1: empty */
  int64_t *len;
  uint64_t *used;      /* last use, for LRU */
  uint64_t tick;
  uint8_t **buf;
  int pending;         /* the slot dc_blockcache_slot handed out, until committed (-1: none) */
};

dc_blockcache *dc_blockcache_new(int slots, int64_t bsize) {
  if (slots < 1 || bsize < 1) return NULL;
  dc_blockcache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->slots = slots; c->bsize = bsize;
  c->idx = malloc(sizeof *c->idx * (size_t)slots);
  c->len = calloc((size_t)slots, sizeof *c->len);
  c->used = calloc((size_t)slots, sizeof *c->used);
  c->buf = calloc((size_t)slots, sizeof *c->buf);
  if (!c->idx || !c->len || !c->used || !c->buf) { dc_blockcache_free(c); return NULL; }
  for (int i = 0; i < slots; i++) c->idx[i] = -1;
  c->pending = -1;
  return c;
}

void dc_blockcache_free(dc_blockcache *c) {
  if (!c) return;
  if (c->buf) for (int i = 0; i < c->slots; i++) free(c->buf[i]);
  free(c->buf); free(c->idx); free(c->len); free(c->used); free(c);
}

const uint8_t *dc_blockcache_get(dc_blockcache *c, int64_t idx, int64_t *len) {
  for (int i = 0; i < c->slots; i++)
    if (c->idx[i] == idx) { c->used[i] = ++c->tick; *len = c->len[i]; return c->buf[i]; }
  return NULL;
}

uint8_t *dc_blockcache_slot(dc_blockcache *c, int64_t idx) {
  int v = 0;
  for (int i = 0; i < c->slots; i++) {
    if (c->idx[i] == idx) { v = i; break; }
    if (c->idx[i] < 0) { v = i; break; }
    if (c->used[i] < c->used[v]) v = i;
  }
  if (!c->buf[v] && !(c->buf[v] = malloc((size_t)c->bsize))) return NULL;
  c->idx[v] = -1;        /* not held until committed */
  c->used[v] = ++c->tick;
  c->pending = v;
  return c->buf[v];
}

void dc_blockcache_commit(dc_blockcache *c, int64_t idx, int64_t len) {
  if (c->pending < 0) return;
  for (int i = 0; i < c->slots; i++)       /* one slot per block */
    if (c->idx[i] == idx) c->idx[i] = -1;
  c->idx[c->pending] = idx;
  c->len[c->pending] = len;
  c->pending = -1;
}

void dc_blockcache_clear(dc_blockcache *c) {
  for (int i = 0; i < c->slots; i++) c->idx[i] = -1;
  c->pending = -1;
}

struct dc_sharedcache {
  int slots;
  int64_t cap;
  uint64_t *key;
  int64_t *idx, *len;
  uint64_t *used, tick;
  uint8_t **buf;       /* slot i: arena + i * cap */
  uint8_t *arena;      /* every slot's bytes, in huge pages where the system has them (dc_mem_alloc_huge):
                          a new process (a DataLoader worker each epoch) fills slots in fresh memory,
                          one page fault per 2 MiB instead of one per 4 KiB; reserved, touched as filled */
  size_t arena_len;    /* dc_mem_free's */
  uint8_t *filling;    /* claimed, being filled by its caller: neither visible nor picked */
};

dc_sharedcache *dc_sharedcache_new(int slots, int64_t cap) {
  if (slots < 1 || cap < 1) return NULL;
  dc_sharedcache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->slots = slots; c->cap = cap;
  c->key = calloc((size_t)slots, sizeof *c->key);
  c->idx = malloc(sizeof *c->idx * (size_t)slots);
  c->len = calloc((size_t)slots, sizeof *c->len);
  c->used = calloc((size_t)slots, sizeof *c->used);
  c->buf = calloc((size_t)slots, sizeof *c->buf);
  c->filling = calloc((size_t)slots, sizeof *c->filling);
  if ((uint64_t)cap > SIZE_MAX / (size_t)slots) {
    dc_sharedcache_free(c);
    return NULL;
  }
  c->arena = dc_mem_alloc_huge((size_t)slots * (size_t)cap, &c->arena_len);
  if (!c->key || !c->idx || !c->len || !c->used || !c->buf || !c->filling || !c->arena) {
    dc_sharedcache_free(c);
    return NULL;
  }
  for (int i = 0; i < slots; i++) {
    c->idx[i] = -1;
    c->buf[i] = c->arena + (size_t)i * (size_t)cap;
  }
  return c;
}

void dc_sharedcache_free(dc_sharedcache *c) {
  if (!c) return;
  dc_mem_free(c->arena, c->arena_len);
  free(c->buf); free(c->filling); free(c->key); free(c->idx); free(c->len); free(c->used); free(c);
}

int dc_sharedcache_get(dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len, int64_t off, int64_t n,
                       uint8_t *out) {
  if (off < 0 || n < 0 || off > len || n > len - off) return 0;
  for (int i = 0; i < c->slots; i++)
    if (c->idx[i] == idx && c->key[i] == key && c->len[i] == len) {
      memcpy(out, c->buf[i] + off, (size_t)n);
      c->used[i] = ++c->tick;
      return 1;
    }
  return 0;
}

int dc_sharedcache_has(const dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len) {
  for (int i = 0; i < c->slots; i++)
    if (c->idx[i] == idx && c->key[i] == key && c->len[i] == len) return 1;
  return 0;
}

uint8_t *dc_sharedcache_claim(dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len, int *slot) {
  *slot = -1;
  if (len > c->cap || len < 0) return NULL;
  int v = -1;
  for (int i = 0; i < c->slots; i++) {
    if (c->filling[i]) continue;
    if (c->idx[i] == idx && c->key[i] == key && c->len[i] == len) { c->used[i] = ++c->tick; return NULL; }
    if (v < 0 || (c->idx[v] >= 0 && (c->idx[i] < 0 || c->used[i] < c->used[v]))) v = i;
  }
  if (v < 0) return NULL;                       /* every slot is being filled */
  c->idx[v] = -1;
  c->filling[v] = 1;
  *slot = v;
  return c->buf[v];
}

void dc_sharedcache_publish(dc_sharedcache *c, int slot, uint64_t key, int64_t idx, int64_t len) {
  if (slot < 0 || slot >= c->slots || !c->filling[slot]) return;
  for (int i = 0; i < c->slots; i++)          /* one copy of a block: an older one goes */
    if (!c->filling[i] && c->idx[i] == idx && c->key[i] == key) c->idx[i] = -1;
  c->filling[slot] = 0;
  c->key[slot] = key; c->idx[slot] = idx; c->len[slot] = len; c->used[slot] = ++c->tick;
}

void dc_sharedcache_drop_fills(dc_sharedcache *c) {
  for (int i = 0; i < c->slots; i++) c->filling[i] = 0;   /* (their idx is -1: empty) */
}

void dc_sharedcache_put(dc_sharedcache *c, uint64_t key, int64_t idx, const uint8_t *b, int64_t len) {
  int slot;
  uint8_t *dst = dc_sharedcache_claim(c, key, idx, len, &slot);
  if (!dst) return;
  memcpy(dst, b, (size_t)len);
  dc_sharedcache_publish(c, slot, key, idx, len);
}

static uint64_t fnv(uint64_t h, const char *s) {
  for (; *s; s++) { h ^= (uint8_t)*s; h *= 1099511628211ull; }
  h ^= 0xff; h *= 1099511628211ull;           /* field separator */
  return h;
}

uint64_t dc_cache_key(const char *url, const dc_validator *v) {
  char sz[32];
  snprintf(sz, sizeof sz, "%lld", (long long)v->size);
  uint64_t h = 14695981039346656037ull;
  h = fnv(h, url); h = fnv(h, v->etag); h = fnv(h, v->last_modified); h = fnv(h, sz);
  return h;
}

uint64_t dc_known_who(const char *url, const char *credential) {
  uint64_t h = 14695981039346656037ull;
  h = fnv(h, url ? url : "");
  return fnv(h, credential ? credential : "");
}

static int known_find(const dc_knownset *s, uint64_t who) {
  for (int i = 0; i < s->n; i++)
    if (s->e[i].who == who) return i;
  return -1;
}

void dc_known_put(dc_knownset *s, uint64_t who, const dc_validator *val, int64_t size, double now) {
  int i = known_find(s, who);
  if (i < 0 && s->n < DC_KNOWN_MAX) i = s->n++;
  if (i < 0) {
    i = 0;
    for (int k = 1; k < s->n; k++)
      if (s->e[k].at < s->e[i].at) i = k;
  }
  s->e[i].who = who;
  s->e[i].val = *val;
  s->e[i].size = size;
  s->e[i].at = now;
}

void dc_known_seen(dc_knownset *s, uint64_t who, const dc_validator *val, double now) {
  char why[8];
  int i = known_find(s, who);
  if (i >= 0 && !dc_validator_differs(&s->e[i].val, val, why, sizeof why) && now > s->e[i].at) s->e[i].at = now;
}

const dc_known *dc_known_get(const dc_knownset *s, uint64_t who, double now, double fresh_s) {
  int i = known_find(s, who);
  if (i < 0 || !(fresh_s > 0) || now - s->e[i].at > fresh_s || now < s->e[i].at) return NULL;
  return &s->e[i];
}

void dc_known_forget(dc_knownset *s, uint64_t who) {
  int i = known_find(s, who);
  if (i >= 0) s->e[i] = s->e[--s->n];
}

void dc_cache_name(char *out, size_t n, uint64_t key, int64_t bsize, int64_t idx) {
  snprintf(out, n, "dc-%016llx-%lldk-%lld.blk", (unsigned long long)key, (long long)(bsize >> 10), (long long)idx);
}

static int by_age(const void *a, const void *b) {
  const dc_cachefile *x = a, *y = b;
  return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns ? 1 : 0;
}

int dc_evict_plan(dc_cachefile *files, int n, int64_t budget, int64_t incoming) {
  if (n > 0) qsort(files, (size_t)n, sizeof *files, by_age);   /* files is NULL for an empty directory */
  int64_t total = incoming;
  for (int i = 0; i < n; i++) total += files[i].size;
  int k = 0;
  while (k < n && total > budget) total -= files[k++].size;
  return k;
}

int dc_is_remote_name(const char *s) {
  return s && (strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0 ||
               strncasecmp(s, "s3://", 5) == 0);
}

int dc_s3_url(const char *s3, const char *endpoint, const char *region, char *out, size_t n, char *why,
              size_t why_n) {
  if (strncasecmp(s3, "s3://", 5) != 0) { snprintf(why, why_n, "not an s3:// name"); return 0; }
  const char *b = s3 + 5, *slash = strchr(b, '/');
  if (!slash || slash == b || !slash[1]) {
    snprintf(why, why_n, "an s3 name is s3://BUCKET/KEY");
    return 0;
  }
  int blen = (int)(slash - b);
  int k;
  /* the key as S3 names it (aws-cli's s3://bucket/key), percent-encoded for the URL as SigV4
  ** encodes it: every byte but A-Z a-z 0-9 - . _ ~ and '/'.  Pasted raw, a key with '+', '=',
  ** '(', a space or '%' failed with SignatureDoesNotMatch or named another key. */
  char key[2048];
  size_t kl = 0;
  for (const unsigned char *c = (const unsigned char *)slash + 1; *c; c++) {
    if (kl + 4 > sizeof key) { snprintf(why, why_n, "the URL is too long"); return 0; }
    int keep = (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' ||
               *c == '.' || *c == '_' || *c == '~' || *c == '/';
    if (keep) key[kl++] = (char)*c;
    else kl += (size_t)snprintf(key + kl, sizeof key - kl, "%%%02X", *c);
  }
  key[kl] = 0;
  if (endpoint && *endpoint) {
    size_t el = strlen(endpoint);
    while (el && endpoint[el - 1] == '/') el--;
    k = snprintf(out, n, "%.*s/%.*s/%s", (int)el, endpoint, blen, b, key);
  } else {
    k = snprintf(out, n, "https://%.*s.s3.%s.amazonaws.com/%s", blen, b, region && *region ? region : "us-east-1", key);
  }
  if (k < 0 || (size_t)k >= n) { snprintf(why, why_n, "the URL is too long"); return 0; }
  return 1;
}

int dc_range_check(const dc_range_resp *r, int *transport, char *why, size_t why_n) {
  *transport = 0;
  if (why_n) why[0] = 0;
  if (r->status >= 400 && !(r->status == 416 && r->first)) {   /* an error, whatever its body's size */
    snprintf(why, why_n, "HTTP %ld", r->status);
    return DC_RESP_BAD;
  }
  if (r->overflow) {
    snprintf(why, why_n, "the server sent more than the %lld bytes asked for", (long long)r->len);
    return DC_RESP_BAD;
  }
  if (r->status == 416 && r->first) return DC_RESP_EMPTY;
  if (r->status == 200 && r->first && r->got < r->len) return DC_RESP_WHOLE;
  if (r->status != 206) {
    if (r->status == 200)
      snprintf(why, why_n, "the server ignored the Range request (HTTP 200): it must support ranges");
    else
      snprintf(why, why_n, "HTTP %ld", r->status);
    return DC_RESP_BAD;
  }
  if (!r->have_cr || r->cr_start != r->off) {
    snprintf(why, why_n, "HTTP 206 without a matching Content-Range");
    return DC_RESP_BAD;
  }
  if ((uint64_t)r->got != (uint64_t)r->cr_end - (uint64_t)r->cr_start + 1) {   /* cr_end >= cr_start: parsed */
    *transport = 1;
    snprintf(why, why_n, "short body: %lld of %lld bytes", (long long)r->got, (long long)(r->cr_end - r->cr_start + 1));
    return DC_RESP_BAD;
  }
  return DC_RESP_OK;
}

/* The text of the first <tag>...</tag> in b[0, n): entities decoded, runs of white space as one
** space, cut to fit out.  Returns its length, or 0 when there is no complete element. */
static size_t xml_text(const char *b, size_t n, const char *tag, char *out, size_t out_n) {
  char open[32], close[32];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  size_t lo = strlen(open), lc = strlen(close), i = 0;
  while (i + lo <= n && memcmp(b + i, open, lo) != 0) i++;
  if (i + lo > n) return 0;
  size_t s = i + lo, e = s;
  while (e + lc <= n && memcmp(b + e, close, lc) != 0) e++;
  if (e + lc > n || !out_n) return 0;
  static const struct { const char *ent; char c; } ents[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  size_t k = 0;
  for (size_t j = s; j < e && k + 1 < out_n;) {
    char c = b[j++];
    if (c == '&')
      for (size_t t = 0; t < sizeof ents / sizeof ents[0]; t++) {
        size_t le = strlen(ents[t].ent);
        if (j - 1 + le <= e && memcmp(b + j - 1, ents[t].ent, le) == 0) { c = ents[t].c; j += le - 1; break; }
      }
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    if (c == ' ' && (k == 0 || out[k - 1] == ' ')) continue;
    if ((unsigned char)c < 0x20) continue;
    out[k++] = c;
  }
  while (k && out[k - 1] == ' ') k--;
  out[k] = 0;
  return k;
}

int dc_s3_error(const char *body, size_t n, char *out, size_t out_n) {
  char code[64], msg[200];
  if (!out_n || !body || !xml_text(body, n, "Code", code, sizeof code)) return 0;
  if (xml_text(body, n, "Message", msg, sizeof msg)) snprintf(out, out_n, "%s: %s", code, msg);
  else snprintf(out, out_n, "%s", code);
  return 1;
}

/* --- parts of blocks ------------------------------------------------------------------------ */
typedef struct {
  uint64_t key;
  int64_t lo, len, pos;             /* bytes [lo, lo + len) of the file, at ring[pos] */
} dc_part;

struct dc_partstore {
  uint8_t *ring;
  size_t ring_map;
  int64_t cap, head;                /* the next part goes at ring[head] (or at 0 where it does not fit) */
  int n;                            /* parts held, oldest first */
  dc_part part[DC_PARTS_MAX];
};

dc_partstore *dc_partstore_new(int64_t cap) {
  if (cap < 1) return NULL;
  dc_partstore *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->cap = cap;
  return s;
}

void dc_partstore_free(dc_partstore *s) {
  if (!s) return;
  dc_mem_free(s->ring, s->ring_map);
  free(s);
}

void dc_partstore_put(dc_partstore *s, uint64_t key, int64_t lo, const uint8_t *b, int64_t len) {
  if (!s || len < 1 || len > s->cap || lo < 0) return;
  if (!s->ring && !(s->ring = dc_mem_alloc_huge((size_t)s->cap, &s->ring_map))) return;
  int64_t pos = s->head + len <= s->cap ? s->head : 0;
  /* the parts the new one overwrites go, and the oldest where the list is full */
  int k = 0;
  for (int i = 0; i < s->n; i++) {
    const dc_part *o = &s->part[i];
    if ((o->pos < pos + len && pos < o->pos + o->len) || (s->n == DC_PARTS_MAX && i == 0)) continue;
    s->part[k++] = *o;
  }
  s->n = k;
  memcpy(s->ring + pos, b, (size_t)len);
  dc_part *p = &s->part[s->n++];
  p->key = key; p->lo = lo; p->len = len; p->pos = pos;
  s->head = pos + len;
}

int dc_partstore_get(const dc_partstore *s, uint64_t key, int64_t off, int64_t n, uint8_t *out) {
  if (!s || n < 1 || off < 0) return 0;
  for (int i = s->n - 1; i >= 0; i--) {     /* the newest first */
    const dc_part *p = &s->part[i];
    if (p->key == key && p->lo <= off && off + n <= p->lo + p->len) {
      if (out) memcpy(out, s->ring + p->pos + (off - p->lo), (size_t)n);
      return 1;
    }
  }
  return 0;
}
