/*
** batch_ticket.c — dc_batch's pending results and tickets (see batch_ticket.h).  Pure of SQL:
** it calls no SQLite function (only sqlite3_malloc's free for the pending arrays); the copy
** itself is batch_run_take (batch_plan.c) on the result's connection's pool.
*/
#include <pthread.h>
#include <string.h>
#include "batch_ticket.h"

void batch_pending_unref(batch_pending *p) {
  if (!p || __atomic_sub_fetch(&p->n_ref, 1, __ATOMIC_ACQ_REL) > 0) return;
  for (size_t q = 0; q < p->n_chunks; q++) dc_chunk_release(p->chunks[q]);
  sqlite3_free(p->chunks);
  sqlite3_free(p->rows);
  sqlite3_free(p->off);
  sqlite3_free(p);
}


/* The registry is process-wide (the ctypes caller names a ticket by number only).  A ticket
** with a pending result uses its connection's pool: takes_active counts the takes copying now
** (under ticket_mu), and a connection's tickets are dropped (dc_batch_forget_conn, at its end)
** or its pool replaced (dc_batch_pool_change) only once it is 0, so neither happens under a
** take; a fork waits for it too.  (Not a rwlock: glibc's cannot be unlocked in a fork child by
** the thread that locked it in the parent, whose thread id changed.) */
#define TICKET_MAX 4
typedef struct ticket {
  uint64_t id;              /* 0: free slot */
  int64_t n_cells, nnz;
  void *indptr, *indices, *data;   /* references held (indices, data NULL with pend) */
  batch_pending *pend;
} ticket;
static pthread_mutex_t ticket_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t takes_done = PTHREAD_COND_INITIALIZER;
static int takes_active;
static ticket tickets[TICKET_MAX];
static uint64_t ticket_next = 1;

/* a fork while another thread holds ticket_mu or takes must not leave them locked in the child */
static pthread_once_t ticket_once = PTHREAD_ONCE_INIT;
/* with ticket_mu held, until no take is copying */
static void takes_wait_locked(void) { while (takes_active > 0) pthread_cond_wait(&takes_done, &ticket_mu); }
static void ticket_lock(void) { pthread_mutex_lock(&ticket_mu); takes_wait_locked(); }
static void ticket_unlock(void) { pthread_mutex_unlock(&ticket_mu); }
static void ticket_atfork(void) { pthread_atfork(ticket_lock, ticket_unlock, ticket_unlock); }

static void ticket_release(ticket *t) {
  rcbuf_unref(t->indptr); rcbuf_unref(t->indices); rcbuf_unref(t->data);
  batch_pending_unref(t->pend);
}

uint64_t batch_ticket_issue(int64_t n_cells, int64_t nnz, void *indptr, void *indices, void *data,
                            batch_pending *pend) {
  if (!indptr || (!pend && (!indices || !data))) return 0;
  ticket t = { 0, n_cells, nnz, indptr, indices, data, pend };
  if (t.pend) { t.indices = t.data = NULL; __atomic_add_fetch(&t.pend->n_ref, 1, __ATOMIC_ACQ_REL); }
  rcbuf_ref(t.indptr);
  if (t.indices) rcbuf_ref(t.indices);
  if (t.data) rcbuf_ref(t.data);
  ticket old = { 0, 0, 0, NULL, NULL, NULL, NULL };
  pthread_once(&ticket_once, ticket_atfork);
  pthread_mutex_lock(&ticket_mu);
  t.id = ticket_next++;
  int slot = 0;
  for (int k = 0; k < TICKET_MAX; k++) {
    if (!tickets[k].id) { slot = k; break; }
    if (tickets[k].id < tickets[slot].id) slot = k;     /* the oldest goes */
  }
  old = tickets[slot];
  tickets[slot] = t;
  pthread_mutex_unlock(&ticket_mu);
  if (old.id) ticket_release(&old);
  return t.id;
}

