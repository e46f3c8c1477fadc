/*
** cv_util.c — errors, allocation, interrupt flag, hash map (see cv_util.h).
*/
#include "cv_util.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int cv_fail(cv_err *e, const char *fmt, ...) {
  if (e) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
  }
  return -1;
}

void cv_put_text(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned c = *p;
    int len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    int ok = len == 1 ? c >= 0x20 && c != 0x7f : len > 1;
    for (int i = 1; ok && i < len; i++) ok = (p[i] & 0xc0) == 0x80;      /* stops at the NUL */
    /* no overlong forms, no surrogates, nothing past U+10FFFF */
    if (ok && len == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) ok = 0;
    if (ok && len == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))) ok = 0;
    if (ok) {
      fwrite(p, 1, (size_t)len, f);
      p += len;
    } else {
      fprintf(f, "\\x%02x", c);
      p++;
    }
  }
}

int cv_prefix(cv_err *e, const char *fmt, ...) {
  if (!e) return -1;
  char pre[512], old[sizeof e->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pre, sizeof pre, fmt, ap);
  va_end(ap);
  memcpy(old, e->msg, sizeof old);
  size_t k = strlen(pre);
  if (k > sizeof e->msg - 3) k = sizeof e->msg - 3;
  memcpy(e->msg, pre, k);
  memcpy(e->msg + k, ": ", 2);
  size_t r = strnlen(old, sizeof old - 1);
  if (r > sizeof e->msg - k - 3) r = sizeof e->msg - k - 3;
  memcpy(e->msg + k + 2, old, r);
  e->msg[k + 2 + r] = 0;
  return -1;
}

void cv_rename_subject(cv_err *e, const char *from, const char *to) {
  size_t k = strlen(from);
  if (strncmp(e->msg, from, k) != 0 || e->msg[k] != ':') return;
  char rest[sizeof e->msg];
  snprintf(rest, sizeof rest, "%s", e->msg + k);
  snprintf(e->msg, sizeof e->msg, "%s%s", to, rest);
}

void *cv_malloc(size_t n, cv_err *e) {
  void *p = malloc(n ? n : 1);
  if (!p) cv_fail(e, "out of memory (allocating %zu bytes)", n);
  return p;
}

void *cv_calloc(size_t n, size_t sz, cv_err *e) {
  void *p = calloc(n ? n : 1, sz ? sz : 1);
  if (!p) cv_fail(e, "out of memory (allocating %zu x %zu bytes)", n, sz);
  return p;
}

/* Large buffers are advised for transparent huge pages (their 2 MiB-aligned
** interior): filling fresh memory then costs one page fault per 2 MiB, not per
** 4 KiB.  Advice on these ranges only, nothing process-wide. */
void cv_advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
  const uintptr_t huge = (uintptr_t)2 << 20;
  if (n < ((size_t)4 << 20)) return;
  uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), b = ((uintptr_t)p + n) & ~(huge - 1);
  if (b > a) madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
  (void)p; (void)n;
#endif
}

int cv_grow(void **p, size_t *cap, size_t need, size_t elem, cv_err *e) {
  if (need <= *cap) return 0;
  size_t nc = *cap ? *cap : 16;
  while (nc < need) nc = nc + nc / 2 + 16;
  void *q = realloc(*p, nc * elem);
  if (!q) return cv_fail(e, "out of memory (growing a buffer to %zu bytes)", nc * elem);
  *p = q;
  *cap = nc;
  cv_advise_huge(q, nc * elem);
  return 0;
}

void cv_sort_row(uint32_t *ix, uint32_t *vx, uint64_t n, uint32_t n_genes, uint64_t *ka, uint64_t *kb) {
  uint64_t k;
  for (k = 1; k < n && ix[k] > ix[k - 1]; k++) {}
  if (k >= n) return; /* already in order */
  uint64_t *x = ka, *y = kb;
  for (k = 0; k < n; k++) x[k] = (uint64_t)ix[k] << 32 | vx[k];
  if (n <= 32) {
    for (k = 1; k < n; k++) {
      uint64_t t = x[k], j = k;
      for (; j > 0 && x[j - 1] > t; j--) x[j] = x[j - 1];
      x[j] = t;
    }
  } else {
    uint32_t bits = 1;
    while (bits < 32 && (n_genes - 1) >> bits) bits++;
    uint32_t maxd = n < 2048 && bits <= 24 ? 8 : 11, passes = (bits + maxd - 1) / maxd;
    uint32_t width = (bits + passes - 1) / passes, mask = (1u << width) - 1;
    uint32_t cnt[(1u << 11) + 1];
    for (uint32_t p = 0; p < passes; p++) {
      int sh = 32 + (int)(width * p);
      memset(cnt, 0, (mask + 2) * sizeof *cnt);
      for (k = 0; k < n; k++) cnt[((x[k] >> sh) & mask) + 1]++;
      for (uint32_t d = 0; d <= mask; d++) cnt[d + 1] += cnt[d];
      for (k = 0; k < n; k++) y[cnt[(x[k] >> sh) & mask]++] = x[k];
      uint64_t *t = x;
      x = y;
      y = t;
    }
  }
  for (k = 0; k < n; k++) {
    ix[k] = (uint32_t)(x[k] >> 32);
    vx[k] = (uint32_t)x[k];
  }
}

