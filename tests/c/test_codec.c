/*
** test_codec.c — round trips, edge cases, threading and corruption of the tile
** codec (ext/codec).  Runs for each available codec.
*/
#include "dctest.h"
#include "dc_testutil.h"
#include "dc_ctx.h"          /* DC_CTX_ONE_BUCKET_*: the default's choice, tested below */

/* The codecs, and four variants of rans: pairs of symbols in every context that can have them
** (dc_encode_opts.rans_pairs = 1: the default codes pairs only where they pay, so small random
** tiles would meet few), and the version-2 model (tile version 2, one symbol per step), which
** datasets written before tile version 3 hold; and one rank bucket forced on
** (dc_encode_opts.rans_one_bucket = 1: the default takes it only for small cells, where it
** pays) and off (-1: random test tiles have small cells, and would mostly get one bucket). */
#define RANS_PAIRS (0x100 | DC_CODEC_RANS)
#define RANS_V2 (0x200 | DC_CODEC_RANS)
#define RANS_ONE (0x300 | DC_CODEC_RANS)
#define RANS_RANK (0x400 | DC_CODEC_RANS)
static const int codecs[] = {DC_CODEC_RANS, RANS_PAIRS, RANS_V2, RANS_ONE, RANS_RANK, DC_CODEC_ZSTD,
                             DC_CODEC_RANS_V1};
#define N_CODECS (sizeof codecs / sizeof codecs[0])

static void set_codec(dc_encode_opts *o, int c) {
  o->codec = c & 0xff;
  o->rans_pairs = c == RANS_PAIRS;
  o->rans_v2 = c == RANS_V2;
  o->rans_one_bucket = c == RANS_ONE ? 1 : c == RANS_RANK ? -1 : 0;
}
static const char *cname(int c) {
  return c == RANS_PAIRS ? "rans (pairs everywhere)" : c == RANS_V2 ? "rans (version 2)"
         : c == RANS_ONE ? "rans (one rank bucket)" : c == RANS_RANK ? "rans (rank buckets)" : dc_codec_name(c);
}
static int level_for(int codec, int variant) {
  if (codec == DC_CODEC_ZSTD) return variant ? 19 : 3;
  return variant;
}

/* Encodes m, decodes it every way, checks each against m. */
static void roundtrip(const dct_mat *m, int codec, int level, uint32_t n_chunks, int threads) {
  dc_csr in = dct_csr(m);
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  set_codec(&o, codec); o.level = level; o.n_chunks = n_chunks; o.chunk_cells = 0; o.threads = threads;
  uint8_t *buf = NULL;
  size_t len = 0;
  dc_error err = {0};
  int rc = dc_tile_encode(&in, &o, &buf, &len, &err);
  DCT_CHECKF(rc == DC_OK, "encode %s: %s", cname(codec), err.msg);
  if (rc) return;
  for (int f32 = 0; f32 < 2; f32++) {
    dct_dec d;
    rc = dct_decode(buf, len, f32, &d, &err);
    DCT_CHECKF(rc == DC_OK, "decode %s: %s", cname(codec), err.msg);
    if (rc) break;
    DCT_CHECKF(d.hdr.codec == (uint32_t)(codec & 0xff), "codec %u", d.hdr.codec);
    uint32_t want_chunks = n_chunks ? n_chunks : DC_CHUNKS_MAX;   /* chunk_cells 0: exactly */
    if (want_chunks > m->n_cells) want_chunks = m->n_cells;
    DCT_CHECKF(d.hdr.n_chunks == want_chunks, "%u chunks, want %u", d.hdr.n_chunks, want_chunks);
    DCT_CHECKF(dct_same(m, &d, f32), "%s level %d chunks %u f32 %d: mismatch", cname(codec), level,
               n_chunks, f32);
    dct_dec_free(&d);
  }
  size_t need = dc_tile_header_need(buf, 8);
  DCT_CHECK(need >= 32);
  need = dc_tile_header_need(buf, need);
  DCT_CHECK(need == 0 || need <= len);
  if (need) DCT_CHECK(dc_tile_header_need(buf, need) == 0);
  free(buf);
}

static void test_roundtrip_random(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++)
    for (int t = 0; t < 12; t++) {
      dct_mat m;
      uint64_t seed = 1000 + (uint64_t)t;
      uint32_t cells = 1 + (uint32_t)(dct_rng(&seed) % 300);
      uint32_t genes = 1 + (uint32_t)(dct_rng(&seed) % 3000);
      int kind = t % 4;
      DCT_CHECK(dct_mat_random(&m, seed, cells, genes, 0.8, kind, 0.1, 0.02) == 0);
      uint32_t chunks[] = {1, 3, 8, 0, 64, 256};
      roundtrip(&m, codecs[ci], level_for(codecs[ci], t & 1), chunks[t % 6], 1 + t % 3);
      dct_mat_free(&m);
    }
}

/* Chunks per tile: 8, or one per DC_CHUNK_NNZ nonzeros where that is more, at most n_chunks
** (32), at least chunk_cells cells each where a tile has room for two, never more than its
** cells; chunk_cells 0 gives n_chunks exactly.  n_chunks 8 (what datasets written before
** 2026-12-07 record) gives their rule whatever the nonzeros.  A default-encoded small tile gets
** that count, balanced by nonzeros, and decodes to its input. */
static void test_chunk_count_rule(void) {
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  DCT_CHECK(o.n_chunks == 32 && o.chunk_cells == DC_CHUNK_CELLS && DC_CHUNK_CELLS == 512);
  DCT_CHECK(DC_CHUNKS_MAX == 32 && DC_CHUNKS_BASE == 8 && DC_CHUNK_NNZ == 1048576);
  const uint64_t M = 1048576;
  /* few nonzeros: the cells decide, as before */
  static const uint32_t cells[] = {0, 1, 2, 3, 511, 1000, 1535, 1536, 2700, 4095, 4096, 10000, 200000};
  static const uint32_t want[] = {0, 1, 2, 2, 2, 2, 2, 3, 5, 7, 8, 8, 8};
  for (size_t i = 0; i < sizeof cells / sizeof *cells; i++)
    for (uint64_t nnz = 0; nnz <= 8 * M; nnz += 4 * M)
      DCT_CHECKF(dc_encode_chunks(&o, cells[i], nnz) == want[i], "%u cells, %llu nonzeros: %u chunks, want %u",
                 cells[i], (unsigned long long)nnz, dc_encode_chunks(&o, cells[i], nnz), want[i]);
  /* past 8 M nonzeros one chunk per M (rounded up), as the cells allow, at most 32; past 8
  ** chunks the count rounded up to a multiple of 4 (10,000 cells have room for 19 of 512:
  ** 20 of 500) */
  static const struct { uint32_t cells; uint64_t nnz; uint32_t want; } big[] = {
      {10000, 8 * M + 1, 12}, {10000, 12 * M, 12}, {10000, 12 * M + 1, 16}, {10000, 23472816, 20},
      {10000, 40 * M, 20}, {20000, 23472816, 24}, {100000, 31 * M + 5, 32}, {100000, 500 * M, 32},
      {4096, 20 * M, 8}, {4608, 20 * M, 12}, {6000, 20 * M, 12}, {1000, 20 * M, 2}};
  for (size_t i = 0; i < sizeof big / sizeof *big; i++)
    DCT_CHECKF(dc_encode_chunks(&o, big[i].cells, big[i].nnz) == big[i].want, "%u cells, %llu nonzeros: %u chunks, want %u",
               big[i].cells, (unsigned long long)big[i].nnz, dc_encode_chunks(&o, big[i].cells, big[i].nnz), big[i].want);
  o.n_chunks = 8;                        /* a dataset written before 2026-12-07 */
  DCT_CHECK(dc_encode_chunks(&o, 10000, 23472816) == 8 && dc_encode_chunks(&o, 100000, 500 * M) == 8 &&
            dc_encode_chunks(&o, 2700, 23472816) == 5);
  o.n_chunks = 10;                       /* a cap that is no multiple of 4: rounded down past 8 */
  DCT_CHECK(dc_encode_chunks(&o, 10000, 23472816) == 8 && dc_encode_chunks(&o, 4608, 20 * M) == 8 &&
            dc_encode_chunks(&o, 100000, 9 * M) == 8);
  o.n_chunks = 13;
  DCT_CHECK(dc_encode_chunks(&o, 10000, 23472816) == 12 && dc_encode_chunks(&o, 100000, 9 * M) == 12);
  o.n_chunks = 3;
  DCT_CHECK(dc_encode_chunks(&o, 1000, 0) == 2 && dc_encode_chunks(&o, 100000, 0) == 3 &&
            dc_encode_chunks(&o, 100000, 100 * M) == 3);
  o.n_chunks = 1;
  DCT_CHECK(dc_encode_chunks(&o, 100000, 100 * M) == 1);
  o.n_chunks = 8;
  o.chunk_cells = 0;                     /* exactly n_chunks, at most the cells, whatever the nonzeros */
  DCT_CHECK(dc_encode_chunks(&o, 1000, 0) == 8 && dc_encode_chunks(&o, 5, 0) == 5 &&
            dc_encode_chunks(&o, 100000, 100 * M) == 8);
  o.n_chunks = 1000;                     /* more than a tile may hold */
  DCT_CHECK(dc_encode_chunks(&o, 100000, 0) == DC_MAX_CHUNKS);
  o.n_chunks = 0;                        /* 0: the default, 32 */
  DCT_CHECK(dc_encode_chunks(&o, 100000, 0) == 32);
  o.chunk_cells = 100;
  DCT_CHECK(dc_encode_chunks(&o, 450, 0) == 4 && dc_encode_chunks(&o, 150, 0) == 2 &&
            dc_encode_chunks(&o, 450, 100 * M) == 4 && dc_encode_chunks(&o, 1500, 10 * M) == 12);   /* 10, rounded up */

  /* encoded with the defaults: 1,000 cells in 2 chunks, about half the nonzeros each */
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 31, 1000, 4000, 0.8, DCT_MIXED, 0.05, 0.0) == 0);
  dc_csr in = dct_csr(&m);
  uint8_t *buf = NULL;
  size_t len = 0;
  dc_error err = {0};
  DCT_CHECK(dc_tile_encode(&in, NULL, &buf, &len, &err) == DC_OK);
  dct_dec d;
  DCT_CHECK(dct_decode(buf, len, 0, &d, &err) == DC_OK);
  DCT_CHECKF(d.hdr.n_chunks == 2, "%u chunks", d.hdr.n_chunks);
  uint64_t nnz = m.indptr[m.n_cells];
  DCT_CHECK(d.hdr.chunk[0].nnz * 4 >= nnz && d.hdr.chunk[0].nnz * 4 <= 3 * nnz);
  DCT_CHECK(dct_same(&m, &d, 0));
  dct_dec_free(&d);
  free(buf);
  dct_mat_free(&m);

  /* and a tile of 9,216,000 nonzeros (5,120 dense cells of 1,800 genes): 12 chunks (8.8 M
  ** nonzeros, one chunk per M rounded up: 9; room for 10 of 512 cells; 9 rounded up to a
  ** multiple of 4), at most DC_CHUNK_NNZ each */
  DCT_CHECK(dct_mat_random(&m, 32, 5120, 1800, 0.8, DCT_SMALL, 0.0, 1.0) == 0);
  DCT_CHECK(m.indptr[m.n_cells] == 9216000);
  in = dct_csr(&m);
  DCT_CHECK(dc_tile_encode(&in, NULL, &buf, &len, &err) == DC_OK);
  DCT_CHECK(dct_decode(buf, len, 0, &d, &err) == DC_OK);
  DCT_CHECKF(d.hdr.n_chunks == 12, "%u chunks", d.hdr.n_chunks);
  for (uint32_t c = 0; c < d.hdr.n_chunks; c++) DCT_CHECK(d.hdr.chunk[c].nnz <= DC_CHUNK_NNZ);
  DCT_CHECK(dct_same(&m, &d, 0));
  dct_dec_free(&d);
  free(buf);
  dct_mat_free(&m);
}

