/*
** obs_decode.c — the decoder of obs blocks (docs/format.md section 3).
**
** Every field of a stored block is checked before use: header, method,
** lengths (in 64-bit arithmetic), the zstd frame size, the checksum of the
** payload, the NULL-map's count, category codes against the dictionary size,
** and that no non-NULL real decodes to NaN.  Errors are DC_ECORRUPT (or
** DC_EUNSUPPORTED for a newer version) with a message naming the reason.
*/
#include <stdlib.h>
#include <math.h>
#include <zstd.h>
#include "obs_internal.h"

struct dc_obs_decoder {
  ZSTD_DCtx *dctx;
  uint8_t *raw;     size_t raw_cap;      /* decompressed payload */
  int32_t *codes;   size_t codes_cap;
  int64_t *i64;     size_t i64_cap;
  double *f64;      size_t f64_cap;
  uint8_t *valid;   size_t valid_cap;
  uint64_t *off;    size_t off_cap;
  uint64_t *tmp;    size_t tmp_cap;
  uint64_t *tmp2;   size_t tmp2_cap;
  uint8_t *txt;     size_t txt_cap;      /* rebuilt text (TEXT_DNA) */
};

dc_obs_decoder *dc_obs_decoder_new(void) {
  dc_obs_decoder *d = calloc(1, sizeof *d);
  if (!d) return NULL;
  d->dctx = ZSTD_createDCtx();
  if (!d->dctx) { free(d); return NULL; }
  return d;
}

void dc_obs_decoder_free(dc_obs_decoder *d) {
  if (!d) return;
  ZSTD_freeDCtx(d->dctx);
  free(d->raw); free(d->codes); free(d->i64); free(d->f64);
  free(d->valid); free(d->off); free(d->tmp); free(d->tmp2); free(d->txt);
  free(d);
}

/* grows *p to hold n elements of size sz; 0 on success */
static int grow(void **p, size_t *cap, size_t n, size_t sz) {
  if (n == 0) n = 1;
  if (n <= *cap) return 0;
  size_t want = n + n / 4;
  void *q = realloc(*p, want * sz);
  if (!q) return 1;
  *p = q;
  *cap = want;
  return 0;
}
#define GROW(d, f, n) grow((void **)&(d)->f, &(d)->f##_cap, (n), sizeof *(d)->f)

int dc_obs_peek(const uint8_t *buf, size_t len, int *kind, uint32_t *n,
                uint32_t *null_count, dc_error *err) {
  if (!buf || len < OBS_HDR_LEN) {
    dc_error_set(err, DC_ECORRUPT, "obs block of %zu bytes is shorter than its %d-byte header", len, OBS_HDR_LEN);
    return DC_ECORRUPT;
  }
  if (memcmp(buf, OBS_MAGIC, 4) != 0) {
    dc_error_set(err, DC_ECORRUPT, "obs block: bad magic (not an obs block)");
    return DC_ECORRUPT;
  }
  if (buf[4] != OBS_VERSION) {
    dc_error_set(err, DC_EUNSUPPORTED, "obs block: format version %u is not supported (this reader knows %d)",
               buf[4], OBS_VERSION);
    return DC_EUNSUPPORTED;
  }
  if (!dc_obs_kind_name(buf[5])) {
    dc_error_set(err, DC_ECORRUPT, "obs block: unknown kind %u", buf[5]);
    return DC_ECORRUPT;
  }
  if (kind) *kind = buf[5];
  if (n) *n = obs_get32(buf + 8);
  if (null_count) *null_count = obs_get32(buf + 12);
  return DC_OK;
}

#define CORRUPT(...) do { dc_error_set(err, DC_ECORRUPT, __VA_ARGS__); rc = DC_ECORRUPT; goto fail; } while (0)
#define NOMEM() do { dc_error_set(err, DC_ENOMEM, "out of memory decoding an obs block"); rc = DC_ENOMEM; goto fail; } while (0)

static size_t popcount_bytes(const uint8_t *p, size_t n) {
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += (size_t)__builtin_popcount(p[i]);
  return c;
}

