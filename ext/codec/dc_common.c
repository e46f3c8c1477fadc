/*
** dc_common.c — errors, codec names, options, checksums, and the tile header
** (parse, size probe, cells -> chunks).  The byte layout of the header is in
** docs/format.md section 2.
*/
#include "dc_internal.h"
#include "dc_ctx.h"
#include "dc_rans.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <xxhash.h>
#include <zstd.h>

/* ------------------------------------------------------------ large buffers */
/* Under AddressSanitizer every buffer comes from malloc, whose bounds it checks (a mapped one
** has none: a decoder read past its scratch would go unseen by the tests and fuzzers). */
#if defined(__SANITIZE_ADDRESS__)
#define DC_MEM_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DC_MEM_PLAIN 1
#endif
#endif

#ifndef DC_MEM_PLAIN
#define HUGE_SZ ((size_t)2 << 20)

static void *big_alloc(size_t n, size_t *map_len) {
  size_t len = (n + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
  if (len < n || len + HUGE_SZ < len) return NULL;
  uint8_t *p = mmap(NULL, len + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uintptr_t a = ((uintptr_t)p + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1);
  size_t head = (size_t)(a - (uintptr_t)p), tail = HUGE_SZ - head;
  if (head) munmap(p, head);
  if (tail) munmap((uint8_t *)a + len, tail);
#ifdef MADV_HUGEPAGE
  madvise((void *)a, len, MADV_HUGEPAGE);
#endif
  *map_len = len;
  return (void *)a;
}
#endif

void *dc_mem_alloc_huge(size_t n, size_t *map_len) {
  *map_len = 0;
#ifndef DC_MEM_PLAIN
  void *p = big_alloc(n ? n : 1, map_len);
  if (p) return p;
  *map_len = 0;
#endif
  return malloc(n ? n : 1);
}

void *dc_mem_alloc(size_t n, size_t *map_len) {
  if (n >= DC_BIG_MIN) return dc_mem_alloc_huge(n, map_len);
  *map_len = 0;
  return malloc(n ? n : 1);
}

void dc_mem_free(void *p, size_t map_len) {
  if (!p) return;
  if (map_len) munmap(p, map_len);
  else free(p);
}

/* ------------------------------------------------------------ errors */
void dc_error_set(dc_error *err, int code, const char *fmt, ...) {
  if (!err) return;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
}

const char *dc_strerror(int code) {
  switch (code) {
    case DC_OK: return "ok";
    case DC_ECORRUPT: return "corrupt tile";
    case DC_ENOMEM: return "out of memory";
    case DC_EARG: return "invalid argument";
    case DC_EUNSUPPORTED: return "unsupported codec or format version";
    default: return "unknown error";
  }
}

/* ------------------------------------------------------------ codecs */
const char *dc_codec_name(int codec_id) {
  switch (codec_id) {
    case DC_CODEC_RANS: return "rans";
    case DC_CODEC_ZSTD: return "zstd";
    case DC_CODEC_RANS_V1: return "rans-v1";
    default: return NULL;
  }
}

int dc_codec_from_name(const char *name) {
  if (!name) return 0;
  if (strcmp(name, "rans") == 0) return DC_CODEC_RANS;
  if (strcmp(name, "zstd") == 0) return DC_CODEC_ZSTD;
  if (strcmp(name, "rans-v1") == 0) return DC_CODEC_RANS_V1;
  return 0;
}

int dc_codec_levels(int codec_id, int *lo, int *hi) {
  switch (codec_id) {
    case DC_CODEC_RANS: *lo = 1; *hi = (int)DC_CTX_MAXQ; return 0;
    case DC_CODEC_RANS_V1: *lo = 1; *hi = (int)DC_RANS_MAXNB; return 0;
    case DC_CODEC_ZSTD: *lo = ZSTD_minCLevel(); *hi = ZSTD_maxCLevel(); return 0;
    default: return -1;
  }
}

/* ------------------------------------------------------------ SIMD dispatch */
int dc_simd_supported(int level) {
  if (level == DC_SIMD_SCALAR) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
  static int have[3] = {-1, -1, -1};
  if (level < 0 || level > DC_SIMD_AVX512) return 0;
  if (__atomic_load_n(&have[level], __ATOMIC_RELAXED) < 0) {
    __builtin_cpu_init();
    int ok = level == DC_SIMD_AVX2
                 ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt")
                 : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                       __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("popcnt");
    __atomic_store_n(&have[level], ok, __ATOMIC_RELAXED);
  }
  return __atomic_load_n(&have[level], __ATOMIC_RELAXED);   /* other threads may store it too */
#else
  return 0;
#endif
}

/* DC_SIMD's value -> the highest path it allows; -1 for a value that names no path */
static int simd_wanted(const char *want) {
  if (!want || !*want || !strcmp(want, "avx512") || !strcmp(want, "best")) return DC_SIMD_AVX512;
  if (!strcmp(want, "scalar") || !strcmp(want, "none") || !strcmp(want, "portable")) return DC_SIMD_SCALAR;
  if (!strcmp(want, "avx2")) return DC_SIMD_AVX2;
  return -1;
}

int dc_simd_level(void) {
  int cap = simd_wanted(getenv("DC_SIMD"));
  const char *no = getenv("DC_NO_SIMD");
  if (no && *no && *no != '0') cap = DC_SIMD_SCALAR;
  if (cap < 0) cap = DC_SIMD_AVX512;      /* refused where it is read first (dc_simd_env_check) */
  while (cap > DC_SIMD_SCALAR && !dc_simd_supported(cap)) cap--;
  return cap;
}

int dc_simd_env_check(char *msg, size_t n) {
  const char *want = getenv("DC_SIMD");
  if (simd_wanted(want) >= 0) return 0;
  if (msg && n) snprintf(msg, n, "DC_SIMD=%.64s names no decoder path (avx512, avx2, scalar; unset: the best this CPU has)", want);
  return -1;
}

const char *dc_simd_name(int level) {
  switch (level) {
    case DC_SIMD_AVX512: return "avx512";
    case DC_SIMD_AVX2: return "avx2";
    default: return "scalar";
  }
}

uint32_t dc_encode_chunks(const dc_encode_opts *o, uint32_t n_cells, uint64_t nnz) {
  uint32_t nc = o->n_chunks ? o->n_chunks : DC_CHUNKS_MAX;
  if (nc > DC_MAX_CHUNKS) nc = DC_MAX_CHUNKS;
  const uint32_t cap = nc;
  if (o->chunk_cells) {
    /* 8, or one per DC_CHUNK_NNZ nonzeros where that is more (with n_chunks 8, as datasets
    ** written before 2026-12-07 record it, the rule is the one they were written with) */
    uint64_t want = nnz / DC_CHUNK_NNZ + (nnz % DC_CHUNK_NNZ != 0);
    if (want < DC_CHUNKS_BASE) want = DC_CHUNKS_BASE;
    if (nc > want) nc = (uint32_t)want;
    uint32_t room = n_cells / o->chunk_cells;
    if (room < 2) room = 2;
    if (nc > room) nc = room;
    /* past 8, a multiple of 4, so that 2 or 4 threads decoding one tile finish together (19
    ** equal chunks bound 2 threads to 19 / 10 = 1.9x one): rounded up (at most 3 more chunks
    ** than the cells had room for: at least 3/4 of chunk_cells each), down where n_chunks
    ** is lower than that */
    if (nc > DC_CHUNKS_BASE) {
      uint32_t up = (nc + 3) & ~3u;
      nc = up <= cap ? up : nc & ~3u;
    }
  }
  return nc < n_cells ? nc : n_cells;
}

void dc_encode_opts_default(dc_encode_opts *o) {
  o->codec = DC_CODEC_DEFAULT;
  o->level = 0;       /* codec default: zstd 19, rans 0 */
  o->n_chunks = DC_CHUNKS_MAX;
  o->chunk_cells = DC_CHUNK_CELLS;
  o->threads = 0;
  o->rans_v2 = 0;
  o->rans_pairs = 0;
  o->rans_one_bucket = 0;
}

/* Fixing the sum moves one slot at a time to (or from) the symbol where that costs least: the
** largest v below, the lower index on ties.  The direction never changes (the sum moves by one
** towards m).  A symbol's v only falls when it gets (loses) a slot, so a heap of the candidates
** makes the same choices as a scan per slot, at log n instead of n (the scan was 7% of encoding
** a real file: a pair context has up to 1,157 codes and many slots to move). */
#define NF_HEAP_MAX 2048u
static inline double nf_val(const uint64_t *c, const uint32_t *f, uint32_t i, int down) {
  return down ? (double)f[i] / (double)(c[i] + 1) : (double)c[i] / (double)f[i];
}
static inline int nf_above(const double *v, uint32_t a, uint32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }
static void nf_sift(uint32_t *h, uint32_t k, uint32_t n, const double *v) {
  for (;;) {
    uint32_t l = 2 * k + 1, b = k;
    if (l < n && nf_above(v, h[l], h[b])) b = l;
    if (l + 1 < n && nf_above(v, h[l + 1], h[b])) b = l + 1;
    if (b == k) return;
    uint32_t t = h[k];
    h[k] = h[b];
    h[b] = t;
    k = b;
  }
}
static void nf_fix_heap(const uint64_t *c, uint32_t *f, uint32_t n, int down, uint32_t steps) {
  double v[NF_HEAP_MAX];
  uint32_t h[NF_HEAP_MAX], k = 0;
  for (uint32_t i = 0; i < n; i++)
    if (!down || f[i] > 1) { v[i] = nf_val(c, f, i, down); h[k++] = i; }
  for (uint32_t i = k / 2; i-- > 0;) nf_sift(h, i, k, v);
  while (steps-- && k) {       /* k > 0 while n <= m: the slots to take are on symbols above 1 */
    uint32_t b = h[0];
    f[b] += down ? -1u : 1u;
    if (down && f[b] <= 1) h[0] = h[--k];
    else v[b] = nf_val(c, f, b, down);
    nf_sift(h, 0, k, v);
  }
}

void dc_normalize_freqs(const uint64_t *c, uint32_t *f, uint32_t n, uint32_t m) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < n; i++) s += c[i];
  int64_t tot = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)((double)c[i] * m / (double)s + 0.5);
    f[i] = v < 1 ? 1 : (uint32_t)v;
    tot += f[i];
  }
  /* fix the sum: cost change per slot ~ c / f */
  if (tot == (int64_t)m) return;
  int down = tot > (int64_t)m;
  uint32_t steps = (uint32_t)(down ? tot - (int64_t)m : (int64_t)m - tot);
  if (n <= NF_HEAP_MAX) { nf_fix_heap(c, f, n, down, steps); return; }
  while (steps--) {
    uint32_t best = 0;
    double bestv = -1;
    for (uint32_t i = 0; i < n; i++) {
      if (down && f[i] <= 1) continue;
      double v = nf_val(c, f, i, down);
      if (v > bestv) { bestv = v; best = i; }
    }
    f[best] += down ? -1u : 1u;
  }
}