static void test_roundtrip_large(void) {
  /* a tile with many cells, wide genes, gaps >= 65536 */
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dct_mat m;
    DCT_CHECK(dct_mat_random(&m, 77, 2000, 200000, 0.9, DCT_MIXED, 0.01, 0.0) == 0);
    roundtrip(&m, codecs[ci], level_for(codecs[ci], 0), 8, 2);
    roundtrip(&m, codecs[ci], level_for(codecs[ci], 0), 17, 0);
    dct_mat_free(&m);
  }
}

/* builds a matrix from a literal cell list */
static void mat_literal(dct_mat *m, uint32_t n_cells, uint32_t n_genes, const uint32_t *cell_nnz,
                        const uint32_t *idx, const uint32_t *val) {
  m->n_cells = n_cells; m->n_genes = n_genes;
  m->indptr = malloc(((size_t)n_cells + 1) * 8);
  uint64_t k = 0;
  m->indptr[0] = 0;
  for (uint32_t i = 0; i < n_cells; i++) { k += cell_nnz[i]; m->indptr[i + 1] = k; }
  m->indices = malloc(k * 4 + 4);
  m->data = malloc(k * 4 + 4);
  for (uint64_t j = 0; j < k; j++) { m->indices[j] = idx[j]; m->data[j] = val[j]; }
}

static void test_edge_cases(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    int c = codecs[ci];
    dct_mat m;
    /* empty tile: 0 cells */
    mat_literal(&m, 0, 100, NULL, NULL, NULL);
    roundtrip(&m, c, 0, 8, 1);
    dct_mat_free(&m);
    /* 0 genes, empty cells */
    uint32_t zero3[3] = {0, 0, 0};
    mat_literal(&m, 3, 0, zero3, NULL, NULL);
    roundtrip(&m, c, 0, 8, 1);
    dct_mat_free(&m);
    /* one cell, one gene, extreme counts in separate tiles */
    const uint32_t extremes[] = {1, 254, 255, 256, 65535, 65536, 4294967295u, 0};
    for (int e = 0; e < 8; e++) {
      uint32_t one = 1, g0 = 0;
      mat_literal(&m, 1, 1, &one, &g0, &extremes[e]);
      roundtrip(&m, c, 0, 8, 1);
      dct_mat_free(&m);
    }
    /* counts 1, 65535, 65536, 2^32-1 and gaps at the escape edges in one cell */
    uint32_t nn = 8;
    uint32_t idx[8] = {0, 1, 65535, 65536, 131072, 131073, 196609, 500000};
    uint32_t val[8] = {1, 65535, 65536, 4294967295u, 1, 255, 254, 4294967294u};
    mat_literal(&m, 1, 500001, &nn, idx, val);
    roundtrip(&m, c, 0, 8, 1);
    dct_mat_free(&m);
    /* dense cells: every gene nonzero, and empty cells between them */
    uint32_t G = 3000, cn[4] = {G, 0, G, 0};
    uint32_t *di = malloc(2 * G * 4), *dv = malloc(2 * G * 4);
    for (uint32_t j = 0; j < 2 * G; j++) { di[j] = j % G; dv[j] = 1 + (j * 7919u) % 70000; }
    mat_literal(&m, 4, G, cn, di, dv);
    roundtrip(&m, c, 0, 2, 2);
    roundtrip(&m, c, 0, 8, 2);
    dct_mat_free(&m);
    free(di); free(dv);
    /* a single gene, many cells */
    DCT_CHECK(dct_mat_random(&m, 5, 500, 1, 0.5, DCT_HUGE, 0.0, 0.0) == 0);
    roundtrip(&m, c, 0, 8, 2);
    dct_mat_free(&m);
    /* all cells empty, many cells */
    DCT_CHECK(dct_mat_random(&m, 6, 1000, 50, 0.5, DCT_SMALL, 1.0, 0.0) == 0);
    roundtrip(&m, c, 0, 8, 2);
    dct_mat_free(&m);
  }
}

static void test_indptr_window(void) {
  /* the tile is a window of a larger CSR: indptr[0] != 0 */
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 9, 100, 500, 0.5, DCT_MIXED, 0.1, 0.0) == 0);
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dct_mat w = m;
    w.indptr = m.indptr + 30;
    w.n_cells = 50;
    roundtrip(&w, codecs[ci], 0, 4, 1);
  }
  dct_mat_free(&m);
}

