/*
** tsan_vfs.c — the dchttp VFS's prefetch threads and their concurrent users under ThreadSanitizer.
** Built from the extension's sources with -fsanitize=thread (tests/run_all.sh runs it on
** build/tsan/tsan_vfs.dcdb, a small converted dataset).  The program serves that file itself: a
** minimal HTTP/1.1 range server on 127.0.0.1 (a thread per keep-alive connection; Range GETs
** answered 206 with Content-Range and an ETag; any path ending in .dcdb is the file, so each test
** uses its own URL and so its own key in the process's shared block cache).  Tests:
**   tsan_vfs_prefetch_read     one open file read through the VFS: sequential pages (prefetch on,
**                              4 threads in flight), reads across block borders, jumps; every byte
**                              compared with the file; prefetch must have served blocks
**   tsan_vfs_close_inflight    the server stalls every request from the middle of the file on; the
**                              reader stops before it and closes while requests are stalled: the
**                              close must abort them (well before the stall ends)
**   tsan_vfs_close_throttled_local  a local file with a 1 s emulated latency: close while prefetch
**                              threads wait it out ends their waits at once
**   tsan_vfs_faults            every 5th request fails (a 503 or a reset mid-body): failed prefetch
**                              requests are fetched again by the reader; every byte is right
**   tsan_vfs_shared_threads    three threads, each with its own open file of one URL, read it at
**                              once (their prefetchers filling the shared block cache, the reading
**                              threads one on-disk cache directory); then a
**                              fourth file without prefetch reads every block from that cache
**   tsan_vfs_fetch_threads     three threads, a connection each on one URL, ask for every tile's
**                              pages with dc_vfs_fetch (the page map's ranges; prefetch threads
**                              filling the shared block cache) and read the tiles: each the same
**                              blobs as the local file
**   tsan_vfs_sql_concurrent    dc_batch over every cell and SELECT * FROM cells in five threads at
**                              once: three with a connection each (two over HTTP, one a throttled
**                              local file) and two sharing one connection over HTTP, all with
**                              prefetch, each checked against the local file
** Prints "ok NAME", "FAIL NAME: why" or "skip NAME: why" like the C tests; TSan's report (with
** TSAN_OPTIONS=halt_on_error=1:exitcode=66) makes the exit status nonzero.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int sqlite3_deltacells_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* --- the range server -------------------------------------------------------------------- */
#define MAX_CONN 256
static struct {
  int lfd, port;
  uint8_t *data;
  int64_t size;
  pthread_t accept_th;
  _Atomic int stop;
  pthread_mutex_t mu;                 /* the connections: their threads and sockets */
  int nconn;
  pthread_t th[MAX_CONN];
  int fd[MAX_CONN];
  _Atomic int64_t stall_from;         /* requests starting at or after this offset stall (-1: none) */
  _Atomic int stall_ms;
  _Atomic int stalled_now, stalled_total, requests;
  _Atomic int fault_every;            /* every Nth request of the file fails: a 503, or a reset mid-body */
  _Atomic int fault_seq, faults;
} S = {.lfd = -1};

static int send_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    b += k; n -= (size_t)k;
  }
  return 1;
}

