/*
** vtab_tiles.c — the `tiles` virtual table (module deltacells_tiles).
**
**   CREATE VIRTUAL TABLE tiles USING deltacells_tiles;
**
** Schema of the table (one row per tile of the count matrix):
**
**   CREATE TABLE x(
**     tile INTEGER PRIMARY KEY,  -- 0, 1, 2, ...  (also the rowid)
**     first_cell INTEGER,        -- cells of the tile: first_cell .. first_cell+n_cells-1
**     n_cells INTEGER,
**     nnz INTEGER,               -- nonzero counts stored in the tile
**     bytes INTEGER,             -- bytes of the encoded tile blob
**     chunks INTEGER             -- independently compressed chunks of the tile
**   );
**
** Shadow table: <name>_data (docs/format.md section 1, `tiles_data` for the
** usual name), created by xCreate if it does not exist yet (the converter
** may also create it first) and dropped by xDestroy.  xConnect only attaches,
** in the vtab's own schema (argv[1]), so every ATTACHed dataset has its own
** `tiles`.  xShadowName reports "data", so SQLITE_DBCONFIG_DEFENSIVE makes the
** shadow table read-only to SQL.  The table reads only its own data and is
** SQLITE_VTAB_INNOCUOUS.  Read-only: no xUpdate.
**
** Plans (xBestIndex): the shared plan codec (dc_plan.h), e.g.
**   #0 "tile" >= ?1, #0 "tile" < ?2, ORDER BY tile DESC
** Terms on `tile` (or rowid): =, <, <=, >, >=, applied by the inner SELECT on the INTEGER
** PRIMARY KEY of <name>_data, so values of any type compare exactly as on a native table;
** they are therefore omitted (omit = 1: no "prefilter").  The words "ORDER BY tile" and
** "ORDER BY tile DESC" mean ORDER BY tile (either direction) is consumed.  "=" plans are
** unique (one row).
*/
#include <stdio.h>
#include <string.h>
#include "dc_ext.h"
#include "dc_format.h"
#include "dc_plan.h"
#include "dc_reader.h"

typedef struct tiles_vtab {
  sqlite3_vtab base;
  sqlite3 *db;
  char *schema;          /* schema of the vtab (main, temp or ATTACH name) */
  char *shadow;          /* <name>_data */
  dc_conn *conn;
  dc_reader *reader;     /* the table named `tiles` (shadow tiles_data): checks
                         ** every tile's header and seal before showing its row */
} tiles_vtab;

typedef struct tiles_cursor {
  sqlite3_vtab_cursor base;
  sqlite3_stmt *stmt;
  int eof;
} tiles_cursor;

enum { COL_TILE, COL_FIRST, COL_NCELLS, COL_NNZ, COL_BYTES, COL_CHUNKS };

static int tiles_init(sqlite3 *db, void *aux, int argc, const char *const *argv,
                      sqlite3_vtab **ppVtab, char **pzErr, int create) {
  if (argc > 3) {
    *pzErr = sqlite3_mprintf("deltacells_tiles: takes no arguments");
    return SQLITE_ERROR;
  }
  int rc = sqlite3_declare_vtab(db,
      "CREATE TABLE x(tile INTEGER PRIMARY KEY, first_cell INTEGER, n_cells INTEGER,"
      " nnz INTEGER, bytes INTEGER, chunks INTEGER)");
  if (rc != SQLITE_OK) return rc;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  tiles_vtab *v = sqlite3_malloc64(sizeof *v);
  if (!v) return SQLITE_NOMEM;
  memset(v, 0, sizeof *v);
  v->db = db;
  v->conn = (dc_conn *)aux;
  v->schema = sqlite3_mprintf("%s", argv[1]);
  v->shadow = sqlite3_mprintf("%s_data", argv[2]);
  if (!v->schema || !v->shadow) { rc = SQLITE_NOMEM; goto fail; }
  if (create) {
    char *sql = sqlite3_mprintf(
        "CREATE TABLE IF NOT EXISTS \"%w\".\"%w\"(" DC_TILES_DATA_COLUMNS ");" DC_TILES_INDEX_SQL,
        v->schema, v->shadow, v->schema, v->shadow, v->shadow);
    if (!sql) { rc = SQLITE_NOMEM; goto fail; }
    rc = sqlite3_exec(db, sql, NULL, NULL, pzErr);
    sqlite3_free(sql);
    if (rc != SQLITE_OK) goto fail;
  }
  if (strcmp(v->shadow, DC_TILES_DATA) == 0) {
    rc = dc_reader_open(db, (dc_conn *)aux, v->schema, "tiles", &v->reader, pzErr);
    if (rc != SQLITE_OK) goto fail;
  }
  *ppVtab = &v->base;
  return SQLITE_OK;
fail:
  sqlite3_free(v->schema);
  sqlite3_free(v->shadow);
  sqlite3_free(v);
  return rc;
}

