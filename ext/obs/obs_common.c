/*
** obs_common.c — shared helpers of the obs block library: errors, kind
** names, checksums, byte planes, statistics.
*/
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "obs_internal.h"

static const char *const kind_names[] = {NULL, "category", "int", "real", "bool", "text"};

const char *dc_obs_kind_name(int kind) {
  return kind >= DC_OBS_CATEGORY && kind <= DC_OBS_TEXT ? kind_names[kind] : NULL;
}

int dc_obs_kind_from_name(const char *name) {
  if (!name) return 0;
  for (int k = DC_OBS_CATEGORY; k <= DC_OBS_TEXT; k++)
    if (strcmp(name, kind_names[k]) == 0) return k;
  return 0;
}

void dc_obs_planes_put(uint8_t *dst, const uint64_t *v, size_t m, unsigned w) {
  if (w == 1) {
    for (size_t i = 0; i < m; i++) dst[i] = (uint8_t)v[i];
    return;
  }
  for (unsigned k = 0; k < w; k++) {
    uint8_t *p = dst + (size_t)k * m;
    unsigned sh = 8 * k;
    for (size_t i = 0; i < m; i++) p[i] = (uint8_t)(v[i] >> sh);
  }
}

/* One pass over the values, each made from its w plane bytes (the widths the format uses
** have their own loop; GCC 12 at -O2 leaves them scalar), not w passes over v.  The decoder
** checks widths before it calls, so the generic loop serves no width the format writes. */
void dc_obs_planes_get(const uint8_t *src, size_t m, unsigned w, uint64_t *v) {
  const uint8_t *p0 = src, *p1 = src + m, *p2 = src + 2 * m, *p3 = src + 3 * m;
  switch (w) {
    case 0: memset(v, 0, m * sizeof *v); return;
    case 1: for (size_t i = 0; i < m; i++) v[i] = p0[i]; return;
    case 2: for (size_t i = 0; i < m; i++) v[i] = p0[i] | (uint64_t)p1[i] << 8; return;
    case 4:
      for (size_t i = 0; i < m; i++) v[i] = p0[i] | (uint64_t)p1[i] << 8 | (uint64_t)p2[i] << 16 | (uint64_t)p3[i] << 24;
      return;
    case 8: {
      const uint8_t *p4 = src + 4 * m, *p5 = src + 5 * m, *p6 = src + 6 * m, *p7 = src + 7 * m;
      for (size_t i = 0; i < m; i++) {
        uint64_t lo = p0[i] | (uint64_t)p1[i] << 8 | (uint64_t)p2[i] << 16 | (uint64_t)p3[i] << 24;
        uint64_t hi = p4[i] | (uint64_t)p5[i] << 8 | (uint64_t)p6[i] << 16 | (uint64_t)p7[i] << 24;
        v[i] = lo | hi << 32;
      }
      return;
    }
    default:
      for (size_t i = 0; i < m; i++) {
        uint64_t x = 0;
        for (unsigned k = 0; k < w; k++) x |= (uint64_t)src[(size_t)k * m + i] << (8 * k);
        v[i] = x;
      }
  }
}

/* The same loops into 32-bit values (category codes), so that no 64-bit array is needed. */
void dc_obs_planes_get32(const uint8_t *src, size_t m, unsigned w, uint32_t *v) {
  const uint8_t *p0 = src, *p1 = src + m, *p2 = src + 2 * m, *p3 = src + 3 * m;
  switch (w) {
    case 0: memset(v, 0, m * sizeof *v); return;
    case 1: for (size_t i = 0; i < m; i++) v[i] = p0[i]; return;
    case 2: for (size_t i = 0; i < m; i++) v[i] = p0[i] | (uint32_t)p1[i] << 8; return;
    default:
      for (size_t i = 0; i < m; i++) v[i] = p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 | (uint32_t)p3[i] << 24;
  }
}

void dc_obs_stats_clear(dc_obs_stats *st) {
  if (!st) return;
  free(st->present);
  memset(st, 0, sizeof *st);
}

