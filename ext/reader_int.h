/*
** reader_int.h — what the parts of the reader share (not a public interface; the reader's
** interface is dc_reader.h):
**   reader.c         the tile index of a schema: loaded, validated, shared by the readers of a
**                    connection, reloaded when the data version changes
**   reader_chunks.c  tile headers and chunk bytes read through the blob handle, chunks decoded
**                    on the pool, the decoded-chunk cache
**   reader_names.c   the gene-name map (loaded on first use)
**   reader_obs.c     the obs statistics (dc_obsstats.h; loaded on first use)
** The consistency rules they apply are pure logic in tile_check.c.
*/
#ifndef READER_INT_H
#define READER_INT_H
#include "dc_reader.h"

/* ------------------------------------------------------ the shared index
** One tile index per connection, schema and data version (a dc_index), shared by every
** reader of that schema (dc_batch, expression, expression_long, dc_aggregate*, tiles): the
** first reader that begins a statement after the data changed loads it, the others join it.
** A dc_slot per (schema, file) holds the current index; it lives while readers of that
** schema exist (DETACH frees the schema's tables and so its readers and its slot).  Readers
** hold a reference to the index they began with, so a reload never frees an index a reader
** still uses.  All of it runs on the querying thread, under the connection's mutex. */
struct dc_index {
  int n_ref;
  unsigned int data_version;
  uint64_t ns;
  int64_t n_cells, n_genes;
  uint32_t n_tiles;
  int sealed;
  uint64_t dataset_id;
  dc_tileinfo *tiles;
  int64_t *tile_first;     /* [n_tiles + 1]: each tile's first cell, then n_cells */
  dc_tilehead **heads;
  int gm_loaded;
  uint32_t gm_mask;
  int64_t *gm_slot;
  char **gm_name;
  struct dc_obsstats *obs; /* obs statistics, one per obs table, loaded on first use (reader_obs.c) */
};

/* the remote VFS's reason for an I/O error rc (ext/vfs_http.c), or "" */
const char *rd_io_detail(int rc);
#endif
