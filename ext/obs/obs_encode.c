/*
** obs_encode.c — the encoder of obs blocks (docs/format.md section 3).
**
** For each block it builds the raw payload of every method that applies to
** the data (for a real column: binary64 planes, binary32 planes when every
** value is exact in binary32, and the integer methods when every value is an
** integer), compresses each with zstd level 1 to pick the smallest, then
** compresses the winner at the requested level.  A payload that zstd does not
** shrink is stored as is.
*/
#include <stdlib.h>
#include <math.h>
#include <zstd.h>
#include "obs_internal.h"

typedef struct cand {
  uint8_t *buf;
  size_t len;
  int method;
} cand;

#define MAX_CANDS 4

typedef struct enc {
  const dc_obs_values *v;
  const dc_obs_stats *st;
  size_t nullmap_len;      /* 0 when no NULL-map */
  cand c[MAX_CANDS];
  int nc;
  uint64_t *tmp;           /* m values */
  dc_error *err;
} enc;

static uint8_t *cand_new(enc *e, size_t len, int method) {
  if (e->nc >= MAX_CANDS) return NULL;
  uint8_t *p = malloc(len ? len : 1);
  if (!p) { dc_error_set(e->err, DC_ENOMEM, "out of memory (%zu bytes of obs payload)", len); return NULL; }
  e->c[e->nc].buf = p;
  e->c[e->nc].len = len;
  e->c[e->nc].method = method;
  e->nc++;
  return p;
}

static int is_null(const dc_obs_values *v, uint32_t i) {
  switch (v->kind) {
    case DC_OBS_INT: return v->valid && !v->valid[i];
    case DC_OBS_REAL: return isnan(v->f64[i]);
    case DC_OBS_BOOL: return v->b8[i] == -1;
    case DC_OBS_TEXT: return v->text[i] == NULL;
    default: return v->codes[i] == -1;
  }
}

