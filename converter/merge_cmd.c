/*
** merge_cmd.c — the `append` and `merge` commands around cv_merge_into (merge.c), and the
** gene order of convert --gene-order.
**
** append: the inputs are first converted into a temporary dataset beside D
** with D's codec settings and D's genes given their ids (cv_opts.fixed_genes),
** so that every new tile is encoded once and copied; then cv_merge_into() runs
** in one transaction on D (rollback journal: a crash leaves the old dataset,
** which the next read-write open restores).
** merge: A is copied to a temporary file beside the output, given a fresh
** dataset id (every seal computed again), every other dataset is merged into
** it, and it is renamed into place.
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

int cv_append(const cv_append_opts *o, cv_err *e) {
  sqlite3 *db = NULL;
  dsinfo D;
  memset(&D, 0, sizeof D);
  char *tpath = NULL, **names = NULL;
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
  {
    vals nv;
    if (cv_load_names(db, "genes", o->dataset, &nv, e)) goto done;
    if ((int64_t)nv.n != D.n_genes) { cv_vals_free(&nv); cv_fail(e, "%s: genes holds %llu names for %lld genes", o->dataset, (unsigned long long)nv.n, (long long)D.n_genes); goto done; }
    for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) { nv.text[i] = strdup(""); }
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
  co.codec = dc_codec_from_name(D.codec);
  co.level = (int)D.level;
  co.level_set = D.level != 0;
  co.genes_block = (uint32_t)D.genes_block;
  co.force = 1;
  co.quiet = 1;
  co.fixed_genes = (const char *const *)names;
  co.n_fixed_genes = (uint32_t)n_names;
  co.genes_level = 1;
  co.no_sync = 1;       /* a scratch file: only the dataset's own commit needs to reach the disk */   /* read once by cv_merge_into, which writes the dataset's genes table */
  if (!co.codec) { cv_fail(e, "%s: unknown codec '%s'", o->dataset, D.codec); goto done; }
  /* the new tiles go straight into the dataset (inside its transaction), numbered on */
  dsw tw;
  if (dsw_over(&tw, db, D.id, e)) { dsw_over_end(&tw); goto done; }
  co.tiles_to = &tw;
  co.tile_base = D.n_tiles;
  co.cell_base = D.n_cells;
  double tc = cv_now();
  int cr = cv_convert(&co, e);
  dsw_over_end(&tw);
  if (cr) goto done;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: convert %.3f s\n", cv_now() - tc);
  tc = cv_now();
  int64_t c0 = D.n_cells, g0 = D.n_genes;
  int reenc = 0;
  if (cv_merge_into(db, &D, tpath, 1, 1, o->threads, &reenc, e)) goto done;
  if (reenc) { cv_fail(e, "internal: appended tiles were encoded twice"); goto done; }
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: merge %.3f s\n", cv_now() - tc);
  tc = cv_now();
  if (cv_check_interrupt(e)) goto done;
  /* a schema change (a table made and dropped): other connections then declare the virtual tables again,
  ** so that `cells` shows the new obs columns there too */
  if (cv_exec(db, "CREATE TABLE main.dc_append_schema_bump(x); DROP TABLE main.dc_append_schema_bump;", e)) goto done;
  if (cv_exec(db, "COMMIT", e)) { cv_prefix(e, "%s", o->dataset); goto done; }
  in_tx = 0;
  if (getenv("DELTACELLS_TIMING")) fprintf(stderr, "append: commit %.3f s\n", cv_now() - tc);
  if (!o->quiet)
    printf("%s: appended %lld cells (%lld new genes) from %d file%s; now %lld cells x %lld genes, %lld nonzeros in %lld "
           "tiles; %.1f s\n", o->dataset, (long long)(D.n_cells - c0), (long long)(D.n_genes - g0), o->n_inputs,
           o->n_inputs == 1 ? "" : "s", (long long)D.n_cells, (long long)D.n_genes, (long long)D.nnz,
           (long long)D.n_tiles, cv_now() - t0);
  rc = 0;
