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

/* Registers a result: indptr (int64, n_cells + 1) and either indices/data (int32 blobs, nnz
** each) or pend; the buffers are rcbufs and pend is counted (references taken here).  Returns
** the ticket id, 0 when there is no result.  At most a few tickets are outstanding in the
** process; issuing more releases the oldest. */
uint64_t batch_ticket_issue(int64_t n_cells, int64_t nnz, void *indptr, void *indices, void *data,
                            batch_pending *pend);
#endif
