/*
** bench_blob_read.c — how fast the tile blobs of a dataset read through
** sqlite3_blob, and how that depends on the SQLite page size.
**
**   build/bench_blob_read [--runs N] [--page-sizes 4096,16384,...] [--workdir DIR]
**                         [--mmap BYTES] [--json] DATASET [DATASET ...]
**
** For every dataset given, and for a copy of the first one at each of
** --page-sizes (made with PRAGMA page_size + VACUUM INTO, in --workdir,
** default the first dataset's directory), it times reading every tile blob of
** tiles_data as the extension does: one sqlite3_blob handle moved with
** sqlite3_blob_reopen, the first 4 KiB (the header probe), then the rest of
** the blob in one sqlite3_blob_read into a buffer reused across runs (warmed
** up first, so first-touch page faults are not timed).  The files are read
** in turn within each run (--runs, default 25), so all of them see the same
** machine load; it prints the best and the median time per file and their
** ratio to the first file's.  The files are in the OS page cache (warm reads):
** this measures SQLite's cost per page, not the disk.
** --mmap sets PRAGMA mmap_size on every connection (SQLite's default is 0,
** and the extension never changes it).  With --json the last line is one
** JSON object.
*/
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 32
#define PROBE 4096

typedef struct {
  char path[4096];
  int made;            /* a copy this program made (deleted at the end) */
  sqlite3 *db;
  int page_size;
  int64_t file_bytes, blob_bytes, n_tiles, max_blob;
  double *t;           /* ms per run */
} entry;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* appends s as a JSON string */
static void json_str(sqlite3_str *js, const char *s) {
  sqlite3_str_appendchar(js, 1, '"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') sqlite3_str_appendf(js, "\\%c", *s);
    else if ((unsigned char)*s < 0x20) sqlite3_str_appendf(js, "\\u%04x", *s);
    else sqlite3_str_appendchar(js, 1, *s);
  }
  sqlite3_str_appendchar(js, 1, '"');
}

static void die(const char *what, sqlite3 *db) {
  fprintf(stderr, "bench_blob_read: %s: %s\n", what, db ? sqlite3_errmsg(db) : "failed");
  exit(1);
}

static int64_t q_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) die(sql, db);
  int64_t v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
  sqlite3_finalize(st);
  return v;
}

