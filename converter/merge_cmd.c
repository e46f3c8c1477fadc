/*
** merge_cmd.c — the `append` and `merge` commands around cv_merge_into (merge.c), and the
** gene order of convert --gene-order.
**
** append: the inputs are first converted into a temporary dataset beside D
** with D's codec settings and D's genes given their ids (cv_opts.fixed_genes),
** so that every new tile is encoded once and copied; then cv_merge_into() runs
** in one transaction on D (rollback journal: a crash leaves the old dataset,
** which the next read-write open restores).
** merge: a temporary file beside the output gets A's schema and rows (its tiles
** streamed by cv_copy_tiles with their seals under a fresh dataset id, its obs
** blocks sealed again), every other dataset is merged into it, and it is
** renamed into place.
*/
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "dc_codec.h"
#include "dc_format.h"
#include "dc_obs.h"
#include "dc_seal.h"
#include "merge_store.h"

/* The extension, compiled into the converter with -DSQLITE_CORE. */
int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

/* ------------------------------------------------------------ append */
static char *temp_beside(const char *path, int *fd_out, cv_err *e) {
  char *a = strdup(path), *b = strdup(path);
  size_t n = strlen(path) + 64;
  char *t = malloc(n);
  if (!a || !b || !t) { free(a); free(b); free(t); cv_fail(e, "out of memory"); return NULL; }
  snprintf(t, n, "%s/.%s.tmp-XXXXXX", dirname(a), basename(b));
  free(a);
  free(b);
  int fd = mkstemp(t);
  if (fd < 0) { cv_fail(e, "%s: cannot create a temporary file beside it: %s", path, strerror(errno)); free(t); return NULL; }
  flock(fd, LOCK_EX);
  *fd_out = fd;
  return t;
}

static void unlink_db(const char *p) {
  if (!p) return;
  unlink(p);
  size_t n = strlen(p) + 16;
  char *j = malloc(n);
  if (!j) return;
  snprintf(j, n, "%s-journal", p);
  unlink(j);
  snprintf(j, n, "%s-wal", p);
  unlink(j);
  free(j);
}

