/*
** deltacells.c — entry point of the deltacells SQLite extension.
**
**   .load build/deltacells            (sqlite3 shell)
**   SELECT load_extension('build/deltacells', 'sqlite3_deltacells_init');
**
** sqlite3_deltacells_init creates the per-connection state (dc_conn, see
** dc_ext.h), registers every virtual-table module the build lists in
** build/gen/dc_modules.h (one ext/vtab_NAME.c each, through
** dc_register_NAME), and the settings function:
**
**   dc_config(name)          -> the current value of a setting
**   dc_config(name, value)   -> sets it, returns the new value
**
** Settings (per connection):
**   threads    decoder threads including the querying thread, 1..256;
**              0 means one per online core (the default).  Reading it
**              returns the number in effect.
**   cache_mb   budget of the decoded-chunk cache in MiB, 0..1048576; 0 turns
**              the cache off.  Default: 512, at most 1/8 of physical memory.
**   decode_mb  decoded chunks one dc_batch call holds at once, in MiB,
**              1..1048576 (default 256): a batch needing more is decoded in
**              groups (its rows staged between groups).
**   batch_mb   the most one dc_batch call may return, in MiB, 1..1048576
**              (default 1024): cell_ids + indptr + indices + data (and rows
**              staged between decode groups).  A request over it is refused
**              before anything is decoded, from the tile index (each cell
**              counted at its chunk's mean nonzeros), and again exactly
**              before the output is allocated.
**   allow_drop 0 (default) or 1: DROP TABLE of a dataset's virtual tables
**              (cells, genes, tiles, expression, expression_long, dc_batch,
**              which drop their shadow tables with them) is refused with
**              SQLITE_PERM unless 1 (dc_drop_check).
**   defensive  0 or 1: SQLITE_DBCONFIG_DEFENSIVE of the connection (shadow
**              tables read-only to SQL and not droppable); never changed
**              unless asked.  Reading it returns the connection's state.
** Read-only statistics: cache_used_mb (REAL), cache_entries, cache_hits,
** cache_misses; index_loads (tile indexes this connection loaded: one per schema and data
** version, shared by every table); obs_loads (obs statistics loaded: one per schema, obs table
** and data version, shared by cells and dc_batch's obs values); last_refusal (the reason of the last refused DROP TABLE);
** simd (the decoder path decodes take now: avx512, avx2 or scalar; DC_SIMD forces one, and a
** value that names none makes loading the extension fail).
** Unknown names and bad values are SQL errors naming the setting.
**
** dc_config changes connection state, so it is SQLITE_DIRECTONLY: a view or
** trigger in an untrusted database cannot call it.
**
** Built with -DSQLITE_CORE (the converter), the same entry point is called
** directly to declare the virtual tables in new datasets.
*/
#define DC_EXT_MAIN
#include "dc_plan.h"
#include "dc_ext.h"
#include "dc_value.h"
SQLITE_EXTENSION_INIT1
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "dc_cache.h"

#define DC_DEFAULT_CACHE_MB 512
#define DC_MAX_THREADS 256
#define DC_MAX_CACHE_MB (1 << 20)

/* every module file defines dc_register_NAME */
#define DC_MODULE(n) int dc_register_##n(sqlite3 *, dc_conn *);
#include "dc_modules.h"
#undef DC_MODULE

static int online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > DC_MAX_THREADS) n = DC_MAX_THREADS;
  return (int)n;
}

static int64_t default_cache_bytes(void) {
  int64_t b = (int64_t)DC_DEFAULT_CACHE_MB << 20;
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  if (pages > 0 && psz > 0) {
    int64_t eighth = (int64_t)pages * psz / 8;
    if (eighth < b) b = eighth;
  }
  return b;
}

int dc_err(char **pzErr, int rc, const char *what, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = sqlite3_vmprintf(fmt, ap);
  va_end(ap);
  if (m && what) {
    char *w = sqlite3_mprintf("%s: %s", what, m);
    sqlite3_free(m);
    m = w;
  }
  if (pzErr) { sqlite3_free(*pzErr); *pzErr = m; } else sqlite3_free(m);
  return m || rc == SQLITE_OK ? rc : SQLITE_NOMEM;
}

