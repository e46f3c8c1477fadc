/*
** dc_reader.h — reading the count matrix of one dataset schema (ext/reader.c: the index;
** reader_chunks.c: chunks; reader_names.c: gene names).
**
** A reader belongs to one virtual table (dc_batch, expression, ...) of one
** schema of one connection.  It keeps the tile index (tiles_data without the
** blobs), the parsed header of every tile it has touched, and, on demand, the
** gene-name map.  All of it is reloaded when the schema's data version
** changes (SQLITE_FCNTL_DATA_VERSION, checked by dc_reader_begin at the
** start of every xFilter, inside the statement's read transaction).
**
** Threads: every function here runs on the thread that runs the statement;
** the blob reads (one sqlite3_blob handle moved with sqlite3_blob_reopen)
** happen here too.  Only the decoding runs on the pool (dc_pool_decode), and
** the pool threads see nothing but byte buffers and output arrays.
*/
#ifndef DC_READER_H
#define DC_READER_H
#include "dc_ext.h"
#include "dc_cache.h"

typedef struct dc_tileinfo {
  int64_t first_cell;
  uint32_t n_cells;
  uint32_t chunks;
  uint64_t nnz;
  int64_t seal;            /* tiles_data.checksum (format version 3), when seal_state is 1 */
  int seal_state;          /* 0: not loaded (read with the tile's head), 1: loaded, 2: loaded and
                              not an integer (the row lacks its checksum) */
} dc_tileinfo;

typedef struct dc_tilehead {
  uint64_t blob_len;
  uint64_t prefix_len;     /* bytes before the first chunk payload */
  uint8_t *prefix;         /* those bytes (header + shared section) */
  uint8_t *genes;          /* the tile's genes (dc_tile_gene_set), when genes_read; NULL: any */
  int genes_read;
  /* Last, and allocated only up to chunk[hdr.n_chunks] (DC_TILEHEAD_SIZE):
  ** the full array of DC_MAX_CHUNKS entries is 12 KB per tile, which an
  ** index of 10,000 tiles would hold per connection.  Never copy it whole. */
  dc_tile_hdr hdr;
} dc_tilehead;
#define DC_TILEHEAD_SIZE(n_chunks) \
  (offsetof(dc_tilehead, hdr) + offsetof(dc_tile_hdr, chunk) + (size_t)(n_chunks) * sizeof(dc_chunk_info))

typedef struct dc_reader dc_reader;
typedef struct dc_index dc_index;   /* the shared tile index (reader.c) */
/* The index fields below are the reader's view of the shared index of its schema (read
** only: reader.c owns them); they are valid between dc_reader_begin and the next begin. */
struct dc_reader {
  sqlite3 *db;
  dc_conn *conn;
  char *schema;
  char *what;              /* name used in error messages, e.g. "dc_batch" */
  int loaded;
  unsigned int data_version;
  uint64_t ns;             /* cache namespace of the current data version */
  int64_t n_cells, n_genes;
  uint32_t n_tiles;
  int sealed;              /* format version >= 3: tiles carry seals (dc_seal.h) */
  uint64_t dataset_id;     /* dc_meta.dataset_id, the seals' key */
  dc_tileinfo *tiles;
  int64_t *tile_first;     /* [n_tiles + 1]: tiles[t].first_cell, then n_cells (cells' tile
                           ** boundaries: `cells` reads them here, it loads no index of its own) */
  dc_tilehead **heads;     /* n_tiles entries, NULL until read */
  sqlite3_blob *blob;      /* open between dc_reader_begin and dc_reader_end */
  int64_t blob_row;
  /* gene-name map, loaded on first use: open addressing over gene ids */
  int gm_loaded;
  uint32_t gm_mask;
  int64_t *gm_slot;        /* gene id + 1, 0 = empty, -1 = name not unique marker */
  char **gm_name;          /* name of gene i (n_genes entries) */
  dc_index *ix;            /* the shared index this view is of (a reference) */
  struct dc_slot *slot;    /* this schema's slot in the connection (reader.c) */
};

/* dc_chunkkey (tile, chunk): in dc_cache.h */

/* A chunk decoded straight into caller memory (the no-copy path for whole
** chunks): CSR rows row0 .. row0+n_cells-1 of the output, whose nonzeros
** start at out_base.  indptr_out[row0+1 .. row0+n_cells] are written. */
typedef struct dc_direct {
  uint32_t tile, chunk;
  int64_t *indptr_out;     /* the output indptr array                 */
  uint64_t row0;
  int64_t out_base;        /* nonzero offset of the chunk's first row */
  int32_t *indices_out;    /* output arrays (whole)                   */
  int32_t *values_out;
} dc_direct;

/* The seal key of a dataset schema: *sealed = 1 and *id = dc_meta.dataset_id
** for format version >= DC_FORMAT_SEALED, *sealed = 0 for older versions.
** A version this build does not read is SQLITE_ERROR; a sealed dataset
** without a well-formed dataset_id, SQLITE_CORRUPT_VTAB.  `what` starts the
** message (e.g. "cells"). */
int dc_dataset_seal(sqlite3 *db, const char *schema, const char *what, int *sealed, uint64_t *id,
                    char **pzErr);