/* reads the FOR/DELTA parameters and values into d->tmp as int64 (m values) */
static int int_payload(dc_obs_decoder *d, int method, const uint8_t *p, size_t avail, size_t m,
                       dc_error *err) {
  int rc;
  if (avail < OBS_INT_PARAMS) CORRUPT("obs block: integer parameters truncated");
  unsigned w = p[0];
  if (w != 0 && w != 1 && w != 2 && w != 4 && w != 8) CORRUPT("obs block: bad value width %u", w);
  uint64_t base = obs_get64(p + 1);
  size_t cnt = method == OBS_M_FOR ? m : (m ? m - 1 : 0);
  if ((uint64_t)(avail - OBS_INT_PARAMS) != (uint64_t)cnt * w)
    CORRUPT("obs block: %zu bytes of values where %zu x %u are expected", avail - OBS_INT_PARAMS, cnt, w);
  if (GROW(d, tmp, m)) NOMEM();
  if (method == OBS_M_DELTA && m == 0 && base != 0) CORRUPT("obs block: delta base without values");
  dc_obs_planes_get(p + OBS_INT_PARAMS, cnt, w, d->tmp);
  if (method == OBS_M_FOR) {
    for (size_t i = 0; i < m; i++) d->tmp[i] += base;
  } else if (m) {
    /* in place, from the back: tmp[i] holds delta i+1 */
    uint64_t acc = base;
    for (size_t i = 0; i + 1 < m; i++) {
      uint64_t z = d->tmp[i];
      d->tmp[i] = acc;
      acc += (uint64_t)obs_unzigzag(z);
    }
    d->tmp[m - 1] = acc;
  }
  return DC_OK;
fail:
  return rc;
}

/* TEXT_DNA payload (after the NULL-map) into d->txt and d->off; d->valid set */
static int text_dna(dc_obs_decoder *d, const uint8_t *p, size_t avail, uint32_t n, size_t m, dc_error *err) {
  int rc;
  if (avail < 2) CORRUPT("obs block: text parameters truncated");
  unsigned wr = p[0], ws = p[1];
  if ((wr != 0 && wr != 1 && wr != 2 && wr != 4) || (ws != 0 && ws != 1 && ws != 2 && ws != 4))
    CORRUPT("obs block: bad text length widths %u/%u", wr, ws);
  p += 2;
  avail -= 2;
  if ((uint64_t)avail < (uint64_t)m * (wr + ws)) CORRUPT("obs block: text lengths truncated");
  if (GROW(d, tmp, m) || GROW(d, tmp2, m) || GROW(d, off, (size_t)n + 1)) NOMEM();
  dc_obs_planes_get(p, m, wr, d->tmp);
  p += m * wr;
  dc_obs_planes_get(p, m, ws, d->tmp2);
  p += m * ws;
  avail -= m * (wr + ws);
  uint64_t runs = 0, sufs = 0;
  for (size_t j = 0; j < m; j++) { runs += d->tmp[j]; sufs += d->tmp2[j]; }
  uint64_t packed = (runs + 3) / 4;
  if (runs + sufs > DC_OBS_MAX_TEXT || packed + sufs != (uint64_t)avail)
    CORRUPT("obs block: text lengths (%llu bases, %llu other bytes) disagree with the %zu bytes stored",
            (unsigned long long)runs, (unsigned long long)sufs, avail);
  if ((runs & 3) && (p[packed - 1] >> (2 * (runs & 3)))) CORRUPT("obs block: bits set past the last base");
  if (GROW(d, txt, (size_t)(runs + sufs))) NOMEM();
  static const char acgt[4] = {'A', 'C', 'G', 'T'};
  const uint8_t *suf = p + packed;
  uint8_t *o = d->txt;
  uint64_t bi = 0, total = 0;
  size_t j = 0;
  d->off[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (d->valid[i]) {
      uint64_t r = d->tmp[j], s = d->tmp2[j];
      j++;
      for (uint64_t q = 0; q < r; q++, bi++) *o++ = (uint8_t)acgt[(p[bi >> 2] >> (2 * (bi & 3))) & 3];
      if (s) memcpy(o, suf, (size_t)s);
      o += s;
      suf += s;
      total += r + s;
    }
    d->off[i + 1] = total;
  }
  return DC_OK;
fail:
  return rc;
}