static void put_nullmap(enc *e, uint8_t *p) {
  if (!e->nullmap_len) return;
  memset(p, 0, e->nullmap_len);
  for (uint32_t i = 0; i < e->v->n; i++)
    if (!is_null(e->v, i)) p[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* FOR and DELTA candidates over the m non-NULL values in e->tmp (as int64) */
static int int_cands(enc *e, size_t m) {
  const uint64_t *x = e->tmp;
  int64_t mn = 0, mx = 0;
  uint64_t zmax = 0;
  for (size_t i = 0; i < m; i++) {
    int64_t a = (int64_t)x[i];
    if (i == 0 || a < mn) mn = a;
    if (i == 0 || a > mx) mx = a;
    if (i) {
      uint64_t z = obs_zigzag((int64_t)(x[i] - x[i - 1]));
      if (z > zmax) zmax = z;
    }
  }
  uint64_t *t = malloc((m ? m : 1) * sizeof *t);
  if (!t) { dc_error_set(e->err, DC_ENOMEM, "out of memory"); return DC_ENOMEM; }
  int rc = DC_ENOMEM;
  /* FOR */
  unsigned w = obs_width((uint64_t)mx - (uint64_t)mn);
  uint8_t *p = cand_new(e, e->nullmap_len + OBS_INT_PARAMS + m * w, OBS_M_FOR);
  if (!p) goto done;
  put_nullmap(e, p);
  p += e->nullmap_len;
  p[0] = (uint8_t)w;
  obs_put64(p + 1, (uint64_t)mn);
  for (size_t i = 0; i < m; i++) t[i] = x[i] - (uint64_t)mn;
  dc_obs_planes_put(p + OBS_INT_PARAMS, t, m, w);
  /* DELTA (only when it can be narrower or when the values are not constant) */
  if (m > 1) {
    w = obs_width(zmax);
    p = cand_new(e, e->nullmap_len + OBS_INT_PARAMS + (m - 1) * w, OBS_M_DELTA);
    if (!p) goto done;
    put_nullmap(e, p);
    p += e->nullmap_len;
    p[0] = (uint8_t)w;
    obs_put64(p + 1, x[0]);
    for (size_t i = 1; i < m; i++) t[i - 1] = obs_zigzag((int64_t)(x[i] - x[i - 1]));
    dc_obs_planes_put(p + OBS_INT_PARAMS, t, m - 1, w);
  }
  rc = DC_OK;
done:
  free(t);
  return rc;
}

static int base_code(char c) {
  return c == 'A' ? 0 : c == 'C' ? 1 : c == 'G' ? 2 : c == 'T' ? 3 : -1;
}

/* TEXT_DNA: each string as its leading run of A/C/G/T (2 bits a base) and
** the rest; a candidate when the runs hold at least half of the bytes
** (cell barcodes, often the obs index). */
static int text_dna_cand(enc *e, size_t m, size_t total) {
  const dc_obs_values *v = e->v;
  uint32_t n = v->n;
  size_t runs = 0;
  uint32_t max_run = 0, max_suf = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!v->text[i]) continue;
    uint32_t l = v->text_len ? v->text_len[i] : (uint32_t)strlen(v->text[i]);
    uint32_t r = 0;
    while (r < l && base_code(v->text[i][r]) >= 0) r++;
    runs += r;
    if (r > max_run) max_run = r;
    if (l - r > max_suf) max_suf = l - r;
  }
  if (m == 0 || runs * 2 < total) return DC_OK;
  unsigned wr = obs_width(max_run), ws = obs_width(max_suf);
  size_t len = e->nullmap_len + 2 + m * wr + m * ws + (runs + 3) / 4 + (total - runs);
  uint8_t *p = cand_new(e, len, OBS_M_TEXT_DNA);
  if (!p) return e->err->code;
  put_nullmap(e, p);
  p += e->nullmap_len;
  p[0] = (uint8_t)wr;
  p[1] = (uint8_t)ws;
  p += 2;
  uint64_t *rl = e->tmp, *sl = malloc(m * sizeof *sl);
  if (!sl) { dc_error_set(e->err, DC_ENOMEM, "out of memory"); return DC_ENOMEM; }
  size_t j = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!v->text[i]) continue;
    uint32_t l = v->text_len ? v->text_len[i] : (uint32_t)strlen(v->text[i]);
    uint32_t r = 0;
    while (r < l && base_code(v->text[i][r]) >= 0) r++;
    rl[j] = r;
    sl[j] = l - r;
    j++;
  }
  dc_obs_planes_put(p, rl, m, wr);
  p += m * wr;
  dc_obs_planes_put(p, sl, m, ws);
  p += m * ws;
  free(sl);
  uint8_t *packed = p;
  memset(packed, 0, (runs + 3) / 4);
  uint8_t *suf = packed + (runs + 3) / 4;
  size_t bi = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (!v->text[i]) continue;
    const char *s = v->text[i];
    uint32_t l = v->text_len ? v->text_len[i] : (uint32_t)strlen(s);
    uint32_t r = 0;
    int c;
    while (r < l && (c = base_code(s[r])) >= 0) {
      packed[bi >> 2] |= (uint8_t)(c << (2 * (bi & 3)));
      bi++;
      r++;
    }
    if (l > r) memcpy(suf, s + r, l - r);
    suf += l - r;
  }
  return DC_OK;
}