int cv_sort_rows(const uint64_t *indptr, uint32_t *ix, uint32_t *vx, uint64_t i0, uint64_t i1, const uint32_t *remap,
                 uint32_t n_genes, uint64_t **ka, uint64_t **kb, size_t *kcap, cv_err *e) {
  uint64_t maxlen = 0;
  for (uint64_t i = i0; i < i1; i++)
    if (indptr[i + 1] - indptr[i] > maxlen) maxlen = indptr[i + 1] - indptr[i];
  size_t c1 = *kcap, c2 = *kcap;
  if (cv_grow((void **)ka, &c1, (size_t)maxlen + 1, sizeof **ka, e) ||
      cv_grow((void **)kb, &c2, (size_t)maxlen + 1, sizeof **kb, e))
    return -1;
  *kcap = c1 < c2 ? c1 : c2;
  for (uint64_t i = i0; i < i1; i++) {
    uint64_t a = indptr[i], n = indptr[i + 1] - a;
    if (remap)
      for (uint64_t k = a; k < a + n; k++) ix[k] = remap[ix[k]];
    cv_sort_row(ix + a, vx + a, n, n_genes, *ka, *kb);
  }
  return 0;
}

char *cv_strdup(const char *s, cv_err *e) {
  size_t n = strlen(s);
  char *d = cv_malloc(n + 1, e);
  if (d) memcpy(d, s, n + 1);
  return d;
}

volatile sig_atomic_t cv_interrupted = 0;

static void on_signal(int sig) { cv_interrupted = sig; }

void cv_install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  /* A file size limit (ulimit -f) must give EFBIG, not kill us half way. */
  signal(SIGXFSZ, SIG_IGN);
}

int cv_check_interrupt(cv_err *e) {
  if (!cv_interrupted) return 0;
  return cv_fail(e, "interrupted by signal %d", (int)cv_interrupted);
}

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

uint32_t *cv_map_ref(cv_map *m, const char *key) {
  if (!m->cap) return NULL;
  size_t i = (size_t)hash_str(key) & (m->cap - 1);
  while (m->keys[i]) {
    if (strcmp(m->keys[i], key) == 0) return &m->vals[i];
    i = (i + 1) & (m->cap - 1);
  }
  return NULL;
}

int cv_map_get(const cv_map *m, const char *key, uint32_t *val) {
  uint32_t *p = cv_map_ref((cv_map *)m, key);
  if (!p) return 0;
  *val = *p;
  return 1;
}

int cv_map_put(cv_map *m, const char *key, uint32_t val, cv_err *e) {
  if ((m->n + 1) * 2 > m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 1024;
    char **nk = calloc(nc, sizeof *nk);
    uint32_t *nv = calloc(nc, sizeof *nv);
    if (!nk || !nv) {
      free(nk);
      free(nv);
      return cv_fail(e, "out of memory (hash map of %zu entries)", nc);
    }
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->keys[i]) continue;
      size_t j = (size_t)hash_str(m->keys[i]) & (nc - 1);
      while (nk[j]) j = (j + 1) & (nc - 1);
      nk[j] = m->keys[i];
      nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = nc;
  }
  size_t i = (size_t)hash_str(key) & (m->cap - 1);
  while (m->keys[i]) i = (i + 1) & (m->cap - 1);
  m->keys[i] = cv_strdup(key, e);
  if (!m->keys[i]) return -1;
  m->vals[i] = val;
  m->n++;
  return 0;
}