static void test_bad_input(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    set_codec(&o, codecs[ci]);
    uint8_t *buf = (uint8_t *)1;
    size_t len = 7;
    dc_error err = {0};
    uint64_t ip[3] = {0, 2, 4};
    uint32_t dat[4] = {1, 2, 3, 4};
    uint32_t unsorted[4] = {1, 1, 0, 2};
    dc_csr in = {2, 10, ip, unsorted, dat};
    int rc = dc_tile_encode(&in, &o, &buf, &len, &err);
    DCT_CHECKF(rc == DC_EARG && strstr(err.msg, "cell 0"), "rc %d %s", rc, err.msg);
    DCT_CHECK(buf == NULL && len == 0);
    uint32_t big[4] = {0, 1, 2, 10};
    in.indices = big;
    rc = dc_tile_encode(&in, &o, &buf, &len, &err);
    DCT_CHECKF(rc == DC_EARG && strstr(err.msg, "cell 1") && strstr(err.msg, "out of range"), "rc %d %s", rc, err.msg);
    uint64_t ip_bad[3] = {0, 3, 2};
    in.indptr = ip_bad;
    rc = dc_tile_encode(&in, &o, &buf, &len, &err);
    DCT_CHECKF(rc == DC_EARG, "rc %d %s", rc, err.msg);
    o.codec = 99;
    in.indptr = ip;
    rc = dc_tile_encode(&in, &o, &buf, &len, &err);
    DCT_CHECK(rc == DC_EUNSUPPORTED);
  }
  DCT_CHECK(dc_codec_from_name("zstd") == DC_CODEC_ZSTD && dc_codec_from_name("rans") == DC_CODEC_RANS);
  DCT_CHECK(dc_codec_from_name("lz4") == 0 && dc_codec_name(0) == NULL);
  {
    int lo = 0, hi = 0;
    DCT_CHECK(dc_codec_levels(DC_CODEC_RANS, &lo, &hi) == 0 && lo == 1 && hi == 4);
    DCT_CHECK(dc_codec_levels(DC_CODEC_RANS_V1, &lo, &hi) == 0 && lo == 1 && hi == 8);
    DCT_CHECK(dc_codec_levels(DC_CODEC_ZSTD, &lo, &hi) == 0 && lo < 0 && hi == 22);
    DCT_CHECK(dc_codec_levels(0, &lo, &hi) == -1 && dc_codec_levels(99, &lo, &hi) == -1);
  }
  DCT_CHECK(strcmp(dc_codec_name(DC_CODEC_ZSTD), "zstd") == 0);
  DCT_CHECK(strcmp(dc_strerror(DC_ECORRUPT), "corrupt tile") == 0);
}

/* encodes a small random tile with codec c */
static uint8_t *small_tile(int c, uint64_t seed, size_t *len, dct_mat *m, uint32_t chunks) {
  DCT_CHECK(dct_mat_random(m, seed, 40, 400, 0.6, DCT_MIXED, 0.1, 0.02) == 0);
  dc_csr in = dct_csr(m);
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  set_codec(&o, c); o.level = level_for(c, 0); o.n_chunks = chunks; o.chunk_cells = 0; o.threads = 1;
  uint8_t *buf = NULL;
  dc_error err;
  int rc = dc_tile_encode(&in, &o, &buf, len, &err);
  DCT_CHECKF(rc == DC_OK, "%s", err.msg);
  return buf;
}

/* One decoder decoding the chunks of six tiles in turn (chunk 0 of each
** tile, then chunk 1, ...), as a pool thread does for a batch across tiles:
** it keeps the tables of its last few tiles, and must give each tile exactly
** what a fresh decoder gives, on every path, also once tiles are evicted. */
static void test_decoder_many_tiles(void) {
  enum { NT = 6, CH = 4 };
  static const char *paths[] = {"scalar", "avx2", "avx512"};
  for (int pi = 0; pi < 3; pi++) {
    setenv("DC_SIMD", paths[pi], 1);
    dct_mat m[NT];
    uint8_t *buf[NT];
    size_t len[NT];
    dc_tile_hdr h[NT];
    dct_dec ref[NT];
    dc_error err;
    for (int t = 0; t < NT; t++) {
      buf[t] = small_tile(DC_CODEC_RANS, 1000 + (uint64_t)t, &len[t], &m[t], CH);
      DCT_CHECK(dc_tile_parse(buf[t], len[t], &h[t], &err) == DC_OK);
      DCT_CHECKF(dct_decode(buf[t], len[t], 0, &ref[t], &err) == DC_OK, "%s", err.msg);
    }
    dc_decoder *d = dc_decoder_new();
    for (int round = 0; round < 2; round++) {
      int64_t *ip[NT];
      int32_t *ix[NT], *vv[NT];
      for (int t = 0; t < NT; t++) {
        ip[t] = calloc(h[t].n_cells + 1, sizeof(int64_t));
        ix[t] = calloc(h[t].nnz + 1, sizeof(int32_t));
        vv[t] = calloc(h[t].nnz + 1, sizeof(int32_t));
      }
      /* round 0: chunk-major over all six; round 1: tiles 0,1 back and forth, then the rest */
      for (uint32_t c = 0; c < CH; c++)
        for (int k = 0; k < NT; k++) {
          int t = round == 0 ? k : (k < 4 ? k % 2 : k);
          uint32_t cc = round == 0 ? c : (k < 4 ? (c + (uint32_t)(k / 2)) % CH : c);
          if (cc >= h[t].n_chunks) continue;
          dc_out out = {ip[t], ix[t], vv[t], 0};
          DCT_CHECKF(dc_chunk_decode(d, buf[t], len[t], &h[t], cc, &out, &err) == DC_OK, "%s: %s", paths[pi], err.msg);
        }
      for (int t = 0; t < NT; t++) {
        if (round == 0)
          DCT_CHECKF(memcmp(ix[t], ref[t].indices, h[t].nnz * sizeof(int32_t)) == 0 &&
                         memcmp(vv[t], ref[t].values, h[t].nnz * sizeof(int32_t)) == 0 &&
                         memcmp(ip[t] + 1, ref[t].indptr + 1, h[t].n_cells * sizeof(int64_t)) == 0,
                     "%s: tile %d differs when its chunks interleave with other tiles'", paths[pi], t);
        free(ip[t]); free(ix[t]); free(vv[t]);
      }
    }
    dc_decoder_free(d);
    for (int t = 0; t < NT; t++) { dct_dec_free(&ref[t]); dct_mat_free(&m[t]); free(buf[t]); }
  }
  unsetenv("DC_SIMD");
}

static void test_corrupt_truncation(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dct_mat m;
    size_t len;
    uint8_t *buf = small_tile(codecs[ci], 42, &len, &m, 4);
    if (!buf) { dct_mat_free(&m); continue; }
    /* every truncation of the tile: parse or decode fails with a message */
    for (size_t l = 0; l < len; l++) {
      uint8_t *cut = malloc(l ? l : 1);
      memcpy(cut, buf, l);
      dct_dec d;
      dc_error err = {0};
      int rc = dct_decode(cut, l, 0, &d, &err);
      DCT_CHECKF(rc == DC_ECORRUPT && err.msg[0], "truncation to %zu: rc %d", l, rc);
      if (rc == DC_OK) dct_dec_free(&d);
      free(cut);
    }
    /* every truncation of each chunk payload, checksums resealed so the
    ** decoder proper meets the short payload */
    dc_tile_hdr h;
    dc_error err;
    DCT_CHECK(dc_tile_parse(buf, len, &h, &err) == DC_OK);
    for (uint32_t c = 0; c < h.n_chunks; c++) {
      for (uint64_t l = 0; l < h.chunk[c].length; l++) {
        size_t cut_off = (size_t)(h.chunk[c].offset + l);
        size_t tail = len - (size_t)(h.chunk[c].offset + h.chunk[c].length);
        size_t nl = cut_off + tail;
        uint8_t *t = malloc(nl);
        memcpy(t, buf, cut_off);
        memcpy(t + cut_off, buf + h.chunk[c].offset + h.chunk[c].length, tail);
        uint8_t *r = t + 32 + 24 * c;          /* chunk record: length at +16 */
        uint64_t nlen = l;
        memcpy(r + 16, &nlen, 8);
        dct_reseal(t, nl);
        dct_dec d;
        int rc = dct_decode(t, nl, 0, &d, &err);
        DCT_CHECKF(rc == DC_ECORRUPT && err.msg[0], "chunk %u cut to %llu: rc %d", c, (unsigned long long)l, rc);
        if (rc == DC_OK) dct_dec_free(&d);
        free(t);
      }
    }
    free(buf);
    dct_mat_free(&m);
  }
}

static void test_corrupt_flips(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dct_mat m;
    size_t len;
    uint8_t *buf = small_tile(codecs[ci], 43, &len, &m, 3);
    if (!buf) { dct_mat_free(&m); continue; }
    uint64_t s = 99;
    int detected = 0, resealed_ok = 0;
    for (int t = 0; t < 3000; t++) {
      uint8_t *x = malloc(len);
      memcpy(x, buf, len);
      int nflip = 1 + (int)(dct_rng(&s) % 4);
      for (int f = 0; f < nflip; f++) x[dct_rng(&s) % len] ^= (uint8_t)(1u << (dct_rng(&s) % 8));
      if (memcmp(x, buf, len) == 0) { free(x); continue; }
      dct_dec d;
      dc_error err = {0};
      int rc = dct_decode(x, len, t & 1, &d, &err);
      /* with checksums intact every flip is detected */
      DCT_CHECKF(rc != DC_OK && err.msg[0], "flip trial %d went undetected", t);
      if (rc != DC_OK) detected++; else dct_dec_free(&d);
      /* resealed: the decoder proper must fail cleanly or decode something */
      dct_reseal(x, len);
      rc = dct_decode(x, len, t & 1, &d, &err);
      if (rc == DC_OK) { resealed_ok++; dct_dec_free(&d); }
      else DCT_CHECKF(err.msg[0] != 0, "trial %d: error %d without message", t, rc);
      free(x);
    }
    DCT_CHECK(detected > 2900);
    free(buf);
    dct_mat_free(&m);
  }
}