/* 1 if s[0..len) is valid UTF-8 (no overlongs, no surrogates, <= U+10FFFF) */
static int utf8_valid(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    unsigned c = s[i];
    if (c < 0x80) { i++; continue; }
    size_t k;
    unsigned cp, lo;
    if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; lo = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; lo = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; lo = 0x10000; }
    else return 0;
    if (len - i <= k) return 0;
    for (size_t j = 1; j <= k; j++) {
      if ((s[i + j] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    if (cp < lo || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += k + 1;
  }
  return 1;
}

static int text_cmp(const char *a, uint32_t la, const char *b, uint32_t lb) {
  uint32_t l = la < lb ? la : lb;
  int c = l ? memcmp(a, b, l) : 0;
  if (c) return c;
  return la < lb ? -1 : la > lb ? 1 : 0;
}

int dc_obs_stats_compute(const dc_obs_values *v, dc_obs_stats *st, dc_error *err) {
  memset(st, 0, sizeof *st);
  if (!v) { dc_error_set(err, DC_EARG, "no values given"); return DC_EARG; }
  if (v->n > DC_OBS_MAX_N) {
    dc_error_set(err, DC_EARG, "block of %u values is larger than the limit %u", v->n, DC_OBS_MAX_N);
    return DC_EARG;
  }
  uint32_t n = v->n, nulls = 0;
  st->n = n;
  int first = 1;
  switch (v->kind) {
    case DC_OBS_CATEGORY: {
      if (n && !v->codes) { dc_error_set(err, DC_EARG, "category block without codes"); return DC_EARG; }
      if (v->n_categories > DC_OBS_MAX_CATEGORIES) {
        dc_error_set(err, DC_EARG, "%u categories is more than the limit", v->n_categories);
        return DC_EARG;
      }
      for (uint32_t i = 0; i < n; i++) {
        int32_t c = v->codes[i];
        if (c == -1) { nulls++; continue; }
        if (c < 0 || (uint32_t)c >= v->n_categories) {
          dc_error_set(err, DC_EARG, "value %u: category code %d is outside -1 .. %u", i, (int)c,
                     v->n_categories ? v->n_categories - 1 : 0);
          return DC_EARG;
        }
        if (first) { st->min_i = st->max_i = c; first = 0; }
        else if (c < st->min_i) st->min_i = c;
        else if (c > st->max_i) st->max_i = c;
      }
      if (!first) {
        size_t plen = (size_t)st->max_i / 8 + 1;
        if (plen <= DC_OBS_PRESENT_MAX) {
          st->present = calloc(plen, 1);
          if (!st->present) { dc_error_set(err, DC_ENOMEM, "out of memory (present bitmap)"); return DC_ENOMEM; }
          st->present_len = plen;
          for (uint32_t i = 0; i < n; i++) {
            int32_t c = v->codes[i];
            if (c >= 0) st->present[c >> 3] |= (uint8_t)(1u << (c & 7));
          }
        }
      }
      break;
    }
    case DC_OBS_INT:
      if (n && !v->i64) { dc_error_set(err, DC_EARG, "int block without values"); return DC_EARG; }
      for (uint32_t i = 0; i < n; i++) {
        if (v->valid && !v->valid[i]) { nulls++; continue; }
        int64_t x = v->i64[i];
        if (first) { st->min_i = st->max_i = x; first = 0; }
        else if (x < st->min_i) st->min_i = x;
        else if (x > st->max_i) st->max_i = x;
      }
      break;
    case DC_OBS_BOOL:
      if (n && !v->b8) { dc_error_set(err, DC_EARG, "bool block without values"); return DC_EARG; }
      for (uint32_t i = 0; i < n; i++) {
        int8_t b = v->b8[i];
        if (b == -1) { nulls++; continue; }
        if (b != 0 && b != 1) {
          dc_error_set(err, DC_EARG, "value %u: bool %d is not 0, 1 or -1 (NULL)", i, (int)b);
          return DC_EARG;
        }
        if (first) { st->min_i = st->max_i = b; first = 0; }
        else if (b < st->min_i) st->min_i = b;
        else if (b > st->max_i) st->max_i = b;
      }
      break;
    case DC_OBS_REAL:
      if (n && !v->f64) { dc_error_set(err, DC_EARG, "real block without values"); return DC_EARG; }
      for (uint32_t i = 0; i < n; i++) {
        double x = v->f64[i];
        if (isnan(x)) { nulls++; continue; }
        if (first) { st->min_f = st->max_f = x; first = 0; }
        else if (x < st->min_f) st->min_f = x;
        else if (x > st->max_f) st->max_f = x;
      }
      break;
    case DC_OBS_TEXT:
      if (n && !v->text) { dc_error_set(err, DC_EARG, "text block without values"); return DC_EARG; }
      for (uint32_t i = 0; i < n; i++) {
        const char *s = v->text[i];
        if (!s) { nulls++; continue; }
        size_t l = v->text_len ? v->text_len[i] : strlen(s);
        if (l > 0x7fffffffu) { dc_error_set(err, DC_EARG, "value %u: text of %zu bytes is too long", i, l); return DC_EARG; }
        if (!utf8_valid((const unsigned char *)s, l)) {
          dc_error_set(err, DC_EARG, "value %u: text is not valid UTF-8", i);
          return DC_EARG;
        }
        uint32_t l32 = (uint32_t)l;
        if (first) { st->min_s = st->max_s = s; st->min_len = st->max_len = l32; first = 0; }
        else if (text_cmp(s, l32, st->min_s, st->min_len) < 0) { st->min_s = s; st->min_len = l32; }
        else if (text_cmp(s, l32, st->max_s, st->max_len) > 0) { st->max_s = s; st->max_len = l32; }
      }
      break;
    default:
      dc_error_set(err, DC_EARG, "unknown obs kind %d", v->kind);
      return DC_EARG;
  }
  st->null_count = nulls;
  st->has_minmax = !first;
  return DC_OK;
}
