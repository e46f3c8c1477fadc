/*
** batch_ticket.c — dc_batch's pending results and tickets (see batch_ticket.h).  Pure of SQL:
** it calls no SQLite function (only sqlite3_malloc's free for the pending arrays); the copy
** itself is batch_run_take (batch_plan.c) on the result's connection's pool.
*/
#include <pthread.h>
#include <stdio.h>
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

void batch_place_unref(batch_place *p) {
  if (!p || __atomic_sub_fetch(&p->n_ref, 1, __ATOMIC_ACQ_REL) > 0) return;
  dc_reader_read_free(p->tb, p->n_tb);
  if (p->heads) for (size_t k = 0; k < p->n_tb; k++) sqlite3_free(p->heads[k]);
  sqlite3_free(p->heads);
  sqlite3_free(p->keys);
  sqlite3_free(p->key_tb);
  sqlite3_free(p->row0);
  sqlite3_free(p->rows);
  sqlite3_free(p->row_cell);
  sqlite3_free(p->nnz);
  sqlite3_free(p->pmap);
  sqlite3_free(p->pin);
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
  batch_place *place;               /* a placing result (the rest NULL) */
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
  batch_place_unref(t->place);
}

static uint64_t ticket_store(ticket t);

uint64_t batch_ticket_issue(int64_t n_cells, int64_t nnz, void *indptr, void *indices, void *data,
                            batch_pending *pend) {
  if (!indptr || (!pend && (!indices || !data))) return 0;
  ticket t = { 0, n_cells, nnz, indptr, indices, data, pend, NULL };
  if (t.pend) { t.indices = t.data = NULL; __atomic_add_fetch(&t.pend->n_ref, 1, __ATOMIC_ACQ_REL); }
  rcbuf_ref(t.indptr);
  if (t.indices) rcbuf_ref(t.indices);
  if (t.data) rcbuf_ref(t.data);
  return ticket_store(t);
}

uint64_t batch_ticket_issue_place(batch_place *place) {
  if (!place) return 0;
  ticket t = { 0, place->n, place->total, NULL, NULL, NULL, NULL, place };
  __atomic_add_fetch(&place->n_ref, 1, __ATOMIC_ACQ_REL);
  return ticket_store(t);
}

/* Stores a ticket (its references already taken) in a free slot or the oldest one's. */
static uint64_t ticket_store(ticket t) {
  ticket old = { 0, 0, 0, NULL, NULL, NULL, NULL, NULL };
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
    if (tickets[k].id && ((tickets[k].pend && tickets[k].pend->conn == conn) ||
                          (tickets[k].place && tickets[k].place->conn == conn))) {
      gone[n++] = tickets[k];
      memset(&tickets[k], 0, sizeof tickets[k]);
    }
  pthread_mutex_unlock(&ticket_mu);
  for (int k = 0; k < n; k++) ticket_release(&gone[k]);
}

void dc_batch_pool_change(dc_conn *conn, int threads) {
  pthread_mutex_lock(&ticket_mu);
  takes_wait_locked();
  /* a pool with threads enough keeps them (the rest rest, their decoders' scratch warm) */
  if (conn->pool && !dc_pool_set_threads(conn->pool, threads)) { dc_pool_free(conn->pool); conn->pool = NULL; }
  conn->threads = threads;
  pthread_mutex_unlock(&ticket_mu);
}

/* Takes ticket id out of the registry (a placing one if place, else a plain one) and counts
** it as running; t.id is 0 when there is no such ticket.  ticket_done ends it. */
static ticket ticket_claim(uint64_t id, int place) {
  ticket t = { 0, 0, 0, NULL, NULL, NULL, NULL, NULL };
  pthread_mutex_lock(&ticket_mu);
  for (int k = 0; k < TICKET_MAX; k++)
    if (tickets[k].id == id && !tickets[k].place == !place) { t = tickets[k]; memset(&tickets[k], 0, sizeof tickets[k]); break; }
  if (t.id) takes_active++;
  pthread_mutex_unlock(&ticket_mu);
  return t;
}

