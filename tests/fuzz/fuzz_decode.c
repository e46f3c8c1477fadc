/*
** fuzz_decode.c — libFuzzer target: arbitrary bytes into dc_tile_parse and the
** chunk decoders.  The first input byte picks a mode:
**   0x00-0x3f  the rest is a tile, decoded as is (checksums guard the payload);
**   0x40-0x7f  the rest is a tile whose checksums are recomputed first, so the
**              decoder proper meets the mutated payload;
**   0x80-0xff  the next 9 bytes are parameters of a valid random tile (any
**              codec, rans model variant, chunk count, count distribution), then 3-byte edits
**              (offset u16, xor u8) are applied and the checksums recomputed.
**              With no edits the decode must round-trip exactly (else abort).
**              The tile of given parameters is encoded once per process and
**              cached (encoding was most of a run: 64 runs/s without).
** Rans tiles are also placed (dc_chunk_cell_nnz, dc_chunk_place: each cell into its own
** exactly sized place) and must equal the decode where both succeed.
** Any decode either succeeds or returns an error with a message; ASan/UBSan
** and libFuzzer's timeout catch out-of-bounds accesses and endless loops.
*/
#include "../c/dc_testutil.h"
#include <stdio.h>

static dc_decoder *dec;

typedef struct tcache {
  int used, unsupported;
  uint8_t key[9];
  dct_mat m;
  uint8_t *tile;
  size_t len;
} tcache;
#define TCACHE 512
static tcache cache[TCACHE];

/* Placing (rans tiles): each chunk's per-cell counts, then every cell into its own place of
** exactly that size (ASan sees a write past it); a tile that decoded must place the same
** values; must_ok: a valid tile, so both must succeed. */
static void place_all(const uint8_t *buf, size_t len, const dc_tile_hdr *h, int f32, const int64_t *ip,
                      const int32_t *ix, const int32_t *vv, int must_ok) {
  dc_error err;
  for (uint32_t c = 0; c < h->n_chunks; c++) {
    uint32_t n = h->chunk[c].n_cells;
    uint32_t *nnz = calloc((size_t)n + 1, sizeof *nnz);
    int32_t **pix = calloc((size_t)n + 1, sizeof *pix);
    void **pval = calloc((size_t)n + 1, sizeof *pval);
    if (!nnz || !pix || !pval) abort();
    int rc = dc_chunk_cell_nnz(dec, buf, len, h, c, nnz, &err);
    if (rc == DC_OK) {
      for (uint32_t i = 0; i < n; i++) {
        if ((i & 3) == 3) continue;                 /* some cells kept nowhere */
        pix[i] = malloc((size_t)nnz[i] * 4 + 1);
        pval[i] = malloc((size_t)nnz[i] * 4 + 1);
        if (!pix[i] || !pval[i]) abort();
      }
      dc_place pl = {pix, pval, f32, NULL, NULL, NULL};
      rc = dc_chunk_place(dec, buf, len, h, c, &pl, &err);
      if (rc == DC_OK && ip) {                      /* equal to the decode */
        for (uint32_t i = 0; i < n; i++) {
          int64_t a = ip[h->chunk[c].first_cell + i], b = ip[h->chunk[c].first_cell + i + 1];
          if (!pix[i]) continue;
          if (b - a != (int64_t)nnz[i] || memcmp(pix[i], ix + a, (size_t)nnz[i] * 4) ||
              memcmp(pval[i], vv + a, (size_t)nnz[i] * 4)) {
            fprintf(stderr, "placing differs from decoding\n");
            abort();
          }
        }
      }
    }
    if (rc != DC_OK && (!err.msg[0] || rc == DC_EARG || (must_ok && h->codec == DC_CODEC_RANS))) abort();
    for (uint32_t i = 0; i < n; i++) { free(pix[i]); free(pval[i]); }
    free(nnz); free(pix); free(pval);
  }
}