static void conn_serve(int fd) {
  char req[8192];
  size_t have = 0;
  for (;;) {
    char *end;
    while (!(end = memmem(req, have, "\r\n\r\n", 4))) {
      if (have == sizeof req) return;
      ssize_t k = recv(fd, req + have, sizeof req - have, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return;                        /* the client closed (or the server stops) */
      have += (size_t)k;
    }
    size_t hlen = (size_t)(end - req) + 4;
    *end = 0;
    atomic_fetch_add(&S.requests, 1);
    char method[16] = "", path[1024] = "";
    sscanf(req, "%15s %1023s", method, path);
    int head = strcmp(method, "HEAD") == 0;
    size_t pl = strlen(path);
    int64_t a = 0, b = S.size - 1;
    int ranged = 0;
    for (char *l = strstr(req, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
      long long x, y;
      if (strncasecmp(l + 2, "range:", 6) != 0) continue;
      const char *v = l + 8;
      while (*v == ' ') v++;
      int n = sscanf(v, "bytes=%lld-%lld", &x, &y);
      if (n >= 1) { ranged = 1; a = x; if (n == 2 && y < b) b = y; }
    }
    char hdr[512];
    int hn;
    if (pl < 5 || strcmp(path + pl - 5, ".dcdb") != 0 || (strcmp(method, "GET") != 0 && !head)) {
      hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n");
      if (!send_all(fd, hdr, (size_t)hn)) return;
    } else if (ranged && a >= S.size) {
      hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%lld\r\n"
                    "Content-Length: 0\r\n\r\n", (long long)S.size);
      if (!send_all(fd, hdr, (size_t)hn)) return;
    } else if ((hn = atomic_load(&S.fault_every)) > 0 && atomic_fetch_add(&S.fault_seq, 1) % hn == hn - 1) {
      int k = atomic_fetch_add(&S.faults, 1);
      if (k % 2 == 0) {
        hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 503 Slow Down\r\nContent-Length: 0\r\n\r\n");
        if (!send_all(fd, hdr, (size_t)hn)) return;
      } else {                                   /* a reset mid-body: half of it, then the connection closes */
        int64_t n = b - a + 1;
        hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %lld-%lld/%lld\r\n"
                      "Content-Length: %lld\r\nETag: \"tsan-vfs-1\"\r\n\r\n",
                      (long long)a, (long long)b, (long long)S.size, (long long)n);
        if (send_all(fd, hdr, (size_t)hn)) send_all(fd, S.data + a, (size_t)(n / 2));
        return;
      }
    } else {
      int64_t n = b - a + 1;
      if (ranged)
        hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %lld-%lld/%lld\r\n"
                      "Content-Length: %lld\r\nETag: \"tsan-vfs-1\"\r\nAccept-Ranges: bytes\r\n\r\n",
                      (long long)a, (long long)b, (long long)S.size, (long long)n);
      else
        hn = snprintf(hdr, sizeof hdr, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\nETag: \"tsan-vfs-1\"\r\n"
                      "Accept-Ranges: bytes\r\n\r\n", (long long)n);
      if (!send_all(fd, hdr, (size_t)hn)) return;
      if (!head) {
        int64_t sf = atomic_load(&S.stall_from), half = 0;
        if (sf >= 0 && a >= sf) {
          /* half the body, then nothing until the stall ends or the client goes away */
          half = n / 2;
          if (!send_all(fd, S.data + a, (size_t)half)) return;
          atomic_fetch_add(&S.stalled_now, 1);
          atomic_fetch_add(&S.stalled_total, 1);
          struct pollfd q = {fd, POLLIN | POLLRDHUP, 0};
          double until = now_s() + atomic_load(&S.stall_ms) / 1000.0;
          while (!atomic_load(&S.stop) && now_s() < until)
            if (poll(&q, 1, 20) > 0) break;            /* the client closed (or sent more) */
          atomic_fetch_sub(&S.stalled_now, 1);
        }
        if (!send_all(fd, S.data + a + half, (size_t)(n - half))) return;
      }
    }
    memmove(req, req + hlen, have - hlen);
    have -= hlen;
  }
}

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  conn_serve(fd);
  shutdown(fd, SHUT_RDWR);                       /* the client sees the end (closed in server_stop) */
  return NULL;
}

static void *accept_main(void *arg) {
  (void)arg;
  while (!atomic_load(&S.stop)) {
    struct pollfd q = {S.lfd, POLLIN, 0};
    if (poll(&q, 1, 20) <= 0) continue;
    int fd = accept(S.lfd, NULL, NULL);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_mutex_lock(&S.mu);
    if (S.nconn == MAX_CONN || pthread_create(&S.th[S.nconn], NULL, conn_main, (void *)(intptr_t)fd) != 0) close(fd);
    else S.fd[S.nconn++] = fd;
    pthread_mutex_unlock(&S.mu);
  }
  return NULL;
}