static void test_header_errors(void) {
  dct_mat m;
  size_t len;
  uint8_t *buf = small_tile(DC_CODEC_ZSTD, 44, &len, &m, 4);
  if (!buf) { dct_mat_free(&m); return; }
  dc_tile_hdr h;
  dc_error err;
  uint8_t *x = malloc(len);
  /* bad magic */
  memcpy(x, buf, len); x[0] ^= 1; dct_reseal(x, len);
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_ECORRUPT && strstr(err.msg, "magic"));
  /* version */
  memcpy(x, buf, len); x[4] = 9; dct_reseal(x, len);
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_EUNSUPPORTED && strstr(err.msg, "version"));
  /* codec id */
  memcpy(x, buf, len); x[6] = 77; dct_reseal(x, len);
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_EUNSUPPORTED && strstr(err.msg, "codec"));
  /* chunk count too large */
  memcpy(x, buf, len); x[25] = 9; dct_reseal(x, len);
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_ECORRUPT);
  /* header checksum */
  memcpy(x, buf, len); x[10] ^= 4;
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_ECORRUPT && strstr(err.msg, "checksum"));
  /* chunk checksum */
  memcpy(x, buf, len); x[len - 1] ^= 4;
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_OK);
  int64_t ip[41]; int32_t ix[4000], vv[4000];
  dc_out out = {ip, ix, vv, 0};
  dc_decoder *d = dc_decoder_new();
  DCT_CHECK(dc_chunk_decode(d, x, len, &h, h.n_chunks - 1, &out, &err) == DC_ECORRUPT &&
            strstr(err.msg, "checksum"));
  DCT_CHECK(dc_chunk_decode(d, x, len, &h, h.n_chunks, &out, &err) == DC_EARG);
  /* nnz of a chunk moved between chunks: totals agree, decoding must notice */
  memcpy(x, buf, len);
  uint64_t n0, n1;
  memcpy(&n0, x + 32 + 8, 8); memcpy(&n1, x + 32 + 24 + 8, 8);
  if (n1 > 0) { n0++; n1--; memcpy(x + 32 + 8, &n0, 8); memcpy(x + 32 + 24 + 8, &n1, 8); }
  dct_reseal(x, len);
  DCT_CHECK(dc_tile_parse(x, len, &h, &err) == DC_OK);
  DCT_CHECK(dc_chunk_decode(d, x, len, &h, 0, &out, &err) == DC_ECORRUPT);
  dc_decoder_free(d);
  free(x);
  free(buf);
  dct_mat_free(&m);
}

/* decode through the pool, only the chunks holding some cells, then gather */
static void test_pool_subset_gather(void) {
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dct_mat m;
    DCT_CHECK(dct_mat_random(&m, 123, 700, 2000, 0.7, DCT_MIXED, 0.05, 0.01) == 0);
    dc_csr in = dct_csr(&m);
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    set_codec(&o, codecs[ci]); o.level = level_for(codecs[ci], 0); o.n_chunks = 16; o.chunk_cells = 0; o.threads = 2;
    uint8_t *buf; size_t len; dc_error err;
    DCT_CHECK(dc_tile_encode(&in, &o, &buf, &len, &err) == DC_OK);
    dc_tile_hdr h;
    DCT_CHECK(dc_tile_parse(buf, len, &h, &err) == DC_OK);
    uint64_t nnz = h.nnz;
    int64_t *ip = malloc((h.n_cells + 1) * 8);
    int32_t *ix = malloc(nnz * 4 + 4), *vv = malloc(nnz * 4 + 4);
    for (int nt = 1; nt <= 4; nt++) {
      dc_pool *p = dc_pool_new(nt);
      DCT_CHECK(p && dc_pool_size(p) == nt);
      /* requested cells: a few, random, with repeats */
      uint32_t want[50];
      uint64_t s = 7 + (uint64_t)nt;
      for (int i = 0; i < 50; i++) want[i] = (uint32_t)(dct_rng(&s) % 300);
      want[7] = want[3];
      uint32_t chunks[DC_MAX_CHUNKS];
      uint32_t k = dc_chunks_for_cells(&h, want, 50, chunks);
      DCT_CHECK(k >= 1 && k < h.n_chunks);
      for (uint32_t i = 1; i < k; i++) DCT_CHECK(chunks[i] > chunks[i - 1]);
      dc_job jobs[DC_MAX_CHUNKS];
      memset(ip, 0xff, (h.n_cells + 1) * 8);
      for (uint32_t i = 0; i < k; i++) {
        jobs[i] = (dc_job){buf, len, &h, chunks[i], {ip, ix, vv, 0}, -1, {0, {0}}, NULL, NULL};
      }
      DCT_CHECK(dc_pool_decode(p, jobs, k) == DC_OK);
      for (uint32_t i = 0; i < k; i++) DCT_CHECK(jobs[i].rc == DC_OK);
      /* gather in the requested order, twice from the same tile */
      dc_decoded src = {h.n_cells, ip, ix, vv};
      uint32_t tiles[50] = {0};
      uint64_t gn = dc_gather_nnz(&src, tiles, want, 50);
      uint64_t exp = 0;
      for (int i = 0; i < 50; i++) exp += m.indptr[want[i] + 1] - m.indptr[want[i]];
      DCT_CHECK(gn == exp);
      int64_t gip[51];
      int32_t *gix = malloc(gn * 4 + 4), *gvv = malloc(gn * 4 + 4);
      dc_gather(p, &src, tiles, want, 50, gip, gix, gvv);
      DCT_CHECK(gip[0] == 0 && (uint64_t)gip[50] == gn);
      for (int i = 0; i < 50; i++) {
        uint64_t a = m.indptr[want[i]], n = m.indptr[want[i] + 1] - a;
        DCT_CHECK((uint64_t)(gip[i + 1] - gip[i]) == n);
        for (uint64_t j = 0; j < n; j++) {
          DCT_CHECK((uint32_t)gix[gip[i] + j] == m.indices[a + j]);
          DCT_CHECK((uint32_t)gvv[gip[i] + j] == m.data[a + j]);
        }
      }
      free(gix); free(gvv);
      /* the whole tile through the pool, float32 */
      float *vf = malloc(nnz * 4 + 4);
      dc_job all[DC_MAX_CHUNKS];
      for (uint32_t c = 0; c < h.n_chunks; c++)
        all[c] = (dc_job){buf, len, &h, c, {ip, ix, vf, 1}, -1, {0, {0}}, NULL, NULL};
      DCT_CHECK(dc_pool_decode(p, all, h.n_chunks) == DC_OK);
      dct_dec dd = {ip, ix, vf, h};
      DCT_CHECK(dct_same(&m, &dd, 1));
      free(vf);
      /* a corrupt chunk among good ones: its job reports, others succeed */
      uint8_t *x = malloc(len);
      memcpy(x, buf, len);
      x[h.chunk[2].offset + h.chunk[2].length / 2] ^= 0x10;
      for (uint32_t c = 0; c < h.n_chunks; c++)
        all[c] = (dc_job){x, len, &h, c, {ip, ix, vv, 0}, -1, {0, {0}}, NULL, NULL};
      DCT_CHECK(dc_pool_decode(p, all, h.n_chunks) == DC_ECORRUPT);
      DCT_CHECK(all[2].rc == DC_ECORRUPT && strstr(all[2].err.msg, "chunk 2"));
      DCT_CHECK(all[0].rc == DC_OK && all[3].rc == DC_OK);
      free(x);
      dc_pool_free(p);
    }
    DCT_CHECK(dc_chunk_of_cell(&h, 0) == 0);
    DCT_CHECK(dc_chunk_of_cell(&h, h.n_cells - 1) == (int)h.n_chunks - 1);
    DCT_CHECK(dc_chunk_of_cell(&h, h.n_cells) == -1);
    for (uint32_t c = 0; c < h.n_chunks; c++) {
      DCT_CHECK(dc_chunk_of_cell(&h, h.chunk[c].first_cell) == (int)c);
      DCT_CHECK(dc_chunk_of_cell(&h, h.chunk[c].first_cell + h.chunk[c].n_cells - 1) == (int)c);
    }
    free(ip); free(ix); free(vv); free(buf);
    dct_mat_free(&m);
  }
}

static void count_item(void *arg, size_t i) {
  __atomic_fetch_add(&((uint64_t *)arg)[i % 4], i + 1, __ATOMIC_RELAXED);
}
static void nested_item(void *arg, size_t i) {
  (void)i;
  dc_pool *p = *(dc_pool **)arg;
  uint64_t sum[4] = {0};
  dc_pool_for(p, 10, count_item, sum);   /* nested: runs serially, no deadlock */
  __atomic_fetch_add((uint64_t *)((dc_pool **)arg + 1), sum[0] + sum[1] + sum[2] + sum[3], __ATOMIC_RELAXED);
}