static void open_entry(entry *e, long long mmap_bytes) {
  if (sqlite3_open_v2(e->path, &e->db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die(e->path, e->db);
  if (mmap_bytes > 0) {
    char *sql = sqlite3_mprintf("PRAGMA mmap_size=%lld", mmap_bytes);
    if (sqlite3_exec(e->db, sql, NULL, NULL, NULL) != SQLITE_OK) die("PRAGMA mmap_size", e->db);
    sqlite3_free(sql);
  }
  e->page_size = (int)q_int(e->db, "PRAGMA page_size");
  e->file_bytes = q_int(e->db, "PRAGMA page_count") * e->page_size;
  e->n_tiles = q_int(e->db, "SELECT count(*) FROM tiles_data");
  e->blob_bytes = q_int(e->db, "SELECT coalesce(sum(length(data)), 0) FROM tiles_data");
  e->max_blob = q_int(e->db, "SELECT coalesce(max(length(data)), 0) FROM tiles_data");
  if (e->n_tiles < 0 || e->blob_bytes < 0) die("not a deltacells dataset (no tiles_data)", e->db);
}

/* Reads every tile blob once; returns the ms it took. */
static double read_all(entry *e, uint8_t *buf) {
  sqlite3_blob *b = NULL;
  double t0 = now_ms();
  if (sqlite3_exec(e->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) die("BEGIN", e->db);
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(e->db, "SELECT tile FROM tiles_data ORDER BY tile", -1, &st, NULL) != SQLITE_OK)
    die("tiles_data", e->db);
  while (sqlite3_step(st) == SQLITE_ROW) {
    int64_t tile = sqlite3_column_int64(st, 0);
    int rc = b ? sqlite3_blob_reopen(b, tile) : sqlite3_blob_open(e->db, "main", "tiles_data", "data", tile, 0, &b);
    if (rc != SQLITE_OK) die("sqlite3_blob_open", e->db);
    int n = sqlite3_blob_bytes(b), head = n < PROBE ? n : PROBE;
    if (sqlite3_blob_read(b, buf, head, 0) != SQLITE_OK) die("sqlite3_blob_read", e->db);
    if (n > head && sqlite3_blob_read(b, buf + head, n - head, head) != SQLITE_OK) die("sqlite3_blob_read", e->db);
  }
  sqlite3_finalize(st);
  if (b) sqlite3_blob_close(b);
  sqlite3_exec(e->db, "COMMIT", NULL, NULL, NULL);
  return now_ms() - t0;
}

int main(int argc, char **argv) {
  entry *es = calloc(MAX_FILES, sizeof *es);
  int ne = 0, runs = 25, json = 0;
  long long mmap_bytes = 0;
  const char *sizes = NULL, *workdir = NULL;
  const char *inputs[MAX_FILES];
  int ni = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--page-sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(argv[i], "--workdir") && i + 1 < argc) workdir = argv[++i];
    else if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--mmap") && i + 1 < argc) mmap_bytes = atoll(argv[++i]);
    else if (argv[i][0] == '-') {
      fprintf(stderr, "usage: bench_blob_read [--runs N] [--page-sizes A,B,...] [--workdir DIR] [--json] DATASET...\n");
      return 2;
    } else if (ni < MAX_FILES) inputs[ni++] = argv[i];
  }
  if (!ni || runs < 1) {
    fprintf(stderr, "bench_blob_read: which dataset? (and --runs >= 1)\n");
    return 2;
  }
  for (int i = 0; i < ni; i++) snprintf(es[ne++].path, sizeof es[0].path, "%s", inputs[i]);
  if (sizes) {
    char dir[3072];
    if (workdir) snprintf(dir, sizeof dir, "%s", workdir);
    else {
      snprintf(dir, sizeof dir, "%s", inputs[0]);
      char *sl = strrchr(dir, '/');
      if (sl) *sl = 0; else snprintf(dir, sizeof dir, ".");
    }
    sqlite3 *src;
    if (sqlite3_open_v2(inputs[0], &src, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) die(inputs[0], src);
    for (const char *p = sizes; *p && ne < MAX_FILES;) {
      int ps = atoi(p);
      entry *e = &es[ne++];
      snprintf(e->path, sizeof e->path, "%s/.bench_blob_read.%d.%d.dcdb", dir, (int)getpid(), ps);
      unlink(e->path);
      char *sql = sqlite3_mprintf("PRAGMA page_size=%d; VACUUM INTO %Q", ps, e->path);
      if (sqlite3_exec(src, sql, NULL, NULL, NULL) != SQLITE_OK) die("VACUUM INTO", src);
      sqlite3_free(sql);
      e->made = 1;
      p = strchr(p, ',');
      if (!p) break;
      p++;
    }
    sqlite3_close(src);
  }
  int64_t maxb = 1;
  for (int i = 0; i < ne; i++) {
    open_entry(&es[i], mmap_bytes);
    if (es[i].max_blob > maxb) maxb = es[i].max_blob;
    es[i].t = calloc((size_t)runs, sizeof(double));
  }
  uint8_t *buf = malloc((size_t)maxb);
  if (!buf) { fprintf(stderr, "bench_blob_read: out of memory\n"); return 1; }
  memset(buf, 1, (size_t)maxb);
  for (int i = 0; i < ne; i++) read_all(&es[i], buf);          /* warm-up */
  for (int r = 0; r < runs; r++)
    for (int i = 0; i < ne; i++) es[i].t[r] = read_all(&es[i], buf);
  double best0 = 0, med0 = 0;
  printf("%-50s %6s %6s %10s %10s %9s %9s %8s %7s %7s\n", "dataset", "page", "tiles", "blob MB", "file MB",
         "best ms", "median", "GB/s", "x best", "x med");
  sqlite3_str *js = sqlite3_str_new(NULL);
  sqlite3_str_appendf(js, "{\"runs\":%d,\"files\":[", runs);
  for (int i = 0; i < ne; i++) {
    entry *e = &es[i];
    qsort(e->t, (size_t)runs, sizeof(double), cmp_double);
    double best = e->t[0], med = runs % 2 ? e->t[runs / 2] : 0.5 * (e->t[runs / 2 - 1] + e->t[runs / 2]);
    if (i == 0) { best0 = best; med0 = med; }
    const char *name = e->made ? "(copy of the first at this page size)" : e->path;
    printf("%-50.50s %6d %6lld %10.2f %10.2f %9.3f %9.3f %8.2f %7.2f %7.2f\n", name, e->page_size,
           (long long)e->n_tiles, e->blob_bytes / 1e6, e->file_bytes / 1e6, best, med,
           best > 0 ? e->blob_bytes / best / 1e6 : 0.0, best0 > 0 ? best / best0 : 0.0, med0 > 0 ? med / med0 : 0.0);
    sqlite3_str_appendall(js, i ? ",{\"path\":" : "{\"path\":");
    json_str(js, e->path);
    sqlite3_str_appendf(js, ",\"copy\":%s,\"page_size\":%d,\"tiles\":%lld,\"blob_bytes\":%lld,"
                        "\"file_bytes\":%lld,\"best_ms\":%.4f,\"median_ms\":%.4f,\"ratio_best\":%.4f,\"ratio_median\":%.4f}",
                        e->made ? "true" : "false", e->page_size, (long long)e->n_tiles,
                        (long long)e->blob_bytes, (long long)e->file_bytes, best, med,
                        best0 > 0 ? best / best0 : 0.0, med0 > 0 ? med / med0 : 0.0);
    sqlite3_close(e->db);
    if (e->made) unlink(e->path);
    free(e->t);
  }
  sqlite3_str_appendall(js, "]}");
  char *j = sqlite3_str_finish(js);
  if (json && j) printf("%s\n", j);
  sqlite3_free(j);
  free(buf);
  free(es);
  return 0;
}
