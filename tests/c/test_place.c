/*
** test_place.c — placing (dc_chunk_cell_nnz, dc_chunk_place, and dc_pool_decode's jobs of
** both kinds): every cell of a chunk decoded straight to its own place must equal what a
** whole-tile decode gives, on every decoder path, for int32 and float32, with cells kept
** and cells dropped (decoded into the sink), on tiles with a gene map, with a per-cell filter
** (dc_place.filter, float32) and without; and a corrupt
** chunk or a codec without placing is an error, never a write out of bounds.
*/
#include "dctest.h"
#include "dc_testutil.h"
#include "dc_ctx.h"

static uint8_t *encode(const dct_mat *m, int codec, uint32_t chunks, size_t *len) {
  uint8_t *buf = NULL;
  dc_error err = {0};
  int rc = dct_encode(m, codec, chunks, 0, &buf, len, &err);
  DCT_CHECKF(rc == DC_OK, "encode: %s", err.msg);
  return rc == DC_OK ? buf : NULL;
}

/* A random matrix (dct_mat_random with p0 0.9) as one rans tile of `chunks` chunks, parsed into *h. */
static uint8_t *random_tile(dct_mat *m, uint64_t seed, uint32_t n_cells, uint32_t n_genes, int kind,
                            double frac_empty, double frac_dense, uint32_t chunks, size_t *len, dc_tile_hdr *h) {
  DCT_CHECK(dct_mat_random(m, seed, n_cells, n_genes, 0.9, kind, frac_empty, frac_dense) == 0);
  uint8_t *buf = encode(m, DC_CODEC_RANS, chunks, len);
  dc_error err = {0};
  DCT_CHECK(buf && dc_tile_parse(buf, *len, h, &err) == DC_OK);
  return buf;
}

/* A filter (dc_place.filter): keeps the nonzeros of odd genes, in place, and counts its calls. */
typedef struct { uint32_t calls; } odd_arg;
static uint32_t keep_odd(void *arg, int32_t *ix, void *val, uint32_t n) {
  uint32_t o = 0;
  int32_t *v = val;
  for (uint32_t j = 0; j < n; j++)
    if (ix[j] & 1) { ix[o] = ix[j]; v[o] = v[j]; o++; }
  ((odd_arg *)arg)->calls++;
  return o;
}