static void ticket_done(ticket *t) {
  if (!t->id) return;
  pthread_mutex_lock(&ticket_mu);
  if (--takes_active == 0) pthread_cond_broadcast(&takes_done);
  pthread_mutex_unlock(&ticket_mu);
  ticket_release(t);
}

/* Exchanges a ticket of dc_batch for its result, copied into the caller's
** buffers, and releases it.  indptr_out: n_cells+1 int32 (or NULL);
** indices_out: nnz int32 (or NULL); data_out: nnz values of kind data_kind
** (or NULL): 0 int32, 1 float32, 2 int16, 3 int8, 4 uint8, 5 float64,
** 6 int64, 7 uint32 (BATCH_KIND_*; the stored counts are uint32, so int32 takes counts
** below 2^31 only).  All NULL: release only.  Returns 0; -1 unknown
** ticket (taken, released, never issued, or of a closed connection); -2 a
** count does not fit data_kind (*bad = the count, *bad_at = its position);
** -3 nnz does not fit int32 indptr; -4 unknown data_kind.  The sizes are
** checked against n_cells and nnz.  Call it on the thread that runs the
** connection's statements, or at least not while that connection closes
** (the copy may use the connection's decoder threads). */
int deltacells_ticket_take(uint64_t id, int64_t n_cells, int64_t nnz, int32_t *indptr_out,
                           int32_t *indices_out, void *data_out, int data_kind, int64_t *bad,
                           int64_t *bad_at) {
  if (!id) return -1;
  ticket t = ticket_claim(id, 0);
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
  ticket_done(&t);
  return rc;
}


/* A placing result with a gene panel: each placed cell filtered to it where it lies, by the
** decoder's per-cell hook (dc_place.filter) on the thread that placed it, while the cell is in
** that core's cache.  One per job: the scratch of a panel not in gene order is its own. */
typedef struct place_filter {
  const batch_kernel *k;            /* the panel (map, member table, panel_size, sorted) */
  batch_scratch sc;
  int bad;                          /* out of memory (the scratch) */
} place_filter;

static uint32_t filter_cell(void *arg, int32_t *ix, void *val, uint32_t n) {
  place_filter *f = arg;
  if (f->bad) return 0;
  int64_t m = batch_panel_inplace(f->k, ix, val, n, &f->sc);
  if (m < 0) {
    f->bad = 1;
    return 0;
  }
  return (uint32_t)m;
}

/* Packing the caller's runs of rows after a panel (deltacells_ticket_place's seg): run s's rows
** at offsets rel[] from its first row's address, each moved to follow the one before it. */
typedef struct pack_ctx {
  const int64_t *seg, *rel, *cnt;
  const uint64_t *ix_addr, *val_addr;
  int bad;                          /* atomic */
} pack_ctx;

static void pack_run(void *arg, size_t s) {
  pack_ctx *c = arg;
  int64_t a = c->seg[s], e = c->seg[s + 1];
  if (e > a && batch_compact(e - a, c->rel + a, c->cnt + a, (int32_t *)(uintptr_t)c->ix_addr[a],
                             (void *)(uintptr_t)c->val_addr[a], 4, 0) < 0)
    __atomic_store_n(&c->bad, 1, __ATOMIC_RELAXED);
}

static int pack_runs(const batch_place *p, const uint64_t *ix_addr, const uint64_t *val_addr, const int64_t *row_nnz,
                     int64_t n_seg, const int64_t *seg) {
  if (seg[0] != 0 || seg[n_seg] != p->n) return -3;
  for (int64_t s = 0; s < n_seg; s++) if (seg[s + 1] < seg[s]) return -3;
  int64_t *rel = sqlite3_malloc64((uint64_t)(p->n ? p->n : 1) * sizeof *rel);
  if (!rel) return -6;
  int rc = 0;
  for (int64_t s = 0; s < n_seg && !rc; s++)
    for (int64_t r = seg[s]; r < seg[s + 1]; r++) {
      /* values are 4 bytes (int32 or float32): a row lies as far from its run's first row in
      ** both arrays, a whole number of entries */
      uint64_t d = ix_addr[r] - ix_addr[seg[s]], dv = val_addr[r] - val_addr[seg[s]];
      if (d != dv || d % 4 || d / 4 > (uint64_t)p->total) { rc = -3; break; }
      rel[r] = (int64_t)(d / 4);
    }
  if (!rc) {
    pack_ctx c = {seg, rel, row_nnz, ix_addr, val_addr, 0};
    dc_pool_for(p->conn->pool, (size_t)n_seg, pack_run, &c);
    if (c.bad) rc = -3;
  }
  sqlite3_free(rel);
  return rc;
}