static int tiles_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **ppVtab, char **pzErr) {
  return tiles_init(db, aux, argc, argv, ppVtab, pzErr, 1);
}
static int tiles_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                         sqlite3_vtab **ppVtab, char **pzErr) {
  return tiles_init(db, aux, argc, argv, ppVtab, pzErr, 0);
}

static int tiles_disconnect(sqlite3_vtab *p) {
  tiles_vtab *v = (tiles_vtab *)p;
  dc_reader_free(v->reader);
  sqlite3_free(v->schema);
  sqlite3_free(v->shadow);
  sqlite3_free(v);
  return SQLITE_OK;
}

static int tiles_destroy(sqlite3_vtab *p) {
  tiles_vtab *v = (tiles_vtab *)p;
  int refused = dc_drop_check(v->conn, v->schema, "tiles");
  if (refused) return refused;
  char *sql = sqlite3_mprintf("DROP TABLE IF EXISTS \"%w\".\"%w\"", v->schema, v->shadow);
  int rc = sql ? sqlite3_exec(v->db, sql, NULL, NULL, NULL) : SQLITE_NOMEM;
  sqlite3_free(sql);
  if (rc == SQLITE_OK) tiles_disconnect(p);
  return rc;
}

static const char *const col_names[] = {"tile", "first_cell", "n_cells", "nnz", "bytes", "chunks"};
static const char *plan_col_name(void *ctx, int col) { (void)ctx; return col_names[col]; }
static const dc_plan_word plan_words[] = {{"ORDER BY tile", 0}, {"ORDER BY tile DESC", 0}};
enum { ITEM_ORDER = 1, ITEM_ORDER_DESC = 2 };
static const dc_plan_table plan_table = {6, plan_col_name, NULL, plan_words, 2};

static int tiles_best_index(sqlite3_vtab *p, sqlite3_index_info *info) {
  (void)p;
  dc_plan_item items[DC_PLAN_MAX_TERMS + 1];
  int n = 0, has_eq = 0, has_range = 0;
  for (int i = 0; i < info->nConstraint; i++) {
    const struct sqlite3_index_constraint *c = &info->aConstraint[i];
    if (!c->usable || (c->iColumn != COL_TILE && c->iColumn != -1)) continue;
    int op;
    switch (c->op) {
      case SQLITE_INDEX_CONSTRAINT_EQ: op = DC_OP_EQ; has_eq = 1; break;
      case SQLITE_INDEX_CONSTRAINT_GT: op = DC_OP_GT; has_range = 1; break;
      case SQLITE_INDEX_CONSTRAINT_GE: op = DC_OP_GE; has_range = 1; break;
      case SQLITE_INDEX_CONSTRAINT_LT: op = DC_OP_LT; has_range = 1; break;
      case SQLITE_INDEX_CONSTRAINT_LE: op = DC_OP_LE; has_range = 1; break;
      default: continue;
    }
    if (n >= DC_PLAN_MAX_TERMS) continue;            /* the rest SQLite checks */
    info->aConstraintUsage[i].argvIndex = ++n;
    info->aConstraintUsage[i].omit = 1;
    items[n - 1] = (dc_plan_item){DC_ITEM_TERM, COL_TILE, op, 1, n - 1};
  }
  int n_items = n;
  if (info->nOrderBy == 1 && (info->aOrderBy[0].iColumn == COL_TILE || info->aOrderBy[0].iColumn == -1)) {
    items[n_items++] = (dc_plan_item){info->aOrderBy[0].desc ? ITEM_ORDER_DESC : ITEM_ORDER, -1, 0, 1, -1};
    info->orderByConsumed = 1;
  }
  if (dc_plan_set(info, &plan_table, items, n_items, n) != SQLITE_OK) return SQLITE_NOMEM;
  if (has_eq) {
    info->estimatedRows = 1;
    info->estimatedCost = 1;
    info->idxFlags |= SQLITE_INDEX_SCAN_UNIQUE;
  } else if (has_range) {
    info->estimatedRows = 25;
    info->estimatedCost = 25;
  } else {
    info->estimatedRows = 100;
    info->estimatedCost = 100;
  }
  return SQLITE_OK;
}