void dc_batch_forget_conn(dc_conn *conn) {
  ticket gone[TICKET_MAX];
  int n = 0;
  pthread_mutex_lock(&ticket_mu);
  takes_wait_locked();
  for (int k = 0; k < TICKET_MAX; k++)
    if (tickets[k].id && tickets[k].pend && tickets[k].pend->conn == conn) {
      gone[n++] = tickets[k];
      memset(&tickets[k], 0, sizeof tickets[k]);
    }
  pthread_mutex_unlock(&ticket_mu);
  for (int k = 0; k < n; k++) ticket_release(&gone[k]);
}

void dc_batch_pool_change(dc_conn *conn, int threads) {
  pthread_mutex_lock(&ticket_mu);
  takes_wait_locked();
  if (conn->pool) { dc_pool_free(conn->pool); conn->pool = NULL; }
  conn->threads = threads;
  pthread_mutex_unlock(&ticket_mu);
}

/* Exchanges a ticket of dc_batch for its result, copied into the caller's
** buffers, and releases it.  indptr_out: n_cells+1 int32 (or NULL);
** indices_out: nnz int32 (or NULL); data_out: nnz values of kind data_kind
** (or NULL): 0 int32, 1 float32, 2 int16, 3 int8, 4 uint8, 5 float64,
** 6 int64 (BATCH_KIND_*).  All NULL: release only.  Returns 0; -1 unknown
** ticket (taken, released, never issued, or of a closed connection); -2 a
** count does not fit data_kind (*bad = the count, *bad_at = its position);
** -3 nnz does not fit int32 indptr; -4 unknown data_kind.  The sizes are
** checked against n_cells and nnz.  Call it on the thread that runs the
** connection's statements, or at least not while that connection closes
** (the copy may use the connection's decoder threads). */
int deltacells_ticket_take(uint64_t id, int64_t n_cells, int64_t nnz, int32_t *indptr_out,
                           int32_t *indices_out, void *data_out, int data_kind, int64_t *bad,
                           int64_t *bad_at) {
  ticket t = { 0, 0, 0, NULL, NULL, NULL, NULL };
  if (!id) return -1;
  pthread_mutex_lock(&ticket_mu);
  for (int k = 0; k < TICKET_MAX; k++)
    if (tickets[k].id == id) { t = tickets[k]; memset(&tickets[k], 0, sizeof tickets[k]); break; }
  if (t.id) takes_active++;
  pthread_mutex_unlock(&ticket_mu);
  int rc = 0;
  if (!t.id) { rc = -1; goto out; }
  if (!indptr_out && !indices_out && !data_out) goto out;
  if (n_cells != t.n_cells || nnz != t.nnz) { rc = -1; goto out; }
  if (data_kind < 0 || data_kind >= BATCH_KIND_N) { rc = -4; goto out; }
  const int64_t *ip = t.indptr;
  if (indptr_out) {
    if (t.nnz > INT32_MAX) { rc = -3; goto out; }
    for (int64_t i = 0; i <= t.n_cells; i++) indptr_out[i] = (int32_t)ip[i];
  }
  /* a pending result: its rows, from the decoded chunks, on its connection's pool; an eagerly
  ** gathered one: the blobs as one row, on this thread */
  batch_row whole = { t.indices, t.data, (uint32_t)t.nnz, t.nnz };
  int64_t zero = 0;
  batch_take tk = { &whole, 1, &zero, indices_out, data_out, data_kind, 0, 0 };
  if (t.pend) {
    tk.rows = t.pend->rows;
    tk.n = t.pend->n;
    tk.off = t.pend->off;
  } else if (t.nnz > UINT32_MAX) {
    rc = -3;
    goto out;
  }
  if (batch_run_take(t.pend ? t.pend->conn->pool : NULL, &tk)) {
    if (bad) *bad = tk.bad_val;
    if (bad_at) *bad_at = tk.bad_pos;
    rc = -2;
  }
out:
  if (t.id) {
    pthread_mutex_lock(&ticket_mu);
    if (--takes_active == 0) pthread_cond_broadcast(&takes_done);
    pthread_mutex_unlock(&ticket_mu);
    ticket_release(&t);
  }
  return rc;
}