/* One tile, one path: counts per cell equal the input's; placing with every kept cell in
** its own malloc'd place (exactly its size: ASan sees any write past it) equals the input;
** dropped cells leave their places untouched. */
static void check_tile(const dct_mat *m, uint32_t chunks, const char *path, uint64_t seed) {
  size_t len = 0;
  uint8_t *buf = encode(m, DC_CODEC_RANS, chunks, &len);
  if (!buf) return;
  dc_tile_hdr h;
  dc_error err = {0};
  DCT_CHECK(dc_tile_parse(buf, len, &h, &err) == DC_OK);
  dc_decoder *d = dc_decoder_new();
  setenv("DC_SIMD", path, 1);
  uint64_t s = seed;
  for (uint32_t c = 0; c < h.n_chunks; c++) {
    const dc_chunk_info *ci = &h.chunk[c];
    uint32_t n = ci->n_cells;
    uint32_t *nnz = calloc(n + 1, sizeof *nnz);
    int32_t **ix = calloc(n + 1, sizeof *ix);
    void **val = calloc(n + 1, sizeof *val);
    DCT_CHECK(nnz && ix && val);
    int rc = dc_chunk_cell_nnz(d, buf, len, &h, c, nnz, &err);
    DCT_CHECKF(rc == DC_OK, "%s chunk %u cell counts: %s", path, c, err.msg);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t cell = ci->first_cell + i;
      DCT_CHECKF(nnz[i] == m->indptr[cell + 1] - m->indptr[cell], "%s cell %u: %u nonzeros counted", path, cell,
                 nnz[i]);
    }
    for (int f32 = 0; f32 < 2; f32++) {
      for (uint32_t i = 0; i < n; i++) {
        int keep = dct_rng(&s) % 4 != 0;           /* a quarter of the cells dropped */
        size_t k = nnz[i] ? nnz[i] : 1;
        ix[i] = keep ? malloc(k * 4) : NULL;
        val[i] = keep ? malloc(k * 4) : NULL;
        if (keep) { memset(ix[i], 0xab, k * 4); memset(val[i], 0xab, k * 4); }
      }
      /* float32 with a filter: each kept cell's odd genes, n_out its count (cells kept nowhere
      ** are neither filtered nor written: n_out keeps its marker) */
      odd_arg oa = {0};
      uint32_t *n_out = malloc((n + 1) * sizeof *n_out), kept = 0;
      DCT_CHECK(n_out != NULL);
      for (uint32_t i = 0; i < n; i++) { n_out[i] = 0xdeadbeef; kept += ix[i] != NULL; }
      dc_place pl = {ix, val, f32, f32 ? keep_odd : NULL, &oa, f32 ? n_out : NULL};
      rc = dc_chunk_place(d, buf, len, &h, c, &pl, &err);
      DCT_CHECKF(rc == DC_OK, "%s chunk %u place: %s", path, c, err.msg);
      DCT_CHECK(oa.calls == (f32 ? kept : 0));
      for (uint32_t i = 0; i < n && rc == DC_OK; i++) {
        if (!ix[i]) {
          DCT_CHECK(n_out[i] == 0xdeadbeef);
          continue;
        }
        uint32_t cell = ci->first_cell + i;
        uint64_t a = m->indptr[cell];
        int same = 1;
        uint32_t o = 0;
        for (uint32_t j = 0; j < nnz[i]; j++) {
          if (f32 && !(m->indices[a + j] & 1)) continue;
          same &= (uint32_t)ix[i][o] == m->indices[a + j];
          if (f32) same &= ((float *)val[i])[o] == (float)m->data[a + j];
          else same &= (uint32_t)((int32_t *)val[i])[o] == m->data[a + j];
          o++;
        }
        if (f32) same &= n_out[i] == o;
        DCT_CHECKF(same, "%s f32 %d cell %u: placed values differ from the input", path, f32, cell);
      }
      free(n_out);
      for (uint32_t i = 0; i < n; i++) { free(ix[i]); free(val[i]); ix[i] = NULL; val[i] = NULL; }
    }
    free(nnz); free(ix); free(val);
  }
  unsetenv("DC_SIMD");
  dc_decoder_free(d);
  free(buf);
}

static const char *paths[] = {"scalar", "avx2", "avx512"};
static const int levels[] = {DC_SIMD_SCALAR, DC_SIMD_AVX2, DC_SIMD_AVX512};

/* check_tile on every decoder path this CPU has (scalar always) */
static void check_every_path(const dct_mat *m, uint32_t chunks, uint64_t seed) {
  for (size_t p = 0; p < 3; p++)
    if (dc_simd_supported(levels[p])) check_tile(m, chunks, paths[p], seed);
}

static void test_place_random(void) {
  uint32_t cells[] = {1, 9, 33, 300};
  for (size_t p = 0; p < 3; p++) {
    if (!dc_simd_supported(levels[p])) continue;   /* scalar always runs; the vector paths where the CPU has them */
    for (size_t t = 0; t < sizeof cells / sizeof cells[0]; t++)
      for (int kind = 0; kind < 4; kind++) {
        dct_mat m;
        DCT_CHECK(dct_mat_random(&m, 900 + t * 4 + (uint64_t)kind, cells[t], 4000, 0.9, kind, 0.1, 0.02) == 0);
        check_tile(&m, 1 + (uint32_t)(t % 3), paths[p], 7 + t);
        dct_mat_free(&m);
      }
  }
}

/* A tile of every 7th gene (a gene map): placed ids are the dataset's, not the tile's. */
static void test_place_gene_map(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 77, 200, 2000, 0.9, DCT_MIXED, 0.05, 0.0) == 0);
  m.n_genes = 7 * 2000;
  for (uint64_t j = 0; j < m.indptr[m.n_cells]; j++) m.indices[j] *= 7;
  check_every_path(&m, 3, 3);
  dct_mat_free(&m);
}

