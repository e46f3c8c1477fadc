/*
** dc_decompress.c — the tile decoder: decoder contexts, chunk and tile
** decoding (checksums first), and the decoder of the zstd codec.  The rANS
** decoder is in dc_rans_decompress.c.  Byte layout: docs/format.md section 2.
*/
#include "dc_ctx.h"

#include <stdlib.h>
#include <zstd.h>

dc_decoder *dc_decoder_new(void) {
  return calloc(1, sizeof(dc_decoder));
}

void dc_decoder_free(dc_decoder *d) {
  if (!d) return;
  if (d->zstd_dctx) ZSTD_freeDCtx(d->zstd_dctx);
  dc_rans_decoder_free(d->rans);
  dc_ctx_decoder_free(d->ctx);
  dc_mem_free(d->scratch, d->scratch_map);
  free(d);
}

int dc_decoder_scratch(dc_decoder *d, size_t need, dc_error *err) {
  if (need <= d->scratch_cap) return DC_OK;
  /* grown by half at least, so that chunks of slowly growing sizes do not each map (and
  ** fault in) a new buffer; large ones in huge pages (dc_mem_alloc) */
  size_t cap = d->scratch_cap + d->scratch_cap / 2 > need ? d->scratch_cap + d->scratch_cap / 2 : need;
  dc_mem_free(d->scratch, d->scratch_map);
  d->scratch = dc_mem_alloc(cap, &d->scratch_map);
  d->scratch_cap = d->scratch ? (d->scratch_map ? d->scratch_map : cap) : 0;
  if (!d->scratch) {
    dc_error_set(err, DC_ENOMEM, "out of memory for %zu bytes of decoder scratch", need);
    return DC_ENOMEM;
  }
  return DC_OK;
}

uint8_t *dc_unpack_shared(dc_decoder *d, const uint8_t *sh, size_t sh_len, uint64_t max, uint32_t c,
                          size_t *raw_len, dc_error *err) {
  const uint8_t *end = sh + sh_len;
  uint64_t n;
  size_t k = dc_get_varint(sh, end, &n);
  const char *why = "truncated";
  int code = DC_ECORRUPT;
  uint8_t *raw = NULL;
  if (!k) goto fail;
  sh += k;
  why = "too large";
  if (n > max) goto fail;
  why = "bad zstd frame";
  if (ZSTD_getFrameContentSize(sh, (size_t)(end - sh)) != n) goto fail;
  raw = malloc(n ? (size_t)n : 1);
  if (d && !d->zstd_dctx) d->zstd_dctx = ZSTD_createDCtx();
  if (!raw || (d && !d->zstd_dctx)) {
    why = "out of memory";
    code = DC_ENOMEM;
    goto fail;
  }
  size_t z = d ? ZSTD_decompressDCtx(d->zstd_dctx, raw, (size_t)n, sh, (size_t)(end - sh))
               : ZSTD_decompress(raw, (size_t)n, sh, (size_t)(end - sh));
  if (ZSTD_isError(z) || z != n) goto fail;
  *raw_len = (size_t)n;
  return raw;
fail:
  free(raw);
  dc_error_set(err, code, "chunk %u: rans tables: %s", c, why);
  return NULL;
}