static void test_pool_for(void) {
  for (int nt = 0; nt <= 3; nt++) {
    dc_pool *p = dc_pool_new(nt);
    DCT_CHECK(p != NULL && dc_pool_size(p) >= 1);
    for (int rep = 0; rep < 50; rep++) {
      uint64_t sum[4] = {0};
      size_t n = (size_t)rep * 7;
      dc_pool_for(p, n, count_item, sum);
      DCT_CHECK(sum[0] + sum[1] + sum[2] + sum[3] == (uint64_t)n * (n + 1) / 2);
    }
    void *ctx[2] = {p, (void *)0};
    dc_pool_for(p, 5, nested_item, ctx);
    DCT_CHECK((uint64_t)(uintptr_t)ctx[1] == 5 * 55);
    dc_pool_free(p);
  }
  uint64_t sum[4] = {0};
  dc_pool_for(NULL, 10, count_item, sum);
  DCT_CHECK(sum[0] + sum[1] + sum[2] + sum[3] == 55);
}

/* Decodes buf with the DC_SIMD path `path` into fresh buffers. */
static int decode_with(const char *path, const uint8_t *buf, size_t len, int f32, dct_dec *d, dc_error *err) {
  setenv("DC_SIMD", path, 1);
  int rc = dct_decode(buf, len, f32, d, err);
  unsetenv("DC_SIMD");
  return rc;
}

/* The tile of m, encoded in `chunks` chunks, decodes on `path` to the input, and byte for byte
** to what the portable path decodes, int32 and float32, for every codec. */
static void check_path_mat(const char *path, const dct_mat *m, uint32_t chunks, const char *what) {
  dc_csr in = dct_csr(m);
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    set_codec(&o, codecs[ci]);
    o.n_chunks = chunks;
    o.chunk_cells = 0;
    uint8_t *buf = NULL;
    size_t len = 0;
    dc_error err = {0};
    DCT_CHECKF(dc_tile_encode(&in, &o, &buf, &len, &err) == DC_OK, "encode: %s", err.msg);
    for (int f32 = 0; f32 < 2 && buf; f32++) {
      dct_dec a, b;
      int ra = decode_with(path, buf, len, f32, &a, &err);
      DCT_CHECKF(ra == DC_OK, "%s %s: %s", path, cname(codecs[ci]), err.msg);
      int rb = decode_with("scalar", buf, len, f32, &b, &err);
      DCT_CHECKF(rb == DC_OK, "scalar %s: %s", cname(codecs[ci]), err.msg);
      if (ra == DC_OK && rb == DC_OK) {
        uint64_t nnz = a.hdr.nnz;
        DCT_CHECKF(dct_same(m, &a, f32), "%s %s %s: mismatch", path, cname(codecs[ci]), what);
        DCT_CHECK(!memcmp(a.indptr, b.indptr, ((size_t)a.hdr.n_cells + 1) * 8));
        DCT_CHECK(!nnz || !memcmp(a.indices, b.indices, nnz * 4));
        DCT_CHECK(!nnz || !memcmp(a.values, b.values, nnz * 4));
      }
      if (ra == DC_OK) dct_dec_free(&a);
      if (rb == DC_OK) dct_dec_free(&b);
    }
    free(buf);
  }
}

/* Every decoder path decodes random tiles of every shape to the input, and
** byte for byte to what the portable path decodes: 1 to 300 cells (streams
** shorter and longer than the 32 lanes, tails of every length), each value
** kind, int32 and float32 output; and a tile with a gene map (every 5th gene)
** whose cells hold 0 to 47 nonzeros and then a few hundred, so that the map
** (which the AVX2 loop applies two steps behind its stores) meets every tail. */
static void check_path(const char *path, int level) {
  if (!dc_simd_supported(level)) {
    DCT_SKIP("this CPU has no %s", path);
    return;
  }
  setenv("DC_SIMD", path, 1);
  int got = dc_simd_level();
  unsetenv("DC_SIMD");
  DCT_CHECKF(got == level, "DC_SIMD=%s selected %s", path, dc_simd_name(got));
  uint32_t cells[] = {1, 7, 8, 9, 31, 33, 64, 65, 300};
  char what[64];
  for (size_t t = 0; t < sizeof cells / sizeof cells[0]; t++)
    for (int kind = 0; kind < 4; kind++) {
      dct_mat m;
      DCT_CHECK(dct_mat_random(&m, 500 + t * 4 + (uint64_t)kind, cells[t], 4000, 0.9, kind, 0.05, 0.01) == 0);
      snprintf(what, sizeof what, "%u cells kind %d", cells[t], kind);
      check_path_mat(path, &m, 1 + (uint32_t)(t % 3), what);
      dct_mat_free(&m);
    }
  /* the gene map: cell c has min(c, 47) nonzeros, or 200 + c past 48 */
  const uint32_t n_cells = 64, local = 400;
  uint64_t seed = 77, cap = 0;
  for (uint32_t c = 0; c < n_cells; c++) cap += c < 48 ? c : 200 + c;
  dct_mat m = {n_cells, 5 * local, malloc((n_cells + 1) * sizeof(uint64_t)), malloc(cap * 4), malloc(cap * 4)};
  DCT_CHECK(m.indptr && m.indices && m.data);
  if (!m.indptr || !m.indices || !m.data) { dct_mat_free(&m); return; }
  uint64_t k = 0;
  m.indptr[0] = 0;
  for (uint32_t c = 0; c < n_cells; c++) {
    uint32_t want = c < 48 ? c : 200 + c, got_ = 0;
    for (uint32_t g = 0; g < local && got_ < want; g++)      /* want of the local genes, in order */
      if (dct_rng(&seed) % (local - g) < want - got_) {
        m.indices[k] = 5 * g;
        m.data[k++] = 1 + (uint32_t)(dct_rng(&seed) % (g < 8 ? 100000 : 5));
        got_++;
      }
    m.indptr[c + 1] = k;
  }
  check_path_mat(path, &m, 2, "gene map, cells of 0-47 and 248-263 nonzeros");
  dct_mat_free(&m);
}
static void test_path_scalar(void) { check_path("scalar", DC_SIMD_SCALAR); }
static void test_path_avx2(void) { check_path("avx2", DC_SIMD_AVX2); }
static void test_path_avx512(void) { check_path("avx512", DC_SIMD_AVX512); }

/* DC_SIMD names a path; an unknown or unsupported one falls back, never up */
static void test_simd_dispatch(void) {
  setenv("DC_SIMD", "scalar", 1);
  DCT_CHECK(dc_simd_level() == DC_SIMD_SCALAR);
  setenv("DC_SIMD", "avx2", 1);
  DCT_CHECK(dc_simd_level() <= DC_SIMD_AVX2);
  DCT_CHECK(dc_simd_level() == (dc_simd_supported(DC_SIMD_AVX2) ? DC_SIMD_AVX2 : DC_SIMD_SCALAR));
  unsetenv("DC_SIMD");
  setenv("DC_NO_SIMD", "1", 1);
  DCT_CHECK(dc_simd_level() == DC_SIMD_SCALAR);
  unsetenv("DC_NO_SIMD");
  DCT_CHECK(dc_simd_supported(DC_SIMD_SCALAR));
  DCT_CHECK(!strcmp(dc_simd_name(DC_SIMD_AVX2), "avx2") && !strcmp(dc_simd_name(DC_SIMD_SCALAR), "scalar"));
  /* a value that names no path is refused where a program starts (dc_simd_env_check), with
  ** the value and the names in the message; every name the dispatch knows passes */
  char msg[192];
  const char *good[] = {"avx512", "best", "avx2", "scalar", "portable", "none", ""};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    setenv("DC_SIMD", good[i], 1);
    DCT_CHECKF(dc_simd_env_check(msg, sizeof msg) == 0, "DC_SIMD=%s refused", good[i]);
  }
  setenv("DC_SIMD", "avx-2", 1);
  DCT_CHECK(dc_simd_env_check(msg, sizeof msg) == -1 && strstr(msg, "DC_SIMD=avx-2") && strstr(msg, "avx2"));
  DCT_CHECK(dc_simd_env_check(NULL, 0) == -1);
  unsetenv("DC_SIMD");
  DCT_CHECK(dc_simd_env_check(msg, sizeof msg) == 0);
}

