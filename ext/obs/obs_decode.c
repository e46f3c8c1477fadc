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
  uint64_t *out;    size_t out_cap;      /* the block's arrays (dc_obs_decode), 8-byte words */
  uint64_t *tmp;    size_t tmp_cap;
  uint64_t *tmp2;   size_t tmp2_cap;
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
  free(d->raw); free(d->out); free(d->tmp); free(d->tmp2);
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

/* The bytes of a block's arrays in one region (dc_obs.h, dc_obs_decode_to): text_len is the
** text's bytes (text only). */
size_t dc_obs_block_bytes(int kind, uint32_t n, uint64_t text_len) {
  switch (kind) {
    case DC_OBS_CATEGORY: return (size_t)n * 4;
    case DC_OBS_INT: case DC_OBS_BOOL: return (size_t)n * 9;
    case DC_OBS_REAL: return (size_t)n * 8;
    default: return ((size_t)n + 1) * 8 + n + (size_t)text_len;
  }
}

size_t dc_obs_block_size(const dc_obs_block *src) {
  return dc_obs_block_bytes(src->kind, src->n, src->kind == DC_OBS_TEXT ? src->text_off[src->n] : 0);
}

void dc_obs_block_copy(const dc_obs_block *src, void *dst, dc_obs_block *out) {
  size_t n = src->n;
  uint8_t *q = dst;
  *out = *src;
  switch (src->kind) {   /* the layout of dc_obs_decode_to (dc_obs.h) */
    case DC_OBS_CATEGORY:
      if (n) memcpy(q, src->codes, n * 4);
      out->codes = (const int32_t *)(void *)q;
      break;
    case DC_OBS_INT: case DC_OBS_BOOL:
      if (n) { memcpy(q, src->i64, n * 8); memcpy(q + n * 8, src->valid, n); }
      out->i64 = (const int64_t *)(void *)q;
      out->valid = q + n * 8;
      break;
    case DC_OBS_REAL:
      if (n) memcpy(q, src->f64, n * 8);
      out->f64 = (const double *)(void *)q;
      break;
    default:             /* text */
      memcpy(q, src->text_off, (n + 1) * 8);
      if (n) memcpy(q + (n + 1) * 8, src->valid, n);
      if (src->text_off[n]) memcpy(q + (n + 1) * 8 + n, src->text, (size_t)src->text_off[n]);
      out->text_off = (const uint64_t *)(void *)q;
      out->valid = q + (n + 1) * 8;
      out->text = (const char *)q + (n + 1) * 8 + n;
      break;
  }
}

/* Where the arrays of the block being decoded go: the caller's memory, or the decoder's. */
typedef struct sink {
  dc_obs_alloc alloc;
  void *arg;
} sink;

static uint8_t *region(dc_obs_decoder *d, const sink *s, size_t bytes) {
  if (s->alloc) return s->alloc(s->arg, bytes);
  if (grow((void **)&d->out, &d->out_cap, (bytes + 7) / 8, 8)) return NULL;
  return (uint8_t *)d->out;
}

static void fill_valid(uint8_t *valid, const uint8_t *nullmap, uint32_t n) {
  if (!nullmap) { memset(valid, 1, n); return; }
  for (uint32_t i = 0; i < n; i++) valid[i] = (nullmap[i >> 3] >> (i & 7)) & 1;
}

/* Reads the m FOR/DELTA values (checked by int_check) into v as int64 */
static void int_payload(int method, const uint8_t *p, size_t m, uint64_t *v) {
  unsigned w = p[0];
  uint64_t base = obs_get64(p + 1);
  size_t cnt = method == OBS_M_FOR ? m : (m ? m - 1 : 0);
  dc_obs_planes_get(p + OBS_INT_PARAMS, cnt, w, v);
  if (method == OBS_M_FOR) {
    for (size_t i = 0; i < m; i++) v[i] += base;
  } else if (m) {
    /* in place, from the front: v[i] holds delta i+1 */
    uint64_t acc = base;
    for (size_t i = 0; i + 1 < m; i++) {
      uint64_t z = v[i];
      v[i] = acc;
      acc += (uint64_t)obs_unzigzag(z);
    }
    v[m - 1] = acc;
  }
}

/* The checks of int_payload, before any output is made */
static int int_check(int method, size_t avail, const uint8_t *p, size_t m, dc_error *err) {
  int rc;
  if (avail < OBS_INT_PARAMS) CORRUPT("obs block: integer parameters truncated");
  unsigned w = p[0];
  if (w != 0 && w != 1 && w != 2 && w != 4 && w != 8) CORRUPT("obs block: bad value width %u", w);
  size_t cnt = method == OBS_M_FOR ? m : (m ? m - 1 : 0);
  if ((uint64_t)(avail - OBS_INT_PARAMS) != (uint64_t)cnt * w)
    CORRUPT("obs block: %zu bytes of values where %zu x %u are expected", avail - OBS_INT_PARAMS, cnt, w);
  if (method == OBS_M_DELTA && m == 0 && obs_get64(p + 1) != 0) CORRUPT("obs block: delta base without values");
  return DC_OK;
fail:
  return rc;
}

