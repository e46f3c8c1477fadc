/*
** name_index.c — names to ids over a stored text column (see name_index.h).  Pure C.
*/
#include "name_index.h"

#include <stdlib.h>
#include <string.h>

static uint64_t name_hash(const char *s, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; i++) { h ^= (uint8_t)s[i]; h *= 1099511628211ull; }
  return h ^ (h >> 31);
}

static int name_eq(const dc_nameidx *x, int64_t id, const char *s, uint64_t n) {
  return x->valid[id] && x->off[id + 1] - x->off[id] == n && (n == 0 || memcmp(x->text + x->off[id], s, (size_t)n) == 0);
}

int dc_nameidx_build(dc_nameidx *x, const char *text, const uint64_t *off, const uint8_t *valid, int64_t n) {
  memset(x, 0, sizeof *x);
  uint64_t size = 16;
  while (size < (uint64_t)n * 2) size <<= 1;
  int64_t *slot = calloc(size, sizeof *slot);
  int64_t *next = malloc((size_t)(n ? n : 1) * sizeof *next);
  if (!slot || !next) { free(slot); free(next); return -1; }
  x->n = n; x->text = text; x->off = off; x->valid = valid;
  /* in decreasing id order, each id pushed in front of its name's chain: chains come out
  ** in increasing id */
  for (int64_t id = n - 1; id >= 0; id--) {
    next[id] = -1;
    if (!valid[id]) continue;
    const char *s = text + off[id];
    uint64_t len = off[id + 1] - off[id];
    uint64_t h = name_hash(s, len) & (size - 1);
    for (;;) {
      if (slot[h] == 0) { slot[h] = id + 1; break; }
      if (name_eq(x, slot[h] - 1, s, len)) { next[id] = slot[h] - 1; slot[h] = id + 1; break; }
      h = (h + 1) & (size - 1);
    }
  }
  x->slot = slot;
  x->next = next;
  x->mask = size - 1;
  return 0;
}

int64_t dc_nameidx_first(const dc_nameidx *x, const char *s, uint64_t len) {
  if (!x->slot) return -1;
  uint64_t h = name_hash(s, len) & x->mask;
  for (;;) {
    int64_t v = x->slot[h];
    if (v == 0) return -1;
    if (name_eq(x, v - 1, s, len)) return v - 1;
    h = (h + 1) & x->mask;
  }
}

void dc_nameidx_free(dc_nameidx *x) {
  free(x->slot);
  free(x->next);
  memset(x, 0, sizeof *x);
}