static void decode_all(const uint8_t *buf, size_t len, int f32, const dct_mat *check) {
  dc_tile_hdr h;
  dc_error err;
  int rc = dc_tile_parse(buf, len, &h, &err);
  if (rc != DC_OK) {
    if (!err.msg[0]) abort();
    if (check) abort();
    return;
  }
  if (h.nnz > (1u << 17) || h.n_cells > (1u << 16)) return;   /* the caller's allocation cap */
  int64_t *ip = malloc(((size_t)h.n_cells + 1) * sizeof *ip);
  int32_t *ix = malloc((size_t)h.nnz * 4 + 4);
  int32_t *vv = malloc((size_t)h.nnz * 4 + 4);
  if (!ip || !ix || !vv) abort();
  dc_out out = {ip, ix, vv, f32};
  ip[0] = 0;
  int ok = 1;
  /* chunks in reverse order, as a pool may run them */
  for (uint32_t c = h.n_chunks; c-- > 0;) {
    rc = dc_chunk_decode(dec, buf, len, &h, c, &out, &err);
    if (rc != DC_OK) {
      if (!err.msg[0] || rc == DC_EARG) abort();
      ok = 0;
    }
  }
  if (check) {
    dct_dec d = {ip, ix, vv, h};
    if (!ok || !dct_same(check, &d, f32)) {
      fprintf(stderr, "round trip mismatch\n");
      abort();
    }
  }
  place_all(buf, len, &h, f32, ok ? ip : NULL, ix, vv, check != NULL);
  /* the tile's gene set (dc_tile_gene_set): an error with a message, or a set that holds every
  ** gene the chunks decoded to, and only genes below n_genes; the encoder's tiles always give one */
  uint8_t *set = NULL;
  rc = dc_tile_gene_set(buf, len, &h, &set, &err);
  if (rc != DC_OK) {
    if (!err.msg[0] || rc == DC_EARG || set || check) abort();
  } else if (set) {
    if (ok)
      for (uint64_t j = 0; j < h.nnz; j++)
        if ((uint32_t)ix[j] >= h.n_genes || !(set[ix[j] / 8] >> (ix[j] % 8) & 1)) abort();
    if (h.n_genes % 8 && set[h.n_genes / 8] >> (h.n_genes % 8)) abort();
  }
  free(set);
  free(ip); free(ix); free(vv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dec) dec = dc_decoder_new();
  if (size < 1) return 0;
  uint8_t mode = data[0];
  if (mode < 0x80) {
    uint8_t *buf = malloc(size);
    memcpy(buf, data + 1, size - 1);
    if (mode >= 0x40) dct_reseal(buf, size - 1);
    decode_all(buf, size - 1, mode & 1, NULL);
    free(buf);
    return 0;
  }
  if (size < 10) return 0;
  const uint8_t *b = data + 1;
  /* the random tile of these parameters: encoded once per process (encoding is most of the
  ** time of a run), kept in a small cache keyed by the parameter bytes that make it */
  uint8_t key[9];
  memcpy(key, b, 8);
  key[8] = b[8] % 3;
  uint32_t hsh = 2166136261u;
  for (int i = 0; i < 9; i++) hsh = (hsh ^ key[i]) * 16777619u;
  tcache *t = &cache[hsh % TCACHE];
  if (!t->used || memcmp(t->key, key, 9) != 0) {
    if (t->used) { free(t->tile); dct_mat_free(&t->m); }
    memset(t, 0, sizeof *t);
    static const int codecs[] = {DC_CODEC_RANS, DC_CODEC_ZSTD, DC_CODEC_RANS_V1};
    uint32_t cells = b[0] % 65, genes = 1 + (uint32_t)((b[1] | b[2] << 8) % 400);
    int codec = codecs[(b[3] & 1) ? 1 : (b[4] >> 7) ? 2 : 0];
    uint32_t chunks = b[4] % 12;
    int kind = b[5] % 4;
    double p0 = (1 + b[6] % 16) / 16.0;
    uint64_t seed = b[7];
    int level = b[8] % 3;
    if (dct_mat_random(&t->m, seed, cells, genes, p0, kind, (b[3] >> 4) / 32.0, (b[3] >> 1 & 3) / 16.0)) abort();
    dc_csr in = dct_csr(&t->m);
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    o.codec = codec; o.level = codec == DC_CODEC_ZSTD ? level + 1 : level; o.n_chunks = chunks; o.chunk_cells = 0; o.threads = 1;
    /* rans: the default model, pairs in every context, the version-2 model, no pairs */
    o.rans_pairs = b[5] >> 6 == 1 ? 1 : b[5] >> 6 == 3 ? -1 : 0;
    o.rans_v2 = b[5] >> 6 == 2;
    /* and one rank bucket as the default chooses it, forced on, forced off */
    o.rans_one_bucket = (b[5] >> 2 & 3) == 1 ? 1 : (b[5] >> 2 & 3) == 2 ? -1 : 0;
    dc_error err;
    int rc = dc_tile_encode(&in, &o, &t->tile, &t->len, &err);
    if (rc == DC_EUNSUPPORTED) t->unsupported = 1;   /* codec not in this build */
    else if (rc != DC_OK) abort();
    memcpy(t->key, key, 9);
    t->used = 1;
  }
  if (t->unsupported) return 0;
  size_t len = t->len;
  uint8_t *tile = malloc(len ? len : 1);
  if (!tile) abort();
  memcpy(tile, t->tile, len);
  size_t n_edits = (size - 10) / 3;
  for (size_t e = 0; e < n_edits && len; e++) {
    const uint8_t *x = data + 10 + 3 * e;
    tile[(x[0] | (size_t)x[1] << 8) % len] ^= x[2];
  }
  if (n_edits) dct_reseal(tile, len);
  /* both decoder paths of this CPU: the portable one and the best SIMD one */
  if (b[8] & 0x40) setenv("DC_SIMD", "scalar", 1);
  decode_all(tile, len, b[8] >> 7, n_edits ? NULL : &t->m);
  if (b[8] & 0x40) unsetenv("DC_SIMD");
  free(tile);
  return 0;
}