static int build(enc *e) {
  const dc_obs_values *v = e->v;
  uint32_t n = v->n;
  size_t m = n - e->st->null_count;
  switch (v->kind) {
    case DC_OBS_CATEGORY: {
      uint64_t top = e->st->has_minmax ? (uint64_t)e->st->max_i + 1 : 0;
      unsigned w = top <= 0xff ? 1 : top <= 0xffff ? 2 : 4;
      uint8_t *p = cand_new(e, (size_t)n * w, w == 1 ? OBS_M_CAT1 : w == 2 ? OBS_M_CAT2 : OBS_M_CAT4);
      if (!p) return e->err->code;
      for (uint32_t i = 0; i < n; i++) e->tmp[i] = (uint64_t)(uint32_t)(v->codes[i] + 1);
      dc_obs_planes_put(p, e->tmp, n, w);
      return DC_OK;
    }
    case DC_OBS_BOOL: {
      uint8_t *p = cand_new(e, e->nullmap_len + (m + 7) / 8, OBS_M_BITS);
      if (!p) return e->err->code;
      put_nullmap(e, p);
      p += e->nullmap_len;
      memset(p, 0, (m + 7) / 8);
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (v->b8[i] == -1) continue;
        if (v->b8[i]) p[j >> 3] |= (uint8_t)(1u << (j & 7));
        j++;
      }
      return DC_OK;
    }
    case DC_OBS_INT: {
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++)
        if (!v->valid || v->valid[i]) e->tmp[j++] = (uint64_t)v->i64[i];
      return int_cands(e, m);
    }
    case DC_OBS_REAL: {
      int integral = 1, f32 = 1;
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        double x = v->f64[i];
        if (isnan(x)) continue;
        uint64_t bits;
        memcpy(&bits, &x, 8);
        e->tmp[j++] = bits;
        if (integral) {
          if (!(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) integral = 0;
          else {
            double back = (double)(int64_t)x;
            uint64_t bb;
            memcpy(&bb, &back, 8);
            if (bb != bits) integral = 0;
          }
        }
        if (f32) {
          float f = (float)x;
          double back = (double)f;
          uint64_t bb;
          memcpy(&bb, &back, 8);
          if (bb != bits) f32 = 0;
        }
      }
      /* binary64 planes, always possible */
      uint8_t *p = cand_new(e, e->nullmap_len + m * 8, OBS_M_F64);
      if (!p) return e->err->code;
      put_nullmap(e, p);
      dc_obs_planes_put(p + e->nullmap_len, e->tmp, m, 8);
      if (f32) {
        p = cand_new(e, e->nullmap_len + m * 4, OBS_M_F32);
        if (!p) return e->err->code;
        put_nullmap(e, p);
        uint64_t *t = malloc((m ? m : 1) * sizeof *t);
        if (!t) { dc_error_set(e->err, DC_ENOMEM, "out of memory"); return DC_ENOMEM; }
        for (size_t i = 0; i < m; i++) {
          double x;
          memcpy(&x, &e->tmp[i], 8);
          float f = (float)x;
          uint32_t fb;
          memcpy(&fb, &f, 4);
          t[i] = fb;
        }
        dc_obs_planes_put(p + e->nullmap_len, t, m, 4);
        free(t);
      }
      if (integral) {
        for (size_t i = 0; i < m; i++) {
          double x;
          memcpy(&x, &e->tmp[i], 8);
          e->tmp[i] = (uint64_t)(int64_t)x;
        }
        return int_cands(e, m);
      }
      return DC_OK;
    }
    case DC_OBS_TEXT: {
      size_t total = 0;
      uint32_t maxlen = 0;
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (!v->text[i]) continue;
        uint32_t l = v->text_len ? v->text_len[i] : (uint32_t)strlen(v->text[i]);
        e->tmp[j++] = l;
        total += l;
        if (l > maxlen) maxlen = l;
      }
      if (total + e->nullmap_len + 1 + m * 4 > DC_OBS_MAX_TEXT) {
        dc_error_set(e->err, DC_EARG, "text block of %zu bytes is larger than the limit of %u bytes",
                   total, (unsigned)DC_OBS_MAX_TEXT);
        return DC_EARG;
      }
      unsigned w = obs_width(maxlen);
      uint8_t *p = cand_new(e, e->nullmap_len + 1 + m * w + total, OBS_M_TEXT);
      if (!p) return e->err->code;
      put_nullmap(e, p);
      p += e->nullmap_len;
      p[0] = (uint8_t)w;
      dc_obs_planes_put(p + 1, e->tmp, m, w);
      p += 1 + m * w;
      for (uint32_t i = 0; i < n; i++) {
        if (!v->text[i]) continue;
        uint32_t l = v->text_len ? v->text_len[i] : (uint32_t)strlen(v->text[i]);
        if (l) memcpy(p, v->text[i], l);
        p += l;
      }
      return text_dna_cand(e, m, total);
    }
  }
  dc_error_set(e->err, DC_EARG, "unknown obs kind %d", v->kind);
  return DC_EARG;
}

/* zstd at level `level`, its match finder's tables no larger than the window that holds the
** input.  From level 13 on, zstd sizes them for inputs over 256 KiB as for a window twice as
** large as the one it then uses (hash and chain logs windowLog + 1): 17 MB for the 566 KB of
** pisces_pbmc1k's gene names at level 16, whose fresh pages took most of the time of compressing
** them.  Logs of the window's size gave the same bytes there (level 16 and 19) in 0.6-0.8x the
** time (docs/converter.md).  Up to 4 MiB, where the default logs (22 and up) are not smaller. */
static size_t compress_sized(ZSTD_CCtx *cctx, void *dst, size_t cap, const void *src, size_t len, int level) {
  if (level < 13 || len <= (256u << 10) || len > (4u << 20)) return ZSTD_compressCCtx(cctx, dst, cap, src, len, level);
  int wl = 10;
  while (((size_t)1 << wl) < len) wl++;           /* the window zstd takes for len bytes */
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  size_t r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, wl);
  if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(cctx, ZSTD_c_chainLog, wl);
  return ZSTD_isError(r) ? r : ZSTD_compress2(cctx, dst, cap, src, len);
}