int dc_obs_decode(dc_obs_decoder *d, const uint8_t *buf, size_t len,
                  const dc_obs_expect *ex, dc_obs_block *out, dc_error *err) {
  int rc, kind = 0;
  uint32_t n = 0, nulls = 0;
  dc_error dummy;
  if (!err) err = &dummy;
  err->code = DC_OK;
  err->msg[0] = 0;
  if (!out || !d || !ex) { dc_error_set(err, DC_EARG, "dc_obs_decode: missing argument"); return DC_EARG; }
  memset(out, 0, sizeof *out);
  rc = dc_obs_peek(buf, len, &kind, &n, &nulls, err);
  if (rc) return rc;
  if (kind != ex->kind)
    CORRUPT("obs block holds kind '%s' where the column is '%s'", dc_obs_kind_name(kind),
            dc_obs_kind_name(ex->kind) ? dc_obs_kind_name(ex->kind) : "?");
  if (n != ex->n) CORRUPT("obs block holds %u values where %u are expected", n, ex->n);
  if (n > DC_OBS_MAX_N) CORRUPT("obs block of %u values is over the limit %u", n, DC_OBS_MAX_N);
  if (nulls > n) CORRUPT("obs block: null count %u is larger than its %u values", nulls, n);
  int method = buf[6];
  unsigned flags = buf[7];
  uint32_t raw_len = obs_get32(buf + 16);
  uint32_t sum = obs_get32(buf + 20);
  if (flags & ~(unsigned)(OBS_F_ZSTD | OBS_F_NULLMAP)) CORRUPT("obs block: unknown flags 0x%02x", flags);
  const uint8_t *stored = buf + OBS_HDR_LEN;
  size_t stored_len = len - OBS_HDR_LEN;
  /* an upper bound of the raw payload of n values, before trusting raw_len */
  uint64_t bound = (uint64_t)(n + 7) / 8 + OBS_INT_PARAMS + (uint64_t)n * 8;
  if (kind == DC_OBS_TEXT) bound = DC_OBS_MAX_TEXT;
  if (raw_len > bound) CORRUPT("obs block: payload length %u is impossible for %u values", raw_len, n);
  const uint8_t *raw;
  if (flags & OBS_F_ZSTD) {
    unsigned long long fcs = ZSTD_getFrameContentSize(stored, stored_len);
    if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != raw_len)
      CORRUPT("obs block: compressed frame does not declare the payload length %u", raw_len);
    size_t fsz = ZSTD_findFrameCompressedSize(stored, stored_len);
    if (ZSTD_isError(fsz) || fsz != stored_len)
      CORRUPT("obs block: compressed frame is truncated or followed by garbage (%zu stored bytes)", stored_len);
    if (GROW(d, raw, raw_len)) NOMEM();
    size_t got = ZSTD_decompressDCtx(d->dctx, d->raw, raw_len ? raw_len : 1, stored, stored_len);
    if (ZSTD_isError(got)) CORRUPT("obs block: zstd: %s", ZSTD_getErrorName(got));
    if (got != raw_len) CORRUPT("obs block: payload decompressed to %zu bytes, not %u", got, raw_len);
    raw = d->raw;
  } else {
    if (stored_len != raw_len) CORRUPT("obs block: %zu stored bytes where %u are declared", stored_len, raw_len);
    raw = stored;
    if (kind == DC_OBS_TEXT) {  /* text points into the payload: keep a copy */
      if (GROW(d, raw, raw_len)) NOMEM();
      if (raw_len) memcpy(d->raw, stored, raw_len);
      raw = d->raw;
    }
  }
  if (dc_checksum(raw, raw_len) != sum) CORRUPT("obs block: checksum mismatch");

  size_t m = (size_t)n - nulls;
  const uint8_t *p = raw;
  size_t avail = raw_len;
  const uint8_t *nullmap = NULL;
  if (flags & OBS_F_NULLMAP) {
    if (kind == DC_OBS_CATEGORY) CORRUPT("obs block: a category block has no NULL-map");
    size_t nb = ((size_t)n + 7) / 8;
    if (avail < nb) CORRUPT("obs block: NULL-map truncated");
    nullmap = p;
    if (popcount_bytes(nullmap, nb) != m) CORRUPT("obs block: NULL-map disagrees with the null count %u", nulls);
    if ((n & 7) && (nullmap[nb - 1] >> (n & 7))) CORRUPT("obs block: NULL-map has bits past the end");
    p += nb;
    avail -= nb;
  } else if (nulls && kind != DC_OBS_CATEGORY) {
    CORRUPT("obs block: %u NULLs but no NULL-map", nulls);
  }
  if (kind != DC_OBS_CATEGORY && kind != DC_OBS_REAL) {
    if (GROW(d, valid, n)) NOMEM();
    for (uint32_t i = 0; i < n; i++) d->valid[i] = nullmap ? (nullmap[i >> 3] >> (i & 7)) & 1 : 1;
    out->valid = d->valid;
  }

  switch (kind) {
    case DC_OBS_CATEGORY: {
      unsigned w = method == OBS_M_CAT1 ? 1 : method == OBS_M_CAT2 ? 2 : method == OBS_M_CAT4 ? 4 : 0;
      if (!w) CORRUPT("obs block: unknown category method %d", method);
      if ((uint64_t)avail != (uint64_t)n * w) CORRUPT("obs block: %zu bytes of codes where %u x %u are expected", avail, n, w);
      if (GROW(d, tmp, n) || GROW(d, codes, n)) NOMEM();
      dc_obs_planes_get(p, n, w, d->tmp);
      uint32_t seen_null = 0;
      uint64_t lim = ex->n_categories ? (uint64_t)ex->n_categories : (uint64_t)DC_OBS_MAX_CATEGORIES;
      for (uint32_t i = 0; i < n; i++) {
        uint64_t c = d->tmp[i];
        if (c == 0) seen_null++;
        else if (c > lim) CORRUPT("obs block: value %u has category code %llu, beyond the %llu categories", i,
                                  (unsigned long long)(c - 1), (unsigned long long)lim);
        d->codes[i] = (int32_t)c - 1;
      }
      if (seen_null != nulls) CORRUPT("obs block: %u NULL codes where the null count is %u", seen_null, nulls);
      out->codes = d->codes;
      break;
    }
    case DC_OBS_BOOL: {
      if (method != OBS_M_BITS) CORRUPT("obs block: unknown bool method %d", method);
      if (avail != (m + 7) / 8) CORRUPT("obs block: %zu bytes of bool bits where %zu are expected", avail, (m + 7) / 8);
      if (GROW(d, i64, n)) NOMEM();
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (d->valid[i]) { d->i64[i] = (p[j >> 3] >> (j & 7)) & 1; j++; }
        else d->i64[i] = 0;
      }
      out->i64 = d->i64;
      break;
    }
    case DC_OBS_INT: {
      if (method != OBS_M_FOR && method != OBS_M_DELTA) CORRUPT("obs block: unknown int method %d", method);
      rc = int_payload(d, method, p, avail, m, err);
      if (rc) goto fail;
      if (GROW(d, i64, n)) NOMEM();
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) d->i64[i] = d->valid[i] ? (int64_t)d->tmp[j++] : 0;
      out->i64 = d->i64;
      break;
    }
    case DC_OBS_REAL: {
      if (GROW(d, f64, n)) NOMEM();
      if (method == OBS_M_F64 || method == OBS_M_F32) {
        unsigned w = method == OBS_M_F64 ? 8 : 4;
        if ((uint64_t)avail != (uint64_t)m * w) CORRUPT("obs block: %zu bytes of reals where %zu x %u are expected", avail, m, w);
        if (GROW(d, tmp, m)) NOMEM();
        dc_obs_planes_get(p, m, w, d->tmp);
        for (size_t i = 0; i < m; i++) {
          double x;
          if (w == 8) memcpy(&x, &d->tmp[i], 8);
          else { uint32_t b = (uint32_t)d->tmp[i]; float f; memcpy(&f, &b, 4); x = f; }
          if (isnan(x)) CORRUPT("obs block: a non-NULL real is NaN");
          memcpy(&d->tmp[i], &x, 8);
        }
      } else if (method == OBS_M_FOR || method == OBS_M_DELTA) {
        rc = int_payload(d, method, p, avail, m, err);
        if (rc) goto fail;
        for (size_t i = 0; i < m; i++) {
          double x = (double)(int64_t)d->tmp[i];
          memcpy(&d->tmp[i], &x, 8);
        }
      } else {
        CORRUPT("obs block: unknown real method %d", method);
      }
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (!nullmap || ((nullmap[i >> 3] >> (i & 7)) & 1)) memcpy(&d->f64[i], &d->tmp[j++], 8);
        else d->f64[i] = NAN;
      }
      out->f64 = d->f64;
      break;
    }
    case DC_OBS_TEXT: {
      if (method == OBS_M_TEXT_DNA) {
        rc = text_dna(d, p, avail, n, m, err);
        if (rc) goto fail;
        out->text = (const char *)d->txt;
        out->text_off = d->off;
        break;
      }
      if (method != OBS_M_TEXT) CORRUPT("obs block: unknown text method %d", method);
      if (avail < 1) CORRUPT("obs block: text lengths truncated");
      unsigned w = p[0];
      if (w != 0 && w != 1 && w != 2 && w != 4) CORRUPT("obs block: bad text length width %u", w);
      p++;
      avail--;
      if ((uint64_t)avail < (uint64_t)m * w) CORRUPT("obs block: text lengths truncated");
      if (GROW(d, tmp, m) || GROW(d, off, (size_t)n + 1)) NOMEM();
      dc_obs_planes_get(p, m, w, d->tmp);
      p += m * w;
      avail -= m * w;
      uint64_t total = 0;
      size_t j = 0;
      d->off[0] = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (d->valid[i]) total += d->tmp[j++];
        d->off[i + 1] = total;
      }
      if (total != avail) CORRUPT("obs block: text lengths add up to %llu bytes where %zu are stored",
                                  (unsigned long long)total, avail);
      out->text = (const char *)p;
      out->text_off = d->off;
      break;
    }
  }
  out->kind = kind;
  out->n = n;
  out->null_count = nulls;
  return DC_OK;
fail:
  memset(out, 0, sizeof *out);
  return rc;
}
