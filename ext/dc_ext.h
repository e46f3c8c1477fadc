/*
** dc_ext.h — what the files of the SQLite extension share.
**
** The extension is one file per virtual table (ext/vtab_NAME.c, each a thin
** layer defining `int dc_register_NAME(sqlite3 *db, dc_conn *conn)`) plus
** ext/deltacells.c, the entry point, which registers every ext/vtab_*.c it is
** built with (the Makefile lists them in build/gen/dc_modules.h), and the
** shared helpers ext/cache.c (decoded-chunk cache) and ext/reader.c (reading
** tile blobs on the calling thread and decoding chunks on the pool).
**
** Every file includes sqlite3ext.h through this header; only deltacells.c
** defines the API pointer (SQLITE_EXTENSION_INIT1).  Built with -DSQLITE_CORE
** the same files link straight into the converter.
**
** Threading (docs/threading.md): only the thread running the SQL statement
** calls SQLite.  Pool threads get plain bytes and write plain memory.
*/
#ifndef DC_EXT_H
#define DC_EXT_H
#include <sqlite3ext.h>
#ifndef DC_EXT_MAIN
SQLITE_EXTENSION_INIT3
#endif
#include <stdint.h>
#include "dc_codec.h"

/* Per-connection state, shared by all modules and functions of one
** connection.  Created by sqlite3_deltacells_init.  Reference counted: every
** function and module registered with it as user data holds one reference
** and drops it in its destructor, so it lives exactly as long as the
** connection (SQLite destroys functions and modules in either order).
**
** Settings are changed with SELECT dc_config(name, value); see deltacells.c. */
typedef struct dc_conn dc_conn;
struct dc_conn {
  int threads;            /* decoder threads; 0 = one per online core          */
  int64_t cache_bytes;    /* budget of the decoded-chunk cache                  */
  int64_t work_bytes;     /* decoded chunks one batch holds at once (groups)    */
  int64_t batch_bytes;    /* the most output (and staging) one dc_batch call may make */
  dc_pool *pool;          /* created on first use with `threads` threads       */
  void *cache;            /* decoded-chunk cache (ext/cache.c), a dc_cache*     */
  struct dc_bufpool *bufpool; /* recycled result/tile buffers (ext/cache.c)     */
  int n_ref;              /* references held by registered functions/modules   */
  uint64_t next_ns;       /* next cache namespace id (see dc_conn_namespace)    */
  void *index_slots;      /* the shared tile indexes, one per schema (reader.c) */
  int64_t index_loads;    /* tile indexes loaded (dc_config('index_loads'))      */
  int64_t obs_loads;      /* obs statistics loaded (dc_config('obs_loads'), reader_obs.c) */
  /* where the last dc_batch call of this connection spent its time (ns), for
  ** dc_config('last_batch'): plan (parse, map cells to chunks), fetch (blob
  ** reads + decoding of chunks not decoded straight into the output, cache
  ** lookups), direct (chunks decoded straight into the output), copy (rows
  ** gathered into the output) */
  int64_t last_ns[4];
  int64_t last_cells, last_nnz, last_direct_chunks, last_fetched_chunks;
  int allow_drop;         /* dc_config('allow_drop'): DROP TABLE of a dataset's tables */
  char last_refusal[512]; /* dc_config('last_refusal'): why the last DROP TABLE failed */
  void *cells_tabs;       /* the connected `cells` tables (ext/vtab_cells.c), for dc_batch's obs */
};

/* Obs values of cells ids[0..n) from the `cells` table of schema zDb (connected
** on demand), for dc_batch: cols[0..m) are cells_columns.col ids of stored
** columns that are not text.  out: m*n 8-byte values, column after column:
** int64 category codes (-1: NULL), int64 bools (0/1, -1: NULL), float64 reals
** (NaN: NULL), int64 ints, or float64 ints (NaN: NULL) when the batch holds a
** NULL of that column: fmt[j] = 1 then (float64), else 0.  Blocks are read,
** checked against their seals and cached by the cells table itself. */
int dc_cells_values(dc_conn *conn, sqlite3 *db, const char *zDb, const int64_t *cols, int m,
                    const int64_t *ids, int64_t n, void *out, int64_t *fmt, char **pzErr);