void cv_map_free(cv_map *m) {
  for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

typedef struct orig_at { int64_t o; uint64_t i; } orig_at;
static int cmp_orig_at(const void *a, const void *b) {
  const orig_at *x = a, *y = b;
  if (x->o != y->o) return x->o < y->o ? -1 : 1;
  return x->i < y->i ? -1 : x->i > y->i;
}

int cv_gene_repeats(const char *const *names, uint64_t n, const uint8_t *skip, const int64_t *orig, uint32_t *rep,
                    cv_err *e) {
  uint64_t cap = 64;
  while (cap < 2 * n + 2) cap *= 2;
  if (n >= UINT32_MAX) return cv_fail(e, "too many genes (%llu)", (unsigned long long)n);
  /* open addressing by name: a slot holds the first gene of a name (index + 1) and its count */
  uint32_t *slot = calloc((size_t)cap, sizeof *slot), *cnt = calloc((size_t)cap, sizeof *cnt);
  orig_at *by = orig ? malloc(((size_t)n + 1) * sizeof *by) : NULL;
  if (!slot || !cnt || (orig && !by)) { free(slot); free(cnt); free(by); return cv_fail(e, "out of memory"); }
  if (orig) {   /* a permutation of 0 .. n-1 (as convert writes orig_index) is inverted; else sorted */
    int perm = 1;
    for (uint64_t i = 0; i < n; i++) by[i].i = UINT64_MAX;
    for (uint64_t i = 0; i < n && perm; i++) {
      if (orig[i] < 0 || (uint64_t)orig[i] >= n || by[orig[i]].i != UINT64_MAX) perm = 0;
      else by[orig[i]].i = i;
    }
    if (!perm) {
      for (uint64_t i = 0; i < n; i++) { by[i].o = orig[i]; by[i].i = i; }
      qsort(by, (size_t)n, sizeof *by, cmp_orig_at);
    }
  }
  for (uint64_t r = 0; r < n; r++) {
    uint64_t i = orig ? by[r].i : r;
    if (skip && skip[i]) { rep[i] = UINT32_MAX; continue; }
    const char *nm = names[i] ? names[i] : "";
    size_t j = (size_t)hash_str(nm) & (size_t)(cap - 1);
    for (; slot[j]; j = (j + 1) & (size_t)(cap - 1)) {
      const char *o = names[slot[j] - 1];
      if (!strcmp(o ? o : "", nm)) break;
    }
    if (!slot[j]) slot[j] = (uint32_t)i + 1;
    rep[i] = cnt[j]++;
  }
  free(slot);
  free(cnt);
  free(by);
  return 0;
}

double cv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cv_ncores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)n;
}

int cv_utf8_valid(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t k;
    if (c < 0x80) { i++; continue; }
    else if ((c & 0xE0) == 0xC0 && c >= 0xC2) k = 1;
    else if ((c & 0xF0) == 0xE0) k = 2;
    else if ((c & 0xF8) == 0xF0 && c <= 0xF4) k = 3;
    else return 0;
    for (size_t j = 1; j <= k; j++)
      if (i + j >= n || (p[i + j] & 0xC0) != 0x80) return 0;
    i += k + 1;
  }
  return 1;
}

/* Edit distance (case-insensitive), capped at 255 per string length. */
static int edit_distance(const char *a, const char *b) {
  size_t n = strlen(a), m = strlen(b);
  if (n > 255 || m > 255) return 1 << 20;
  int row[256];
  for (size_t j = 0; j <= m; j++) row[j] = (int)j;
  for (size_t i = 1; i <= n; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= m; j++) {
      int up = row[j];
      int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = diag + cost;
      if (up + 1 < v) v = up + 1;
      if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
      row[j] = v;
      diag = up;
    }
  }
  return row[m];
}

const char *cv_closest(const char *name, const char *const *cands, int n) {
  const char *best = NULL;
  int bd = 1 << 20;
  for (int i = 0; i < n; i++) {
    int d = edit_distance(name, cands[i]);
    if (d < bd) { bd = d; best = cands[i]; }
  }
  int len = (int)strlen(name);
  int limit = len / 3 > 2 ? len / 3 : 2;
  return best && bd <= limit ? best : NULL;
}

void cv_list_names(char *buf, size_t cap, const char *const *names, int n) {
  size_t at = 0;
  buf[0] = 0;
  if (n == 0) { snprintf(buf, cap, "none"); return; }
  for (int i = 0; i < n; i++) {
    int k = snprintf(buf + at, cap - at, "%s'%s'", i ? ", " : "", names[i]);
    if (k < 0 || (size_t)k >= cap - at || (at + (size_t)k > cap - 24 && i + 1 < n)) {
      snprintf(buf + at, cap - at, "%s... (%d in all)", i ? ", " : "", n);
      return;
    }
    at += (size_t)k;
  }
}

int cv_gene_order_problem(const char *go, int has_col, char *buf, size_t cap) {
  buf[0] = 0;
  if (go && strcmp(go, "union"))
    snprintf(buf, cap, "dc_meta.gene_order is '%s'; the only order this version knows is 'union'", go);
  else if (go && !has_col)
    snprintf(buf, cap, "dc_meta.gene_order says the original gene order is recorded, but the genes table has no "
             "orig_index column");
  else if (!go && has_col)
    snprintf(buf, cap, "the genes table has an orig_index column, but dc_meta.gene_order is missing");
  return buf[0] != 0;
}

void cv_json_print(FILE *o, const char *s) {
  fputc('"', o);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(o, "\\%c", *p);
    else if (*p < 0x20) fprintf(o, "\\u%04x", *p);
    else fputc(*p, o);
  }
  fputc('"', o);
}