/* Empty cells, one gene, dense cells, counts of 2^32-1 */
static void test_place_edges(void) {
  dct_mat m;
  DCT_CHECK(dct_mat_random(&m, 5, 40, 1, 0.9, DCT_HUGE, 0.3, 0.0) == 0);
  check_tile(&m, 2, "scalar", 1);
  dct_mat_free(&m);
  DCT_CHECK(dct_mat_random(&m, 6, 20, 700, 0.9, DCT_HUGE, 0.2, 0.5) == 0);
  check_every_path(&m, 2, 2);
  dct_mat_free(&m);
}

/* The pool runs both kinds of job; a zstd tile is refused by name; a flipped byte in a
** chunk is a checksum error for both entry points. */
static void test_place_jobs_and_errors(void) {
  dct_mat m;
  size_t len = 0;
  dc_tile_hdr h;
  dc_error err = {0};
  uint8_t *buf = random_tile(&m, 11, 120, 3000, DCT_SMALL, 0.05, 0.0, 4, &len, &h);
  dc_pool *pool = dc_pool_new(2);
  dc_job jobs[4];
  uint32_t *nnz[4];
  memset(jobs, 0, sizeof jobs);
  for (uint32_t c = 0; c < h.n_chunks; c++) {
    nnz[c] = calloc(h.chunk[c].n_cells, sizeof(uint32_t));
    jobs[c] = (dc_job){buf, len, &h, c, {NULL, NULL, NULL, 0}, -1, {0, {0}}, NULL, nnz[c]};
  }
  DCT_CHECK(dc_pool_decode(pool, jobs, h.n_chunks) == DC_OK);
  /* every cell into one array, in tile order, through its own place */
  uint64_t total = m.indptr[m.n_cells];
  int32_t *all_ix = malloc((total + 1) * 4), *all_v = malloc((total + 1) * 4);
  int32_t **ix[4];
  void **val[4];
  dc_place pl[4];
  uint64_t o = 0;
  for (uint32_t c = 0; c < h.n_chunks; c++) {
    uint32_t n = h.chunk[c].n_cells;
    ix[c] = malloc(n * sizeof(int32_t *));
    val[c] = malloc(n * sizeof(void *));
    for (uint32_t i = 0; i < n; i++) { ix[c][i] = all_ix + o; val[c][i] = all_v + o; o += nnz[c][i]; }
    pl[c] = (dc_place){ix[c], val[c], 0, NULL, NULL, NULL};
    jobs[c] = (dc_job){buf, len, &h, c, {NULL, NULL, NULL, 0}, -1, {0, {0}}, &pl[c], NULL};
  }
  DCT_CHECK(o == total);
  DCT_CHECK(dc_pool_decode(pool, jobs, h.n_chunks) == DC_OK);
  DCT_CHECK(!memcmp(all_ix, m.indices, total * 4) && !memcmp(all_v, m.data, total * 4));

  dc_decoder *d = dc_decoder_new();
  uint8_t *bad = malloc(len);
  memcpy(bad, buf, len);
  bad[h.chunk[1].offset + h.chunk[1].length / 2] ^= 0x10;
  DCT_CHECK(dc_chunk_cell_nnz(d, bad, len, &h, 1, nnz[1], &err) == DC_ECORRUPT);
  DCT_CHECKF(strstr(err.msg, "checksum") != NULL, "%s", err.msg);
  DCT_CHECK(dc_chunk_place(d, bad, len, &h, 1, &pl[1], &err) == DC_ECORRUPT);
  /* resealed, so the decoder proper meets the flipped bits: an error or the same counts,
  ** never a crash (ASan) */
  dct_reseal(bad, len);
  int rc = dc_chunk_place(d, bad, len, &h, 1, &pl[1], &err);
  DCT_CHECK(rc == DC_OK || rc == DC_ECORRUPT);
  DCT_CHECK(dc_chunk_place(d, buf, len, &h, 9, &pl[1], &err) == DC_EARG);
  DCT_CHECK(dc_chunk_place(d, buf, len, &h, 0, NULL, &err) == DC_EARG);
  free(bad);

  size_t zlen = 0;
  uint8_t *z = encode(&m, DC_CODEC_ZSTD, 2, &zlen);
  dc_tile_hdr zh;
  DCT_CHECK(z && dc_tile_parse(z, zlen, &zh, &err) == DC_OK);
  DCT_CHECK(dc_chunk_cell_nnz(d, z, zlen, &zh, 0, nnz[0], &err) == DC_EUNSUPPORTED);
  DCT_CHECKF(strstr(err.msg, "codec rans") != NULL, "%s", err.msg);
  DCT_CHECK(dc_chunk_place(d, z, zlen, &zh, 0, &pl[0], &err) == DC_EUNSUPPORTED);
  free(z);
  dc_decoder_free(d);
  for (uint32_t c = 0; c < h.n_chunks; c++) { free(nnz[c]); free(ix[c]); free(val[c]); }
  free(all_ix); free(all_v);
  dc_pool_free(pool);
  free(buf);
  dct_mat_free(&m);
}