/* The m non-NULL 8-byte values at v[0 .. m) spread to their rows v[0 .. n), from the back (in
** place: value j goes to row i >= j), NULL rows set to null */
static void spread(uint64_t *v, const uint8_t *nullmap, uint32_t n, size_t m, uint64_t null) {
  if (!nullmap) return;
  size_t j = m;
  for (uint32_t i = n; i-- > 0;) v[i] = ((nullmap[i >> 3] >> (i & 7)) & 1) ? v[--j] : null;
}

/* TEXT_DNA payload (after the NULL-map) */
static int text_dna(dc_obs_decoder *d, const sink *sk, const uint8_t *p, size_t avail, uint32_t n, size_t m,
                    const uint8_t *nullmap, dc_obs_block *out, dc_error *err) {
  int rc;
  if (avail < 2) CORRUPT("obs block: text parameters truncated");
  unsigned wr = p[0], ws = p[1];
  if ((wr != 0 && wr != 1 && wr != 2 && wr != 4) || (ws != 0 && ws != 1 && ws != 2 && ws != 4))
    CORRUPT("obs block: bad text length widths %u/%u", wr, ws);
  p += 2;
  avail -= 2;
  if ((uint64_t)avail < (uint64_t)m * (wr + ws)) CORRUPT("obs block: text lengths truncated");
  if (GROW(d, tmp, m) || GROW(d, tmp2, m)) NOMEM();
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
  uint8_t *r = region(d, sk, dc_obs_block_bytes(DC_OBS_TEXT, n, runs + sufs));
  if (!r) NOMEM();
  uint64_t *off = (uint64_t *)r;
  uint8_t *valid = r + ((size_t)n + 1) * 8, *o = valid + n;
  out->text_off = off;
  out->valid = valid;
  out->text = (const char *)o;
  fill_valid(valid, nullmap, n);
  static const char acgt[4] = {'A', 'C', 'G', 'T'};
  const uint8_t *suf = p + packed;
  uint64_t bi = 0, total = 0;
  size_t j = 0;
  off[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (valid[i]) {
      uint64_t rn = d->tmp[j], s = d->tmp2[j];
      j++;
      for (uint64_t q = 0; q < rn; q++, bi++) *o++ = (uint8_t)acgt[(p[bi >> 2] >> (2 * (bi & 3))) & 3];
      if (s) memcpy(o, suf, (size_t)s);
      o += s;
      suf += s;
      total += rn + s;
    }
    off[i + 1] = total;
  }
  return DC_OK;
fail:
  return rc;
}

