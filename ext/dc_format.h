/*
** dc_format.h — the dataset file's format version and page size
** (docs/format.md section 1).  Shared by the converter, which writes them,
** and every reader in C (the extension's tables, `deltacells info/verify`);
** python/deltacells/_connect.py keeps the same numbers.
**
** Versions:
**   1  genes a plain table (+ index genes_name); tiles may span two inputs;
**      64 KiB pages.
**   2  genes a virtual table (deltacells_genes) over the compressed shadow
**      tables genes_columns / genes_blocks; tiles never span two inputs, and
**      dc_meta.sources gives each input's first_tile and n_tiles; 32 KiB pages.
**   3  seals (ext/dc_seal.h): dc_meta.dataset_id, a random id; a `checksum`
**      column in tiles_data, cells_blocks, genes_blocks and cells_columns
**      binding each row's content to its place.  A reader of a version-3
**      file checks them; it reads versions 1 and 2 without.
** A reader accepts DC_FORMAT_MIN .. DC_FORMAT_VERSION and refuses anything
** else with a message naming the file's version and the ones it reads.
*/
#ifndef DC_FORMAT_H
#define DC_FORMAT_H

#define DC_FORMAT_VERSION 3        /* what the converter writes */
#define DC_FORMAT_MIN 1            /* the oldest version the readers read */
#define DC_FORMAT_GENES_MIN 2      /* the first version with the genes virtual table */

/* The count matrix's table: the shadow table <name>_data of the dataset's `tiles` table
** (ext/vtab_tiles.c owns it: its xCreate makes it when missing, its xDestroy drops it, its
** xShadowName names it).  The extension's files name it through these (tiles, tile_rows.c
** and reader.c, reader_chunks.c, cells), and so do the converter's DDL (dataset.c) and
** verify; the converter's other statements (export, merge, append, info) still write
** "tiles_data" in their SQL text. */
#define DC_TILES_TABLE "tiles"
#define DC_TILES_DATA DC_TILES_TABLE "_data"

/* The columns of tiles_data (the shadow table <name>_data of a `tiles` table), written once:
** the converter creates it (with checksum NOT NULL: it always seals), `tiles`' xCreate when
** it does not exist yet (ext/vtab_tiles.c; rows written by SQL may lack a checksum).  The
** checksum column is last so that a constraint may follow it. */
#define DC_TILES_DATA_COLUMNS                                                                    \
  "tile INTEGER PRIMARY KEY, first_cell INTEGER NOT NULL, n_cells INTEGER NOT NULL, nnz INTEGER NOT NULL," \
  " chunks INTEGER NOT NULL, data BLOB NOT NULL, checksum INTEGER"
/* A covering index of tiles_data's small columns, <shadow>_meta: loading the tile index (tile_rows.c,
** the Python catalogue) reads its few contiguous pages instead of the table's leaf pages, which lie
** scattered between the tiles' overflow pages (over a remote store, one request each: 0.9 s of a
** 100,000-cell dataset's open at 50 ms per request), and the reader takes every tile's checksum
** from it at that load: read from the table, the checksum (after the blob) walks every page of
** its tile.  Not part of the format: a dataset without it reads the same, slower.  Made by the
** tiles table's xCreate (so by convert and merge once the tiles are in, its pages together at the
** end) and by append; printf arguments: schema, shadow, shadow. */
#define DC_TILES_INDEX_SUFFIX "_meta"
#define DC_TILES_INDEX DC_TILES_DATA DC_TILES_INDEX_SUFFIX
#define DC_TILES_INDEX_SQL                                                                         \
  "CREATE INDEX IF NOT EXISTS \"%w\".\"%w" DC_TILES_INDEX_SUFFIX "\" ON \"%w\"(tile, first_cell, n_cells, nnz, chunks, checksum)"
/* Where each tile's pages lie, <shadow>_pages: tile, the b-tree leaf page that holds its row, and
** the first and last of its overflow pages and how many there are (0 0 0: its blob is all in the
** leaf); the row of tile -1 holds, as its leaf, the PRAGMA schema_version the map was written
** under (a VACUUM, or any schema change since, retires it).  Over a remote store a tile's read
** otherwise costs two round trips one after the other (the leaf page, where SQLite learns where
** the overflow pages are, then those pages); with the map, the fetch-ahead
** (python/deltacells/_fetchahead.py) asks for both at once (dc_vfs_fetch).  A hint, not part of
** the format: a file without it, or with a stale one (tiles written by an older release), reads
** the same bytes with more requests.  Written last, by convert, merge and append, its version
** recorded again by annotate (converter/pagemap.c, from SQLite's dbstat; none where SQLite lacks
** dbstat). */
#define DC_TILES_PAGES DC_TILES_DATA "_pages"
#define DC_TILES_PAGES_COLUMNS                                                                    \
  "tile INTEGER PRIMARY KEY, leaf INTEGER NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL," \
  " pages INTEGER NOT NULL"
#define DC_FORMAT_SEALED 3         /* the first version with seals (dc_seal.h) */
/* PRAGMA page_size of a new dataset: 32 KiB, or 16 KiB for one of fewer than
** DC_PAGE_SMALL_NNZ nonzeros: there a page per table and the part-filled last page of each
** blob are a large share of the file, and larger pages save no measurable blob reading
** (docs/format.md, "Page size"). */
#define DC_PAGE_SIZE 32768
#define DC_PAGE_SIZE_SMALL 16384
#define DC_PAGE_SMALL_NNZ 4000000
static inline int dc_page_size_for(unsigned long long nnz) {
  return nnz < DC_PAGE_SMALL_NNZ ? DC_PAGE_SIZE_SMALL : DC_PAGE_SIZE;
}
#define DC_GENES_BLOCK 1048576     /* genes per genes_blocks row (default) */

#endif