done:
  if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  if (db) sqlite3_close(db);
  unlink_db(tpath);
  if (tfd >= 0) close(tfd);
  free(tpath);
  if (names) for (int64_t i = 0; i < n_names; i++) free(names[i]);
  free(names);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ merge */
static int copy_file(const char *from, int to_fd, cv_err *e) {
  int in = open(from, O_RDONLY | O_CLOEXEC);
  if (in < 0) return cv_fail(e, "%s: %s", from, strerror(errno));
  char *buf = malloc(1 << 20);
  int rc = buf ? 0 : cv_fail(e, "out of memory");
  ssize_t n;
  while (!rc && (n = read(in, buf, 1 << 20)) != 0) {
    if (n < 0) { rc = cv_fail(e, "%s: %s", from, strerror(errno)); break; }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to_fd, buf + off, (size_t)(n - off));
      if (w <= 0) { rc = cv_fail(e, "writing a copy of %s: %s", from, strerror(errno)); break; }
      off += w;
    }
  }
  free(buf);
  close(in);
  return rc;
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
  if (copy_file(o->inputs[0], fd, e)) goto done;
  if (sqlite3_open_v2(tmp, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) { cv_fail(e, "%s: cannot open a copy", o->inputs[0]); goto done; }
  if (cv_exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-16384; BEGIN", e)) goto done;
  if (cv_read_meta(db, "main", o->inputs[0], &D, e)) goto done;
  /* a fresh dataset id: every seal of the copy again (each checked under the old id first) */
  uint64_t old = D.id;
  if (dc_seal_new_id(&D.id) != 0) { cv_fail(e, "no random dataset id: %s", strerror(errno)); goto done; }
  {
    seal_fn_ctx fc = {old, D.id};
    char hex[17], *m = NULL;
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)D.id);
    if (sqlite3_create_function(db, "cv_reseal_tile", 9, SQLITE_UTF8, &fc, cv_fn_reseal_tile, NULL, NULL) != SQLITE_OK) { cv_sql_fail(db, e, "function"); goto done; }
    if (sqlite3_exec(db, "UPDATE tiles_data SET checksum = cv_reseal_tile(tile, first_cell, tile, first_cell, n_cells, nnz, "
                         "chunks, data, checksum)", NULL, NULL, &m) != SQLITE_OK) {
      cv_fail(e, "%s: %s", o->inputs[0], m ? m : sqlite3_errmsg(db));
      sqlite3_free(m);
      goto done;
    }
    if (cv_read_cols(db, "main", o->inputs[0], &cols, &nc, e)) goto done;
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
  for (int i = 1; i < o->n_inputs; i++)  /* the copy is thrown away on any failure: a transaction each */
    if (cv_merge_into(db, &D, o->inputs[i], i > 1, 0, o->threads, &reenc, e) || cv_exec(db, "COMMIT; DETACH src", e) ||
        (i + 1 < o->n_inputs && cv_exec(db, "BEGIN", e)))
      goto done;
  if (sqlite3_close(db) != SQLITE_OK) { cv_fail(e, "%s: close", tmp); db = NULL; goto done; }
  db = NULL;
  if (fsync(fd) != 0) { cv_fail(e, "%s: fsync: %s", tmp, strerror(errno)); goto done; }
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
  cv_dcols_free(cols, nc);
  if (db) sqlite3_close(db);
  unlink_db(tmp);
  free(tmp);
  if (fd >= 0) close(fd);
  free(D.sources);
  return rc;
}

/* ------------------------------------------------------------ convert --gene-order */
int cv_gene_order_load(const char *path, char ***names, uint32_t *n, cv_err *e) {
  *names = NULL;
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
    else if (!cv_read_meta(db, "main", path, &D, e)) {
      if (!cv_load_names(db, "genes", path, &nv, e)) {
        for (uint64_t i = 0; i < nv.n; i++) if (!nv.text[i]) nv.text[i] = strdup("");
        *names = nv.text;
        *n = (uint32_t)nv.n;
        nv.text = NULL;
        nv.n = 0;
        rc = 0;
      }
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