static int decode(dc_obs_decoder *d, const uint8_t *buf, size_t len, const dc_obs_expect *ex, const sink *sk,
                  dc_obs_block *out, dc_error *err) {
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

  uint8_t *r;
  switch (kind) {
    case DC_OBS_CATEGORY: {
      unsigned w = method == OBS_M_CAT1 ? 1 : method == OBS_M_CAT2 ? 2 : method == OBS_M_CAT4 ? 4 : 0;
      if (!w) CORRUPT("obs block: unknown category method %d", method);
      if ((uint64_t)avail != (uint64_t)n * w) CORRUPT("obs block: %zu bytes of codes where %u x %u are expected", avail, n, w);
      if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, 0)))) NOMEM();
      uint32_t *u = (uint32_t *)r;   /* stored codes (0: NULL), then in place code - 1 */
      dc_obs_planes_get32(p, n, w, u);
      uint32_t seen_null = 0, over = 0;
      uint64_t lim = ex->n_categories ? (uint64_t)ex->n_categories : (uint64_t)DC_OBS_MAX_CATEGORIES;
      for (uint32_t i = 0; i < n; i++) {
        seen_null += u[i] == 0;
        over |= (uint64_t)u[i] > lim;
      }
      if (over) {
        uint32_t i = 0;
        while ((uint64_t)u[i] <= lim) i++;
        CORRUPT("obs block: value %u has category code %llu, beyond the %llu categories", i,
                (unsigned long long)(u[i] - 1), (unsigned long long)lim);
      }
      int32_t *codes = (int32_t *)r;
      for (uint32_t i = 0; i < n; i++) codes[i] = (int32_t)u[i] - 1;
      if (seen_null != nulls) CORRUPT("obs block: %u NULL codes where the null count is %u", seen_null, nulls);
      out->codes = codes;
      break;
    }
    case DC_OBS_BOOL: {
      if (method != OBS_M_BITS) CORRUPT("obs block: unknown bool method %d", method);
      if (avail != (m + 7) / 8) CORRUPT("obs block: %zu bytes of bool bits where %zu are expected", avail, (m + 7) / 8);
      if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, 0)))) NOMEM();
      int64_t *i64 = (int64_t *)r;
      uint8_t *valid = r + (size_t)n * 8;
      fill_valid(valid, nullmap, n);
      size_t j = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (valid[i]) { i64[i] = (p[j >> 3] >> (j & 7)) & 1; j++; }
        else i64[i] = 0;
      }
      out->i64 = i64;
      out->valid = valid;
      break;
    }
    case DC_OBS_INT: {
      if (method != OBS_M_FOR && method != OBS_M_DELTA) CORRUPT("obs block: unknown int method %d", method);
      if ((rc = int_check(method, avail, p, m, err)) != DC_OK) goto fail;
      if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, 0)))) NOMEM();
      uint64_t *v = (uint64_t *)r;
      uint8_t *valid = r + (size_t)n * 8;
      fill_valid(valid, nullmap, n);
      int_payload(method, p, m, v);
      spread(v, nullmap, n, m, 0);
      out->i64 = (const int64_t *)v;
      out->valid = valid;
      break;
    }
    case DC_OBS_REAL: {
      uint64_t *v;
      if (method == OBS_M_F64 || method == OBS_M_F32) {
        unsigned w = method == OBS_M_F64 ? 8 : 4;
        if ((uint64_t)avail != (uint64_t)m * w) CORRUPT("obs block: %zu bytes of reals where %zu x %u are expected", avail, m, w);
        if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, 0)))) NOMEM();
        v = (uint64_t *)r;
        dc_obs_planes_get(p, m, w, v);
        for (size_t i = 0; i < m; i++) {
          double x;
          if (w == 8) memcpy(&x, &v[i], 8);
          else { uint32_t b = (uint32_t)v[i]; float f; memcpy(&f, &b, 4); x = f; }
          if (isnan(x)) CORRUPT("obs block: a non-NULL real is NaN");
          memcpy(&v[i], &x, 8);
        }
      } else if (method == OBS_M_FOR || method == OBS_M_DELTA) {
        if ((rc = int_check(method, avail, p, m, err)) != DC_OK) goto fail;
        if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, 0)))) NOMEM();
        v = (uint64_t *)r;
        int_payload(method, p, m, v);
        for (size_t i = 0; i < m; i++) {
          double x = (double)(int64_t)v[i];
          memcpy(&v[i], &x, 8);
        }
      } else {
        CORRUPT("obs block: unknown real method %d", method);
      }
      double nan = NAN;
      uint64_t nanbits;
      memcpy(&nanbits, &nan, 8);
      spread(v, nullmap, n, m, nanbits);
      out->f64 = (const double *)v;
      break;
    }
    case DC_OBS_TEXT: {
      if (method == OBS_M_TEXT_DNA) {
        rc = text_dna(d, sk, p, avail, n, m, nullmap, out, err);
        if (rc) goto fail;
        break;
      }
      if (method != OBS_M_TEXT) CORRUPT("obs block: unknown text method %d", method);
      if (avail < 1) CORRUPT("obs block: text lengths truncated");
      unsigned w = p[0];
      if (w != 0 && w != 1 && w != 2 && w != 4) CORRUPT("obs block: bad text length width %u", w);
      p++;
      avail--;
      if ((uint64_t)avail < (uint64_t)m * w) CORRUPT("obs block: text lengths truncated");
      if (GROW(d, tmp, m)) NOMEM();
      dc_obs_planes_get(p, m, w, d->tmp);
      p += m * w;
      avail -= m * w;
      uint64_t total = 0;
      for (size_t j = 0; j < m; j++) total += d->tmp[j];
      if (total != avail) CORRUPT("obs block: text lengths add up to %llu bytes where %zu are stored",
                                  (unsigned long long)total, avail);
      if (!(r = region(d, sk, dc_obs_block_bytes(kind, n, total)))) NOMEM();
      uint64_t *off = (uint64_t *)r;
      uint8_t *valid = r + ((size_t)n + 1) * 8;
      char *text = (char *)valid + n;
      fill_valid(valid, nullmap, n);
      total = 0;
      size_t j = 0;
      off[0] = 0;
      for (uint32_t i = 0; i < n; i++) {
        if (valid[i]) total += d->tmp[j++];
        off[i + 1] = total;
      }
      if (avail) memcpy(text, p, avail);
      out->text = text;
      out->text_off = off;
      out->valid = valid;
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

int dc_obs_decode(dc_obs_decoder *d, const uint8_t *buf, size_t len,
                  const dc_obs_expect *ex, dc_obs_block *out, dc_error *err) {
  sink s = {NULL, NULL};
  return decode(d, buf, len, ex, &s, out, err);
}

int dc_obs_decode_to(dc_obs_decoder *d, const uint8_t *buf, size_t len, const dc_obs_expect *ex,
                     dc_obs_alloc alloc, void *arg, dc_obs_block *out, dc_error *err) {
  sink s = {alloc, arg};
  if (!alloc) {
    if (!err) return DC_EARG;
    dc_error_set(err, DC_EARG, "dc_obs_decode_to: no allocator given");
    return DC_EARG;
  }
  return decode(d, buf, len, ex, &s, out, err);
}