/* ------------------------------------------------------------ zstd codec */
int dc_zstd_decode_chunk(dc_decoder *d, const uint8_t *p, size_t len,
                         const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err) {
  const dc_chunk_info *ci = &h->chunk[c];
  const uint8_t *end = p + len;
  uint64_t la, le;
  size_t k = dc_get_varint(p, end, &la);
  if (!k) goto trunc;
  p += k;
  k = dc_get_varint(p, end, &le);
  if (!k) goto trunc;
  p += k;
  uint64_t nnz = ci->nnz;
  /* each cell's nnz takes at most 5 varint bytes; each escape at most 5 */
  if (la > 5ull * ci->n_cells || le > 10ull * nnz) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: section sizes %llu/%llu out of range", c,
                 (unsigned long long)la, (unsigned long long)le);
    return DC_ECORRUPT;
  }
  uint64_t total = la + 3 * nnz + le;
  unsigned long long fcs = ZSTD_getFrameContentSize(p, (size_t)(end - p));
  if (fcs != total) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: zstd frame holds %s, expected %llu bytes", c,
                 fcs == ZSTD_CONTENTSIZE_ERROR ? "no valid frame header" : fcs == ZSTD_CONTENTSIZE_UNKNOWN ? "an unknown size" : "a different size",
                 (unsigned long long)total);
    return DC_ECORRUPT;
  }
  if (total > SIZE_MAX - 16) goto trunc;
  int rc = dc_decoder_scratch(d, (size_t)total + 16, err);
  if (rc) return rc;
  if (!d->zstd_dctx) {
    d->zstd_dctx = ZSTD_createDCtx();
    if (!d->zstd_dctx) {
      dc_error_set(err, DC_ENOMEM, "chunk %u: out of memory for a zstd context", c);
      return DC_ENOMEM;
    }
  }
  size_t z = ZSTD_decompressDCtx(d->zstd_dctx, d->scratch, (size_t)total, p, (size_t)(end - p));
  if (ZSTD_isError(z) || z != total) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: zstd: %s", c,
                 ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short frame");
    return DC_ECORRUPT;
  }
  const uint8_t *a = d->scratch, *aend = a + la;
  const uint8_t *lo = aend, *hi = lo + nnz, *ct = hi + nnz;
  const uint8_t *e = ct + nnz, *eend = e + le;
  int64_t *indptr = out->indptr + ci->first_cell;
  int32_t *idx = out->indices + ci->nnz_before;
  int32_t *vi = out->values_f32 ? NULL : (int32_t *)out->values + ci->nnz_before;
  float *vf = out->values_f32 ? (float *)out->values + ci->nnz_before : NULL;
  uint64_t base = ci->nnz_before, pos = 0;
  const uint64_t ng = h->n_genes;
  dc_indptr_edge(&indptr[0], (int64_t)base);
  for (uint32_t i = 0; i < ci->n_cells; i++) {
    uint64_t m;
    k = dc_get_varint(a, aend, &m);
    if (!k || m > nnz - pos) {
      dc_error_set(err, DC_ECORRUPT, "chunk %u: cell %u: bad nonzero count", c, ci->first_cell + i);
      return DC_ECORRUPT;
    }
    a += k;
    uint64_t g = 0;                 /* next index is g + gap */
    for (uint64_t j = pos; j < pos + m; j++) {
      uint64_t gap = (uint64_t)lo[j] | ((uint64_t)hi[j] << 8);
      if (gap == 65535) {
        uint64_t x;
        k = dc_get_varint(e, eend, &x);
        if (!k || x > ng) goto bad_esc;
        e += k;
        gap += x;
      }
      g += gap;
      if (g >= ng) {
        dc_error_set(err, DC_ECORRUPT, "chunk %u: cell %u: gene index %llu out of range (%llu genes)", c,
                     ci->first_cell + i, (unsigned long long)g, (unsigned long long)ng);
        return DC_ECORRUPT;
      }
      idx[j] = (int32_t)g;
      g++;
      uint64_t v = ct[j];
      if (v == 255) {
        uint64_t x;
        k = dc_get_varint(e, eend, &x);
        if (!k || x > UINT32_MAX - 255ull) goto bad_esc;
        e += k;
        v += x;
      }
      if (vf) vf[j] = (float)v; else vi[j] = (int32_t)(uint32_t)v;
    }
    pos += m;
    if (i + 1 < ci->n_cells) indptr[i + 1] = (int64_t)(base + pos);
  }
  dc_indptr_edge(&indptr[ci->n_cells], (int64_t)(base + pos));
  if (pos != nnz || a != aend || e != eend) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: %llu nonzeros decoded, header says %llu%s", c,
                 (unsigned long long)pos, (unsigned long long)nnz,
                 pos == nnz ? " (but trailing bytes)" : "");
    return DC_ECORRUPT;
  }
  return DC_OK;
bad_esc:
  dc_error_set(err, DC_ECORRUPT, "chunk %u: bad escape value", c);
  return DC_ECORRUPT;