int dc_obs_encode(const dc_obs_values *v, int level, uint8_t **out,
                  size_t *out_len, dc_obs_stats *st_out, dc_error *err) {
  dc_error dummy;
  if (!err) err = &dummy;
  err->code = DC_OK;
  err->msg[0] = 0;
  dc_obs_stats st_local, *st = st_out ? st_out : &st_local;
  enc e;
  memset(&e, 0, sizeof e);
  ZSTD_CCtx *cctx = NULL;
  uint8_t *blob = NULL;
  int rc;
  if (!out || !out_len) { dc_error_set(err, DC_EARG, "no output given"); rc = DC_EARG; goto done_nost; }
  *out = NULL;
  *out_len = 0;
  rc = dc_obs_stats_compute(v, st, err);
  if (rc) goto done;
  if (level <= 0) level = DC_OBS_DEFAULT_LEVEL;
  if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
  e.v = v;
  e.st = st;
  e.err = err;
  if (st->null_count && v->kind != DC_OBS_CATEGORY) e.nullmap_len = (v->n + 7) / 8;
  e.tmp = malloc((v->n ? v->n : 1) * sizeof *e.tmp);
  cctx = ZSTD_createCCtx();
  if (!e.tmp || !cctx) { dc_error_set(err, DC_ENOMEM, "out of memory"); rc = DC_ENOMEM; goto done; }
  rc = build(&e);
  if (rc) goto done;

  /* pick the candidate that compresses best at a fast level */
  int best = 0;
  if (e.nc > 1) {
    size_t best_sz = (size_t)-1;
    size_t cap = 0;
    for (int i = 0; i < e.nc; i++)
      if (ZSTD_compressBound(e.c[i].len) > cap) cap = ZSTD_compressBound(e.c[i].len);
    uint8_t *scratch = malloc(cap);
    if (!scratch) { dc_error_set(err, DC_ENOMEM, "out of memory"); rc = DC_ENOMEM; goto done; }
    for (int i = 0; i < e.nc; i++) {
      size_t z = ZSTD_compressCCtx(cctx, scratch, cap, e.c[i].buf, e.c[i].len, 1);
      if (ZSTD_isError(z) || z > e.c[i].len) z = e.c[i].len;
      if (z < best_sz) { best_sz = z; best = i; }
    }
    free(scratch);
  }
  cand *c = &e.c[best];
  if (c->len > 0xffffffffu) { dc_error_set(err, DC_EARG, "obs block payload of %zu bytes is too large", c->len); rc = DC_EARG; goto done; }
  size_t bound = ZSTD_compressBound(c->len);
  blob = malloc(OBS_HDR_LEN + (bound > c->len ? bound : c->len));
  if (!blob) { dc_error_set(err, DC_ENOMEM, "out of memory"); rc = DC_ENOMEM; goto done; }
  uint8_t flags = e.nullmap_len ? OBS_F_NULLMAP : 0;
  size_t stored = c->len;
  if (c->len > 0) {
    size_t z = compress_sized(cctx, blob + OBS_HDR_LEN, bound, c->buf, c->len, level);
    if (ZSTD_isError(z)) {
      dc_error_set(err, DC_ENOMEM, "zstd: %s", ZSTD_getErrorName(z));
      rc = DC_ENOMEM;
      goto done;
    }
    if (z < c->len) { flags |= OBS_F_ZSTD; stored = z; }
  }
  if (!(flags & OBS_F_ZSTD) && c->len) memcpy(blob + OBS_HDR_LEN, c->buf, c->len);
  memcpy(blob, OBS_MAGIC, 4);
  blob[4] = OBS_VERSION;
  blob[5] = (uint8_t)v->kind;
  blob[6] = (uint8_t)c->method;
  blob[7] = flags;
  obs_put32(blob + 8, v->n);
  obs_put32(blob + 12, st->null_count);
  obs_put32(blob + 16, (uint32_t)c->len);
  obs_put32(blob + 20, dc_checksum(c->buf, c->len));
  *out = blob;
  *out_len = OBS_HDR_LEN + stored;
  blob = NULL;
  rc = DC_OK;
done:
  if (st == &st_local) dc_obs_stats_clear(st);
done_nost:
  for (int i = 0; i < e.nc; i++) free(e.c[i].buf);
  free(e.tmp);
  free(blob);
  ZSTD_freeCCtx(cctx);
  return rc;
}
