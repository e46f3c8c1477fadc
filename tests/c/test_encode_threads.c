/*
** test_encode_threads.c — a tile encodes to the same bytes whatever the encoder's thread count:
** the rans model is counted in parts of the tile's cells (one per pool thread, summed) and the
** chunks are encoded in parallel; shapes where parts get few, empty or no cells included.
*/
#include "dctest.h"
#include "dc_testutil.h"

/* Encodes m with `threads` threads; the caller frees *buf. */
static int encode(const dct_mat *m, int codec, uint32_t chunks, int threads, uint8_t **buf, size_t *len) {
  dc_error err = {0};
  int rc = dct_encode(m, codec, chunks, threads, buf, len, &err);
  DCT_CHECKF(rc == DC_OK, "encode (%u cells, %d threads): %s", m->n_cells, threads, err.msg);
  return rc;
}

static void same_bytes(const dct_mat *m, int codec, uint32_t chunks) {
  uint8_t *ref = NULL;
  size_t ref_len = 0;
  if (encode(m, codec, chunks, 1, &ref, &ref_len)) return;
  const int threads[] = {2, 3, 8};
  for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
    uint8_t *b = NULL;
    size_t len = 0;
    if (encode(m, codec, chunks, threads[t], &b, &len)) break;
    DCT_CHECKF(len == ref_len && memcmp(b, ref, len) == 0, "%s, %u cells x %u genes, %u chunks: %zu bytes with 1 thread, "
               "%zu with %d%s", dc_codec_name(codec), m->n_cells, m->n_genes, chunks, ref_len, len, threads[t],
               len == ref_len ? " (contents differ)" : "");
    free(b);
  }
  /* and it decodes to the input */
  dct_dec d;
  dc_error err = {0};
  int rc = dct_decode(ref, ref_len, 0, &d, &err);
  DCT_CHECKF(rc == DC_OK, "decode: %s", err.msg);
  if (rc == DC_OK) {
    DCT_CHECK(dct_same(m, &d, 0));
    dct_dec_free(&d);
  }
  free(ref);
}

static void test_shapes(void) {
  static const struct { uint32_t cells, genes; double p0, empty, dense; uint32_t chunks; } sh[] = {
      {1, 50, 0.5, 0, 0, 8},          /* fewer cells than threads */
      {2, 3000, 0.3, 0, 0, 8},
      {5, 400, 0.4, 0.6, 0, 3},       /* mostly empty cells */
      {40, 20000, 0.002, 0.2, 0, 8},  /* few genes used: the gene map */
      {300, 2000, 0.2, 0.05, 0.01, 8},
      {2500, 3000, 0.3, 0.02, 0, 16}, /* a tile of ~10^5 nonzeros per part */
  };
  const int codecs[] = {DC_CODEC_RANS, DC_CODEC_RANS_V1, DC_CODEC_ZSTD};
  for (size_t k = 0; k < sizeof sh / sizeof *sh; k++)
    for (size_t c = 0; c < sizeof codecs / sizeof *codecs; c++) {
      dct_mat m;
      if (dct_mat_random(&m, 1000 + k, sh[k].cells, sh[k].genes, sh[k].p0, (int)(k % 4), sh[k].empty, sh[k].dense)) {
        DCT_CHECK(!"out of memory");
        dct_mat_free(&m);
        return;
      }
      same_bytes(&m, codecs[c], sh[k].chunks);
      dct_mat_free(&m);
    }
}

/* every cell empty but the last: one part holds all the nonzeros */
static void test_skewed(void) {
  dct_mat m;
  if (dct_mat_random(&m, 77, 600, 1500, 0.4, DCT_SMALL, 0, 0)) { DCT_CHECK(!"out of memory"); dct_mat_free(&m); return; }
  uint64_t last = m.indptr[m.n_cells] - m.indptr[m.n_cells - 1], from = m.indptr[m.n_cells - 1];
  memmove(m.indices, m.indices + from, last * sizeof *m.indices);
  memmove(m.data, m.data + from, last * sizeof *m.data);
  for (uint32_t i = 0; i < m.n_cells; i++) m.indptr[i] = 0;
  m.indptr[m.n_cells] = last;
  same_bytes(&m, DC_CODEC_RANS, 8);
  dct_mat_free(&m);
}

int main(void) {
  DCT_RUN(test_shapes);
  DCT_RUN(test_skewed);
  return dct_done();
}