trunc:
  dc_error_set(err, DC_ECORRUPT, "chunk %u: truncated payload", c);
  return DC_ECORRUPT;
}

/* ------------------------------------------------------------ generic */
/* The checks every chunk entry point makes: arguments, the payload inside the
** tile, its checksum.  *p = the payload. */
static int chunk_front(dc_decoder *d, const uint8_t *buf, size_t len, const dc_tile_hdr *h, uint32_t c,
                       const char *what, const uint8_t **p, dc_error *err) {
  if (!d || !buf || !h) {
    dc_error_set(err, DC_EARG, "%s: NULL argument", what);
    return DC_EARG;
  }
  if (c >= h->n_chunks || h->n_chunks > DC_MAX_CHUNKS) {
    dc_error_set(err, DC_EARG, "%s: chunk %u of a tile of %u chunks", what, c, h->n_chunks);
    return DC_EARG;
  }
  const dc_chunk_info *ci = &h->chunk[c];
  if (ci->offset > len || ci->length > len - ci->offset || h->shared_offset > len ||
      h->shared_len > len - h->shared_offset) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: payload at %llu+%llu past the end of a %zu-byte tile", c,
                 (unsigned long long)ci->offset, (unsigned long long)ci->length, len);
    return DC_ECORRUPT;
  }
  *p = buf + ci->offset;
  if (dc_checksum(*p, (size_t)ci->length) != ci->checksum) {
    dc_error_set(err, DC_ECORRUPT, "chunk %u: checksum mismatch", c);
    return DC_ECORRUPT;
  }
  return DC_OK;
}

static int chunk_done(int rc, dc_error *err) {
  if (rc == DC_OK && err) { err->code = DC_OK; err->msg[0] = 0; }
  return rc;
}

int dc_chunk_decode(dc_decoder *d, const uint8_t *buf, size_t len,
                    const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err) {
  if (!d || !buf || !h || !out) {
    dc_error_set(err, DC_EARG, "chunk decode: NULL argument");
    return DC_EARG;
  }
  if (c < h->n_chunks && h->n_chunks <= DC_MAX_CHUNKS &&
      (!out->indptr || (h->chunk[c].nnz && (!out->indices || !out->values)))) {
    dc_error_set(err, DC_EARG, "chunk %u: NULL output buffer", c);
    return DC_EARG;
  }
  const uint8_t *p;
  int rc = chunk_front(d, buf, len, h, c, "chunk decode", &p, err);
  if (rc != DC_OK) return rc;
  const dc_chunk_info *ci = &h->chunk[c];
  switch (h->codec) {
    case DC_CODEC_ZSTD:
      rc = dc_zstd_decode_chunk(d, p, (size_t)ci->length, h, c, out, err);
      break;
    case DC_CODEC_RANS: {
      const uint8_t *sh = buf + h->shared_offset;
      rc = dc_ctx_decode_chunk(d, sh, (size_t)h->shared_len, p, (size_t)ci->length, h, c, out, NULL, NULL, err);
      break;
    }
    case DC_CODEC_RANS_V1: {
      const uint8_t *sh = buf + h->shared_offset;
      rc = dc_rans_decode_chunk(d, sh, (size_t)h->shared_len, p, (size_t)ci->length, h, c, out, err);
      break;
    }
    default:
      dc_error_set(err, DC_EUNSUPPORTED, "chunk %u: unknown codec id %u", c, h->codec);
      rc = DC_EUNSUPPORTED;
  }
  return chunk_done(rc, err);
}

int dc_tile_gene_set(const uint8_t *buf, size_t len, const dc_tile_hdr *h, uint8_t **set, dc_error *err) {
  if (!buf || !h || !set) {
    dc_error_set(err, DC_EARG, "tile gene set: NULL argument");
    return DC_EARG;
  }
  *set = NULL;
  if (h->codec != DC_CODEC_RANS || h->n_chunks == 0) return chunk_done(DC_OK, err);   /* no map: any gene */
  if (h->shared_offset > len || h->shared_len > len - h->shared_offset) {
    dc_error_set(err, DC_ECORRUPT, "rans tables at %llu+%llu past the end of %zu bytes", (unsigned long long)h->shared_offset,
                 (unsigned long long)h->shared_len, len);
    return DC_ECORRUPT;
  }
  const uint8_t *sh = buf + h->shared_offset;
  if (h->shared_checksum != dc_checksum(sh, (size_t)h->shared_len)) {
    dc_error_set(err, DC_ECORRUPT, "rans tables: checksum mismatch");
    return DC_ECORRUPT;
  }
  return chunk_done(dc_ctx_gene_set(sh, (size_t)h->shared_len, h->n_genes, set, err), err);
}