static void escape_tile(int small) {
  uint32_t C = 400, G = 1u << 20;
  uint64_t seed = 99 + (uint64_t)small;
  dct_mat m;
  m.n_cells = C; m.n_genes = G;
  m.indptr = malloc(((size_t)C + 1) * 8);
  m.indices = malloc((size_t)C * 64 * 4);
  m.data = malloc((size_t)C * 64 * 4);
  uint64_t k = 0;
  m.indptr[0] = 0;
  for (uint32_t i = 0; i < C; i++) {
    uint32_t g = (uint32_t)(dct_rng(&seed) % 64);
    for (int j = 0; j < 64 && g < G; j++) {
      m.indices[k] = g;
      /* counts spread over all codes: 1 .. 2^32-1 (small: 1 .. 2^12-1) */
      uint32_t e = (uint32_t)(dct_rng(&seed) % (small ? 12 : 32));
      uint32_t v = (uint32_t)(dct_rng(&seed) & ((e == 31 ? 0xffffffffu : (2u << e) - 1)));
      m.data[k++] = v ? v : 1;
      uint32_t span = small ? 4000u : (dct_rng(&seed) % 2 ? 30000u : 40u);
      g += 1 + (uint32_t)(dct_rng(&seed) % (1u + dct_rng(&seed) % span));
    }
    m.indptr[i + 1] = k;
  }
  for (int f = 0; f < 2; f++) {
    roundtrip(&m, DC_CODEC_RANS, 0, 1 + 3 * (uint32_t)f, 1);
    if (dc_simd_supported(DC_SIMD_AVX2)) {
      setenv("DC_SIMD", "avx2", 1);
      roundtrip(&m, DC_CODEC_RANS, 1 + f, 2, 1);
      unsetenv("DC_SIMD");
    }
  }
  dct_mat_free(&m);
}
/* More than 255 distinct (gap, count) codes in one context: the rarest take
** the escape, whose codes travel raw.  Once with big gaps and counts (the
** slow path for coded symbols too), once with values below 2^12 only (a
** context whose coded symbols are all fast but whose stream has escapes). */
static void test_rans_escape(void) {
  escape_tile(0);
  escape_tile(1);
}

static size_t encoded_len(const dct_mat *m) {
  dc_csr in = dct_csr(m);
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  uint8_t *buf = NULL;
  size_t len = 0;
  dc_error err;
  DCT_CHECK(dc_tile_encode(&in, &o, &buf, &len, &err) == DC_OK);
  free(buf);
  return len;
}

/* A tile that uses every 7th gene only (as a tile of one input in a dataset
** merged from several): the gene map renumbers them, so it costs about what
** the same matrix on 7x fewer genes costs, and decodes to the original ids. */
static void test_rans_gene_map(void) {
  dct_mat m, c;
  DCT_CHECK(dct_mat_random(&m, 41, 300, 3000, 0.9, DCT_MIXED, 0.05, 0.0) == 0);
  DCT_CHECK(dct_mat_random(&c, 41, 300, 3000, 0.9, DCT_MIXED, 0.05, 0.0) == 0);
  m.n_genes = 7 * 3000;
  uint64_t nnz = m.indptr[m.n_cells];
  for (uint64_t j = 0; j < nnz; j++) m.indices[j] *= 7;
  roundtrip(&m, DC_CODEC_RANS, 0, 3, 1);
  size_t sparse = encoded_len(&m), compact = encoded_len(&c);
  DCT_CHECKF(sparse <= compact + compact / 50 + 1000, "every 7th gene: %zu bytes, compact: %zu", sparse, compact);
  dct_mat_free(&m);
  dct_mat_free(&c);
}

/* dc_tile_gene_set: a tile with a gene map gives exactly the genes that have a nonzero in it,
** from its header and shared section alone (the payloads cut off); a tile without a map, a
** zstd tile and an empty tile say nothing (NULL: any gene); a flipped byte in the shared section
** is DC_ECORRUPT, and so is a map whose bit count disagrees (the section encoded again). */
static void gene_set_of(const dct_mat *m, int codec, uint8_t **set, int *rc, uint8_t **tile, size_t *tlen) {
  dc_csr in = dct_csr(m);
  dc_encode_opts o;
  dc_encode_opts_default(&o);
  o.codec = codec;
  dc_error err;
  *set = NULL;
  *rc = -100;
  if (dc_tile_encode(&in, &o, tile, tlen, &err) != DC_OK) { DCT_CHECKF(0, "encode: %s", err.msg); return; }
  dc_tile_hdr *h = malloc(sizeof *h);
  if (!h || dc_tile_parse(*tile, *tlen, h, &err) != DC_OK) { DCT_CHECK(0); free(h); return; }
  size_t prefix = h->n_chunks ? (size_t)h->chunk[0].offset : *tlen;   /* header + shared section only */
  *rc = dc_tile_gene_set(*tile, prefix, h, set, &err);
  free(h);
}

static void test_tile_gene_set(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 43, 200, 2000, 0.9, DCT_MIXED, 0.05, 0.0) == 0);
  m.n_genes = 5 * 2000 + 3;                    /* every 5th gene (and 3 genes past them: none) */
  uint64_t nnz = m.indptr[m.n_cells];
  for (uint64_t j = 0; j < nnz; j++) m.indices[j] *= 5;
  uint8_t *want = calloc(((size_t)m.n_genes + 7) / 8, 1), *set = NULL, *tile = NULL;
  for (uint64_t j = 0; j < nnz; j++) want[m.indices[j] / 8] |= (uint8_t)(1u << (m.indices[j] % 8));
  int rc;
  size_t tlen;
  gene_set_of(&m, DC_CODEC_RANS, &set, &rc, &tile, &tlen);
  DCT_CHECKF(rc == DC_OK && set, "rc %d, set %p", rc, (void *)set);
  if (set) DCT_CHECK(memcmp(set, want, ((size_t)m.n_genes + 7) / 8) == 0);
  free(set);
  /* a flipped byte of the shared section: its checksum */
  dc_tile_hdr *h = malloc(sizeof *h);
  dc_error err;
  if (h && tile && dc_tile_parse(tile, tlen, h, &err) == DC_OK) {
    tile[h->shared_offset + h->shared_len / 2] ^= 0x10;
    set = NULL;
    DCT_CHECK(dc_tile_gene_set(tile, tlen, h, &set, &err) == DC_ECORRUPT && !set && strstr(err.msg, "checksum"));
    /* resealed: the zstd frame or the model is found bad, or the byte lay outside the head and
    ** the map (a frequency, say): the set is then the tile's, never another */
    dct_reseal(tile, tlen);
    DCT_CHECK(dc_tile_parse(tile, tlen, h, &err) == DC_OK);
    rc = dc_tile_gene_set(tile, tlen, h, &set, &err);
    DCT_CHECKF((rc == DC_ECORRUPT && !set) || (rc == DC_OK && set && !memcmp(set, want, ((size_t)m.n_genes + 7) / 8)),
               "rc %d: %s", rc, err.msg);
    free(set);
    set = NULL;
    DCT_CHECK(dc_tile_gene_set(NULL, tlen, h, &set, &err) == DC_EARG);
  }
  free(h);
  free(tile);
  tile = NULL;
  /* no map: a tile of compact genes; the zstd codec; an empty tile */
  dct_mat c;
  DCT_CHECK(dct_mat_random(&c, 44, 200, 2000, 0.9, DCT_MIXED, 0.05, 0.05) == 0);   /* dense cells: every gene occurs */
  gene_set_of(&c, DC_CODEC_RANS, &set, &rc, &tile, &tlen);
  DCT_CHECK(rc == DC_OK && !set);
  free(tile);
  gene_set_of(&m, DC_CODEC_ZSTD, &set, &rc, &tile, &tlen);
  DCT_CHECK(rc == DC_OK && !set);
  free(tile);
  dct_mat e = c;
  e.n_cells = 0;
  gene_set_of(&e, DC_CODEC_RANS, &set, &rc, &tile, &tlen);
  DCT_CHECK(rc == DC_OK && !set);
  free(tile);
  free(want);
  dct_mat_free(&m);
  dct_mat_free(&c);
}

