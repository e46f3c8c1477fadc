/*
** dataset.c — the SQLite side of the converter (see dataset.h, docs/format.md).
*/
#include "dataset.h"
#include "merge_store.h"   /* cv_write_pagemap */
#include "dc_format.h"
#include "dc_seal.h"
#include "dc_codec.h"

/* zstd level of the genes table's blocks: they are small, and they are most
** of a small dataset's bytes beside the tiles.  16, not 19: the gene names of four of the five
** real files came out 0-0.2% smaller at 16 (mudan_sorted_pbmc_reference's 4% larger, 1.4 KB),
** in about half the time (docs/converter.md, "The genes table's time") */
#define GENES_LEVEL 16

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The extension, compiled into the converter with -DSQLITE_CORE. */
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static const char *SCHEMA =
    "CREATE TABLE dc_meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE " DC_TILES_DATA "(" DC_TILES_DATA_COLUMNS " NOT NULL);"
    "CREATE TABLE cells_columns(col INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " kind TEXT NOT NULL, n_categories INTEGER, null_count INTEGER NOT NULL, bytes INTEGER NOT NULL,"
    " checksum INTEGER NOT NULL);"
    "CREATE TABLE cells_dict(col INTEGER NOT NULL, code INTEGER NOT NULL, value TEXT NOT NULL,"
    " PRIMARY KEY(col, code)) WITHOUT ROWID;"
    "CREATE TABLE cells_blocks(id INTEGER PRIMARY KEY, col INTEGER NOT NULL, block INTEGER NOT NULL,"
    " first_cell INTEGER NOT NULL, n_cells INTEGER NOT NULL, null_count INTEGER NOT NULL,"
    " min, max, present BLOB, data BLOB NOT NULL, checksum INTEGER NOT NULL);"
    "CREATE TABLE genes_columns(col INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL,"
    " null_count INTEGER NOT NULL, bytes INTEGER NOT NULL);"
    "CREATE TABLE genes_blocks(id INTEGER PRIMARY KEY, col INTEGER NOT NULL, block INTEGER NOT NULL,"
    " first_gene INTEGER NOT NULL, n_genes INTEGER NOT NULL, data BLOB NOT NULL, checksum INTEGER NOT NULL);";

static const char *VTABS[] = {
    "CREATE VIRTUAL TABLE genes USING deltacells_genes",
    "CREATE VIRTUAL TABLE cells USING deltacells_cells",
    "CREATE VIRTUAL TABLE tiles USING deltacells_tiles",
    "CREATE VIRTUAL TABLE expression USING deltacells_expression",
    "CREATE VIRTUAL TABLE expression_long USING deltacells_expression_long",
    "CREATE VIRTUAL TABLE dc_batch USING deltacells_batch",
    "CREATE VIRTUAL TABLE dc_aggregate USING deltacells_aggregate",
    "CREATE VIRTUAL TABLE dc_aggregate_wide USING deltacells_aggregate_wide",
};

int dsw_db_fail(const char *out, cv_err *e, const char *what, int rc, const char *m) {
  if ((rc & 0xff) == SQLITE_FULL)
    return cv_fail(e, "%s: %s: disk full (%s); nothing was written", out, what, m);
  if ((rc & 0xff) == SQLITE_IOERR)
    return cv_fail(e, "%s: %s: I/O error (%s: %s); nothing was written", out, what, m, strerror(errno));
  return cv_fail(e, "%s: %s: %s", out, what, m);
}

/* Names the output (the temporary file is an implementation detail) and the reason. */
static int db_fail_rc(dsw *w, cv_err *e, const char *what, int rc, const char *m) {
  return dsw_db_fail(w->out_path ? w->out_path : w->tmp_path, e, what, rc, m);
}

static int db_fail(dsw *w, cv_err *e, const char *what) {
  return db_fail_rc(w, e, what, sqlite3_extended_errcode(w->db), sqlite3_errmsg(w->db));
}

