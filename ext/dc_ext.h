/*
** dc_ext.h — what the files of the SQLite extension share.
**
** The extension is one file per virtual table (ext/vtab_NAME.c, each a thin
** layer defining `int dc_register_NAME(sqlite3 *db, dc_conn *conn)`) plus
** ext/deltacells.c, the entry point, which registers every ext/vtab_*.c it is
** built with (the Makefile lists them in build/gen/dc_modules.h).
**
** Every file includes sqlite3ext.h through this header; only deltacells.c
** defines the API pointer (SQLITE_EXTENSION_INIT1).  Built with -DSQLITE_CORE
** the same files link straight into the converter.
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
** connection.  Created by sqlite3_deltacells_init, freed with the connection
** (destructor of the dc_config function). */
typedef struct dc_conn dc_conn;
struct dc_conn {
  int threads;            /* decoder threads; 0 = one per online core          */
  int64_t cache_bytes;    /* budget of the decoded-chunk cache                  */
  dc_pool *pool;          /* created on first use with `threads` threads       */
  void *cache;            /* decoded-chunk cache (ext/cache.c)                  */
};

/* The pool, created on first use.  NULL on out-of-memory. */
dc_pool *dc_conn_pool(dc_conn *conn);

#endif
