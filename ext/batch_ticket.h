/*
** batch_ticket.h — dc_batch's results handed over outside SQL: pending results (rows left in
** their decoded chunks, copied once at the take) and the process-wide ticket registry that
** deltacells_ticket_take (ctypes) exchanges for a result.  See ext/vtab_batch.c's header for
** how the Python loader uses them, and docs/threading.md for the locking.
*/
#ifndef BATCH_TICKET_H
#define BATCH_TICKET_H
#include <stdint.h>
#include "dc_ext.h"
#include "batch_plan.h"
#include "dc_reader.h"   /* dc_tilebytes, dc_tilehead */

/* A result whose rows are not gathered yet: each row's place in its decoded chunk and in the
** output, and references to those chunks.  Shared (counted) by the cursor and a ticket; it
** reads nothing of SQLite, and its connection only for the pool. */
typedef struct batch_pending {
  int n_ref;                        /* atomic */
  dc_conn *conn;
  int64_t n, total;
  batch_row *rows;                  /* owned (sqlite3_malloc) */
  int64_t *off;                     /* owned */
  dc_chunk_data **chunks;           /* owned, with a reference to each */
  size_t n_chunks;
} batch_pending;

void batch_pending_unref(batch_pending *p);   /* NULL: nothing */

/* A placing result (dc_batch(cells, NULL, obs, 1)): the bytes of the chunks that hold the
** requested cells, read on the querying thread, and where each requested cell is.  Its ticket
** goes to deltacells_ticket_place, which decodes each chunk once on the connection's pool,
** every requested cell straight to the caller's address for it: no decoded chunk is kept and
** no row is copied.  Shared (counted) by the cursor and a ticket. */
typedef struct batch_place {
  int n_ref;                        /* atomic */
  dc_conn *conn;
  int64_t n, total;                 /* requested cells, their nonzeros */
  dc_tilebytes *tb; size_t n_tb;    /* owned: the tiles' buffers (rcbufs), sorted by tile */
  dc_tilehead **heads;              /* owned copies of their headers, per tb entry */
  dc_chunkkey *keys; size_t n_keys; /* owned: the distinct chunks, sorted */
  uint32_t *key_tb;                 /* owned: per key, its tb entry */
  uint64_t *row0;                   /* owned: per key, its rows in rows (n_keys + 1) */
  int64_t *rows;                    /* owned: the requested rows grouped by key */
  uint32_t *row_cell;               /* owned: per requested row, its cell in its chunk */
  uint32_t *nnz;                    /* owned: per requested row, its nonzeros */
  /* a gene panel (dc_batch's genes argument), or pmap NULL: each placed row is filtered to
  ** it where it was placed (batch_panel_inplace), and its size after the panel returned */
  int32_t *pmap;                    /* owned copy: n_genes entries, panel position or -1 */
  uint8_t *pin;                     /* owned: batch_panel_member's table, */
  uint32_t pmask;                   /* and its size - 1 */
  int64_t psize, pgenes;            /* panel genes; genes of the dataset */
  int psorted;
} batch_place;

void batch_place_unref(batch_place *p);       /* NULL: nothing */

/* Glue over the reader, on the querying thread (ext/batch_place.c):
** batch_locate: ref[i] = where cell ids[i] is (tile, chunk, cell of the chunk), the tiles'
** headers read; an id without a tile is SQLITE_CORRUPT_VTAB.
** batch_place_read: a placing result for cells ids[0..n) in *out (one reference), the chunk
** bytes read and each cell's nonzeros counted on pool; *out stays NULL, and the call succeeds,
** when the cells cannot be placed (a cell asked for twice, a tile of a codec other than
** rans); over batch_mb of tile bytes held is SQLITE_TOOBIG.  genes (n_genes gene ids, or
** NULL): a gene panel; the cells of tiles whose gene maps hold none of them are empty rows
** (size 0, no chunk read). */
int batch_locate(dc_reader *r, const int64_t *ids, int64_t n, batch_cellref *ref, char **pzErr);
/* batch_mark_empty: with a gene panel (genes, n_genes gene ids), direct[i] = BATCH_ROW_EMPTY
** for the rows whose tiles' gene maps hold none of its genes (dc_reader_tile_may_hold, asked
** once per tile); other rows untouched.  dc_batch's read and its placing both use it. */
int batch_mark_empty(dc_reader *r, const batch_cellref *ref, int64_t n, const int32_t *genes, int64_t n_genes,
                     uint8_t *direct, char **pzErr);
int batch_place_read(dc_reader *r, dc_conn *conn, dc_pool *pool, const int64_t *ids, int64_t n, const int32_t *genes,
                     int64_t n_genes, batch_place **out, char **pzErr);
/* Gives a placing result the gene panel (map of n_genes entries, size, whether it keeps gene
** order), copied, with its membership table: the vtab's panel may change before the ticket is
** placed.  SQLITE_NOMEM or SQLITE_OK. */
int batch_place_panel(batch_place *p, const int32_t *map, int64_t size, int sorted, int64_t n_genes);

/* Registers a result: indptr (int64, n_cells + 1) and either indices/data (int32 blobs, nnz
** each) or pend; the buffers are rcbufs and pend is counted (references taken here).  Returns
** the ticket id, 0 when there is no result.  At most a few tickets are outstanding in the
** process; issuing more releases the oldest. */
uint64_t batch_ticket_issue(int64_t n_cells, int64_t nnz, void *indptr, void *indices, void *data,
                            batch_pending *pend);
/* The same for a placing result (a reference taken here); 0 when out of memory. */
uint64_t batch_ticket_issue_place(batch_place *place);
#endif