static int exec(dsw *w, const char *sql, cv_err *e) {
  char *msg = NULL;
  if (sqlite3_exec(w->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
    char what[128];
    snprintf(what, sizeof what, "%.100s", sql);
    int r = db_fail_rc(w, e, what, sqlite3_extended_errcode(w->db), msg ? msg : sqlite3_errmsg(w->db));
    sqlite3_free(msg);
    return r;
  }
  return 0;
}

static int prep(dsw *w, const char *sql, sqlite3_stmt **st, cv_err *e) {
  if (sqlite3_prepare_v2(w->db, sql, -1, st, NULL) != SQLITE_OK) return db_fail(w, e, sql);
  return 0;
}

static int step(dsw *w, sqlite3_stmt *st, const char *what, cv_err *e) {
  int rc = sqlite3_step(st);
  sqlite3_reset(st);
  sqlite3_clear_bindings(st);
  if (rc != SQLITE_DONE) return db_fail(w, e, what);
  return 0;
}

int dsw_temp_prefix(const char *out_path, char **dir, char **prefix) {
  char *a = strdup(out_path), *b = strdup(out_path);
  *dir = NULL;
  *prefix = NULL;
  if (a && b) {
    *dir = strdup(dirname(a));
    const char *base = basename(b);
    size_t n = strlen(base) + 8;
    *prefix = malloc(n);
    if (*prefix) snprintf(*prefix, n, ".%s.tmp-", base);
  }
  free(a);
  free(b);
  if (!*dir || !*prefix) { free(*dir); free(*prefix); *dir = *prefix = NULL; return -1; }
  return 0;
}

/* mkstemp's six characters */
static int is_temp_suffix(const char *s) {
  for (int i = 0; i < 6; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9'))) return 0;
  return 1;
}

int dsw_remove_stale(const char *out_path) {
  char *dir = NULL, *prefix = NULL;
  if (dsw_temp_prefix(out_path, &dir, &prefix)) return 0;
  DIR *d = opendir(dir);
  int removed = 0;
  size_t pl = strlen(prefix);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL) {
    const char *nm = de->d_name;
    if (strncmp(nm, prefix, pl) != 0 || strlen(nm) < pl + 6 || !is_temp_suffix(nm + pl)) continue;
    const char *rest = nm + pl + 6;
    size_t len = strlen(dir) + strlen(nm) + 16;
    char *path = malloc(len);
    if (!path) break;
    snprintf(path, len, "%s/%s", dir, nm);
    if (*rest) {
      /* a -journal or -wal whose database is gone */
      if (!strcmp(rest, "-journal") || !strcmp(rest, "-wal")) {
        char *main_path = strndup(path, strlen(path) - strlen(rest));
        struct stat st;
        if (main_path && stat(main_path, &st) != 0 && errno == ENOENT && unlink(path) == 0) removed++;
        free(main_path);
      }
      free(path);
      continue;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    struct stat fs, ps;
    /* our own regular file, whose writer's lock is gone (a live writer holds LOCK_EX) */
    if (fd >= 0 && fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode) && fs.st_uid == geteuid() &&
        flock(fd, LOCK_EX | LOCK_NB) == 0 && stat(path, &ps) == 0 && ps.st_ino == fs.st_ino &&
        ps.st_dev == fs.st_dev && unlink(path) == 0) {
      removed++;
      strcat(path, "-journal");
      unlink(path);
      path[strlen(path) - 8] = 0;
      strcat(path, "-wal");
      unlink(path);
    }
    if (fd >= 0) close(fd);
    free(path);
  }
  if (d) closedir(d);
  free(dir);
  free(prefix);
  return removed;
}

int dsw_open(dsw *w, const char *out_path, const uint64_t *dataset_id, int page_size, cv_err *e) {
  memset(w, 0, sizeof *w);
  w->lock_fd = -1;
  dsw_remove_stale(out_path);
  size_t n = strlen(out_path);
  char *dup = strdup(out_path), *dup2 = strdup(out_path);
  w->tmp_path = malloc(n + 64);
  w->out_path = strdup(out_path);
  if (!dup || !dup2 || !w->tmp_path || !w->out_path) {
    free(dup); free(dup2); free(w->tmp_path); free(w->out_path);
    w->tmp_path = w->out_path = NULL;
    return cv_fail(e, "out of memory");
  }
  snprintf(w->tmp_path, n + 64, "%s/.%s.tmp-XXXXXX", dirname(dup), basename(dup2));
  free(dup);
  free(dup2);
  /* create and lock; should another writer's cleanup have removed it between
  ** the two (it was not locked yet), the path no longer names our file: again */
  int fd = -1;
  size_t tl = strlen(w->tmp_path);
  for (int tries = 0; tries < 16; tries++) {
    memcpy(w->tmp_path + tl - 6, "XXXXXX", 6);
    fd = mkstemp(w->tmp_path);
    if (fd < 0) break;
    struct stat fs, ps;
    if (flock(fd, LOCK_EX) == 0 && fstat(fd, &fs) == 0 && stat(w->tmp_path, &ps) == 0 && fs.st_ino == ps.st_ino &&
        fs.st_dev == ps.st_dev)
      break;
    close(fd);
    fd = -1;
    errno = EAGAIN;
  }
  if (fd < 0) {
    int r = cv_fail(e, "%s: cannot create a temporary file beside it: %s", out_path, strerror(errno));
    free(w->tmp_path);
    w->tmp_path = NULL;
    free(w->out_path);
    w->out_path = NULL;
    return r;
  }
  mode_t um = umask(0);
  umask(um);
  if (fchmod(fd, 0666 & ~um) != 0) { /* mkstemp made it 0600 */ }
  w->lock_fd = fd;   /* kept open (and locked) until the file is renamed or removed */
  if (sqlite3_open_v2(w->tmp_path, &w->db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    int r = db_fail(w, e, "open");
    dsw_abort(w);
    return r;
  }
  sqlite3_extended_result_codes(w->db, 1);
  char pragmas[256];
  snprintf(pragmas, sizeof pragmas,
           /* the journal off before the first write (application_id creates the file): the
           ** temporary file is renamed into place only when complete, so no journal is needed */
           "PRAGMA page_size=%d; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
           "PRAGMA application_id=0x44435442; PRAGMA cache_size=-16384; BEGIN;", page_size);
  if (exec(w, pragmas, e) ||
      exec(w, SCHEMA, e) ||
      prep(w, "INSERT INTO " DC_TILES_DATA " VALUES(?,?,?,?,?,?,?)", &w->ins_tile, e) ||
      prep(w, "INSERT INTO cells_blocks VALUES(?,?,?,?,?,?,?,?,?,?,?)", &w->ins_block, e) ||
      prep(w, "INSERT INTO cells_dict VALUES(?,?,?)", &w->ins_dict, e) ||
      prep(w, "INSERT INTO cells_columns VALUES(?,?,?,?,?,?,?)", &w->ins_col, e) ||
      prep(w, "INSERT INTO dc_meta VALUES(?,?)", &w->ins_meta, e) ||
      prep(w, "INSERT INTO genes_blocks VALUES(?,?,?,?,?,?,?)", &w->ins_gblock, e) ||
      prep(w, "INSERT INTO genes_columns VALUES(?,?,?,?,?)", &w->ins_gcol, e)) {
    dsw_abort(w);
    return -1;
  }
  /* the dataset's identity, which every seal is keyed with (dc_seal.h) */
  char hex[17];
  if (dataset_id) w->dataset_id = *dataset_id;
  else if (dc_seal_new_id(&w->dataset_id) != 0) {
    int r = cv_fail(e, "%s: no random dataset id: %s", out_path, strerror(errno));
    dsw_abort(w);
    return r;
  }
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)w->dataset_id);
  if (dsw_meta_text(w, "dataset_id", hex, e)) {
    dsw_abort(w);
    return -1;
  }
  return 0;
}