/* A warning for each input that one of the dataset's sources (dc_meta sources, "file") already
** is: appended again, its cells are stored twice (as convert warns of a file given twice). */
static void warn_appended_before(sqlite3 *db, const dsinfo *D, const cv_append_opts *o) {
  sqlite3_stmt *st = NULL;
  if (!D->sources || sqlite3_prepare_v2(db, "SELECT json_extract(value, '$.file') FROM json_each(?1)", -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return;
  }
  sqlite3_bind_text(st, 1, D->sources, -1, SQLITE_STATIC);
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *f = (const char *)sqlite3_column_text(st, 0);
    struct stat a, b;
    if (!f || stat(f, &a) != 0) continue;
    for (int i = 0; i < o->n_inputs; i++) {
      if (stat(o->inputs[i], &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) continue;
      if (!strcmp(o->inputs[i], f))
        fprintf(stderr, "deltacells: warning: %s is already in %s; its cells are stored twice\n", o->inputs[i], o->dataset);
      else
        fprintf(stderr, "deltacells: warning: %s is already in %s (as %s); its cells are stored twice\n", o->inputs[i], o->dataset, f);
    }
  }
  sqlite3_finalize(st);
}

int cv_append(const cv_append_opts *o, cv_err *e) {
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  char *tpath = NULL, **names = NULL;
  uint32_t *reps = NULL;
  int tfd = -1, rc = -1, in_tx = 0;
  int64_t n_names = 0;
  double t0 = cv_now();
  struct stat st;
  if (stat(o->dataset, &st) != 0) return cv_fail(e, "%s: %s", o->dataset, strerror(errno));
  if (!S_ISREG(st.st_mode)) return cv_fail(e, "%s: not a file", o->dataset);
  for (int f = 0; f < o->n_inputs; f++) {
    struct stat a;
    if (stat(o->inputs[f], &a) == 0 && a.st_dev == st.st_dev && a.st_ino == st.st_ino)
      return cv_fail(e, "%s: is the dataset itself", o->inputs[f]);
  }
  dsw_remove_stale(o->dataset);
  if (sqlite3_open_v2(o->dataset, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
    cv_fail(e, "%s: %s", o->dataset, db ? sqlite3_errmsg(db) : "cannot open");
    goto done;
  }
  sqlite3_busy_timeout(db, 60000);
  /* the write lock first: no other writer can change the genes read below */
  if (cv_exec(db, "BEGIN IMMEDIATE", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 1;
  if (cv_read_meta(db, "main", o->dataset, &D, e)) goto done;
  warn_appended_before(db, &D, o);
  {
    vals nv;
    if (cv_load_names(db, "genes", o->dataset, &nv, e)) goto done;
    if ((int64_t)nv.n != D.n_genes) { cv_vals_free(&nv); cv_fail(e, "%s: genes holds %llu names for %lld genes", o->dataset, (unsigned long long)nv.n, (long long)D.n_genes); goto done; }
    for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) { nv.text[i] = strdup(""); }
    /* which gene of its name each is, counted in the dataset's original order as convert counts
    ** an input's (not in its stored order, by counts) */
    reps = malloc((nv.n + 1) * sizeof *reps);
    if (!reps) cv_fail(e, "out of memory");
    if (!reps || cv_dataset_gene_reps(db, "main", o->dataset, &nv, NULL, reps, e)) { cv_vals_free(&nv); goto done; }
    names = nv.text;
    n_names = (int64_t)nv.n;
    nv.text = NULL;
    free(nv.tlen);
  }
  /* the scratch dataset: one name per dataset (only the holder of the write lock gets here), of
  ** the form the next writer's stale-file cleanup knows, like the converter's own temporary file */
  {
    char *a = strdup(o->dataset), *b = strdup(o->dataset);
    size_t n = strlen(o->dataset) + 32;
    tpath = malloc(n);
    if (!a || !b || !tpath) { free(a); free(b); cv_fail(e, "out of memory"); goto done; }
    snprintf(tpath, n, "%s/.%s.tmp-append", dirname(a), basename(b));
    free(a);
    free(b);
    dsw_remove_stale(tpath);   /* the converter's temporary files of a killed append */
    tfd = open(tpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (tfd < 0) { cv_fail(e, "%s: cannot create a file beside it: %s", o->dataset, strerror(errno)); free(tpath); tpath = NULL; goto done; }
    flock(tfd, LOCK_EX);
  }
  cv_opts co;
  memset(&co, 0, sizeof co);
  co.inputs = o->inputs;
  co.n_inputs = o->n_inputs;
  co.out = tpath;
  co.layer = o->layer;
  co.raw = o->raw;
  co.gene_key = o->gene_key;
  co.threads = o->threads;
  co.tile_cells = (uint32_t)D.tile_cells;
  co.chunks = (uint32_t)D.chunks;
  co.chunk_cells = (uint32_t)D.chunk_cells;
  co.codec = dc_codec_from_name(D.codec);
  co.level = (int)D.level;
  co.level_set = D.level != 0;
  co.genes_block = (uint32_t)D.genes_block;
  co.force = 1;
  co.quiet = 1;
  co.fixed_genes = (const char *const *)names;
  co.fixed_rep = reps;
  co.n_fixed_genes = (uint32_t)n_names;
  co.genes_level = 1;
  co.obs_level = 1;     /* its obs blocks too: cv_merge_into encodes the values again */
  co.no_sync = 1;       /* a scratch file: only the dataset's own commit needs to reach the disk */   /* read once by cv_merge_into, which writes the dataset's genes table */
  if (!co.codec) { cv_fail(e, "%s: unknown codec '%s'", o->dataset, D.codec); goto done; }
  /* the new tiles go straight into the dataset (inside its transaction), numbered on */
  dsw tw;
  if (dsw_over(&tw, db, o->dataset, D.id, e)) { dsw_over_end(&tw); goto done; }
  co.tiles_to = &tw;
  co.tile_base = D.n_tiles;
  co.cell_base = D.n_cells;
  double tc = cv_now();
  int cr = cv_convert(&co, e);
  dsw_over_end(&tw);
  if (cr) { cv_rename_subject(e, tpath, o->dataset); goto done; }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: convert %.3f s\n", cv_now() - tc);
  tc = cv_now();
  int64_t c0 = D.n_cells, g0 = D.n_genes;
  int reenc = 0;
  char label[512];   /* errors name the files appended, not the scratch dataset */
  snprintf(label, sizeof label, "%s%s", o->inputs[0], o->n_inputs > 1 ? " (and the other files appended)" : "");
  if (cv_merge_into(db, &D, tpath, label, 1, 1, o->threads, &reenc, e)) goto done;
  if (reenc) { cv_fail(e, "internal: appended tiles were encoded twice"); goto done; }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: merge %.3f s\n", cv_now() - tc);
  tc = cv_now();
  if (cv_check_interrupt(e)) goto done;
  /* a schema change (a table made and dropped): other connections then declare the virtual tables again,
  ** so that `cells` shows the new obs columns there too */
  if (cv_exec(db, "CREATE TABLE main.dc_append_schema_bump(x); DROP TABLE main.dc_append_schema_bump;", e)) goto done;
  {  /* a dataset written before the tile index's covering index had one (dc_format.h) */
    char *ix = sqlite3_mprintf(DC_TILES_INDEX_SQL, "main", DC_TILES_DATA, DC_TILES_DATA);
    int xr = ix ? cv_exec(db, ix, e) : cv_fail(e, "out of memory");
    sqlite3_free(ix);
    if (xr) { cv_prefix(e, "%s", o->dataset); goto done; }
  }
  if (cv_write_pagemap(db, e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  if (cv_commit(db, o->dataset, e)) goto done;
  in_tx = 0;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: commit %.3f s\n", cv_now() - tc);
  if (!o->quiet)
    printf("%s: appended %lld cells (%lld new genes) from %d file%s; now %lld cells x %lld genes, %lld nonzeros in %lld "
           "tiles; %.1f s\n", o->dataset, (long long)(D.n_cells - c0), (long long)(D.n_genes - g0), o->n_inputs,
           o->n_inputs == 1 ? "" : "s", (long long)D.n_cells, (long long)D.n_genes, (long long)D.nnz,
           (long long)D.n_tiles, cv_now() - t0);
  rc = 0;
done:
  if (rc && db) cv_name_dataset(db, o->dataset, e);
  if (in_tx) cv_rollback(db);
  if (db) sqlite3_close(db);
  unlink_db(tpath);
  if (tfd >= 0) close(tfd);
  free(tpath);
  if (names) for (int64_t i = 0; i < n_names; i++) free(names[i]);
  free(names);
  free(reps);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ merge */
/* SQL statements of a schema kept for later, in order. */
typedef struct sqllist { char **sql; int n; size_t cap; } sqllist;

static void sqllist_free(sqllist *l) {
  for (int i = 0; i < l->n; i++) free(l->sql[i]);
  free(l->sql);
  memset(l, 0, sizeof *l);
}

static int sqllist_run(sqlite3 *db, const sqllist *l, cv_err *e) {
  for (int i = 0; i < l->n; i++)
    if (cv_exec(db, l->sql[i], e)) return -1;
  return 0;
}

/* main (an empty file) set up for the first dataset (ATTACHed as `first`): its page size, or
** min_page where that is larger (a merged dataset of many nonzeros gets the large pages even if
** its first input was small: dc_page_size_for), then one transaction (BEGIN) in which
** everything of `first` is read, so that a writer changing it meanwhile cannot make the copy a
** mix of two versions; its application id and user version. */
static int open_first(sqlite3 *db, const char *path, int64_t min_page, cv_err *e) {
  static const char *const KEEP[] = {"page_size", "application_id", "user_version"};
  int64_t kv[3];
  for (int k = 0; k < 3; k++) {
    if (k == 1 && cv_exec(db, "BEGIN", e)) return -1;
    sqlite3_stmt *q = cv_prep(db, e, "PRAGMA first.%s", KEEP[k]);
    if (!q) return cv_prefix(e, "%s", path);
    int qr = sqlite3_step(q);
    kv[k] = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    if (qr != SQLITE_ROW) return cv_sql_fail(db, e, path);
    if (k == 0 && kv[0] < min_page) kv[0] = min_page;
    if (k == 0) {   /* before the transaction: main's journal mode cannot change inside one */
      char *prag = sqlite3_mprintf("PRAGMA main.page_size=%lld; PRAGMA main.journal_mode=OFF; PRAGMA main.synchronous=OFF; "
                                   "PRAGMA main.cache_size=-2048", (long long)kv[0]);
      int rc = prag ? cv_exec(db, prag, e) : cv_fail(e, "out of memory");
      sqlite3_free(prag);
      if (rc) return -1;
    }
  }
  char *prag = sqlite3_mprintf("PRAGMA main.application_id=%lld; PRAGMA main.user_version=%lld", (long long)kv[1], (long long)kv[2]);
  int rc = prag ? cv_exec(db, prag, e) : cv_fail(e, "out of memory");
  sqlite3_free(prag);
  return rc;
}

/* The first dataset (ATTACHed as `first`) into main, an empty file (open_first): its tables, every row as it is (INSERT ... SELECT), except that tiles_data's
** rows are copied by cv_copy_tiles with their seals under new_id (one reused buffer, no blob
** taken into fresh memory; rewriting the rows of a byte copy with UPDATE read every blob twice
** into fresh memory, most of a merge's time).  Its virtual tables, then views and triggers, are
** left in late, to be created once the merged dataset is complete. */
static int copy_first(sqlite3 *db, const char *path, uint64_t old_id, uint64_t new_id, sqllist *late, cv_err *e) {
  int rc = 0;
  sqllist tables = {0}, data = {0}, idx = {0};
  sqlite3_stmt *st = cv_prep(db, e, "SELECT type, name, sql FROM first.sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid");
  if (!st) return -1;
  int r, seq = 0;
  while (!rc && (r = sqlite3_step(st)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(st, 0), *name = (const char *)sqlite3_column_text(st, 1);
    const char *sql = (const char *)sqlite3_column_text(st, 2);
    int vtab = !sqlite3_strnicmp(sql, "CREATE VIRTUAL", 14), sys = !sqlite3_strnicmp(name, "sqlite_", 7);
    sqllist *to = !strcmp(type, "table") && !vtab ? &tables : !strcmp(type, "index") ? &idx : late;
    char *copy = NULL;
    if (to == &tables && !sys && strcmp(name, DC_TILES_DATA) != 0)
      copy = sqlite3_mprintf("INSERT INTO main.\"%w\" SELECT * FROM first.\"%w\"", name, name);
    if (sys && to == &tables) {   /* sqlite_sequence: made by the tables that need it, its rows copied last */
      seq |= !strcmp(name, "sqlite_sequence");
      continue;                     /* sqlite_stat*: made by ANALYZE, not copied */
    }
    if (sql) {
      char *s = strdup(sql);
      if (!s || cv_grow((void **)&to->sql, &to->cap, (size_t)to->n + 1, sizeof *to->sql, e)) { free(s); rc = cv_fail(e, "out of memory"); break; }
      to->sql[to->n++] = s;
    }
    if (copy) {
      char *c = strdup(copy);
      sqlite3_free(copy);
      if (!c || cv_grow((void **)&data.sql, &data.cap, (size_t)data.n + 1, sizeof *data.sql, e)) { free(c); rc = cv_fail(e, "out of memory"); break; }
      data.sql[data.n++] = c;
    }
  }
  if (!rc && r != SQLITE_DONE) rc = cv_sql_fail(db, e, path);
  sqlite3_finalize(st);
  if (!rc && (sqllist_run(db, &tables, e) || sqllist_run(db, &data, e) ||
              (seq && cv_exec(db, "DELETE FROM main.sqlite_sequence; "
                                  "INSERT INTO main.sqlite_sequence SELECT * FROM first.sqlite_sequence", e))))
    rc = cv_prefix(e, "%s", path);
  double t0 = cv_now();
  if (!rc) rc = cv_copy_tiles(db, "first", path, old_id, new_id, 0, 0, e);   /* names path itself */
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "merge: tiles of the first %.3f s\n", cv_now() - t0);
  if (!rc && sqllist_run(db, &idx, e)) rc = cv_prefix(e, "%s", path);
  sqllist_free(&tables);
  sqllist_free(&data);
  sqllist_free(&idx);
  return rc;
}

/* A warning for each input that is an earlier one, or a copy of it (the same dataset id): its
** cells would be stored twice, as convert warns of a file given twice.  Inputs it cannot read
** are left to the merge, which names what is wrong with them.  Returns the nonzeros of the
** inputs it could read. */
static uint64_t warn_repeated(const cv_merge_opts *o) {
  uint64_t nnz = 0;
  uint64_t *ids = calloc((size_t)o->n_inputs + 1, sizeof *ids);
  int *ok = calloc((size_t)o->n_inputs + 1, sizeof *ok);
  for (int i = 0; ids && ok && i < o->n_inputs; i++) {
    sqlite3 *db = NULL;
    dsinfo m;
    cv_err ignored;
    memset(&m, 0, sizeof m);
    memset(&ignored, 0, sizeof ignored);
    if (sqlite3_open_v2(o->inputs[i], &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        cv_read_meta(db, "main", o->inputs[i], &m, &ignored) == 0) {
      ids[i] = m.id;
      ok[i] = 1;
      nnz += m.nnz > 0 ? (uint64_t)m.nnz : 0;
    }
    free(m.sources);
    sqlite3_close(db);
    for (int k = 0; ok[i] && k < i; k++)
      if (ok[k] && ids[k] == ids[i]) {
        if (!strcmp(o->inputs[i], o->inputs[k]))
          fprintf(stderr, "deltacells: warning: %s is given twice; its cells are stored twice\n", o->inputs[i]);
        else
          fprintf(stderr, "deltacells: warning: %s is the same dataset as %s (or a copy of it); its cells are stored twice\n",
                  o->inputs[i], o->inputs[k]);
        break;
      }
  }
  free(ids);
  free(ok);
  return nnz;
}

int cv_merge(const cv_merge_opts *o, cv_err *e) {
  struct stat st;
  if (stat(o->out, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return cv_fail(e, "%s: is a directory", o->out);
    if (!o->force) return cv_fail(e, "%s: exists (use --force to replace it)", o->out);
    for (int i = 0; i < o->n_inputs; i++) {
      struct stat a;
      if (stat(o->inputs[i], &a) == 0 && a.st_dev == st.st_dev && a.st_ino == st.st_ino)
        return cv_fail(e, "%s: the output would replace an input", o->out);
    }
  }
  for (int i = 0; i < o->n_inputs; i++)
    if (stat(o->inputs[i], &st) != 0) return cv_fail(e, "%s: %s", o->inputs[i], strerror(errno));
  uint64_t nnz_in = warn_repeated(o);
  double t0 = cv_now();
  dsw_remove_stale(o->out);
  int fd = -1, rc = -1, reenc = 0;
  char *tmp = temp_beside(o->out, &fd, e);
  if (!tmp) return -1;
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  dcol *cols = NULL;
  int nc = 0;
  sqllist late = {0};
  int timing = getenv("DELTACELLS_TIMING") != NULL;
  double tt = cv_now();
#define MERGE_STAGE(what) do { if (timing) { fprintf(stderr, "merge: %s %.3f s\n", what, cv_now() - tt); tt = cv_now(); } } while (0)
  if (sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) { cv_fail(e, "%s: cannot open it", tmp); goto done; }
  {
    sqlite3_stmt *at = cv_prep(db, e, "ATTACH %Q AS first", o->inputs[0]);
    int ar = at ? sqlite3_step(at) : SQLITE_ERROR;
    sqlite3_finalize(at);
    if (ar != SQLITE_DONE) { if (at) cv_sql_fail(db, e, o->inputs[0]); goto done; }
  }
  if (open_first(db, o->inputs[0], dc_page_size_for(nnz_in), e) || cv_read_meta(db, "first", o->inputs[0], &D, e)) goto done;
  D.out = o->out;
  /* a fresh dataset id: every seal of the first again (each checked under the old id first) */
  uint64_t old = D.id;
  if (dc_seal_new_id(&D.id) != 0) { cv_fail(e, "no random dataset id: %s", strerror(errno)); goto done; }
  if (copy_first(db, o->inputs[0], old, D.id, &late, e)) goto done;
  MERGE_STAGE("the first copied");
  {
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)D.id);
    if (cv_read_cols(db, "main", o->inputs[0], old, &cols, &nc, e)) goto done;  /* dictionaries checked under the old id */
    for (int i = 0; i < nc; i++)
      if (cv_reseal_blocks(db, old, cols[i].kind == DC_OBS_CATEGORY ? cols[i].ncat : -1, D.id, cols[i].col, cols[i].name, cols[i].kind, cols[i].kind == DC_OBS_CATEGORY ? cols[i].ncat : -1, e) ||
          cv_write_column_row(db, D.id, cols[i].col, cols[i].name, cols[i].kind, cols[i].labels, cols[i].ncat, e))
        goto done;
    sqlite3_stmt *u = cv_prep(db, e, "UPDATE dc_meta SET value = %Q WHERE key = 'dataset_id'", hex);
    if (!u) goto done;
    int r = sqlite3_step(u);
    sqlite3_finalize(u);
    if (r != SQLITE_DONE) { cv_sql_fail(db, e, "dc_meta"); goto done; }
  }
  if (cv_exec(db, "COMMIT; DETACH first", e)) goto done;
  MERGE_STAGE("obs of the first sealed again");
  for (int i = 1; i < o->n_inputs; i++)  /* the file is thrown away on any failure: a transaction each */
    if (cv_exec(db, "BEGIN", e) || cv_merge_into(db, &D, o->inputs[i], NULL, i > 1, 0, o->threads, &reenc, e) ||
        cv_exec(db, "COMMIT; DETACH src", e))
      goto done;
  MERGE_STAGE("the others merged");
  {  /* the virtual tables (and any views and triggers) of the first, now that the dataset is complete */
    char *msg = NULL;
    if (sqlite3_deltacells_init(db, &msg, NULL) != SQLITE_OK) {
      cv_fail(e, "%s: loading the deltacells extension: %s", tmp, msg ? msg : "failed");
      sqlite3_free(msg);
      goto done;
    }
    sqlite3_free(msg);
    if (cv_exec(db, "BEGIN", e) || sqllist_run(db, &late, e) || cv_write_pagemap(db, e) || cv_exec(db, "COMMIT", e))
      goto done;
  }
  if (sqlite3_close(db) != SQLITE_OK) { cv_fail(e, "%s: close", tmp); db = NULL; goto done; }
  db = NULL;
  MERGE_STAGE("close");
  if (fsync(fd) != 0) { cv_fail(e, "%s: fsync: %s", tmp, strerror(errno)); goto done; }
  MERGE_STAGE("fsync");
  if (o->force ? rename(tmp, o->out) != 0 : renameat2(AT_FDCWD, tmp, AT_FDCWD, o->out, RENAME_NOREPLACE) != 0) {
    cv_fail(e, "%s: %s", o->out, errno == EEXIST ? "exists (use --force to replace it)" : strerror(errno));
    goto done;
  }
  free(tmp);
  tmp = NULL;
  if (!o->quiet)
    printf("%s: %lld cells x %lld genes, %lld nonzeros in %lld tiles from %d datasets (%d tiles decoded and encoded again "
           "for their gene ids, the others copied); %.1f s\n", o->out, (long long)D.n_cells, (long long)D.n_genes,
           (long long)D.nnz, (long long)D.n_tiles, o->n_inputs, reenc, cv_now() - t0);
  rc = 0;
done:
  if (rc && db) cv_name_dataset(db, o->out, e);
  cv_dcols_free(cols, nc);
  sqllist_free(&late);
  if (db) sqlite3_close(db);
  unlink_db(tmp);
  free(tmp);
  if (fd >= 0) close(fd);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ convert --gene-order */
int cv_gene_order_load(const char *path, char ***names, uint32_t **reps, uint32_t *n, cv_err *e) {
  *names = NULL;
  *reps = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return cv_fail(e, "--gene-order %s: %s", path, strerror(errno));
  char hdr[16];
  size_t got = fread(hdr, 1, 16, f);
  if (got == 16 && !memcmp(hdr, "SQLite format 3", 16)) {   /* a dataset */
    fclose(f);
    sqlite3 *db = NULL;
    dsinfo D;
    memset(&D, 0, sizeof D);
    vals nv;
    memset(&nv, 0, sizeof nv);
    int rc = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) cv_fail(e, "--gene-order %s: cannot open", path);
    else if (!cv_read_meta(db, "main", path, &D, e) && !cv_load_names(db, "genes", path, &nv, e)) {
      uint32_t *r = malloc((nv.n + 1) * sizeof *r);   /* counted in its original order, as append counts */
      if (!r) cv_fail(e, "out of memory");
      else if (!cv_dataset_gene_reps(db, "main", path, &nv, NULL, r, e)) {
        for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) nv.text[i] = strdup("");
        *reps = r;
        r = NULL;
        *names = nv.text;
        *n = (uint32_t)nv.n;
        nv.text = NULL;
        nv.n = 0;
        rc = 0;
      }
      free(r);
    }
    cv_vals_free(&nv);
    free(D.sources);
    if (db) sqlite3_close(db);
    return rc;
  }
  rewind(f);
  char *line = NULL;
  size_t cap = 0, ncap = 0;
  ssize_t len;
  cv_map seen = {0};
  int rc = 0;
  int64_t ln = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    ln++;
    char *s = line, *t = line + len;
    while (s < t && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')) s++;
    while (t > s && (t[-1] == ' ' || t[-1] == '\t' || t[-1] == '\r' || t[-1] == '\n')) t--;
    if (s == t) continue;
    *t = 0;
    if (!cv_utf8_valid(s, (size_t)(t - s))) { rc = cv_fail(e, "--gene-order %s: line %lld is not UTF-8 text", path, (long long)ln); break; }
    if (cv_grow((void **)names, &ncap, (size_t)*n + 1, sizeof **names, e)) { rc = -1; break; }
    (*names)[*n] = strdup(s);
    if (!(*names)[(*n)++]) { rc = cv_fail(e, "out of memory"); break; }
  }
  cv_map_free(&seen);
  free(line);
  fclose(f);
  if (!rc && !*n) rc = cv_fail(e, "--gene-order %s: no gene names", path);
  if (rc) {
    for (uint32_t i = 0; i < *n; i++) free((*names)[i]);
    free(*names);
    *names = NULL;
    *n = 0;
  }
  return rc;
}