uint32_t dc_checksum(const void *buf, size_t len) {
  return (uint32_t)XXH3_64bits(buf, len);
}

/* ------------------------------------------------------------ byte buffer */
int dc_buf_reserve(dc_buf *b, size_t extra) {
  if (b->oom) return -1;
  if (b->cap - b->len >= extra) return 0;
  size_t need = b->len + extra;
  if (need < b->len) { b->oom = 1; return -1; }
  size_t cap = b->cap ? b->cap : 256;
  while (cap < need) {
    if (cap > SIZE_MAX / 2) { cap = need; break; }
    cap *= 2;
  }
  uint8_t *p = realloc(b->p, cap);
  if (!p) { b->oom = 1; return -1; }
  b->p = p;
  b->cap = cap;
  return 0;
}

void dc_buf_put(dc_buf *b, const void *src, size_t n) {
  if (n == 0 || dc_buf_reserve(b, n)) return;
  memcpy(b->p + b->len, src, n);
  b->len += n;
}

void dc_buf_varint(dc_buf *b, uint64_t v) {
  if (dc_buf_reserve(b, 10)) return;
  uint8_t *p = b->p + b->len;
  while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
  *p++ = (uint8_t)v;
  b->len = (size_t)(p - b->p);
}

void dc_buf_free(dc_buf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------ header */
size_t dc_tile_header_need(const uint8_t *buf, size_t have) {
  if (have < DC_HDR_FIXED) return DC_HDR_FIXED;
  uint32_t nc = dc_rd32(buf + 24);
  if (nc > DC_MAX_CHUNKS) return 0;          /* dc_tile_parse reports it */
  uint64_t need = DC_HDR_LEN(nc);
  return have >= need ? 0 : (size_t)need;
}

int dc_tile_parse(const uint8_t *buf, size_t len, dc_tile_hdr *h, dc_error *err) {
  if ((!buf && len) || !h) {   /* an empty blob may come as NULL: it is a truncated header */
    dc_error_set(err, DC_EARG, "tile parse: NULL argument");
    return DC_EARG;
  }
  memset(h, 0, offsetof(dc_tile_hdr, chunk));
  if (len < DC_HDR_FIXED) {
    dc_error_set(err, DC_ECORRUPT, "tile header: truncated (%zu bytes, need %u)", len, DC_HDR_FIXED);
    return DC_ECORRUPT;
  }
  if (dc_rd32(buf) != DC_TILE_MAGIC) {
    dc_error_set(err, DC_ECORRUPT, "tile header: bad magic");
    return DC_ECORRUPT;
  }
  h->version = dc_rd16(buf + 4);
  h->codec = dc_rd16(buf + 6);
  h->n_cells = dc_rd32(buf + 8);
  h->n_genes = dc_rd32(buf + 12);
  h->nnz = dc_rd64(buf + 16);
  h->n_chunks = dc_rd32(buf + 24);
  h->shared_len = dc_rd32(buf + 28);
  if (h->n_chunks > DC_MAX_CHUNKS) {
    dc_error_set(err, DC_ECORRUPT, "tile header: %u chunks (at most %d)", h->n_chunks, DC_MAX_CHUNKS);
    return DC_ECORRUPT;
  }
  uint64_t hl = DC_HDR_LEN(h->n_chunks);
  if (len < hl) {
    dc_error_set(err, DC_ECORRUPT, "tile header: truncated (%zu bytes, need %llu)", len,
                 (unsigned long long)hl);
    return DC_ECORRUPT;
  }
  uint32_t want = dc_rd32(buf + hl - 4);
  if (dc_checksum(buf, (size_t)hl - 4) != want) {
    dc_error_set(err, DC_ECORRUPT, "tile header: checksum mismatch");
    return DC_ECORRUPT;
  }
  if (h->version < 1 || h->version > DC_TILE_VERSION) {
    dc_error_set(err, DC_EUNSUPPORTED, "tile header: format version %u (this build reads 1 to %u)",
                 h->version, DC_TILE_VERSION);
    return DC_EUNSUPPORTED;
  }
  if (h->codec == DC_CODEC_RANS && h->version < 2) {
    dc_error_set(err, DC_ECORRUPT, "tile header: codec rans in a version %u tile", h->version);
    return DC_ECORRUPT;
  }
  if (!dc_codec_name((int)h->codec)) {
    dc_error_set(err, DC_EUNSUPPORTED, "tile header: unknown codec id %u", h->codec);
    return DC_EUNSUPPORTED;
  }
  if (h->n_genes > (uint32_t)INT32_MAX) {
    dc_error_set(err, DC_ECORRUPT, "tile header: %u genes (at most %d)", h->n_genes, INT32_MAX);
    return DC_ECORRUPT;
  }
  if ((h->n_cells == 0) != (h->n_chunks == 0)) {
    dc_error_set(err, DC_ECORRUPT, "tile header: %u cells in %u chunks", h->n_cells, h->n_chunks);
    return DC_ECORRUPT;
  }
  if (h->n_genes == 0 ? h->nnz != 0 : h->nnz / h->n_genes > h->n_cells) {
    dc_error_set(err, DC_ECORRUPT, "tile header: %llu nonzeros exceed %u cells x %u genes",
                 (unsigned long long)h->nnz, h->n_cells, h->n_genes);
    return DC_ECORRUPT;
  }
  h->hdr_len = hl;
  h->shared_offset = hl;
  h->shared_checksum = dc_rd32(buf + hl - 8);
  uint64_t off = hl + h->shared_len;
  if (off > len) {
    dc_error_set(err, DC_ECORRUPT, "tile header: shared section of %llu bytes past the end (%zu bytes)",
                 (unsigned long long)h->shared_len, len);
    return DC_ECORRUPT;
  }
  uint64_t cells = 0, nnz = 0;
  for (uint32_t c = 0; c < h->n_chunks; c++) {
    const uint8_t *r = buf + DC_HDR_FIXED + (size_t)c * DC_HDR_CHUNK;
    dc_chunk_info *ci = &h->chunk[c];
    ci->n_cells = dc_rd32(r);
    ci->checksum = dc_rd32(r + 4);
    ci->nnz = dc_rd64(r + 8);
    ci->length = dc_rd64(r + 16);
    ci->first_cell = (uint32_t)cells;
    ci->nnz_before = nnz;
    ci->offset = off;
    if (ci->n_cells == 0 || ci->n_cells > h->n_cells - cells) {
      dc_error_set(err, DC_ECORRUPT, "tile header: chunk %u has %u cells (%llu of %u left)", c,
                   ci->n_cells, (unsigned long long)(h->n_cells - cells), h->n_cells);
      return DC_ECORRUPT;
    }
    if (ci->nnz > h->nnz - nnz || (h->n_genes && ci->nnz / h->n_genes > ci->n_cells)) {
      dc_error_set(err, DC_ECORRUPT, "tile header: chunk %u claims %llu nonzeros", c,
                   (unsigned long long)ci->nnz);
      return DC_ECORRUPT;
    }
    if (ci->length > len - off) {
      dc_error_set(err, DC_ECORRUPT, "tile header: chunk %u of %llu bytes at offset %llu is past the end (%zu bytes)",
                   c, (unsigned long long)ci->length, (unsigned long long)off, len);
      return DC_ECORRUPT;
    }
    cells += ci->n_cells;
    nnz += ci->nnz;
    off += ci->length;
  }
  if (cells != h->n_cells || nnz != h->nnz) {
    dc_error_set(err, DC_ECORRUPT, "tile header: chunks hold %llu cells and %llu nonzeros, header says %u and %llu",
                 (unsigned long long)cells, (unsigned long long)nnz, h->n_cells, (unsigned long long)h->nnz);
    return DC_ECORRUPT;
  }
  if (err) { err->code = DC_OK; err->msg[0] = 0; }
  return DC_OK;
}

int dc_chunk_of_cell(const dc_tile_hdr *h, uint32_t cell) {
  if (!h || cell >= h->n_cells) return -1;
  uint32_t lo = 0, hi = h->n_chunks;      /* find last chunk with first_cell <= cell */
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (h->chunk[mid].first_cell <= cell) lo = mid; else hi = mid;
  }
  return (int)lo;
}

uint32_t dc_chunks_for_cells(const dc_tile_hdr *h, const uint32_t *cells, size_t n,
                             uint32_t *chunks_out) {
  uint8_t seen[DC_MAX_CHUNKS] = {0};
  for (size_t i = 0; i < n; i++) {
    int c = dc_chunk_of_cell(h, cells[i]);
    if (c >= 0) seen[c] = 1;
  }
  uint32_t k = 0;
  for (uint32_t c = 0; h && c < h->n_chunks; c++)
    if (seen[c]) chunks_out[k++] = c;
  return k;
}