/* xDestroy of every module starts with this: SQLITE_OK when
** dc_config('allow_drop', 1) was set on the connection, else SQLITE_PERM
** (DROP TABLE fails, the table and its data stay).  SQLite does not pass a
** virtual table's message on from xDestroy (the user sees "access permission
** denied"), so the full reason goes to sqlite3_log and to
** dc_config('last_refusal'). */
int dc_drop_check(dc_conn *conn, const char *schema, const char *table);

/* The extension's one error helper: *pzErr (freed first; nothing when pzErr is NULL) becomes
** "WHAT: message" (just the message when what is NULL), the message printf-style; returns rc,
** or SQLITE_NOMEM when rc is not SQLITE_OK and the message cannot be made.  A table passes
** &tab->base.zErrMsg; a helper passes the pzErr it was given.  (The dchttp VFS keeps its
** per-thread reason apart: dc_vfs_last_error.) */
int dc_err(char **pzErr, int rc, const char *what, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Registers, once per process, the pthread_atfork handler that keeps SQLite's global mutexes
** free in a forked child (ext/sqlite_fork.c); sqlite3_deltacells_init calls it first
** (docs/threading.md, "Fork"). */
void dc_sqlite_fork_guard(void);

/* The pool, created on first use.  NULL on out-of-memory. */
dc_pool *dc_conn_pool(dc_conn *conn);

/* The decoded-chunk cache of the connection (created on first use; NULL on
** out-of-memory or when the budget is 0). */
struct dc_cache *dc_conn_cache(dc_conn *conn);

/* A fresh cache namespace id: readers key their cached chunks by it, and take
** a new one whenever the database file they read may have changed. */
uint64_t dc_conn_namespace(dc_conn *conn);

/* dc_batch's tickets (vtab_batch.c): the connection's outstanding tickets are dropped
** (called as it ends), and its pool set to run `threads` threads (kept where it has that
** many, else replaced by one created on next use), neither while a ticket of it is being
** taken on another thread. */
void dc_batch_forget_conn(dc_conn *conn);
void dc_batch_pool_change(dc_conn *conn, int threads);

/* Reference counting; dc_conn_unref frees the state at zero.  dc_conn_unref
** has the signature of an SQLite destructor (void*). */
void dc_conn_ref(dc_conn *conn);
void dc_conn_unref(void *conn);

/* The plan items[0..n) of table t (the shared plan codec, dc_plan.h) as info->idxStr, and
** idxNum = nargs (the number of xFilter arguments).  SQLITE_NOMEM when out of memory. */
struct dc_plan_table;
struct dc_plan_item;
int dc_plan_set(sqlite3_index_info *info, const struct dc_plan_table *t, const struct dc_plan_item *items, int n,
                int nargs);

/* The remote-file VFS "dchttp" (ext/vfs_http.c): registered once per process
** by the entry point, with dc_vfs_stats() and dc_vfs_error() on db.
** dc_vfs_last_error: this thread's last reason for a failed remote read ("" if none). */
int dc_register_vfs(sqlite3 *db);
const char *dc_vfs_last_error(void);
/* Announces a read of nbytes to the dchttp file of db's schema: its next miss starts a stream
** with every request to the read's end queued at once (max_inflight at a time) and none past it
** (without prefetch: one request for it).  The end is counted from where the read began: the
** first page of the run of pages read in order that leads to the miss (or to a block of it that
** a stream before it fetched: that sets the end too, without using the announcement).  For one
** miss: withdraw an unused one with nbytes 0.
** Returns the blocks announced, -1 when that schema's file is no dchttp file (nothing done).
** Call on the thread that runs the connection's queries.  SQL: dc_vfs_expect(schema, nbytes). */
int64_t dc_vfs_expect(sqlite3 *db, const char *schema, int64_t nbytes);

#endif