/* dc_ctx_width_sum_avx2 (the widths of the cells placing skips, 32 symbols at a time) against
** a plain sum: contexts of 1 to 256 symbols (one to sixteen shuffles per 32), segments of 0 to
** 100 symbols (tails of every length), and bytes past a segment (another segment's: any value,
** also symbols the context does not have) that must count nothing. */
/* dc_part_nnz and dc_part_rows: the kept cells' rows one after another, the others NULL and
** empty; counts past the chunk's nonzeros are -1.  Then a chunk placed through them (every
** path) equals the input for the kept cells, with the rows exactly as long as their counts. */
static void test_part_rows(void) {
  const uint32_t cnt[6] = {3, 0, 5, 2, 7, 1};
  const uint8_t keep[6] = {1, 1, 0, 1, 0, 1};
  DCT_CHECK(dc_part_nnz(cnt, keep, 6, 18) == 6);
  DCT_CHECK(dc_part_nnz(cnt, keep, 6, 6) == 6);
  DCT_CHECK(dc_part_nnz(cnt, keep, 6, 5) == -1);
  const uint32_t huge[3] = {UINT32_MAX, UINT32_MAX, 1};
  const uint8_t all[3] = {1, 1, 1};
  DCT_CHECK(dc_part_nnz(huge, all, 3, (uint64_t)UINT32_MAX + 5) == -1);
  DCT_CHECK(dc_part_nnz(huge, all, 3, UINT64_MAX) == 2 * (int64_t)UINT32_MAX + 1);
  int32_t idx[6];
  float vals[6];
  int64_t ip[7];
  int32_t *ix[6];
  void *val[6];
  dc_part_rows(cnt, keep, 6, idx, vals, ip, ix, val);
  const int64_t want_ip[7] = {0, 3, 3, 3, 5, 5, 6};
  for (int i = 0; i < 7; i++) DCT_CHECKF(ip[i] == want_ip[i], "indptr[%d] = %lld", i, (long long)ip[i]);
  for (int i = 0; i < 6; i++) {
    DCT_CHECKF(keep[i] ? ix[i] == idx + ip[i] && val[i] == (void *)(vals + ip[i]) : !ix[i] && !val[i],
               "cell %d: its place", i);
  }
  dc_part_rows(cnt, keep, 6, idx, vals, NULL, ix, val);      /* no indptr asked for */
  DCT_CHECK(ix[3] == idx + 3 && val[5] == (void *)(vals + 5) && !ix[4]);

  dct_mat m;
  size_t len = 0;
  dc_tile_hdr h;
  dc_error err = {0};
  uint8_t *buf = random_tile(&m, 91, 300, 2000, DCT_MIXED, 0.1, 0.02, 3, &len, &h);
  dc_decoder *d = dc_decoder_new();
  for (size_t p = 0; p < 3 && buf; p++) {
    if (!dc_simd_supported(levels[p])) continue;
    setenv("DC_SIMD", paths[p], 1);
    for (uint32_t c = 0; c < h.n_chunks; c++) {
      const dc_chunk_info *ci = &h.chunk[c];
      uint32_t n = ci->n_cells, *nnz = calloc(n + 1, sizeof *nnz);
      uint8_t *kp = calloc(n + 1, 1);
      int32_t **rx = calloc(n + 1, sizeof *rx);
      void **rv = calloc(n + 1, sizeof *rv);
      int64_t *rp = calloc(n + 1, sizeof *rp);
      DCT_CHECK(nnz && kp && rx && rv && rp);
      DCT_CHECK(dc_chunk_cell_nnz(d, buf, len, &h, c, nnz, &err) == DC_OK);
      for (uint32_t i = 0; i < n; i++) kp[i] = (uint8_t)((i * 7 + c) % 3 == 0);
      int64_t t = dc_part_nnz(nnz, kp, n, ci->nnz);
      DCT_CHECK(t >= 0);
      int32_t *pi = malloc((size_t)(t ? t : 1) * 4), *pv = malloc((size_t)(t ? t : 1) * 4);   /* exact: ASan */
      dc_part_rows(nnz, kp, n, pi, pv, rp, rx, rv);
      dc_place pl = {rx, rv, 0, NULL, NULL, NULL};
      DCT_CHECKF(dc_chunk_place(d, buf, len, &h, c, &pl, &err) == DC_OK, "%s chunk %u: %s", paths[p], c, err.msg);
      DCT_CHECK(rp[n] == t);
      for (uint32_t i = 0; i < n; i++) {
        if (!kp[i]) { DCT_CHECK(rp[i + 1] == rp[i]); continue; }
        uint64_t a = m.indptr[ci->first_cell + i];
        int same = rp[i + 1] - rp[i] == (int64_t)nnz[i];
        for (uint32_t j = 0; j < nnz[i] && same; j++)
          same = (uint32_t)pi[rp[i] + j] == m.indices[a + j] && (uint32_t)pv[rp[i] + j] == m.data[a + j];
        DCT_CHECKF(same, "%s chunk %u cell %u: placed in part, differs from the input", paths[p], c, i);
      }
      free(pi); free(pv); free(nnz); free(kp); free(rx); free(rv); free(rp);
    }
  }
  unsetenv("DC_SIMD");
  dc_decoder_free(d);
  free(buf);
  dct_mat_free(&m);
}