static int tiles_open(sqlite3_vtab *p, sqlite3_vtab_cursor **ppCur) {
  (void)p;
  tiles_cursor *c = sqlite3_malloc64(sizeof *c);
  if (!c) return SQLITE_NOMEM;
  memset(c, 0, sizeof *c);
  c->eof = 1;
  *ppCur = &c->base;
  return SQLITE_OK;
}

static int tiles_close(sqlite3_vtab_cursor *cur) {
  tiles_cursor *c = (tiles_cursor *)cur;
  tiles_vtab *v = (tiles_vtab *)cur->pVtab;
  if (v->reader) dc_reader_end(v->reader);
  sqlite3_finalize(c->stmt);
  sqlite3_free(c);
  return SQLITE_OK;
}

static int tiles_next(sqlite3_vtab_cursor *cur) {
  tiles_cursor *c = (tiles_cursor *)cur;
  int rc = sqlite3_step(c->stmt);
  tiles_vtab *v = (tiles_vtab *)cur->pVtab;
  if (rc == SQLITE_ROW) {
    /* a row is shown only once its tile's header and seal check out */
    if (v->reader) {
      const dc_tilehead *h;
      char *msg = NULL;
      int64_t tile = sqlite3_column_int64(c->stmt, 0);
      rc = tile < 0 || tile > UINT32_MAX ? SQLITE_CORRUPT_VTAB : dc_reader_head(v->reader, (uint32_t)tile, &h, &msg);
      if (rc != SQLITE_OK) {
        c->eof = 1;
        sqlite3_free(v->base.zErrMsg);
        v->base.zErrMsg = msg ? msg : sqlite3_mprintf("tiles: tile %lld is out of range", (long long)tile);
        return rc;
      }
    }
    return SQLITE_OK;
  }
  c->eof = 1;
  if (v->reader) dc_reader_end(v->reader);
  if (rc == SQLITE_DONE) return SQLITE_OK;
  sqlite3_free(v->base.zErrMsg);
  v->base.zErrMsg = sqlite3_mprintf("tiles: reading %s: %s", v->shadow, sqlite3_errmsg(v->db));
  return rc;
}