int dsw_meta_int(dsw *w, const char *key, int64_t v, cv_err *e) {
  sqlite3_bind_text(w->ins_meta, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(w->ins_meta, 2, v);
  return step(w, w->ins_meta, "dc_meta", e);
}

int dsw_meta_text(dsw *w, const char *key, const char *v, cv_err *e) {
  sqlite3_bind_text(w->ins_meta, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_text(w->ins_meta, 2, v, -1, SQLITE_STATIC);
  return step(w, w->ins_meta, "dc_meta", e);
}

int dsw_meta_forget_obs(sqlite3 *db, const char *name, cv_err *e) {
  static const char *const sql[2] = {
      "UPDATE main.dc_meta SET value = (SELECT json_group_object(key, value) FROM json_each(dc_meta.value) WHERE key <> ?1) "
      "WHERE key IN " DSW_META_OBS_OBJECTS,
      "UPDATE main.dc_meta SET value = (SELECT json_group_array(value) FROM json_each(dc_meta.value) WHERE value <> ?1) "
      "WHERE key = 'obs_ordered'"};
  for (int k = 0; k < 2; k++) {
    sqlite3_stmt *s = NULL;
    int r = sqlite3_prepare_v2(db, sql[k], -1, &s, NULL);
    if (r == SQLITE_OK) {
      sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
      r = sqlite3_step(s);
    }
    sqlite3_finalize(s);
    if (r != SQLITE_DONE) return cv_fail(e, "dc_meta: %s", sqlite3_errmsg(db));
  }
  return 0;
}

int dsw_tile(dsw *w, int64_t tile, int64_t first_cell, int64_t n_cells, int64_t nnz, int64_t chunks,
             const void *blob, size_t len, cv_err *e) {
  sqlite3_stmt *s = w->ins_tile;
  sqlite3_bind_int64(s, 1, tile);
  sqlite3_bind_int64(s, 2, first_cell);
  sqlite3_bind_int64(s, 3, n_cells);
  sqlite3_bind_int64(s, 4, nnz);
  sqlite3_bind_int64(s, 5, chunks);
  sqlite3_bind_blob64(s, 6, blob, len, SQLITE_STATIC);
  dc_tile_hdr *h = malloc(sizeof *h);
  dc_error de;
  memset(&de, 0, sizeof de);
  if (!h) return cv_fail(e, "out of memory");
  if (dc_tile_parse(blob, len, h, &de) != DC_OK) {
    free(h);
    return cv_fail(e, "tile %lld: the encoder made a tile its own parser rejects: %s", (long long)tile, de.msg);
  }
  int64_t seal = 0;
  int sr = dc_seal_tile(w->dataset_id, tile, first_cell, n_cells, nnz, chunks, len, blob, (size_t)h->hdr_len, &seal);
  free(h);
  if (sr) return cv_fail(e, "out of memory");
  sqlite3_bind_int64(s, 7, seal);
  char what[64];
  snprintf(what, sizeof what, "writing tile %lld", (long long)tile);
  return step(w, s, what, e);
}

/* A genes block to encode: block b (genes g0 .. g0 + k - 1) of column c.  Encoded on any thread
** (dc_obs_encode: pure C, no SQLite); written afterwards, in order, on the caller's. */
typedef struct gjob {
  const dsw_gcol *c;
  uint64_t b, g0;
  uint32_t k;
  int level;
  uint8_t *blob;
  size_t len;
  int64_t nulls;
  dc_error err;
} gjob;

static void genes_encode(void *arg, size_t i) {
  gjob *j = (gjob *)arg + i;
  dc_obs_values s = j->c->v;
  uint64_t g0 = j->g0;
  s.n = j->k;
  if (s.codes) s.codes += g0;
  if (s.i64) s.i64 += g0;
  if (s.valid) s.valid += g0;
  if (s.f64) s.f64 += g0;
  if (s.b8) s.b8 += g0;
  if (s.text) s.text += g0;
  if (s.text_len) s.text_len += g0;
  dc_obs_stats st;
  memset(&st, 0, sizeof st);
  memset(&j->err, 0, sizeof j->err);
  if (dc_obs_encode(&s, j->level, &j->blob, &j->len, &st, &j->err) != DC_OK && !j->err.code) j->err.code = DC_ENOMEM;
  j->nulls = st.null_count;
  dc_obs_stats_clear(&st);
}

int dsw_genes_columns(dsw *w, dsw_gcol *cols, int n, uint32_t block, int threads, cv_err *e) {
  size_t nj = 0;
  if (!block) block = DC_GENES_BLOCK;
  for (int i = 0; i < n; i++) nj += (cols[i].v.n + block - 1) / block;
  gjob *jobs = calloc(nj ? nj : 1, sizeof *jobs);
  if (!jobs) return cv_fail(e, "out of memory");
  int level = w->genes_level ? w->genes_level : GENES_LEVEL;
  size_t k = 0;
  for (int i = 0; i < n; i++)
    for (uint64_t b = 0, g0 = 0; g0 < cols[i].v.n; b++, g0 += block, k++) {
      jobs[k].c = &cols[i];
      jobs[k].b = b;
      jobs[k].g0 = g0;
      jobs[k].k = cols[i].v.n - g0 < block ? (uint32_t)(cols[i].v.n - g0) : block;
      jobs[k].level = level;
    }
  /* the blocks in parallel (the first, the longest in practice, first: the names) */
  dc_pool *pool = threads > 1 && nj > 1 ? dc_pool_new(threads < (int)nj ? threads : (int)nj) : NULL;
  if (pool) dc_pool_for(pool, nj, genes_encode, jobs);
  else for (size_t j = 0; j < nj; j++) genes_encode(jobs, j);
  dc_pool_free(pool);
  int rc = 0;
  k = 0;
  for (int i = 0; i < n && !rc; i++) {
    const dsw_gcol *c = &cols[i];
    int64_t bytes = 0, nulls = 0;
    for (uint64_t g0 = 0; g0 < c->v.n; g0 += block, k++) {
      gjob *j = &jobs[k];
      if (j->err.code) {
        rc = cv_fail(e, "genes column '%s', block %llu: %s", c->name, (unsigned long long)j->b,
                     j->err.msg[0] ? j->err.msg : "out of memory");
        break;
      }
      nulls += j->nulls;
      sqlite3_stmt *q = w->ins_gblock;
      sqlite3_bind_int64(q, 1, (c->col << 32) + (int64_t)j->b);
      sqlite3_bind_int64(q, 2, c->col);
      sqlite3_bind_int64(q, 3, (int64_t)j->b);
      sqlite3_bind_int64(q, 4, (int64_t)j->g0);
      sqlite3_bind_int64(q, 5, j->k);
      sqlite3_bind_blob64(q, 6, j->blob, j->len, SQLITE_STATIC);
      dc_blockplace pl = {"genes", c->col, c->name, c->v.kind, -1, (int64_t)j->b, (int64_t)j->g0, (int64_t)j->k, -1};
      int64_t seal = 0;
      if (dc_seal_block(w->dataset_id, &pl, NULL, NULL, NULL, j->len, j->blob, &seal)) {
        rc = cv_fail(e, "out of memory");
        break;
      }
      sqlite3_bind_int64(q, 7, seal);
      if ((rc = step(w, q, "writing genes_blocks", e))) break;
      bytes += (int64_t)j->len;
    }
    if (rc) break;
    sqlite3_stmt *q = w->ins_gcol;
    sqlite3_bind_int64(q, 1, c->col);
    sqlite3_bind_text(q, 2, c->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, dc_obs_kind_name(c->v.kind), -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, nulls);
    sqlite3_bind_int64(q, 5, bytes);
    cols[i].bytes = bytes;
    rc = step(w, q, "writing genes_columns", e);
  }
  for (size_t j = 0; j < nj; j++) free(jobs[j].blob);
  free(jobs);
  return rc ? -1 : 0;
}

int dsw_genes_column(dsw *w, int64_t col, const char *name, const dc_obs_values *v, uint32_t block,
                     int64_t *bytes_out, cv_err *e) {
  dsw_gcol c = {col, name, *v, 0};
  int rc = dsw_genes_columns(w, &c, 1, block, 1, e);
  if (!rc && bytes_out) *bytes_out = c.bytes;
  return rc;
}

int dsw_column(dsw *w, int64_t col, const char *name, const char *kind, int64_t n_categories,
               int64_t null_count, int64_t bytes, int64_t dict_seal, cv_err *e) {
  sqlite3_stmt *s = w->ins_col;
  sqlite3_bind_int64(s, 1, col);
  sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
  if (n_categories >= 0) sqlite3_bind_int64(s, 4, n_categories);
  sqlite3_bind_int64(s, 5, null_count);
  sqlite3_bind_int64(s, 6, bytes);
  sqlite3_bind_int64(s, 7, dict_seal);
  return step(w, s, "writing cells_columns", e);
}

int dsw_dict(dsw *w, int64_t col, int64_t code, const char *value, size_t len, cv_err *e) {
  sqlite3_stmt *s = w->ins_dict;
  sqlite3_bind_int64(s, 1, col);
  sqlite3_bind_int64(s, 2, code);
  sqlite3_bind_text64(s, 3, value, len, SQLITE_STATIC, SQLITE_UTF8);
  return step(w, s, "writing cells_dict", e);
}

static void bind_stat(sqlite3_stmt *s, int i, int kind, const dc_obs_stats *st, int max) {
  if (!st->has_minmax) { sqlite3_bind_null(s, i); return; }
  if (kind == DC_OBS_REAL) sqlite3_bind_double(s, i, max ? st->max_f : st->min_f);
  else if (kind == DC_OBS_TEXT)
    sqlite3_bind_text64(s, i, max ? st->max_s : st->min_s, max ? st->max_len : st->min_len, SQLITE_TRANSIENT,
                        SQLITE_UTF8);
  else sqlite3_bind_int64(s, i, max ? st->max_i : st->min_i);
}

int dsw_obs_block(dsw *w, int64_t col, const char *name, int64_t b, int64_t first, const dc_obs_values *v,
                  int64_t *nulls, int64_t *bytes, cv_err *e) {
  dc_obs_stats st;
  memset(&st, 0, sizeof st);
  dc_error de;
  memset(&de, 0, sizeof de);
  uint8_t *blob = NULL;
  size_t len = 0;
  if (dc_obs_encode(v, w->obs_level, &blob, &len, &st, &de) != DC_OK) {
    dc_obs_stats_clear(&st);
    return cv_fail(e, "obs column '%s', block %lld: %s", name, (long long)b, de.msg);
  }
  sqlite3_stmt *s = w->ins_block;
  sqlite3_bind_int64(s, 1, (col << 32) + b);
  sqlite3_bind_int64(s, 2, col);
  sqlite3_bind_int64(s, 3, b);
  sqlite3_bind_int64(s, 4, first);
  sqlite3_bind_int64(s, 5, v->n);
  sqlite3_bind_int64(s, 6, st.null_count);
  bind_stat(s, 7, v->kind, &st, 0);
  bind_stat(s, 8, v->kind, &st, 1);
  if (st.present) sqlite3_bind_blob64(s, 9, st.present, st.present_len, SQLITE_TRANSIENT);
  else sqlite3_bind_null(s, 9);
  sqlite3_bind_blob64(s, 10, blob, len, SQLITE_STATIC);
  dc_blockplace pl = {"cells", col, name, v->kind, v->kind == DC_OBS_CATEGORY ? (int64_t)v->n_categories : -1,
                      b, first, v->n, st.null_count};
  dc_sealval mn = cv_sealval_of_stat(v->kind, &st, 0), mx = cv_sealval_of_stat(v->kind, &st, 1), pr;
  memset(&pr, 0, sizeof pr);
  if (st.present) { pr.type = DC_SV_BLOB; pr.p = st.present; pr.n = st.present_len; }
  int64_t seal = 0;
  int rc = dc_seal_block(w->dataset_id, &pl, &mn, &mx, &pr, len, blob, &seal) ? cv_fail(e, "out of memory") : 0;
  sqlite3_bind_int64(s, 11, seal);
  if (!rc) rc = step(w, s, "writing cells_blocks", e);
  if (nulls) *nulls += (int64_t)st.null_count;
  if (bytes) *bytes += (int64_t)(len + st.present_len);
  dc_obs_stats_clear(&st);
  free(blob);
  return rc;
}

int dsw_fail_no_meta(sqlite3 *db, const char *path, cv_err *e) {
  int ec = sqlite3_extended_errcode(db) & 0xff;
  if (ec == SQLITE_CORRUPT || ec == SQLITE_NOTADB) {   /* an SQLite file, damaged: not "not a dataset" */
    struct stat st;
    long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    return cv_fail(e, "%s: damaged or truncated: an SQLite file of %lld bytes that SQLite reports malformed (%s); "
                   "convert it again or restore a copy", path, size, sqlite3_errmsg(db));
  }
  return cv_fail(e, "%s: not a deltacells dataset (no dc_meta format_version)", path);
}

int dsw_fsync_path(const char *path, int dir) {
  int fd = open(path, (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return -1;
  int r = fsync(fd);
  close(fd);
  return r;
}

int dsw_finish(dsw *w, const char *out_path, int force, cv_err *e) {
  char *msg = NULL;
  if (sqlite3_deltacells_init(w->db, &msg, NULL) != SQLITE_OK) {
    int r = cv_fail(e, "%s: loading the deltacells extension: %s", w->tmp_path, msg ? msg : "failed");
    sqlite3_free(msg);
    return r;
  }
  sqlite3_free(msg);
  for (size_t i = 0; i < sizeof VTABS / sizeof *VTABS; i++)
    if (exec(w, VTABS[i], e)) return -1;
  if (cv_write_pagemap(w->db, e)) return cv_prefix(e, "%s", w->out_path ? w->out_path : w->tmp_path);
  if (exec(w, "COMMIT;", e)) return -1;
  sqlite3_stmt **sts[] = {&w->ins_tile, &w->ins_block, &w->ins_dict, &w->ins_col, &w->ins_gblock, &w->ins_gcol, &w->ins_meta};
  for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) {
    sqlite3_finalize(*sts[i]);
    *sts[i] = NULL;
  }
  if (sqlite3_close(w->db) != SQLITE_OK) return db_fail(w, e, "close");
  w->db = NULL;
  if (!w->no_sync && dsw_fsync_path(w->tmp_path, 0) != 0) return cv_fail(e, "%s: fsync: %s", w->tmp_path, strerror(errno));
  if (force) {
    if (rename(w->tmp_path, out_path) != 0)
      return cv_fail(e, "%s: cannot rename the finished dataset into place: %s", out_path, strerror(errno));
  } else {
    /* never replace a file that appeared meanwhile */
    if (renameat2(AT_FDCWD, w->tmp_path, AT_FDCWD, out_path, RENAME_NOREPLACE) != 0) {
      if (errno == EEXIST) return cv_fail(e, "%s: exists (use --force to replace it)", out_path);
      if (errno != EINVAL && errno != ENOSYS)
        return cv_fail(e, "%s: cannot rename the finished dataset into place: %s", out_path, strerror(errno));
      if (link(w->tmp_path, out_path) != 0)
        return cv_fail(e, "%s: %s", out_path, errno == EEXIST ? "exists (use --force to replace it)" : strerror(errno));
      unlink(w->tmp_path);
    }
  }
  char *d = strdup(out_path);
  if (d && !w->no_sync) {
    dsw_fsync_path(dirname(d), 1);
  }
  free(d);
  if (w->lock_fd >= 0) close(w->lock_fd);
  w->lock_fd = -1;
  free(w->tmp_path);
  w->tmp_path = NULL;
  free(w->out_path);
  w->out_path = NULL;
  return 0;
}

void dsw_abort(dsw *w) {
  sqlite3_stmt **sts[] = {&w->ins_tile, &w->ins_block, &w->ins_dict, &w->ins_col, &w->ins_gblock, &w->ins_gcol, &w->ins_meta};
  for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) {
    sqlite3_finalize(*sts[i]);
    *sts[i] = NULL;
  }
  if (w->db) sqlite3_close(w->db);
  w->db = NULL;
  if (w->tmp_path) {
    unlink(w->tmp_path);
    /* journal files, should SQLite have made any */
    size_t n = strlen(w->tmp_path);
    char *j = malloc(n + 16);
    if (j) {
      snprintf(j, n + 16, "%s-journal", w->tmp_path);
      unlink(j);
      snprintf(j, n + 16, "%s-wal", w->tmp_path);
      unlink(j);
      free(j);
    }
  }
  if (w->lock_fd >= 0) close(w->lock_fd);   /* after unlinking: no one could take it over */
  w->lock_fd = -1;
  free(w->tmp_path);
  w->tmp_path = NULL;
  free(w->out_path);
  w->out_path = NULL;
}

int64_t cv_file_size(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  return (int64_t)st.st_size;
}

dc_sealval cv_sealval_of_column(sqlite3_stmt *st, int i) {
  dc_sealval v;
  memset(&v, 0, sizeof v);
  switch (sqlite3_column_type(st, i)) {
    case SQLITE_INTEGER: v.type = DC_SV_INT; v.i = sqlite3_column_int64(st, i); break;
    case SQLITE_FLOAT: v.type = DC_SV_REAL; v.f = sqlite3_column_double(st, i); break;
    case SQLITE_TEXT: v.type = DC_SV_TEXT; v.p = sqlite3_column_text(st, i); v.n = (size_t)sqlite3_column_bytes(st, i); break;
    case SQLITE_BLOB: v.type = DC_SV_BLOB; v.p = sqlite3_column_blob(st, i); v.n = (size_t)sqlite3_column_bytes(st, i); break;
    default: v.type = DC_SV_NULL; break;
  }
  return v;
}

dc_sealval cv_sealval_of_stat(int kind, const dc_obs_stats *st, int max) {
  dc_sealval v;
  memset(&v, 0, sizeof v);
  if (!st->has_minmax) return v;
  if (kind == DC_OBS_REAL) { v.type = DC_SV_REAL; v.f = max ? st->max_f : st->min_f; }
  else if (kind == DC_OBS_TEXT) { v.type = DC_SV_TEXT; v.p = max ? st->max_s : st->min_s; v.n = max ? st->max_len : st->min_len; }
  else { v.type = DC_SV_INT; v.i = max ? st->max_i : st->min_i; }
  return v;
}