static void test_width_sum(void) {
#ifdef DC_CTX_X86
  if (!dc_simd_supported(DC_SIMD_AVX2)) {
    DCT_SKIP("this CPU has no avx2");
    return;
  }
  uint8_t nbt[256], sp[100 + 32];
  uint64_t r = 7;
  for (uint32_t nsym = 1; nsym <= 256; nsym += nsym < 40 ? 1 : 9) {
    for (uint32_t i = 0; i < 256; i++) nbt[i] = (uint8_t)(i < nsym ? dct_rng(&r) % 29 : 100 + dct_rng(&r) % 100);
    for (uint32_t n = 0; n <= 100; n++) {
      uint64_t want = 0;
      for (uint32_t i = 0; i < sizeof sp; i++) {
        sp[i] = (uint8_t)(i < n ? dct_rng(&r) % nsym : dct_rng(&r) % 256);
        if (i < n) want += nbt[sp[i]];
      }
      uint64_t got = dc_ctx_width_sum_avx2(nbt, nsym, sp, n);
      DCT_CHECKF(got == want, "%u symbols, segment of %u: %llu, want %llu", nsym, n, (unsigned long long)got,
                 (unsigned long long)want);
      if (got != want) return;
    }
  }
#else
  DCT_SKIP("not an x86-64 build: there is no AVX2 width sum");
#endif
}

int main(void) {
  DCT_RUN(test_place_random);
  DCT_RUN(test_place_gene_map);
  DCT_RUN(test_place_edges);
  DCT_RUN(test_place_jobs_and_errors);
  DCT_RUN(test_part_rows);
  DCT_RUN(test_width_sum);
  return dct_done();
}