static int tiles_filter(sqlite3_vtab_cursor *cur, int idxNum, const char *idxStr,
                        int argc, sqlite3_value **argv) {
  tiles_cursor *c = (tiles_cursor *)cur;
  tiles_vtab *v = (tiles_vtab *)cur->pVtab;
  sqlite3_finalize(c->stmt);
  c->stmt = NULL;
  c->eof = 1;
  dc_plan_item items[DC_PLAN_MAX_ITEMS];
  int n_items;
  char why[200] = "";
  if (dc_plan_take(&plan_table, idxNum, idxStr, argc, items, &n_items, why, sizeof why))
    goto bad_plan;
  if (v->reader) {
    char *msg = NULL;
    int rc = dc_reader_begin(v->reader, &msg);
    if (rc != SQLITE_OK) {
      sqlite3_free(v->base.zErrMsg);
      v->base.zErrMsg = msg;
      return rc;
    }
  }
  sqlite3_str *s = sqlite3_str_new(v->db);
  sqlite3_str_appendf(s, "SELECT tile, first_cell, n_cells, nnz, length(data), chunks FROM \"%w\".\"%w\"",
                      v->schema, v->shadow);
  const char *order = "";
  int n = 0;
  for (int i = 0; i < n_items; i++) {
    const dc_plan_item *it = &items[i];
    if (it->kind == ITEM_ORDER || it->kind == ITEM_ORDER_DESC) {
      if (*order) { sqlite3_free(sqlite3_str_finish(s)); snprintf(why, sizeof why, "two orders"); goto bad_plan; }
      order = it->kind == ITEM_ORDER ? " ORDER BY tile" : " ORDER BY tile DESC";
      continue;
    }
    if (it->col != COL_TILE || it->op == DC_OP_IN || it->op == DC_OP_ISNULL || it->op == DC_OP_NOTNULL) {
      sqlite3_free(sqlite3_str_finish(s));
      snprintf(why, sizeof why, "item %d is not a term this table takes", i + 1);
      goto bad_plan;
    }
    sqlite3_str_appendf(s, "%s tile %s ?%d", n++ == 0 ? " WHERE" : " AND", dc_op_word(it->op), it->arg + 1);
  }
  sqlite3_str_appendall(s, order);
  char *sql = sqlite3_str_finish(s);
  if (!sql) return SQLITE_NOMEM;
  int rc = sqlite3_prepare_v2(v->db, sql, -1, &c->stmt, NULL);
  sqlite3_free(sql);
  if (rc != SQLITE_OK) {
    sqlite3_free(v->base.zErrMsg);
    v->base.zErrMsg = sqlite3_mprintf("tiles: cannot read %s.%s: %s", v->schema, v->shadow, sqlite3_errmsg(v->db));
    return rc;
  }
  for (int i = 0; i < argc; i++) sqlite3_bind_value(c->stmt, i + 1, argv[i]);
  c->eof = 0;
  return tiles_next(cur);
bad_plan:
  sqlite3_free(v->base.zErrMsg);
  v->base.zErrMsg = sqlite3_mprintf("tiles: unknown plan '%s'%s%s", idxStr ? idxStr : "", why[0] ? ": " : "", why);
  return SQLITE_ERROR;
}

static int tiles_eof(sqlite3_vtab_cursor *cur) { return ((tiles_cursor *)cur)->eof; }

static int tiles_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i) {
  tiles_cursor *c = (tiles_cursor *)cur;
  if (i >= COL_TILE && i <= COL_CHUNKS) sqlite3_result_value(ctx, sqlite3_column_value(c->stmt, i));
  return SQLITE_OK;
}

static int tiles_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *pRowid) {
  *pRowid = sqlite3_column_int64(((tiles_cursor *)cur)->stmt, 0);
  return SQLITE_OK;
}

static int tiles_shadow_name(const char *suffix) { return sqlite3_stricmp(suffix, "data") == 0; }

static sqlite3_module tiles_module = {
  3,                  /* iVersion: xShadowName */
  tiles_create, tiles_connect, tiles_best_index, tiles_disconnect, tiles_destroy,
  tiles_open, tiles_close, tiles_filter, tiles_next, tiles_eof, tiles_column, tiles_rowid,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL,   /* xUpdate .. xRename */
  NULL, NULL, NULL,                           /* xSavepoint, xRelease, xRollbackTo */
  tiles_shadow_name
};

int dc_register_tiles(sqlite3 *db, dc_conn *conn) {
  dc_conn_ref(conn);
  return sqlite3_create_module_v2(db, "deltacells_tiles", &tiles_module, conn, dc_conn_unref);
}