/* The tile version: rans (codec 3) tiles are version 3 (version 2 with the previous model, on
** request), the others stay version 1 (first-release readers read them); an unknown version
** is refused with a message that names it; a rans tile claiming version 1 is corrupt, and so
** is one whose header and model disagree (a version-3 model in a version-2 tile, or the
** reverse).  Pairs forced on and off give different tiles that both decode to the input. */
static void test_tile_versions(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 31, 50, 500, 0.9, DCT_MIXED, 0.05, 0.0) == 0);
  dc_csr in = dct_csr(&m);
  int cs[] = {DC_CODEC_RANS, RANS_V2, DC_CODEC_ZSTD, DC_CODEC_RANS_V1};
  for (int i = 0; i < 4; i++) {
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    set_codec(&o, cs[i]);
    uint8_t *buf = NULL;
    size_t len = 0;
    dc_error err;
    DCT_CHECK(dc_tile_encode(&in, &o, &buf, &len, &err) == DC_OK);
    if (!buf) continue;
    dc_tile_hdr h;
    DCT_CHECK(dc_tile_parse(buf, len, &h, &err) == DC_OK);
    uint32_t want = cs[i] == DC_CODEC_RANS ? 3u : cs[i] == RANS_V2 ? 2u : 1u;
    DCT_CHECKF(h.version == want, "%s version %u", cname(cs[i]), h.version);
    uint8_t *x = malloc(len);
    uint16_t bad[] = {4, 0, 1, 2, 3};
    for (int b = 0; b < 5; b++) {
      int rans = (cs[i] & 0xff) == DC_CODEC_RANS;
      if ((bad[b] == 1 || bad[b] == 2 || bad[b] == 3) && (!rans || bad[b] == want)) continue;
      memcpy(x, buf, len);
      x[4] = (uint8_t)bad[b];
      x[5] = 0;
      dct_reseal(x, len);
      int rc = dc_tile_parse(x, len, &h, &err);
      if (bad[b] == 1)
        DCT_CHECKF(rc == DC_ECORRUPT && strstr(err.msg, "version 1"), "rc %d %s", rc, err.msg);
      else if (bad[b] == 2 || bad[b] == 3) {   /* parses; the chunks refuse the model of the other version */
        DCT_CHECKF(rc == DC_OK, "rc %d %s", rc, err.msg);
        dct_dec d;
        rc = dct_decode(x, len, 0, &d, &err);
        DCT_CHECKF(rc == DC_ECORRUPT && strstr(err.msg, "model version"), "%s as version %u: rc %d %s",
                   cname(cs[i]), bad[b], rc, err.msg);
        if (rc == DC_OK) dct_dec_free(&d);
      } else
        DCT_CHECKF(rc == DC_EUNSUPPORTED && strstr(err.msg, "format version") &&
                       (bad[b] != 4 || strstr(err.msg, "reads 1 to 3")),
                   "rc %d %s", rc, err.msg);
    }
    free(x);
    free(buf);
  }
  /* pairs forced on and off */
  uint8_t *bufs[2] = {NULL, NULL};
  size_t lens[2] = {0, 0};
  for (int v = 0; v < 2; v++) {
    dc_encode_opts o;
    dc_encode_opts_default(&o);
    o.rans_pairs = v ? 1 : -1;
    dc_error err;
    DCT_CHECK(dc_tile_encode(&in, &o, &bufs[v], &lens[v], &err) == DC_OK);
    dct_dec d;
    DCT_CHECK(bufs[v] && dct_decode(bufs[v], lens[v], 0, &d, &err) == DC_OK);
    if (bufs[v]) {
      DCT_CHECK(dct_same(&m, &d, 0));
      dct_dec_free(&d);
    }
  }
  DCT_CHECK(bufs[0] && bufs[1] && (lens[0] != lens[1] || memcmp(bufs[0], bufs[1], lens[0])));
  free(bufs[0]);
  free(bufs[1]);
  DCT_CHECK(dc_codec_from_name("rans-v1") == DC_CODEC_RANS_V1 && !strcmp(dc_codec_name(DC_CODEC_RANS_V1), "rans-v1"));
  dct_mat_free(&m);
}

/* Cells of a head and a tail: each of the genes below H nonzero with probability 0.7 (counts
** 1..20), then T genes drawn uniformly above H (count 1). */
static void mat_head_tail(dct_mat *m, uint64_t s, uint32_t cells, uint32_t genes, uint32_t H, uint32_t T) {
  memset(m, 0, sizeof *m);
  m->n_cells = cells;
  m->n_genes = genes;
  m->indptr = malloc(((size_t)cells + 1) * 8);
  m->indices = malloc((size_t)cells * (H + T) * 4 + 4);
  m->data = malloc((size_t)cells * (H + T) * 4 + 4);
  uint8_t *on = calloc(genes, 1);
  DCT_CHECK(m->indptr && m->indices && m->data && on);
  if (!m->indptr || !m->indices || !m->data || !on) exit(1);
  uint64_t k = 0;
  m->indptr[0] = 0;
  for (uint32_t i = 0; i < cells; i++) {
    for (uint32_t g = 0; g < H; g++) on[g] = dct_unif(&s) < 0.7;
    for (uint32_t t = 0; t < T; t++) on[H + dct_rng(&s) % (genes - H)] = 1;
    for (uint32_t g = 0; g < genes; g++)
      if (on[g]) {
        m->indices[k] = g;
        m->data[k++] = g < H ? 1 + (uint32_t)(dct_rng(&s) % 20) : 1;
        on[g] = 0;
      }
    m->indptr[i + 1] = k;
  }
  free(on);
}

/* The default's choice of one rank bucket: a tile whose nonempty cells average fewer than
** DC_CTX_ONE_BUCKET_NNZ nonzeros gets, byte for byte, the one-bucket encoding when that is at
** most DC_CTX_ONE_BUCKET_SLACK larger than the rank-bucket one, and the rank-bucket one
** otherwise; a tile of larger cells gets the rank-bucket one without a second encoding.  The
** tiles below include both outcomes of the comparison. */
static void test_rans_one_bucket(void) {
  int took[2] = {0, 0};      /* small-cell tiles that kept rank buckets, took one */
  for (int t = 0; t < 5; t++) {
    dct_mat m;
    if (t < 2) DCT_CHECK(dct_mat_random(&m, 40 + (uint64_t)t, 1000, 1000 + 3000 * (uint32_t)t, 0.9, t, 0.05, 0.0) == 0);
    else if (t < 4) mat_head_tail(&m, 3, 3000, 40000, t == 2 ? 16 : 256, 40);   /* one bucket pays; not */
    else mat_head_tail(&m, 5, 500, 40000, 512, 40);                               /* large cells */
    dc_csr in = dct_csr(&m);
    uint32_t nonempty = 0;
    for (uint32_t i = 0; i < m.n_cells; i++) nonempty += m.indptr[i + 1] > m.indptr[i];
    int small = m.indptr[m.n_cells] < (uint64_t)DC_CTX_ONE_BUCKET_NNZ * nonempty;
    DCT_CHECKF(small == (t < 4), "tile %d: %llu nonzeros in %u cells", t, (unsigned long long)m.indptr[m.n_cells],
               nonempty);
    uint8_t *buf[3] = {NULL, NULL, NULL};
    size_t len[3] = {0, 0, 0};
    for (int v = 0; v < 3; v++) {            /* forced off, forced on, the default */
      dc_encode_opts o;
      dc_encode_opts_default(&o);
      o.rans_one_bucket = v == 0 ? -1 : v == 1 ? 1 : 0;
      dc_error err;
      DCT_CHECKF(dc_tile_encode(&in, &o, &buf[v], &len[v], &err) == DC_OK, "encode: %s", err.msg);
      dct_dec d;
      DCT_CHECK(buf[v] && dct_decode(buf[v], len[v], 0, &d, &err) == DC_OK);
      if (buf[v]) {
        DCT_CHECK(dct_same(&m, &d, 0));
        dct_dec_free(&d);
      }
    }
    DCT_CHECK(len[0] != len[1] || memcmp(buf[0], buf[1], len[0]));
    int one = small && (double)len[1] <= (1.0 + DC_CTX_ONE_BUCKET_SLACK) * (double)len[0];
    if (small) took[one]++;
    DCT_CHECKF(len[2] == len[one] && !memcmp(buf[2], buf[one], len[2]),
               "tile %d: the default is not the %s encoding (%zu / %zu / %zu bytes)", t,
               one ? "one-bucket" : "rank-bucket", len[0], len[1], len[2]);
    for (int v = 0; v < 3; v++) free(buf[v]);
    dct_mat_free(&m);
  }
  DCT_CHECKF(took[0] >= 1 && took[1] >= 1, "small-cell tiles that kept rank buckets %d, took one %d", took[0],
             took[1]);
}

/* a tile whose rans tables are corrupt: every chunk fails, also when one
** decoder sees them again (the tables must not be cached half-built) */
static void test_rans_bad_tables(void) {
  dct_mat m;
  size_t len;
  uint8_t *buf = small_tile(DC_CODEC_RANS, 45, &len, &m, 4);
  if (!buf) { dct_mat_free(&m); return; }
  dc_tile_hdr h;
  dc_error err;
  DCT_CHECK(dc_tile_parse(buf, len, &h, &err) == DC_OK && h.shared_len > 4);
  int64_t ip[41]; int32_t ix[4000], vv[4000];
  dc_out out = {ip, ix, vv, 0};
  for (int where = 0; where < 3; where++) {
    uint8_t *x = malloc(len);
    memcpy(x, buf, len);
    size_t at = (size_t)h.shared_offset + (where == 0 ? 0 : where == 1 ? 2 : (size_t)h.shared_len - 1);
    x[at] ^= 0x5a;
    dct_reseal(x, len);
    dc_decoder *d = dc_decoder_new();
    for (uint32_t c = h.n_chunks; c-- > 0;) {
      int rc = dc_chunk_decode(d, x, len, &h, c, &out, &err);
      DCT_CHECKF(rc == DC_ECORRUPT && strstr(err.msg, "tables"), "byte %zu chunk %u: rc %d %s", at, c, rc, err.msg);
    }
    /* and the good tile still decodes with the same decoder */
    for (uint32_t c = 0; c < h.n_chunks; c++) DCT_CHECK(dc_chunk_decode(d, buf, len, &h, c, &out, &err) == DC_OK);
    dc_decoder_free(d);
    free(x);
  }
  free(buf);
  dct_mat_free(&m);
}

