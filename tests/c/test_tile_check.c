/*
** test_tile_check.c — the consistency rules of the tile index (ext/tile_check.c, pure C:
** compiled in here directly): dc_meta's sizes, tiles_data rows, a tile header against its
** row, the chunk table, and decoded row offsets; each rule broken once.
*/
#include "dctest.h"
#include "../../ext/tile_check.c"

/* a tile of 3 chunks (4, 2, 3 cells; 10, 0, 5 nonzeros) in a blob of 1000 bytes whose header
** and shared section take 100 */
static void make_tile(dc_tile_hdr *h) {
  memset(h, 0, sizeof *h);
  h->n_cells = 9; h->nnz = 15; h->n_genes = 50; h->n_chunks = 3; h->hdr_len = 100;
  uint32_t cells[3] = {4, 2, 3};
  uint64_t nnz[3] = {10, 0, 5}, len[3] = {300, 100, 500};
  uint32_t first = 0;
  uint64_t before = 0, off = 100;
  for (int c = 0; c < 3; c++) {
    h->chunk[c].first_cell = first; h->chunk[c].n_cells = cells[c];
    h->chunk[c].nnz_before = before; h->chunk[c].nnz = nnz[c];
    h->chunk[c].offset = off; h->chunk[c].length = len[c];
    first += cells[c]; before += nnz[c]; off += len[c];
  }
}

static void test_meta_sizes(void) {
  DCT_CHECK(dc_meta_sizes_ok(0, 0, 0));
  DCT_CHECK(dc_meta_sizes_ok(1000000, 36000, 100));
  DCT_CHECK(!dc_meta_sizes_ok(-1, 10, 1));
  DCT_CHECK(!dc_meta_sizes_ok(10, -1, 1));
  DCT_CHECK(!dc_meta_sizes_ok(10, (int64_t)INT32_MAX + 1, 1));
  DCT_CHECK(!dc_meta_sizes_ok(10, 10, -1));
  DCT_CHECK(!dc_meta_sizes_ok(10, 10, 100000001));
}

static void test_tilerow(void) {
  /* row 2 after 250 cells */
  DCT_CHECK(dc_tilerow_ok(2, 250, 2, 250, 100, 4000, 4));
  DCT_CHECK(dc_tilerow_ok(0, 0, 0, 0, 0, 0, 0));                /* an empty tile */
  DCT_CHECK(!dc_tilerow_ok(2, 250, 3, 250, 100, 4000, 4));      /* a tile number skipped */
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 251, 100, 4000, 4));      /* a gap in the cells */
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 249, 100, 4000, 4));      /* an overlap */
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 250, -1, 4000, 4));
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 250, (int64_t)UINT32_MAX + 1, 4000, 4));
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 250, 100, -5, 4));
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 250, 100, 4000, -1));
  DCT_CHECK(dc_tilerow_ok(2, 250, 2, 250, 100, 4000, DC_MAX_CHUNKS));
  DCT_CHECK(!dc_tilerow_ok(2, 250, 2, 250, 100, 4000, DC_MAX_CHUNKS + 1));
}

static void test_head_agrees(void) {
  dc_tile_hdr h;
  make_tile(&h);
  DCT_CHECK(dc_tilehead_agrees(&h, 9, 15, 3, 50));
  DCT_CHECK(dc_tilehead_agrees(&h, 9, 15, 3, 60));             /* fewer genes in the tile than the dataset */
  DCT_CHECK(!dc_tilehead_agrees(&h, 9, 15, 3, 49));            /* more */
  DCT_CHECK(!dc_tilehead_agrees(&h, 8, 15, 3, 50));
  DCT_CHECK(!dc_tilehead_agrees(&h, 9, 16, 3, 50));
  DCT_CHECK(!dc_tilehead_agrees(&h, 9, 15, 2, 50));
  h.n_chunks = 0;                                              /* cells but no chunk */
  DCT_CHECK(!dc_tilehead_agrees(&h, 9, 15, 0, 50));
  memset(&h, 0, sizeof h);                                     /* an empty tile */
  DCT_CHECK(dc_tilehead_agrees(&h, 0, 0, 0, 50));
}

static void test_chunk_table(void) {
  dc_tile_hdr h;
  uint64_t prefix = 7;
  make_tile(&h);
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == -1 && prefix == 100);
  /* chunks stored out of order: the prefix is the smallest offset */
  make_tile(&h);
  h.chunk[0].offset = 600; h.chunk[0].length = 300; h.chunk[1].offset = 400; h.chunk[2].offset = 100;
  h.chunk[2].length = 300;
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == -1 && prefix == 100);
  /* each rule: the first bad chunk is named */
  make_tile(&h); h.chunk[1].first_cell = 5;                    /* a gap in the cells */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 1);
  make_tile(&h); h.chunk[2].n_cells = 0;                       /* an empty chunk */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 2);
  make_tile(&h); h.chunk[1].nnz_before = 9;                    /* nonzeros do not follow on */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 1);
  make_tile(&h); h.chunk[2].offset = 1001;                     /* past the blob */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 2);
  make_tile(&h); h.chunk[2].length = 501;                      /* runs past the blob */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 2);
  make_tile(&h); h.chunk[0].length = UINT64_MAX;               /* no overflow in offset + length */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == 0);
  /* the sums */
  make_tile(&h); h.n_cells = 10;
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == -2);
  make_tile(&h); h.nnz = 14;
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == -2);
  make_tile(&h); h.hdr_len = 101;                              /* a payload inside the header */
  DCT_CHECK(dc_tilehead_chunks(&h, 1000, &prefix) == -2);
  /* an empty tile: the prefix is the header */
  memset(&h, 0, sizeof h);
  h.hdr_len = 64;
  DCT_CHECK(dc_tilehead_chunks(&h, 64, &prefix) == -1 && prefix == 64);
  /* a prefix over DC_MAX_PREFIX */
  make_tile(&h);
  for (int c = 0; c < 3; c++) h.chunk[c].offset += DC_MAX_PREFIX;
  h.hdr_len = 100;
  DCT_CHECK(dc_tilehead_chunks(&h, DC_MAX_PREFIX + 1000, &prefix) == -2);
}

static void test_indptr_rebase(void) {
  int64_t a[5] = {100, 103, 103, 110, 112};
  DCT_CHECK(dc_indptr_rebase(a, 4, 12));
  DCT_CHECK(a[0] == 0 && a[1] == 3 && a[2] == 3 && a[3] == 10 && a[4] == 12);
  int64_t b[5] = {100, 103, 102, 110, 112};                    /* decreasing */
  DCT_CHECK(!dc_indptr_rebase(b, 4, 12));
  int64_t c[5] = {100, 103, 103, 110, 112};                    /* ends elsewhere than nnz */
  DCT_CHECK(!dc_indptr_rebase(c, 4, 13));
  int64_t d[1] = {7};                                          /* no cells */
  DCT_CHECK(dc_indptr_rebase(d, 0, 0) && d[0] == 0);
  int64_t e[3] = {5, 4, 9};                                    /* below the base */
  DCT_CHECK(!dc_indptr_rebase(e, 2, 4));
}

int main(void) {
  DCT_RUN(test_meta_sizes);
  DCT_RUN(test_tilerow);
  DCT_RUN(test_head_agrees);
  DCT_RUN(test_chunk_table);
  DCT_RUN(test_indptr_rebase);
  return dct_done();
}
