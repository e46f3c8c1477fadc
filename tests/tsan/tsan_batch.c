/*
** tsan_batch.c — concurrent dc_batch calls under ThreadSanitizer: four threads, each with its own
** connection to the same dataset, run dc_batch (and expression, cells) at the same time, while
** the extension's process-wide state (the remote VFS registration, buffer pools) and each
** connection's decoder pool are in use.  Each thread checks that every batch gives the same
** bytes as the first thread's reference run.  Built from the extension's sources with
** -fsanitize=thread (tests/run_all.sh runs it on build/fuzz/fuzz_sql.dcdb); prints "ok NAME" or
** "FAIL NAME: why" like the C tests.
*/
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

#define THREADS 4
#define ROUNDS 12
#define BATCH 40

static const char *g_path;
static int64_t g_ncells;
static uint64_t g_ref[ROUNDS];     /* a digest of each round's result, from the reference run */

static uint64_t fnv(uint64_t h, const void *p, int n) {
  const uint8_t *b = p;
  for (int i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
  return h;
}

static sqlite3 *open_db(char *why, size_t nwhy) {
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(g_path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
    snprintf(why, nwhy, "open %s: %s", g_path, db ? sqlite3_errmsg(db) : "?");
    sqlite3_close(db);
    return NULL;
  }
  char *err = NULL;
  if (sqlite3_deltacells_init(db, &err, NULL) != SQLITE_OK) {
    snprintf(why, nwhy, "init: %s", err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_exec(db, "SELECT dc_config('threads', 2), dc_config('cache_mb', 4)", NULL, NULL, NULL);
  return db;
}

/* round r's digest: dc_batch of BATCH cells chosen by r, expression of one cell, a cells count */
static int round_digest(sqlite3 *db, int r, uint64_t *out, char *why, size_t nwhy) {
  int64_t ids[BATCH];
  for (int i = 0; i < BATCH; i++) ids[i] = (int64_t)(((uint64_t)(r + 1) * 2654435761u + (uint64_t)i * 40503u) % (uint64_t)g_ncells);
  uint64_t h = 1469598103934665603ull;
  sqlite3_stmt *st = NULL;
  const char *sql[] = {"SELECT indptr, indices, data FROM dc_batch(?1)",
                       "SELECT genes, counts FROM expression WHERE cell_id = ?2",
                       "SELECT count(*), sum(cell_id) FROM cells WHERE cell_type = (SELECT cell_type FROM cells WHERE cell_id = ?2)"};
  for (int q = 0; q < 3; q++) {
    if (sqlite3_prepare_v2(db, sql[q], -1, &st, NULL) != SQLITE_OK) {
      snprintf(why, nwhy, "prepare: %s", sqlite3_errmsg(db));
      return 0;
    }
    if (sqlite3_bind_parameter_count(st) >= 1 && q == 0) sqlite3_bind_blob(st, 1, ids, sizeof ids, SQLITE_STATIC);
    if (q > 0) sqlite3_bind_int64(st, 1 + (q > 0), ids[r % BATCH]);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(st); c++) {
        const void *p = sqlite3_column_blob(st, c);
        h = fnv(h, p, sqlite3_column_bytes(st, c));
      }
    }
    if (rc != SQLITE_DONE) {
      snprintf(why, nwhy, "query %d: %s", q, sqlite3_errmsg(db));
      sqlite3_finalize(st);
      return 0;
    }
    sqlite3_finalize(st);
  }
  *out = h;
  return 1;
}

typedef struct { int id; int ok; char why[256]; } worker_t;

static void *worker(void *v) {
  worker_t *w = v;
  w->ok = 0;
  sqlite3 *db = open_db(w->why, sizeof w->why);
  if (!db) return NULL;
  for (int k = 0; k < ROUNDS; k++) {
    int r = (k + w->id * 5) % ROUNDS;
    uint64_t h;
    if (!round_digest(db, r, &h, w->why, sizeof w->why)) { sqlite3_close(db); return NULL; }
    if (h != g_ref[r]) {
      snprintf(w->why, sizeof w->why, "thread %d round %d: result differs from the reference run", w->id, r);
      sqlite3_close(db);
      return NULL;
    }
  }
  sqlite3_close(db);
  w->ok = 1;
  return NULL;
}

int main(int argc, char **argv) {
  g_path = argc > 1 ? argv[1] : "build/fuzz/fuzz_sql.dcdb";
  char why[256] = "";
  sqlite3 *db = open_db(why, sizeof why);
  if (!db) { printf("FAIL tsan_concurrent_batches: %s\n", why); return 1; }
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM cells", -1, &st, NULL) != SQLITE_OK || sqlite3_step(st) != SQLITE_ROW) {
    printf("FAIL tsan_concurrent_batches: %s\n", sqlite3_errmsg(db));
    return 1;
  }
  g_ncells = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  for (int r = 0; r < ROUNDS; r++) {
    if (g_ncells <= 0 || !round_digest(db, r, &g_ref[r], why, sizeof why)) {
      printf("FAIL tsan_concurrent_batches: reference run: %s\n", why);
      return 1;
    }
  }
  sqlite3_close(db);
  pthread_t t[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i].id = i;
    w[i].why[0] = 0;
    if (pthread_create(&t[i], NULL, worker, &w[i]) != 0) { printf("FAIL tsan_concurrent_batches: pthread_create\n"); return 1; }
  }
  int ok = 1;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    if (!w[i].ok) { printf("FAIL tsan_concurrent_batches: %s\n", w[i].why); ok = 0; }
  }
  if (ok) printf("ok tsan_concurrent_batches\n");
  return ok ? 0 : 1;
}