/* Exchanges a placing ticket of dc_batch for its cells, each decoded straight to the caller's
** address for it, and releases it.  Row i (the i-th requested cell) goes to ix_addr[i]
** (int32 gene indices) and val_addr[i] (counts: kind 0 the stored uint32 bits as int32,
** unchecked, so the caller makes sure that no count reaches 2^31, as the Python loader does
** from the genes' totals; kind 1 float32); each must have room for that row's nonzeros as dc_batch's cell_nnz gave them.
** row_nnz (n_cells int64, or NULL): each row's size as written; with a gene panel (required
** then) the row holds its panel genes only, as (position, value) in order of position, and
** row_nnz says how many.  seg (n_seg + 1 row numbers, 0 = seg[0] <= ... <= seg[n_seg] =
** n_cells; with a panel only, else ignored): the caller's buffers, rows seg[s] .. seg[s+1]-1
** laid out one after the other from row seg[s]'s address (a batch); each such run is packed
** after the panel (row i then follows row i-1 of its run, from the run's first address), the
** runs in parallel on the pool.  Without seg the rows stay at the front of their places.
** Both addresses NULL: release only.  Returns 0; -1 unknown ticket (taken, released, never
** issued, of a closed connection, or not a placing one); -3 n_cells or nnz differ from the
** result's, a panel without row_nnz, or seg not as described (a row not where its run's
** layout puts it: nothing of that run packed); -4 a kind
** other than int32 or float32; -5 a chunk could not be decoded (msg, msg_len bytes: which and
** why), the places then hold arbitrary values; -6 out of memory.  Thread rules as for
** deltacells_ticket_take. */
int deltacells_ticket_place(uint64_t id, int64_t n_cells, int64_t nnz, const uint64_t *ix_addr,
                            const uint64_t *val_addr, int kind, int64_t *row_nnz, int64_t n_seg, const int64_t *seg,
                            char *msg, int msg_len) {
  if (msg && msg_len > 0) msg[0] = 0;
  if (!id) return -1;
  ticket t = ticket_claim(id, 1);
  int rc = 0;
  dc_job *jobs = NULL;
  dc_place *pl = NULL;
  void **ptrs = NULL;
  place_filter *filt = NULL;
  uint32_t *n_out = NULL;
  if (!t.id) { rc = -1; goto out; }
  if (!ix_addr && !val_addr) goto out;
  batch_place *p = t.place;
  if (n_cells != p->n || nnz != p->total || !ix_addr || !val_addr || (p->pmap && !row_nnz)) { rc = -3; goto out; }
  if (kind != BATCH_KIND_I32 && kind != BATCH_KIND_F32) { rc = -4; goto out; }
  batch_kernel panel = {.map = p->pmap, .member = p->pin, .member_mask = p->pmask,
                       .panel_size = p->psize, .n_genes = p->pgenes, .sorted = p->psorted};
  /* per key, one pointer per cell of its chunk (NULL: decoded into the sink) */
  uint64_t n_ptr = 0;
  for (size_t q = 0; q < p->n_keys; q++) n_ptr += p->heads[p->key_tb[q]]->hdr.chunk[p->keys[q].chunk].n_cells;
  jobs = sqlite3_malloc64((p->n_keys ? p->n_keys : 1) * sizeof *jobs);
  pl = sqlite3_malloc64((p->n_keys ? p->n_keys : 1) * sizeof *pl);
  ptrs = sqlite3_malloc64((n_ptr ? 2 * n_ptr : 1) * sizeof *ptrs);
  if (!jobs || !pl || !ptrs) { rc = -6; goto out; }
  if (p->pmap) {
    filt = sqlite3_malloc64((p->n_keys ? p->n_keys : 1) * sizeof *filt);
    n_out = sqlite3_malloc64((n_ptr ? n_ptr : 1) * sizeof *n_out);
    if (!filt || !n_out) { rc = -6; goto out; }
    memset(filt, 0, p->n_keys * sizeof *filt);
  }
  memset(ptrs, 0, 2 * n_ptr * sizeof *ptrs);
  memset(jobs, 0, p->n_keys * sizeof *jobs);
  uint64_t o = 0;
  for (size_t q = 0; q < p->n_keys; q++) {
    const dc_tilehead *h = p->heads[p->key_tb[q]];
    uint32_t nc = h->hdr.chunk[p->keys[q].chunk].n_cells;
    void **ix = ptrs + o, **val = ptrs + n_ptr + o;
    o += nc;
    for (uint64_t k = p->row0[q]; k < p->row0[q + 1]; k++) {
      int64_t row = p->rows[k];
      ix[p->row_cell[row]] = (void *)(uintptr_t)ix_addr[row];
      val[p->row_cell[row]] = (void *)(uintptr_t)val_addr[row];
    }
    pl[q] = (dc_place){ (int32_t *const *)ix, val, kind == BATCH_KIND_F32, NULL, NULL, NULL };
    if (filt) {
      filt[q].k = &panel;
      pl[q].filter = filter_cell;
      pl[q].filter_arg = &filt[q];
      pl[q].n_out = n_out + (o - nc);
    }
    jobs[q].buf = p->tb[p->key_tb[q]].buf;
    jobs[q].len = (size_t)h->blob_len;
    jobs[q].hdr = &h->hdr;
    jobs[q].chunk = p->keys[q].chunk;
    jobs[q].rc = -1;
    jobs[q].place = &pl[q];
  }
  if (dc_pool_decode(p->conn->pool, jobs, p->n_keys) != DC_OK) {
    rc = -5;
    for (size_t q = 0; q < p->n_keys; q++)
      if (jobs[q].rc != DC_OK) {
        if (jobs[q].rc == DC_ENOMEM) rc = -6;
        if (msg && msg_len > 0)
          snprintf(msg, (size_t)msg_len, "tile %u chunk %u: %s", p->keys[q].tile, p->keys[q].chunk,
                   jobs[q].err.msg[0] ? jobs[q].err.msg : dc_strerror(jobs[q].rc));
        break;
      }
  } else if (filt) {
    memset(row_nnz, 0, (size_t)p->n * sizeof *row_nnz);   /* empty rows (no chunk) stay 0 */
    o = 0;
    for (size_t q = 0; q < p->n_keys && !rc; q++) {
      if (filt[q].bad) rc = -6;
      for (uint64_t k = p->row0[q]; k < p->row0[q + 1]; k++) row_nnz[p->rows[k]] = n_out[o + p->row_cell[p->rows[k]]];
      o += p->heads[p->key_tb[q]]->hdr.chunk[p->keys[q].chunk].n_cells;
    }
    if (!rc && seg && n_seg > 0) rc = pack_runs(p, ix_addr, val_addr, row_nnz, n_seg, seg);
  } else if (row_nnz) {
    for (int64_t i = 0; i < p->n; i++) row_nnz[i] = p->nnz[i];
  }
out:
  if (filt && t.place)
    for (size_t q = 0; q < t.place->n_keys; q++) batch_scratch_free(&filt[q].sc);
  sqlite3_free(filt);
  sqlite3_free(n_out);
  sqlite3_free(jobs);
  sqlite3_free(pl);
  sqlite3_free(ptrs);
  ticket_done(&t);
  return rc;
}
