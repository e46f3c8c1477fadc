/*
** tile_check.c — the consistency rules of the tile index (see tile_check.h).  Pure C: no
** SQLite, no I/O.
*/
#include "tile_check.h"

int dc_meta_sizes_ok(int64_t n_cells, int64_t n_genes, int64_t n_tiles) {
  return !(n_cells < 0 || n_genes < 0 || n_genes > INT32_MAX || n_tiles < 0 || n_tiles > 100000000);
}

int dc_tilerow_ok(int64_t i, int64_t next_cell, int64_t tile, int64_t first, int64_t n_cells, int64_t nnz,
                  int64_t chunks) {
  return !(tile != i || first != next_cell || n_cells < 0 || n_cells > UINT32_MAX || nnz < 0 || chunks < 0 ||
           chunks > DC_MAX_CHUNKS);
}

int dc_tilehead_agrees(const dc_tile_hdr *h, uint32_t n_cells, uint64_t nnz, uint32_t chunks, int64_t n_genes) {
  return !(h->n_cells != n_cells || h->nnz != nnz || h->n_chunks != chunks || (int64_t)h->n_genes > n_genes ||
           (h->n_chunks == 0 && h->n_cells != 0));
}

int64_t dc_tilehead_chunks(const dc_tile_hdr *h, uint64_t len, uint64_t *prefix_out) {
  uint64_t prefix = h->n_chunks ? len : h->hdr_len;
  uint32_t next = 0;
  uint64_t nnz_next = 0;
  for (uint32_t c = 0; c < h->n_chunks; c++) {
    const dc_chunk_info *ci = &h->chunk[c];
    if (ci->first_cell != next || ci->n_cells == 0 || ci->nnz_before != nnz_next || ci->offset > len ||
        ci->length > len - ci->offset)
      return c;
    next += ci->n_cells;
    nnz_next += ci->nnz;
    if (ci->offset < prefix) prefix = ci->offset;
  }
  if (next != h->n_cells || nnz_next != h->nnz || prefix > DC_MAX_PREFIX || prefix < h->hdr_len) return -2;
  *prefix_out = prefix;
  return -1;
}

int dc_indptr_rebase(int64_t *indptr, uint32_t n_cells, uint64_t nnz) {
  int64_t base = indptr[0], prev = 0;
  int ok = 1;
  for (uint32_t c = 0; c <= n_cells; c++) {
    int64_t v = indptr[c] - base;
    if (v < prev) ok = 0;
    indptr[c] = prev = v;
  }
  return ok && (uint64_t)indptr[n_cells] == nnz;
}