/* dc_chunk_cell_nnz and dc_chunk_place: codec rans (3) only */
static int ctx_only(dc_decoder *d, const uint8_t *buf, size_t len, const dc_tile_hdr *h, uint32_t c,
                    const dc_place *pl, uint32_t *nnz, const char *what, dc_error *err) {
  const uint8_t *p;
  int rc = chunk_front(d, buf, len, h, c, what, &p, err);
  if (rc != DC_OK) return rc;
  if (h->codec != DC_CODEC_RANS) {
    dc_error_set(err, DC_EUNSUPPORTED, "chunk %u: %s needs codec rans (id %u), this tile has codec id %u", c, what,
                 DC_CODEC_RANS, h->codec);
    return DC_EUNSUPPORTED;
  }
  rc = dc_ctx_decode_chunk(d, buf + h->shared_offset, (size_t)h->shared_len, p, (size_t)h->chunk[c].length, h, c,
                           NULL, pl, nnz, err);
  return chunk_done(rc, err);
}

int dc_chunk_cell_nnz(dc_decoder *d, const uint8_t *buf, size_t len,
                      const dc_tile_hdr *h, uint32_t c, uint32_t *nnz, dc_error *err) {
  if (!nnz) {
    dc_error_set(err, DC_EARG, "chunk cell counts: NULL argument");
    return DC_EARG;
  }
  return ctx_only(d, buf, len, h, c, NULL, nnz, "chunk cell counts", err);
}

int dc_chunk_place(dc_decoder *d, const uint8_t *buf, size_t len,
                   const dc_tile_hdr *h, uint32_t c, const dc_place *pl, dc_error *err) {
  if (!pl || !pl->ix || !pl->val) {
    dc_error_set(err, DC_EARG, "chunk place: NULL argument");
    return DC_EARG;
  }
  return ctx_only(d, buf, len, h, c, pl, NULL, "chunk place", err);
}

int64_t dc_part_nnz(const uint32_t *nnz, const uint8_t *keep, uint32_t n, uint64_t max) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; i++)
    if (keep[i] && (total += nnz[i]) > max) return -1;   /* each count < 2^32: no wrap */
  return (int64_t)total;
}

void dc_part_rows(const uint32_t *nnz, const uint8_t *keep, uint32_t n, int32_t *indices, void *values,
                  int64_t *indptr, int32_t **ix, void **val) {
  int64_t o = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (indptr) indptr[i] = o;
    ix[i] = keep[i] ? indices + o : NULL;
    val[i] = keep[i] ? (void *)((uint8_t *)values + 4 * o) : NULL;
    if (keep[i]) o += nnz[i];
  }
  if (indptr) indptr[n] = o;
}

int dc_tile_decode(dc_decoder *d, const uint8_t *buf, size_t len,
                   const dc_out *out, dc_error *err) {
  dc_tile_hdr *h = malloc(sizeof *h);
  if (!h) {
    dc_error_set(err, DC_ENOMEM, "tile decode: out of memory");
    return DC_ENOMEM;
  }
  int rc = dc_tile_parse(buf, len, h, err);
  if (rc == DC_OK && h->n_chunks == 0) {
    if (!out || !out->indptr) {
      dc_error_set(err, DC_EARG, "tile decode: NULL output buffer");
      rc = DC_EARG;
    } else {
      out->indptr[0] = 0;
    }
  }
  for (uint32_t c = 0; rc == DC_OK && c < h->n_chunks; c++)
    rc = dc_chunk_decode(d, buf, len, h, c, out, err);
  free(h);
  return rc;
}