int dc_drop_check(dc_conn *conn, const char *schema, const char *table) {
  if (conn && conn->allow_drop) return SQLITE_OK;
  char *m = sqlite3_mprintf("deltacells: DROP TABLE %s.%s refused: it would delete part of a deltacells dataset "
                            "(SELECT dc_config('allow_drop', 1) first to drop it on purpose)", schema, table);
  if (m) {
    sqlite3_log(SQLITE_PERM, "%s", m);
    if (conn) snprintf(conn->last_refusal, sizeof conn->last_refusal, "%s", m);
    sqlite3_free(m);
  }
  return SQLITE_PERM;
}

dc_pool *dc_conn_pool(dc_conn *conn) {
  if (!conn->pool) conn->pool = dc_pool_new(conn->threads);
  return conn->pool;
}

struct dc_cache *dc_conn_cache(dc_conn *conn) {
  if (conn->cache_bytes <= 0) return NULL;
  if (!conn->cache) conn->cache = dc_cache_new(conn->cache_bytes);
  return conn->cache;
}

uint64_t dc_conn_namespace(dc_conn *conn) { return ++conn->next_ns; }

void dc_conn_ref(dc_conn *conn) { conn->n_ref++; }

void dc_conn_unref(void *p) {
  dc_conn *conn = p;
  if (!conn || --conn->n_ref > 0) return;
  dc_batch_forget_conn(conn);
  if (conn->pool) dc_pool_free(conn->pool);
  if (conn->cache) dc_cache_free(conn->cache);
  dc_bufpool_release(conn->bufpool);
  sqlite3_free(conn);
}