static int server_start(const char *path, char *why, size_t nwhy) {
  FILE *fp = fopen(path, "rb");
  if (!fp) { snprintf(why, nwhy, "cannot open %s: %s", path, strerror(errno)); return 0; }
  fseek(fp, 0, SEEK_END);
  S.size = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  S.data = malloc((size_t)S.size);
  int ok = S.data && fread(S.data, 1, (size_t)S.size, fp) == (size_t)S.size;
  fclose(fp);
  if (!ok) { snprintf(why, nwhy, "cannot read %s", path); return 0; }
  pthread_mutex_init(&S.mu, NULL);
  atomic_store(&S.stall_from, -1);
  S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (S.lfd < 0 || bind(S.lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(S.lfd, 64) != 0 ||
      getsockname(S.lfd, (struct sockaddr *)&sa, &sl) != 0) {
    snprintf(why, nwhy, "cannot listen on 127.0.0.1: %s", strerror(errno));
    return -1;
  }
  S.port = ntohs(sa.sin_port);
  if (pthread_create(&S.accept_th, NULL, accept_main, NULL) != 0) { snprintf(why, nwhy, "pthread_create"); return 0; }
  return 1;
}

static void server_stop(void) {
  atomic_store(&S.stop, 1);
  pthread_join(S.accept_th, NULL);
  pthread_mutex_lock(&S.mu);
  for (int i = 0; i < S.nconn; i++) shutdown(S.fd[i], SHUT_RDWR);
  pthread_mutex_unlock(&S.mu);
  for (int i = 0; i < S.nconn; i++) { pthread_join(S.th[i], NULL); close(S.fd[i]); }
  close(S.lfd);
  free(S.data);
}

/* --- helpers ----------------------------------------------------------------------------- */
static sqlite3 *g_stats_db;             /* an in-memory connection with the extension: dc_vfs_stats() */
static pthread_mutex_t g_stats_mu = PTHREAD_MUTEX_INITIALIZER;

static int64_t stat_of(const char *key) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT json_extract(dc_vfs_stats(), '$.%s')", key);
  int64_t v = -1;
  pthread_mutex_lock(&g_stats_mu);
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(g_stats_db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  pthread_mutex_unlock(&g_stats_mu);
  return v;
}

/* opens url through dchttp as SQLite would (the file API itself), params: key, value, ..., NULL */
typedef struct { sqlite3_vfs *vfs; sqlite3_file *f; sqlite3_filename name; } vfile;

static int vopen(vfile *v, const char *url, const char **params, char *why, size_t nwhy) {
  int np = 0;
  while (params[2 * np]) np++;
  v->vfs = sqlite3_vfs_find("dchttp");
  if (!v->vfs) { snprintf(why, nwhy, "the dchttp VFS is not registered"); return 0; }
  v->name = sqlite3_create_filename(url, "", "", np, params);
  v->f = calloc(1, (size_t)v->vfs->szOsFile);
  int out = 0;
  int rc = v->name && v->f ? v->vfs->xOpen(v->vfs, v->name, v->f, SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_READONLY, &out)
                           : SQLITE_NOMEM;
  if (rc != SQLITE_OK) {
    snprintf(why, nwhy, "open %s: %d", url, rc);
    free(v->f); sqlite3_free_filename(v->name);
    return 0;
  }
  return 1;
}

static int vclose(vfile *v) {
  int rc = v->f->pMethods->xClose(v->f);
  free(v->f); sqlite3_free_filename(v->name);
  return rc;
}

/* reads [off, off+n) through v and compares with the served bytes */
static int vread_check(vfile *v, int64_t off, int n, uint8_t *buf, char *why, size_t nwhy) {
  int rc = v->f->pMethods->xRead(v->f, buf, n, off);
  int64_t valid = off + n <= S.size ? n : S.size - off;
  if (rc != SQLITE_OK && !(rc == SQLITE_IOERR_SHORT_READ && valid < n)) {
    snprintf(why, nwhy, "read %d bytes at %lld: error %d", n, (long long)off, rc);
    return 0;
  }
  if (valid > 0 && memcmp(buf, S.data + off, (size_t)valid) != 0) {
    snprintf(why, nwhy, "read %d bytes at %lld: bytes differ from the file", n, (long long)off);
    return 0;
  }
  return 1;
}

/* reads the whole file through v in pages of `page` bytes, in order */
static int vread_all(vfile *v, int page, char *why, size_t nwhy) {
  uint8_t *buf = malloc((size_t)page);
  int ok = buf != NULL;
  for (int64_t off = 0; ok && off < S.size; off += page) ok = vread_check(v, off, page, buf, why, nwhy);
  free(buf);
  return ok;
}

static char g_url_base[64];

/* --- tests ------------------------------------------------------------------------------- */
static int test_prefetch_read(char *why, size_t nwhy) {
  char url[128];
  snprintf(url, sizeof url, "%s/prefetch/d.dcdb", g_url_base);
  const char *params[] = {"block_kb", "8", "mem_blocks", "32", "readahead_kb", "128", "max_inflight", "4", NULL};
  int64_t pf0 = stat_of("prefetch_blocks_used"), req0 = stat_of("prefetch_requests");
  vfile v;
  if (!vopen(&v, url, params, why, nwhy)) return 0;
  int ok = vread_all(&v, 32768, why, nwhy);
  uint8_t buf[20000];
  /* across block borders, and jumps that start new streams */
  int64_t offs[] = {8190, 8192 * 5 - 3, 100000, 8192 * 40 + 17, 4096, S.size - 9000, 8192 * 7};
  for (size_t i = 0; ok && i < sizeof offs / sizeof offs[0]; i++)
    for (int k = 0; ok && k < 6 && offs[i] + k * 7000 < S.size; k++)
      ok = vread_check(&v, offs[i] + k * 7000, 7000 + (int)i * 1000, buf, why, nwhy);
  vclose(&v);
  if (!ok) return 0;
  int64_t used = stat_of("prefetch_blocks_used") - pf0, reqs = stat_of("prefetch_requests") - req0;
  if (used <= 0 || reqs <= 0) {
    snprintf(why, nwhy, "prefetch did not serve the sequential reader (%lld requests, %lld blocks used)",
             (long long)reqs, (long long)used);
    return 0;
  }
  return 1;
}

static int test_close_inflight(char *why, size_t nwhy) {
  char url[128];
  snprintf(url, sizeof url, "%s/close/d.dcdb", g_url_base);
  const char *params[] = {"block_kb", "8", "mem_blocks", "32", "readahead_kb", "128", "max_inflight", "4", NULL};
  int64_t stop_at = (S.size / 2) / 8192 * 8192;
  if (stop_at < 8192 * 8) { snprintf(why, nwhy, "the dataset is too small (%lld bytes)", (long long)S.size); return 0; }
  atomic_store(&S.stall_ms, 30000);
  atomic_store(&S.stall_from, stop_at);
  vfile v;
  if (!vopen(&v, url, params, why, nwhy)) { atomic_store(&S.stall_from, -1); return 0; }
  int ok = 1;
  uint8_t buf[4096];
  for (int64_t off = 0; ok && off + 4096 <= stop_at; off += 4096) ok = vread_check(&v, off, 4096, buf, why, nwhy);
  if (!ok) { atomic_store(&S.stall_from, -1); vclose(&v); return 0; }
  /* the prefetcher has requests ahead of the reader, past stop_at: they stall */
  double t0 = now_s();
  while (atomic_load(&S.stalled_now) < 1 && now_s() - t0 < 10) sleep_ms(10);
  int stalled = atomic_load(&S.stalled_now);
  double c0 = now_s();
  vclose(&v);
  double took = now_s() - c0;
  atomic_store(&S.stall_from, -1);
  if (stalled < 1) { snprintf(why, nwhy, "no prefetch request reached the stalled part of the file"); return 0; }
  if (took > 8) {
    snprintf(why, nwhy, "close took %.1f s with %d requests stalled (the stall is 30 s)", took, stalled);
    return 0;
  }
  printf("# close with %d requests stalled took %.3f s\n", stalled, took);
  return 1;
}

/* every 5th request fails (503 or a reset mid-body): failed prefetch requests are fetched again by
** the reader (with retries); nothing wrong is read */
static int test_faults(char *why, size_t nwhy) {
  char url[128];
  snprintf(url, sizeof url, "%s/faults/d.dcdb", g_url_base);
  const char *params[] = {"block_kb", "8", "mem_blocks", "32", "readahead_kb", "128", "max_inflight", "4",
                          "retries", "8", NULL};
  int64_t f0 = stat_of("prefetch_failed"), r0 = stat_of("retries");
  atomic_store(&S.fault_every, 5);
  vfile v;
  int ok = vopen(&v, url, params, why, nwhy);
  if (ok) {
    ok = vread_all(&v, 32768, why, nwhy);
    vclose(&v);
  }
  atomic_store(&S.fault_every, 0);
  if (!ok) return 0;
  int64_t failed = stat_of("prefetch_failed") - f0, retries = stat_of("retries") - r0;
  if (failed <= 0) {
    snprintf(why, nwhy, "no prefetch request failed (%d faults served, %lld retries)", atomic_load(&S.faults),
             (long long)retries);
    return 0;
  }
  printf("# %d faults served: %lld prefetch requests failed, %lld retries\n", atomic_load(&S.faults),
         (long long)failed, (long long)retries);
  return 1;
}

/* a throttled local file: the prefetch threads read with pread and wait out the emulated latency;
** close while they wait must end the waits (they check the stop flag every 20 ms) */
static const char *g_path;
static int test_close_throttled_local(char *why, size_t nwhy) {
  char abs[4096];
  if (!realpath(g_path, abs)) { snprintf(why, nwhy, "realpath %s: %s", g_path, strerror(errno)); return 0; }
  const char *params[] = {"block_kb", "8", "mem_blocks", "32", "readahead_kb", "128", "max_inflight", "4",
                          "latency_ms", "1000", NULL};
  vfile v;
  if (!vopen(&v, abs, params, why, nwhy)) return 0;
  int64_t r0 = stat_of("requests");
  uint8_t buf[4096];
  int ok = 1;
  for (int64_t off = 0; ok && off < 3 * 8192; off += 4096) ok = vread_check(&v, off, 4096, buf, why, nwhy);
  if (!ok) { vclose(&v); return 0; }
  /* the reader has taken a prefetched request: more are queued; wait until two have read their bytes
  ** (and so are in the throttle's wait) */
  double t0 = now_s();
  while (stat_of("requests") - r0 < 4 && now_s() - t0 < 5) sleep_ms(5);
  int64_t reqs = stat_of("requests") - r0;
  double c0 = now_s();
  vclose(&v);
  double took = now_s() - c0;
  if (reqs < 4) { snprintf(why, nwhy, "only %lld reads were made (want a direct one and prefetches)", (long long)reqs); return 0; }
  if (took > 0.6) { snprintf(why, nwhy, "close took %.2f s while prefetch threads waited out a 1 s latency", took); return 0; }
  printf("# close during the throttle's wait took %.3f s\n", took);
  return 1;
}

typedef struct { const char *url; const char **params; int id; int ok; char why[512]; } rdr_t;

static void *reader_main(void *arg) {
  rdr_t *r = arg;
  vfile v;
  if (!vopen(&v, r->url, r->params, r->why, sizeof r->why)) return NULL;
  r->ok = vread_all(&v, 32768, r->why, sizeof r->why);
  /* and again from a thread-dependent point, wrapping around */
  uint8_t *buf = malloc(32768);
  int64_t start = (int64_t)r->id * (S.size / 3) / 32768 * 32768;
  for (int64_t k = 0; r->ok && k < S.size; k += 32768)
    r->ok = vread_check(&v, (start + k) % (S.size / 32768 * 32768), 32768, buf, r->why, sizeof r->why);
  free(buf);
  vclose(&v);
  return NULL;
}

static int test_shared_threads(char *why, size_t nwhy) {
  char url[128];
  snprintf(url, sizeof url, "%s/shared/d.dcdb", g_url_base);
  /* and one on-disk cache directory for the three */
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/tsan_vfs_cache.XXXXXX");
  if (!mkdtemp(dir)) { snprintf(why, nwhy, "mkdtemp: %s", strerror(errno)); return 0; }
  const char *params[] = {"block_kb", "8", "mem_blocks", "16", "readahead_kb", "64", "max_inflight", "3",
                          "cache_dir", dir, "cache_mb", "64", NULL};
  int64_t req0 = stat_of("prefetch_requests"), dw0 = stat_of("disk_writes");
  enum { N = 3 };
  pthread_t t[N];
  rdr_t r[N];
  for (int i = 0; i < N; i++) {
    r[i] = (rdr_t){url, params, i, 0, ""};
    if (pthread_create(&t[i], NULL, reader_main, &r[i]) != 0) { snprintf(why, nwhy, "pthread_create"); return 0; }
  }
  int ok = 1;
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    if (ok && !r[i].ok) { snprintf(why, nwhy, "thread %d: %s", i, r[i].why); ok = 0; }
  }
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "# could not remove %s\n", dir);
  if (!ok) return 0;
  if (stat_of("prefetch_requests") - req0 <= 0) { snprintf(why, nwhy, "no prefetch request was made"); return 0; }
  if (stat_of("disk_writes") - dw0 <= 0) { snprintf(why, nwhy, "nothing was written to the disk cache"); return 0; }
  /* two more open files without prefetch, one after the other: every block from the shared cache;
  ** the first takes the version the readers confirmed (no request), the second (revalidate_s=0)
  ** asks for the first block at open */
  int64_t nblocks = (S.size + 8191) / 8192;
  for (int k = 0; k < 2; k++) {
    const char *p2[] = {"block_kb", "8", "mem_blocks", "16", "readahead_kb", "0", "max_inflight", "0",
                        "revalidate_s", k ? "0" : "30", NULL};
    int64_t r0 = stat_of("requests"), h0 = stat_of("shared_hits");
    vfile v;
    if (!vopen(&v, url, p2, why, nwhy)) return 0;
    ok = vread_all(&v, 8192, why, nwhy);
    vclose(&v);
    if (!ok) return 0;
    int64_t reqs = stat_of("requests") - r0, hits = stat_of("shared_hits") - h0;
    if (reqs != k || hits < nblocks - k) {
      snprintf(why, nwhy, "after three readers, open %d made %lld requests (want %d) and had %lld shared hits (want %lld)",
               k + 4, (long long)reqs, k, (long long)hits, (long long)(nblocks - k));
      return 0;
    }
  }
  return 1;
}