/* dc_meta.n_genes (n) against the genes the genes table's name column stores (format version
** >= DC_FORMAT_GENES_MIN: the end of its last row of TABLE_blocks, table being "genes"): SQLITE_OK when they agree,
** else SQLITE_CORRUPT_VTAB with a message starting with `what`.  A larger n_genes had widened
** every batch with genes that do not exist. */
int dc_genes_agree(sqlite3 *db, const char *schema, const char *table, const char *what, int64_t n, char **pzErr);

int dc_reader_open(sqlite3 *db, dc_conn *conn, const char *schema, const char *what,
                   dc_reader **out, char **pzErr);
void dc_reader_free(dc_reader *r);

/* Start of an xFilter: refresh the tile index if the data changed. */
int dc_reader_begin(dc_reader *r, char **pzErr);
/* End of the work of an xFilter/xNext: closes the blob handle. */
void dc_reader_end(dc_reader *r);

/* The tile holding a cell, or -1 when the id is out of range. */
int64_t dc_reader_tile_of(const dc_reader *r, int64_t cell);
/* The parsed header of a tile (read on first use). */
int dc_reader_head(dc_reader *r, uint32_t tile, const dc_tilehead **out, char **pzErr);
/* *may = 0 when tile `tile` surely holds none of genes[0..n) (its gene map, read from its head
** on first use and kept with it, lacks them all: dc_tile_gene_set; or they lie past its genes),
** else 1: a query for those genes skips its chunks.  A corrupt map is an error naming the tile. */
int dc_reader_tile_may_hold(dc_reader *r, uint32_t tile, const int32_t *genes, int64_t n, int *may, char **pzErr);
/* The chunk of a tile holding tile-relative cell `cell` (header required). */
uint32_t dc_reader_chunk_of(const dc_tilehead *h, uint32_t cell);

/* The cells of a chunk a caller will read (chunk-relative, any order; repeats allowed). */
typedef struct dc_want { const uint32_t *cells; uint32_t n; } dc_want;
/* Decoded chunks for keys[0..n) (distinct), from the cache (unless
** `lookup` is 0: the caller looked already) or read and decoded in parallel;
** decoded chunks go into the cache.  out[i] holds one reference each
** (dc_chunk_release).  On error every out[i] is NULL.
** want (NULL: whole chunks): the cells the caller reads of each key.  A chunk that is not
** cached and of whose cells at most a quarter are wanted is decoded in part (dc_chunk_place:
** the streams of the whole chunk, only those cells placed; the other rows are empty) and
** not cached, unless the cache recalls that it was asked for in part lately
** (dc_cache_recall): a point query then costs a third of a whole chunk's decode, and a
** second one in the same chunk makes it whole and cached. */
int dc_reader_fetch(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_chunk_data **out, int lookup,
                    const dc_want *want, char **pzErr);
/* Decodes whole chunks straight into caller arrays, in parallel. */
int dc_reader_decode_into(dc_reader *r, const dc_direct *jobs, size_t n, char **pzErr);

/* The bytes of the chunks keys[0..n) (sorted by tile then chunk, distinct),
** read on the calling thread without decoding: one buffer per tile, the size
** of the tile blob, holding its header, shared section and those chunks'
** payloads (the rest untouched), for decoders on the pool.  Free with
** dc_reader_read_free. */
typedef struct dc_tilebytes { uint32_t tile; uint8_t *buf; } dc_tilebytes;
int dc_reader_read(dc_reader *r, const dc_chunkkey *keys, size_t n, dc_tilebytes **out, size_t *n_out,
                   char **pzErr);
void dc_reader_read_free(dc_tilebytes *tb, size_t n);

/* The name of gene `id` (names loaded on first use); valid until the reader
** reloads (the next dc_reader_begin after the data changed). */
int dc_reader_gene_name(dc_reader *r, int64_t id, const char **name, char **pzErr);

/* Gene id of a gene name: SQLITE_OK and *id >= 0; SQLITE_OK and *id == -1
** when unknown; *id == -2 when the name is not unique. */
int dc_reader_gene_id(dc_reader *r, const char *name, int n, int64_t *id, char **pzErr);

/* The obs statistics of obs table `table` (e.g. "cells") of the dataset object the reader
** began with (dc_obsstats.h, reader_obs.c): loaded and validated on first use, once per
** connection, schema and data version, and checked against the tile index (the same number
** of cells); dropped with the index.  Valid until the reader's next dc_reader_begin; a new
** load has a new gen.  dc_config('obs_loads') counts the loads. */
typedef struct dc_obsstats dc_obsstats;
int dc_reader_obs(dc_reader *r, const char *table, dc_obsstats **out, char **pzErr);
/* Frees a list of obs statistics (the index's, when its last reference goes). */
void dc_obsstats_free_list(dc_obsstats *s);

#endif