static void dc_config_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  dc_conn *conn = sqlite3_user_data(ctx);
  const char *name = (const char *)sqlite3_value_text(argv[0]);
  if (sqlite3_value_type(argv[0]) != SQLITE_TEXT || !name) {
    sqlite3_result_error(ctx, "dc_config: the first argument must be a setting name (threads, cache_mb)", -1);
    return;
  }
  int64_t v = 0;
  int set = argc > 1;
  /* a value that is not an integer: said of the settings that take one; the others (read-only,
  ** unknown) say what they are below, before any use of v */
  static const char *const takes_int[] = {"threads", "cache_mb", "decode_mb", "batch_mb", "allow_drop", "defensive", NULL};
  int int_setting = 0;
  for (int i = 0; takes_int[i]; i++) int_setting |= strcmp(name, takes_int[i]) == 0;
  if (set && !dc_value_int_arg(argv[1], &v) && int_setting) {
    char *m = sqlite3_mprintf("dc_config: %s must be an integer", name);
    sqlite3_result_error(ctx, m ? m : "dc_config: bad value", -1);
    sqlite3_free(m);
    return;
  }
  if (strcmp(name, "threads") == 0) {
    if (set) {
      if (v < 0 || v > DC_MAX_THREADS) {
        char *m = sqlite3_mprintf("dc_config: threads must be 0 (one per core) .. %d, got %lld",
                                  DC_MAX_THREADS, (long long)v);
        sqlite3_result_error(ctx, m ? m : "dc_config: bad threads", -1);
        sqlite3_free(m);
        return;
      }
      if ((int)v != conn->threads) {
        /* no statement of this connection is inside the pool now (the pool is only
        ** used within one xFilter/xNext/xColumn call), nor a ticket's take */
        dc_batch_pool_change(conn, (int)v);
      }
    }
    sqlite3_result_int(ctx, conn->threads ? conn->threads : online_cores());
  } else if (strcmp(name, "cache_mb") == 0) {
    if (set) {
      if (v < 0 || v > DC_MAX_CACHE_MB) {
        char *m = sqlite3_mprintf("dc_config: cache_mb must be 0 .. %d, got %lld", DC_MAX_CACHE_MB, (long long)v);
        sqlite3_result_error(ctx, m ? m : "dc_config: bad cache_mb", -1);
        sqlite3_free(m);
        return;
      }
      conn->cache_bytes = (int64_t)v << 20;
      if (conn->cache) {
        if (v == 0) { dc_cache_free(conn->cache); conn->cache = NULL; }
        else dc_cache_set_budget(conn->cache, conn->cache_bytes);
      }
    }
    sqlite3_result_int64(ctx, conn->cache_bytes >> 20);
  } else if (strcmp(name, "decode_mb") == 0) {
    if (set) {
      if (v < 1 || v > DC_MAX_CACHE_MB) {
        char *m = sqlite3_mprintf("dc_config: decode_mb must be 1 .. %d, got %lld", DC_MAX_CACHE_MB, (long long)v);
        sqlite3_result_error(ctx, m ? m : "dc_config: bad decode_mb", -1);
        sqlite3_free(m);
        return;
      }
      conn->work_bytes = (int64_t)v << 20;
    }
    sqlite3_result_int64(ctx, conn->work_bytes >> 20);
  } else if (strcmp(name, "cache_used_mb") == 0 || strcmp(name, "cache_entries") == 0 ||
             strcmp(name, "cache_hits") == 0 || strcmp(name, "cache_misses") == 0) {
    if (set) {
      char *m = sqlite3_mprintf("dc_config: %s is read-only", name);
      sqlite3_result_error(ctx, m ? m : "dc_config: read-only setting", -1);
      sqlite3_free(m);
      return;
    }
    int64_t bytes = 0, entries = 0, hits = 0, misses = 0;
    if (conn->cache) dc_cache_stats(conn->cache, &bytes, &entries, &hits, &misses);
    if (name[6] == 'u') sqlite3_result_double(ctx, (double)bytes / (1 << 20));
    else sqlite3_result_int64(ctx, name[6] == 'e' ? entries : name[6] == 'h' ? hits : misses);
  } else if (strcmp(name, "batch_mb") == 0) {
    if (set) {
      if (v < 1 || v > DC_MAX_CACHE_MB) {
        char *m = sqlite3_mprintf("dc_config: batch_mb must be 1 .. %d, got %lld", DC_MAX_CACHE_MB, (long long)v);
        sqlite3_result_error(ctx, m ? m : "dc_config: bad batch_mb", -1);
        sqlite3_free(m);
        return;
      }
      conn->batch_bytes = (int64_t)v << 20;
    }
    sqlite3_result_int64(ctx, conn->batch_bytes >> 20);
  } else if (strcmp(name, "allow_drop") == 0) {
    if (set) {
      if (v != 0 && v != 1) {
        sqlite3_result_error(ctx, "dc_config: allow_drop must be 0 or 1", -1);
        return;
      }
      conn->allow_drop = (int)v;
    }
    sqlite3_result_int(ctx, conn->allow_drop);
  } else if (strcmp(name, "defensive") == 0) {
    /* SQLITE_DBCONFIG_DEFENSIVE on this connection: shadow tables (tiles_data,
    ** cells_blocks, ...) become read-only and cannot be dropped; set only on request */
    int on = 0;
    if (set) {
      if (v != 0 && v != 1) {
        sqlite3_result_error(ctx, "dc_config: defensive must be 0 or 1", -1);
        return;
      }
      sqlite3_db_config(sqlite3_context_db_handle(ctx), SQLITE_DBCONFIG_DEFENSIVE, (int)v, &on);
    } else {
      sqlite3_db_config(sqlite3_context_db_handle(ctx), SQLITE_DBCONFIG_DEFENSIVE, -1, &on);
    }
    sqlite3_result_int(ctx, on);
  } else if (strcmp(name, "index_loads") == 0) {
    if (set) {
      sqlite3_result_error(ctx, "dc_config: index_loads is read-only", -1);
      return;
    }
    sqlite3_result_int64(ctx, conn->index_loads);
  } else if (strcmp(name, "obs_loads") == 0) {
    if (set) {
      sqlite3_result_error(ctx, "dc_config: obs_loads is read-only", -1);
      return;
    }
    sqlite3_result_int64(ctx, conn->obs_loads);
  } else if (strcmp(name, "simd") == 0) {
    if (set) {
      sqlite3_result_error(ctx, "dc_config: simd is read-only (DC_SIMD in the environment forces a path)", -1);
      return;
    }
    sqlite3_result_text(ctx, dc_simd_name(dc_simd_level()), -1, SQLITE_STATIC);
  } else if (strcmp(name, "last_refusal") == 0) {
    if (set) {
      sqlite3_result_error(ctx, "dc_config: last_refusal is read-only", -1);
      return;
    }
    sqlite3_result_text(ctx, conn->last_refusal, -1, SQLITE_TRANSIENT);
  } else if (strcmp(name, "last_batch") == 0) {
    if (set) {
      sqlite3_result_error(ctx, "dc_config: last_batch is read-only", -1);
      return;
    }
    char *m = sqlite3_mprintf("{\"cells\": %lld, \"nnz\": %lld, \"plan_s\": %.9f, \"fetch_s\": %.9f, "
                              "\"direct_s\": %.9f, \"copy_s\": %.9f, \"direct_chunks\": %lld, "
                              "\"fetched_chunks\": %lld}",
                              (long long)conn->last_cells, (long long)conn->last_nnz,
                              conn->last_ns[0] * 1e-9, conn->last_ns[1] * 1e-9, conn->last_ns[2] * 1e-9,
                              conn->last_ns[3] * 1e-9, (long long)conn->last_direct_chunks,
                              (long long)conn->last_fetched_chunks);
    if (!m) { sqlite3_result_error_nomem(ctx); return; }
    sqlite3_result_text(ctx, m, -1, sqlite3_free);
  } else {
    char *m = sqlite3_mprintf("dc_config: unknown setting '%s' (known: threads, cache_mb, "
                              "decode_mb, batch_mb, allow_drop, defensive, cache_used_mb, cache_entries, cache_hits, "
                              "cache_misses, index_loads, obs_loads, last_batch, last_refusal, simd)", name);
    sqlite3_result_error(ctx, m ? m : "dc_config: unknown setting", -1);
    sqlite3_free(m);
  }
}

