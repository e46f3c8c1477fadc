/*
** agg_groups.c — the groups of dc_aggregate (see agg_groups.h): a hash map from typed values
** to group numbers (open addressing; NULL is one group of its own) and the groups' order.
** Pure C: no SQLite.
*/
#include "agg_groups.h"
#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const unsigned char *s, int n, uint64_t h) {
  for (int i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
  return h ^ (h >> 29);
}

static int gval_eq(const dc_gval *a, const dc_gval *b) {
  if (a->type != b->type) return 0;
  switch (a->type) {
    case DC_GV_INTEGER: return a->i == b->i;
    case DC_GV_FLOAT: return a->f == b->f;
    case DC_GV_TEXT: case DC_GV_BLOB: return a->n == b->n && (a->n == 0 || memcmp(a->s, b->s, (size_t)a->n) == 0);
    default: return 1;
  }
}

void dc_groups_init(dc_groups *m) {
  memset(m, 0, sizeof *m);
  m->null_group = -1;
}

void dc_gvals_free(dc_gval *g, uint32_t n) {
  if (!g) return;
  for (uint32_t i = 0; i < n; i++) free(g[i].s);
  free(g);
}

void dc_groups_free(dc_groups *m) {
  dc_gvals_free(m->g, m->n);
  free(m->slot);
  dc_groups_init(m);
}

dc_gval *dc_groups_take(dc_groups *m, uint32_t *n) {
  dc_gval *g = m->g;
  *n = m->n;
  m->g = NULL; m->n = m->cap = 0;
  return g;
}

int64_t dc_groups_get(dc_groups *m, int type, int64_t i, double f, const void *s, int n) {
  dc_gval k;
  memset(&k, 0, sizeof k);
  k.type = type;
  k.rank = -1;
  uint64_t h = 1469598103934665603ull ^ (uint64_t)type;
  switch (type) {
    case DC_GV_INTEGER: k.i = i; h = hash_bytes((const unsigned char *)&k.i, 8, h); break;
    case DC_GV_FLOAT:
      k.f = f;
      if (k.f == 0) k.f = 0;   /* -0.0 and 0.0 are one group */
      h = hash_bytes((const unsigned char *)&k.f, 8, h);
      break;
    case DC_GV_TEXT: case DC_GV_BLOB:
      k.s = (unsigned char *)s; k.n = s ? n : 0; h = hash_bytes(k.s, k.n, h); break;
    default: k.type = DC_GV_NULL; break;
  }
  k.hash = h;
  if (k.type == DC_GV_NULL && m->null_group >= 0) return m->null_group;
  if (m->slot) {
    uint32_t p = (uint32_t)k.hash & m->mask;
    while (m->slot[p]) {
      dc_gval *e = &m->g[m->slot[p] - 1];
      if (e->hash == k.hash && gval_eq(e, &k)) return m->slot[p] - 1;
      p = (p + 1) & m->mask;
    }
  }
  /* new group */
  if (m->n == m->cap) {
    uint32_t nc = m->cap ? m->cap * 2 : 16;
    dc_gval *ng = realloc(m->g, (size_t)nc * sizeof *ng);
    if (!ng) return -1;
    m->g = ng;
    m->cap = nc;
  }
  if (!m->slot || (uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1) {
    uint32_t size = m->slot ? (m->mask + 1) * 2 : 64;
    uint32_t *ns = calloc(size, sizeof *ns);
    if (!ns) return -1;
    for (uint32_t g = 0; g < m->n; g++) {
      if (m->g[g].type == DC_GV_NULL) continue;
      uint32_t p = (uint32_t)m->g[g].hash & (size - 1);
      while (ns[p]) p = (p + 1) & (size - 1);
      ns[p] = g + 1;
    }
    free(m->slot);
    m->slot = ns;
    m->mask = size - 1;
  }
  if (k.type == DC_GV_TEXT || k.type == DC_GV_BLOB) {
    unsigned char *copy = malloc((size_t)k.n + 1);
    if (!copy) return -1;
    if (k.n) memcpy(copy, k.s, (size_t)k.n);
    copy[k.n] = 0;
    k.s = copy;
  }
  m->g[m->n] = k;
  if (k.type == DC_GV_NULL) {
    m->null_group = m->n;
  } else {
    uint32_t p = (uint32_t)k.hash & m->mask;
    while (m->slot[p]) p = (p + 1) & m->mask;
    m->slot[p] = m->n + 1;
  }
  return m->n++;
}

static int type_class(int t) {
  return t == DC_GV_INTEGER || t == DC_GV_FLOAT ? 0 : t == DC_GV_TEXT ? 1 : t == DC_GV_BLOB ? 2 : 3;
}

int dc_group_cmp(const void *pa, const void *pb, void *base) {
  const dc_gval *g = base;
  const dc_gval *a = &g[*(const uint32_t *)pa], *b = &g[*(const uint32_t *)pb];
  int ca = type_class(a->type), cb = type_class(b->type);
  if (a->rank >= 0 && b->rank >= 0) return a->rank < b->rank ? -1 : a->rank > b->rank;
  if (a->rank >= 0 && cb != 3) return -1;
  if (b->rank >= 0 && ca != 3) return 1;
  if (ca != cb) return ca < cb ? -1 : 1;
  if (ca == 0) {
    double x = a->type == DC_GV_INTEGER ? (double)a->i : a->f, y = b->type == DC_GV_INTEGER ? (double)b->i : b->f;
    if (a->type == DC_GV_INTEGER && b->type == DC_GV_INTEGER) return a->i < b->i ? -1 : a->i > b->i;
    return x < y ? -1 : x > y;
  }
  if (ca == 1 || ca == 2) {
    int n = a->n < b->n ? a->n : b->n;
    int c = n ? memcmp(a->s, b->s, (size_t)n) : 0;
    return c ? c : (a->n < b->n ? -1 : a->n > b->n);
  }
  return 0;
}
