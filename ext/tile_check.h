/*
** tile_check.h — the consistency rules of the tile index (ext/tile_check.c), pure C (no
** SQLite): dc_meta's sizes, a tiles_data row against the rows before it, a parsed tile
** header against its row, its chunk table, and decoded row offsets.  reader.c applies them
** and words the errors; unit-tested in tests/c/test_tile_check.c.
*/
#ifndef TILE_CHECK_H
#define TILE_CHECK_H
#include <stdint.h>
#include "dc_codec.h"

/* the most bytes before a tile's first chunk payload (header + shared section) */
#define DC_MAX_PREFIX ((uint64_t)1 << 30)

/* dc_meta's n_cells, n_genes, n_tiles are possible: 1, else 0 */
int dc_meta_sizes_ok(int64_t n_cells, int64_t n_genes, int64_t n_tiles);

/* Row i of tiles_data (ORDER BY tile) is (tile, first, n_cells, nnz, chunks), the rows
** before it holding cells 0..next_cell-1: 1 when it continues them, else 0. */
int dc_tilerow_ok(int64_t i, int64_t next_cell, int64_t tile, int64_t first, int64_t n_cells, int64_t nnz,
                  int64_t chunks);

/* A tile's parsed header agrees with its tiles_data row (cells, nonzeros, chunks) and the
** dataset's gene count: 1, else 0. */
int dc_tilehead_agrees(const dc_tile_hdr *h, uint32_t n_cells, uint64_t nnz, uint32_t chunks, int64_t n_genes);

/* The chunk table of a blob of blob_len bytes: the chunks tile the cells in order (the
** gather relies on it), their nonzeros add up, each payload lies in the blob, and the bytes
** before the first payload (*prefix) are at least the header and at most DC_MAX_PREFIX.
** Returns -1 when sound; the first bad chunk (>= 0); or -2 when the chunks are each sound
** but the cells, nonzeros or prefix do not add up. */
int64_t dc_tilehead_chunks(const dc_tile_hdr *h, uint64_t blob_len, uint64_t *prefix);

/* A decoded chunk's row offsets indptr[0..n_cells], relative to the tile, made relative to
** the chunk (indptr[0] = 0) in place: 1 when they never decrease and end at nnz, else 0. */
int dc_indptr_rebase(int64_t *indptr, uint32_t n_cells, uint64_t nnz);
#endif