/* The encoder's division by a frequency as a multiplication (dc_ctx_rcp): floor(x / f) for
** every f of the coder and every state it divides (x < f << 20): each f at both ends, around
** multiples of f (where a rounding error would show first) up to the top, and at random. */
static void test_rcp_div(void) {
  uint64_t rs = 42;
  uint32_t bad = 0, bad_f = 0, bad_x = 0;
  for (uint32_t f = 1; f <= DC_CTX_M; f++) {
    uint64_t r = dc_ctx_rcp(f), top = (uint64_t)f << 20;
    uint64_t xs[64];
    uint32_t n = 0;
    xs[n++] = 0;
    xs[n++] = 1;
    xs[n++] = top - 1;
    for (uint64_t k = 1; k < 8; k++) {              /* k f - 1, k f near the bottom and the top */
      xs[n++] = k * f - 1;
      xs[n++] = k * f;
      xs[n++] = top - k * f;
      xs[n++] = top - k * f - 1;
    }
    while (n < 64) xs[n++] = dct_rng(&rs) % top;
    for (uint32_t i = 0; i < n; i++) {
      uint32_t x = (uint32_t)xs[i];
      if (dc_ctx_rcp_div(x, r) != x / f && !bad++) { bad_f = f; bad_x = x; }
    }
  }
  DCT_CHECKF(bad == 0, "%u wrong quotients, the first %u / %u: %u", bad, bad_x, bad_f,
             bad ? dc_ctx_rcp_div(bad_x, dc_ctx_rcp(bad_f)) : 0);
}

/* dc_normalize_freqs moves slots one at a time to where they cost least: the largest
** f / (c + 1) loses one while the sum is above m (never below 1), the largest c / f gains one
** while it is below; ties go to the lower index.  Its heap must choose as this scan does,
** on counts where many slots move either way (most counts rounding up to 1, or to 0). */
static void ref_normalize(const uint64_t *c, uint32_t *f, uint32_t n, uint32_t m) {
  uint64_t s = 0;
  for (uint32_t i = 0; i < n; i++) s += c[i];
  int64_t tot = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t v = (uint64_t)((double)c[i] * m / (double)s + 0.5);
    f[i] = v < 1 ? 1 : (uint32_t)v;
    tot += f[i];
  }
  while (tot != (int64_t)m) {
    uint32_t best = 0;
    double bestv = -1;
    for (uint32_t i = 0; i < n; i++) {
      if (tot > (int64_t)m && f[i] <= 1) continue;
      double v = tot > (int64_t)m ? (double)f[i] / (double)(c[i] + 1) : (double)c[i] / (double)f[i];
      if (v > bestv) { bestv = v; best = i; }
    }
    if (tot > (int64_t)m) { f[best]--; tot--; } else { f[best]++; tot++; }
  }
}

static void test_normalize_freqs(void) {
  enum { NMAX = 2100 };
  static uint64_t c[NMAX];
  static uint32_t f[NMAX], g[NMAX];
  const uint32_t ns[] = {2, 3, 17, 255, 256, 1090, 1157, 2047, 2048, 2049, 2100};
  const uint32_t ms[] = {1u << 12, 1u << 11, 1u << 15};
  uint64_t rs = 7;
  int cases = 0, moved_up = 0, moved_down = 0;
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t b = 0; b < sizeof ms / sizeof *ms; b++)
      for (int kind = 0; kind < 5; kind++) {
        uint32_t n = ns[a], m = ms[b];
        if (n > m) continue;
        uint64_t sum = 0;
        for (uint32_t i = 0; i < n; i++) {
          uint64_t r = dct_rng(&rs);
          switch (kind) {
            case 0: c[i] = 1 + r % 1000; break;                               /* even */
            case 1: c[i] = (r % 8 == 0) ? 1 + (r >> 8) % 1000000 : r % 3; break; /* a few large, many 0-2 */
            case 2: c[i] = i == 0 ? 100000000 : (r % 4 == 0); break;           /* one symbol takes all */
            case 3: c[i] = (uint64_t)(1e6 / ((double)i + 1)); break;           /* Zipf */
            default: c[i] = 5; break;                                          /* ties everywhere */
          }
          sum += c[i];
        }
        if (!sum) c[0] = sum = 1;
        ref_normalize(c, g, n, m);
        uint64_t tot0 = 0;
        for (uint32_t i = 0; i < n; i++) {
          uint64_t v = (uint64_t)((double)c[i] * m / (double)sum + 0.5);
          tot0 += v < 1 ? 1 : v;
        }
        moved_up += tot0 < m;
        moved_down += tot0 > m;
        dc_normalize_freqs(c, f, n, m);
        uint64_t tot = 0;
        int same = 1, pos = 1;
        for (uint32_t i = 0; i < n; i++) {
          tot += f[i];
          same &= f[i] == g[i];
          pos &= f[i] >= 1;
        }
        DCT_CHECKF(same && tot == m && pos, "n %u, m %u, counts of kind %d: sum %llu, same as the scan: %d", n, m, kind,
                   (unsigned long long)tot, same);
        cases++;
      }
  DCT_CHECK(cases > 100 && moved_up > 10 && moved_down > 10);   /* both directions were exercised */
}

/* Known answers: the low 32 bits of XXH3-64 (seed 0), as docs/format.md defines the checksum.
 * The values come from the xxhash command-line tool (`xxhsum -H3 FILE`, Debian's xxhash
 * 0.8.1), not from this code; the empty input's 2D06800538D394C2 is also the value the xxHash
 * specification publishes.  The lengths reach XXH3's paths: 0, 1-16, 129-240 and > 240 bytes. */
static void test_checksum(void) {
  const char *s = "deltacells";
  DCT_CHECK(dc_checksum(NULL, 0) == 0x38D394C2u);   /* XXH3 = 2d06800538d394c2 */
  DCT_CHECK(dc_checksum(s, 0) == 0x38D394C2u);
  DCT_CHECK(dc_checksum(s, 10) == 0x0EAC7051u);     /* "deltacells": 88f4db720eac7051 */
  DCT_CHECK(dc_checksum(s, 9) == 0x3BC5EB1Fu);      /* "deltacell":  1ecba8ec3bc5eb1f */
  char a[1000];
  memset(a, 'a', sizeof a);
  DCT_CHECK(dc_checksum(a, sizeof a) == 0x7147DB7Cu);  /* 1000 x 'a': b3e7af627147db7c */
  unsigned char b[300];
  for (int i = 0; i < 300; i++) b[i] = (unsigned char)(i % 251);
  DCT_CHECK(dc_checksum(b, 300) == 0xCF021DBCu);    /* bytes i % 251, i < 300: fdda6967cf021dbc */
  DCT_CHECK(dc_checksum(b, 129) == 0x31BA3E5Au);    /* the first 129 of them: ec7642b431ba3e5a */
}

int main(void) {
  DCT_RUN(test_checksum);
  DCT_RUN(test_rcp_div);
  DCT_RUN(test_normalize_freqs);
  DCT_RUN(test_pool_for);
  DCT_RUN(test_roundtrip_random);
  DCT_RUN(test_chunk_count_rule);
  DCT_RUN(test_rans_one_bucket);
  DCT_RUN(test_roundtrip_large);
  DCT_RUN(test_edge_cases);
  DCT_RUN(test_indptr_window);
  DCT_RUN(test_bad_input);
  DCT_RUN(test_header_errors);
  DCT_RUN(test_corrupt_truncation);
  DCT_RUN(test_corrupt_flips);
  DCT_RUN(test_pool_subset_gather);
  DCT_RUN(test_simd_dispatch);
  DCT_RUN(test_path_scalar);
  DCT_RUN(test_path_avx2);
  DCT_RUN(test_path_avx512);
  DCT_RUN(test_rans_escape);
  DCT_RUN(test_rans_gene_map);
  DCT_RUN(test_tile_gene_set);
  DCT_RUN(test_tile_versions);
  DCT_RUN(test_rans_bad_tables);
  DCT_RUN(test_decoder_many_tiles);
  return dct_done();
}