#ifdef _WIN32
__declspec(dllexport)
#endif
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  SQLITE_EXTENSION_INIT2(pApi);
  dc_sqlite_fork_guard();          /* before anything registers its own fork handler */
  int rc;
  char simd_msg[192];
  if (dc_simd_env_check(simd_msg, sizeof simd_msg)) {   /* a mistyped path is not the best one */
    if (pzErrMsg) *pzErrMsg = sqlite3_mprintf("deltacells: %s", simd_msg);
    return SQLITE_ERROR;
  }
  dc_conn *conn = sqlite3_malloc64(sizeof *conn);
  if (!conn) return SQLITE_NOMEM;
  memset(conn, 0, sizeof *conn);
  conn->threads = 0;
  conn->cache_bytes = default_cache_bytes();
  conn->work_bytes = (int64_t)256 << 20;
  conn->batch_bytes = (int64_t)1024 << 20;
  conn->n_ref = 1;                 /* the init's own reference, dropped below */
  conn->bufpool = dc_bufpool_new(); /* NULL (out of memory) only disables recycling */

  /* dc_config holds a reference; SQLite calls the destructor on failure too */
  dc_conn_ref(conn);
  rc = sqlite3_create_function_v2(db, "dc_config", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, conn,
                                  dc_config_func, NULL, NULL, dc_conn_unref);
  if (rc == SQLITE_OK) {
    dc_conn_ref(conn);
    rc = sqlite3_create_function_v2(db, "dc_config", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY, conn,
                                    dc_config_func, NULL, NULL, dc_conn_unref);
  }
#define DC_MODULE(n) \
  if (rc == SQLITE_OK) { \
    rc = dc_register_##n(db, conn); \
    if (rc != SQLITE_OK && pzErrMsg) *pzErrMsg = sqlite3_mprintf("deltacells: registering %s failed: %s", #n, sqlite3_errstr(rc)); \
  }
#include "dc_modules.h"
#undef DC_MODULE
  if (rc == SQLITE_OK) {
    rc = dc_register_vfs(db);
    if (rc != SQLITE_OK && pzErrMsg) *pzErrMsg = sqlite3_mprintf("deltacells: registering the dchttp VFS failed: %s", sqlite3_errstr(rc));
  }
  dc_conn_unref(conn);
  return rc;
}

int dc_plan_set(sqlite3_index_info *info, const dc_plan_table *t, const dc_plan_item *items, int n, int nargs) {
  size_t len = dc_plan_format(t, items, n, NULL, 0);
  char *z = sqlite3_malloc64((sqlite3_uint64)len + 1);
  if (!z) return SQLITE_NOMEM;
  dc_plan_format(t, items, n, z, len + 1);
  info->idxNum = nargs;
  info->idxStr = z;
  info->needToFreeIdxStr = 1;
  return SQLITE_OK;
}