/* --- SQL: dc_batch and cells over dchttp from three threads ------------------------------ */
static uint64_t fnv(uint64_t h, const void *p, int n) {
  const uint8_t *b = p;
  for (int i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
  return h;
}

static sqlite3 *open_db(const char *name, int flags, char *why, size_t nwhy) {
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(name, &db, flags, NULL) != SQLITE_OK) {
    snprintf(why, nwhy, "open %s: %s", name, db ? sqlite3_errmsg(db) : "?");
    sqlite3_close(db);
    return NULL;
  }
  char *err = NULL;
  if (sqlite3_deltacells_init(db, &err, NULL) != SQLITE_OK ||
      sqlite3_exec(db, "SELECT dc_config('threads', 2), dc_config('cache_mb', 2)", NULL, NULL, &err) != SQLITE_OK) {
    snprintf(why, nwhy, "init %s: %s", name, err ? err : "?");
    sqlite3_free(err);
    sqlite3_close(db);
    return NULL;
  }
  return db;
}

/* the digest of SELECT * FROM cells and of dc_batch over every cell, in batches of 300 */
static int sql_digest(sqlite3 *db, uint64_t *out, char *why, size_t nwhy) {
  uint64_t h = 1469598103934665603ull;
  sqlite3_stmt *st = NULL;
  int rc;
  int64_t ncells = 0;
  if (sqlite3_prepare_v2(db, "SELECT * FROM cells", -1, &st, NULL) != SQLITE_OK) goto err;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    ncells++;
    for (int c = 0; c < sqlite3_column_count(st); c++) {
      const void *p = sqlite3_column_blob(st, c);
      h = fnv(h, p, sqlite3_column_bytes(st, c));
    }
  }
  if (rc != SQLITE_DONE) goto err;
  sqlite3_finalize(st);
  if (sqlite3_prepare_v2(db, "SELECT indptr, indices, data FROM dc_batch(?1)", -1, &st, NULL) != SQLITE_OK) goto err;
  int64_t ids[300];
  for (int64_t s = 0; s < ncells; s += 300) {
    int n = 0;
    for (int64_t i = s; i < ncells && n < 300; i++) ids[n++] = i;
    sqlite3_bind_blob(st, 1, ids, (int)(n * sizeof ids[0]), SQLITE_STATIC);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      for (int c = 0; c < 3; c++) h = fnv(h, sqlite3_column_blob(st, c), sqlite3_column_bytes(st, c));
    if (rc != SQLITE_DONE) goto err;
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  if (ncells == 0) { snprintf(why, nwhy, "no cells"); return 0; }
  *out = h;
  return 1;
err:
  snprintf(why, nwhy, "%s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  return 0;
}

typedef struct { const char *uri; uint64_t want; sqlite3 *shared; int ok; char why[512]; } sqlw_t;

static void *sql_main(void *arg) {
  sqlw_t *w = arg;
  sqlite3 *db = w->shared ? w->shared : open_db(w->uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, w->why, sizeof w->why);
  if (!db) return NULL;
  for (int round = 0; round < 2; round++) {
    uint64_t h;
    if (!sql_digest(db, &h, w->why, sizeof w->why)) break;
    if (h != w->want) { snprintf(w->why, sizeof w->why, "round %d: results differ from the local file's", round); break; }
    if (round == 1) w->ok = 1;
  }
  if (!w->shared) sqlite3_close(db);
  return NULL;
}

static int test_sql_concurrent(const char *path, char *why, size_t nwhy) {
  sqlite3 *db = open_db(path, SQLITE_OPEN_READONLY, why, nwhy);
  uint64_t want;
  if (!db) return 0;
  int ok = sql_digest(db, &want, why, nwhy);
  sqlite3_close(db);
  if (!ok) return 0;
  char abs[4096], u[3][4300];
  if (!realpath(path, abs)) { snprintf(why, nwhy, "realpath %s: %s", path, strerror(errno)); return 0; }
  snprintf(u[0], sizeof u[0], "file:%s/sql/d.dcdb?vfs=dchttp&block_kb=8&mem_blocks=16&readahead_kb=96&max_inflight=3",
           g_url_base);
  snprintf(u[1], sizeof u[1], "file:%s/sql/d.dcdb?vfs=dchttp&block_kb=16&mem_blocks=8&readahead_kb=64&max_inflight=2",
           g_url_base);
  snprintf(u[2], sizeof u[2], "file:%s?vfs=dchttp&block_kb=8&mem_blocks=16&readahead_kb=64&max_inflight=2&latency_ms=1",
           abs);
  /* and one connection over HTTP used by two threads at once (SQLite serializes them; the file's
  ** prefetcher sees its reader move between threads) */
  char us[4300];
  snprintf(us, sizeof us, "file:%s/sql-shared/d.dcdb?vfs=dchttp&block_kb=8&mem_blocks=16&readahead_kb=96&max_inflight=3",
           g_url_base);
  sqlite3 *sdb = open_db(us, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, why, nwhy);
  if (!sdb) return 0;
  int64_t req0 = stat_of("prefetch_requests");
  enum { NW = 5 };
  pthread_t t[NW];
  sqlw_t w[NW];
  for (int i = 0; i < NW; i++) {
    w[i] = (sqlw_t){i < 3 ? u[i] : us, want, i < 3 ? NULL : sdb, 0, ""};
    if (pthread_create(&t[i], NULL, sql_main, &w[i]) != 0) { snprintf(why, nwhy, "pthread_create"); return 0; }
  }
  ok = 1;
  for (int i = 0; i < NW; i++) {
    pthread_join(t[i], NULL);
    if (ok && !w[i].ok) { snprintf(why, nwhy, "%s%s: %s", w[i].uri, w[i].shared ? " (shared)" : "", w[i].why); ok = 0; }
  }
  sqlite3_close(sdb);
  if (ok && stat_of("prefetch_requests") - req0 <= 0) {
    snprintf(why, nwhy, "no prefetch request was made");
    ok = 0;
  }
  return ok;
}

/* tsan_vfs_fetch_threads: three threads, a connection each on one URL (their prefetchers filling
** the shared block cache), each asks for every tile's pages with dc_vfs_fetch (the page map's
** ranges) from a different tile on, then reads the tile's blob: the XOR of the blobs' digests must
** be the local file's */
static uint64_t tiles_digest(sqlite3 *db, int start, int fetch, char *why, size_t nwhy) {
  sqlite3_stmt *m = NULL, *f = NULL, *b = NULL;
  uint64_t h = 0;
  int64_t ps = 0, n = 0;
  int ok = 0;
  if (sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &m, NULL) != SQLITE_OK || sqlite3_step(m) != SQLITE_ROW) goto out;
  ps = sqlite3_column_int64(m, 0);
  sqlite3_finalize(m);
  if (sqlite3_prepare_v2(db, "SELECT tile, leaf, first, last, pages FROM tiles_data_pages WHERE tile >= 0", -1, &m, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT dc_vfs_fetch('main', ?1, ?2, ?3, ?4)", -1, &f, NULL) != SQLITE_OK ||
      sqlite3_prepare_v2(db, "SELECT data FROM tiles_data WHERE tile = ?1", -1, &b, NULL) != SQLITE_OK)
    goto out;
  int64_t rows[4096][5];
  while (sqlite3_step(m) == SQLITE_ROW && n < 4096) {
    for (int c = 0; c < 5; c++) rows[n][c] = sqlite3_column_int64(m, c);
    n++;
  }
  if (n == 0) { snprintf(why, nwhy, "no page map"); goto done; }
  for (int64_t k = 0; k < n; k++) {
    int64_t *r = rows[(start + k) % n];
    if (fetch) {
      sqlite3_bind_int64(f, 1, (r[1] - 1) * ps);
      sqlite3_bind_int64(f, 2, ps);
      sqlite3_bind_int64(f, 3, r[4] ? (r[2] - 1) * ps : 0);
      sqlite3_bind_int64(f, 4, r[4] * ps);
      if (sqlite3_step(f) != SQLITE_ROW || sqlite3_column_type(f, 0) != SQLITE_INTEGER) goto out;
      sqlite3_reset(f);
    }
    sqlite3_bind_int64(b, 1, r[0]);
    if (sqlite3_step(b) != SQLITE_ROW) goto out;
    h ^= fnv(1469598103934665603ull ^ (uint64_t)r[0], sqlite3_column_blob(b, 0), sqlite3_column_bytes(b, 0));
    sqlite3_reset(b);
  }
  ok = 1;
out:
  if (!ok && !why[0]) snprintf(why, nwhy, "%s", sqlite3_errmsg(db));
done:
  sqlite3_finalize(m); sqlite3_finalize(f); sqlite3_finalize(b);
  return ok ? h : 0;
}

typedef struct { const char *uri; uint64_t want; int start, ok; char why[512]; } fetchw_t;

static void *fetch_main(void *arg) {
  fetchw_t *w = arg;
  sqlite3 *db = open_db(w->uri, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, w->why, sizeof w->why);
  if (!db) return NULL;
  uint64_t h = tiles_digest(db, w->start, 1, w->why, sizeof w->why);
  if (h && h != w->want) snprintf(w->why, sizeof w->why, "the tiles differ from the local file's");
  else if (h) w->ok = 1;
  sqlite3_close(db);
  return NULL;
}

static int test_fetch_threads(char *why, size_t nwhy) {
  sqlite3 *db = open_db(g_path, SQLITE_OPEN_READONLY, why, nwhy);
  if (!db) return 0;
  uint64_t want = tiles_digest(db, 0, 0, why, nwhy);
  sqlite3_close(db);
  if (!want) return 0;
  /* blocks of 8 KiB (under a page: whole blocks), then of 64 KiB (four pages: a tile's edge
  ** blocks fetched in part, the parts read by the other threads' tiles' neighbours too) */
  int ok = 1;
  for (int v = 0; v < 2 && ok; v++) {
    char u[4300];
    snprintf(u, sizeof u, "file:%s/fetch/d.dcdb?vfs=dchttp&block_kb=%d&mem_blocks=16&readahead_kb=%d&max_inflight=3",
             g_url_base, v ? 64 : 8, v ? 256 : 64);
    int64_t req0 = stat_of("prefetch_requests"), spans0 = stat_of("spans");
    enum { NW = 3 };
    pthread_t t[NW];
    fetchw_t w[NW];
    for (int i = 0; i < NW; i++) {
      w[i] = (fetchw_t){u, want, i * 5, 0, ""};
      if (pthread_create(&t[i], NULL, fetch_main, &w[i]) != 0) { snprintf(why, nwhy, "pthread_create"); return 0; }
    }
    for (int i = 0; i < NW; i++) {
      pthread_join(t[i], NULL);
      if (ok && !w[i].ok) { snprintf(why, nwhy, "block_kb %d, thread %d: %s", v ? 64 : 8, i, w[i].why); ok = 0; }
    }
    if (ok && stat_of("prefetch_requests") - req0 <= 0) {
      snprintf(why, nwhy, "no prefetch request was made");
      ok = 0;
    }
    if (ok && v && stat_of("spans") - spans0 <= 0) {
      snprintf(why, nwhy, "no span request was made");
      ok = 0;
    }
  }
  return ok;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "build/tsan/tsan_vfs.dcdb";
  g_path = path;
  char why[1024] = "";
  int s = server_start(path, why, sizeof why);
  if (s < 0) { printf("skip tsan_vfs: %s\n", why); return 0; }
  if (!s) { printf("FAIL tsan_vfs: %s\n", why); return 1; }
  snprintf(g_url_base, sizeof g_url_base, "http://127.0.0.1:%d", S.port);
  g_stats_db = open_db(":memory:", SQLITE_OPEN_READWRITE, why, sizeof why);   /* registers dchttp */
  if (!g_stats_db) { printf("FAIL tsan_vfs: %s\n", why); server_stop(); return 1; }
  struct { const char *name; int (*fn)(char *, size_t); } tests[] = {
    {"tsan_vfs_prefetch_read", test_prefetch_read},
    {"tsan_vfs_close_inflight", test_close_inflight},
    {"tsan_vfs_close_throttled_local", test_close_throttled_local},
    {"tsan_vfs_faults", test_faults},
    {"tsan_vfs_shared_threads", test_shared_threads},
    {"tsan_vfs_fetch_threads", test_fetch_threads},
  };
  int failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
    why[0] = 0;
    double t0 = now_s();
    if (tests[i].fn(why, sizeof why)) printf("ok %s (%.1f s)\n", tests[i].name, now_s() - t0);
    else { printf("FAIL %s: %s\n", tests[i].name, why); failed++; }
    fflush(stdout);
  }
  why[0] = 0;
  double t0 = now_s();
  if (test_sql_concurrent(path, why, sizeof why)) printf("ok tsan_vfs_sql_concurrent (%.1f s)\n", now_s() - t0);
  else { printf("FAIL tsan_vfs_sql_concurrent: %s\n", why); failed++; }
  sqlite3_close(g_stats_db);
  server_stop();
  return failed ? 1 : 0;
}
