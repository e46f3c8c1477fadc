/*
** vfs_http.c — "dchttp", a read-only SQLite VFS over HTTP(S) and S3 range GETs
** (libcurl), with read-ahead of aligned blocks, retries, an in-memory and an
** on-disk block cache, and a throttle that emulates an object store for remote
** and local files alike.  The pure logic is in remote_logic.c (dc_remote.h).
**
**   ATTACH 'file:https://host/atlas.dcdb?vfs=dchttp' AS a;
**   sqlite3_open_v2("file:s3://bucket/atlas.dcdb?vfs=dchttp", ..., SQLITE_OPEN_READONLY|SQLITE_OPEN_URI, NULL)
**   ATTACH 'file:/data/atlas.dcdb?vfs=dchttp&latency_ms=50&mbps=150' AS slow;   (a throttled local file)
**
** The file is immutable to SQLite (SQLITE_IOCAP_IMMUTABLE: no locks, no
** journal); it is opened read-only whatever the flags ask.  URI parameters
** (each with an environment default):
**   block_kb   read-ahead block, KiB (DC_HTTP_BLOCK_KB, default 1024)
**   readahead_kb  the most one sequential read-ahead request takes, KiB
**              (DC_HTTP_READAHEAD_KB, default 16384; 0: off), at most mem_blocks/2 blocks
**   mem_blocks blocks held in memory per open file (DC_HTTP_MEM_BLOCKS, 32)
**   shared     0: keep this file out of the process's shared block cache (DC_HTTP_SHARED_MB
**              MiB, default 256, of blocks up to 1 MiB, shared by the open files of one version)
**   cache_dir  on-disk block cache directory (DC_CACHE_DIR; none by default)
**   cache_mb   its budget in MiB (DC_CACHE_MB, default 1024)
**   max_inflight  prefetch: background requests in flight at most, each thread on its own curl
**              handle (DC_HTTP_MAX_INFLIGHT, default 4; 0, or readahead_kb=0: off)
**   retries    attempts after the first (DC_HTTP_RETRIES, 4)
**   timeout_ms a request's time limit (DC_HTTP_TIMEOUT_MS, 30000)
**   latency_ms, mbps   the throttle: a fixed latency per request and a bandwidth
**              in MB/s (10^6 bytes/s) per open file (DC_THROTTLE_LATENCY_MS,
**              DC_THROTTLE_MBPS; off by default); each prefetch request is throttled as
**              a connection of its own
** s3://bucket/key: endpoint from DC_S3_ENDPOINT or AWS_ENDPOINT_URL (path style),
** else https://bucket.s3.$AWS_REGION.amazonaws.com/key; signed with
** CURLOPT_AWS_SIGV4 when AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set
** (AWS_SESSION_TOKEN sent when set), anonymous otherwise.
**
** Errors: the reason (URL, HTTP status or transfer error, after how many
** attempts) is kept per thread and returned by dc_vfs_error(); reader.c adds it
** to its messages.  dc_vfs_stats() returns process-wide counters as JSON.
**
** Threads: SQLite calls a file on the thread running its connection only; the file's
** prefetch threads (see "prefetch" below) never call SQLite.
** Fork: a curl handle or prefetch thread is never used across a fork: a child (pid changed)
** drops the inherited handle and prefetcher unused and makes its own.
*/
#include "dc_ext.h"
#include <curl/curl.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "dc_remote.h"

#define DC_VFS_NAME "dchttp"

static sqlite3_vfs *g_base;          /* the default VFS we delegate local files and temp files to */
static sqlite3_vfs g_vfs;
static _Thread_local char g_err[1024];
static int g_trace;                  /* DC_HTTP_TRACE=1: each block read goes to stderr */
/* blocks shared by the process's open files of the same version (connections of a
** DataLoader worker, its prefetch thread, each epoch's new connection): DC_HTTP_SHARED_MB
** slots (default 256; 0: off) of blocks up to 1 MiB */
static dc_sharedcache *g_shared;
static int64_t g_shared_bsize;
static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static void shared_prepare(void) { pthread_mutex_lock(&g_shared_lock); }
static void shared_release(void) { pthread_mutex_unlock(&g_shared_lock); }

static _Atomic int64_t st_shared_hits;
static _Atomic int64_t st_requests, st_bytes, st_retries, st_mem_hits, st_disk_hits, st_disk_bytes, st_disk_writes,
    st_evictions, st_errors, st_opens, st_throttle_ns;
/* prefetch: requests made, of them failed, blocks the reader used, blocks fetched and never used,
** reads that waited for a request in flight, the most requests in flight at once on one file */
static _Atomic int64_t st_pf_requests, st_pf_failed, st_pf_blocks, st_pf_unused, st_pf_waits, st_pf_peak;

const char *dc_vfs_last_error(void) { return g_err; }

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&st_errors, 1);
  sqlite3_log(SQLITE_IOERR, "dchttp: %s", g_err);
}

typedef struct dc_prefetch dc_prefetch;
typedef struct dc_hfile {
  sqlite3_file base;
  sqlite3_file *local;          /* a local file (throttled): the base VFS's file, after this struct */
  char *name;                   /* as given (for messages) */
  char *url;                    /* the URL requested */
  CURL *curl;
  pid_t pid;
  struct curl_slist *headers;
  char *userpwd, *sigv4;
  dc_validator val;
  int64_t size, bsize;
  dc_blockcache *mem;
  char *cache_dir;
  int64_t cache_budget;
  int64_t cache_used;           /* -1: not scanned yet */
  uint64_t key;
  int retries;
  long timeout_ms;
  dc_throttle thr;
  int throttled;
  int64_t last_miss;            /* the last block fetched (sequential read-ahead) */
  int run;
  int64_t ra_blocks;            /* the most blocks one read-ahead request takes */
  int64_t mem_slots;
  int no_shared;                /* URI shared=0: not in the process's shared block cache */
  uint8_t *rabuf;               /* a read-ahead request's bytes */
  int64_t rabuf_cap;
  int max_inflight;             /* prefetch requests in flight at most (0: no prefetch) */
  int64_t pf_chunk;             /* blocks per prefetch request */
  int64_t pf_next;              /* the block after the last one queued for prefetch */
  int pf_depth;                 /* requests the current stream may have ahead (grows from 2) */
  int pf_fd;                    /* a local file's descriptor for the prefetch threads (-1: none) */
  dc_prefetch *pf;              /* the prefetch threads (started on first use) */
} dc_hfile;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  if (s <= 0) return;
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

/* stop: a prefetch thread's flag (NULL on the reading thread): the wait ends early when it is set */
static void throttle(dc_hfile *f, int64_t bytes, double t0, _Atomic int *stop) {
  if (!f->throttled) return;
  double w = dc_throttle_wait(&f->thr, bytes, now_s() - t0);
  atomic_fetch_add(&st_throttle_ns, (int64_t)(w * 1e9));
  if (!stop) { sleep_s(w); return; }
  for (double end = now_s() + w; !atomic_load(stop);) {
    double left = end - now_s();
    if (left <= 0) break;
    sleep_s(left < 0.02 ? left : 0.02);
  }
}

static int64_t param_int(const char *zName, const char *key, const char *env, int64_t dflt) {
  const char *v = zName ? sqlite3_uri_parameter(zName, key) : NULL;
  if (!v && env) v = getenv(env);
  if (!v || !*v) return dflt;
  return strtoll(v, NULL, 10);
}

static double param_double(const char *zName, const char *key, const char *env) {
  const char *v = zName ? sqlite3_uri_parameter(zName, key) : NULL;
  if (!v && env) v = getenv(env);
  return v && *v ? strtod(v, NULL) : 0;
}

/* --- one HTTP range request ------------------------------------------------ */
typedef struct {
  uint8_t *buf;
  int64_t cap, got;
  int overflow;
  dc_validator val;
  int64_t cr_start, cr_end, cr_total;
  int have_cr;
} dc_resp;

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
  dc_resp *r = ud;
  size_t k = sz * n;
  if (r->got + (int64_t)k > r->cap) { r->overflow = 1; return 0; }   /* aborts the transfer */
  memcpy(r->buf + r->got, p, k);
  r->got += (int64_t)k;
  return k;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
  dc_resp *r = ud;
  size_t k = sz * n;
  if (k > 5 && strncmp(p, "HTTP/", 5) == 0) {       /* a new response (after a redirect): start over */
    memset(&r->val, 0, sizeof r->val);
    r->val.size = -1; r->have_cr = 0;
    return k;
  }
  const char *c = memchr(p, ':', k);
  if (!c) return k;
  size_t nl = (size_t)(c - p), vl = k - nl - 1;
  if (nl == 4 && strncasecmp(p, "etag", 4) == 0) dc_header_value(c + 1, vl, r->val.etag, sizeof r->val.etag);
  else if (nl == 13 && strncasecmp(p, "last-modified", 13) == 0)
    dc_header_value(c + 1, vl, r->val.last_modified, sizeof r->val.last_modified);
  else if (nl == 13 && strncasecmp(p, "content-range", 13) == 0) {
    char v[128];
    dc_header_value(c + 1, vl, v, sizeof v);
    r->have_cr = dc_parse_content_range(v, &r->cr_start, &r->cr_end, &r->cr_total);
    if (r->have_cr) r->val.size = r->cr_total;
  }
  return k;
}

/* the options of a request of f on handle c (a fresh or reset handle) */
static void setup_curl(dc_hfile *f, CURL *c) {
  curl_easy_setopt(c, CURLOPT_URL, f->url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, f->timeout_ms < 10000 ? f->timeout_ms : 10000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, f->timeout_ms);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "deltacells-dchttp/1");
  if (f->headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->headers);
  if (f->sigv4) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, f->sigv4);
    curl_easy_setopt(c, CURLOPT_USERPWD, f->userpwd);
  }
}

static int ensure_curl(dc_hfile *f) {
  if (f->curl && f->pid == getpid()) { curl_easy_reset(f->curl); }
  else {
    /* after a fork the inherited handle (and its connection) belong to the parent:
    ** drop it without using it */
    f->curl = curl_easy_init();
    f->pid = getpid();
    if (!f->curl) return 0;
  }
  setup_curl(f, f->curl);
  return 1;
}

/* GET bytes [off, off+len) into buf on handle c, at most 1 + tries attempts.  first: the
** request at open (no validator to compare yet; it fills f->val).  Returns SQLITE_OK, or an
** error with the reason in err (set_error is the caller's: a prefetch thread keeps it quiet). */
static int http_get_on(dc_hfile *f, CURL *c, int tries, int64_t off, int64_t len, uint8_t *buf, int64_t *got,
                       int first, char *err, size_t err_n, _Atomic int *stop) {
  char range[64], why[512] = "";
  int64_t base_ms = 100, max_ms = 2000;
  snprintf(range, sizeof range, "%lld-%lld", (long long)off, (long long)(off + len - 1));
  for (int attempt = 0;; attempt++) {
    if (attempt) {
      atomic_fetch_add(&st_retries, 1);
      int64_t d = dc_backoff_ms(attempt, base_ms, max_ms);
      sleep_s((double)d / 1000);
    }
    dc_resp r;
    memset(&r, 0, sizeof r);
    r.buf = buf; r.cap = len; r.val.size = -1;
    curl_easy_setopt(c, CURLOPT_RANGE, range);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    double t0 = now_s();
    CURLcode cc = curl_easy_perform(c);
    atomic_fetch_add(&st_requests, 1);
    atomic_fetch_add(&st_bytes, r.got);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int transport = 0;
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r.overflow)) {
      transport = 1;
      snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
    } else if (r.overflow) {
      snprintf(why, sizeof why, "the server sent more than the %lld bytes asked for", (long long)len);
    } else if (status == 416 && first) {
      snprintf(err, err_n, "%s: the file is empty (HTTP 416 for the first bytes)", f->name);
      return SQLITE_CANTOPEN;
    } else if (status == 200 && first && r.got < len) {
      /* no range support but the whole (small) file came: accept it */
      r.val.size = r.got;
      r.cr_start = 0; r.cr_end = r.got - 1; r.have_cr = 1;
      status = 206;
    } else if (status != 206) {
      if (status == 200)
        snprintf(why, sizeof why, "the server ignored the Range request (HTTP 200): it must support ranges");
      else
        snprintf(why, sizeof why, "HTTP %ld", status);
    } else if (!r.have_cr || r.cr_start != off) {
      snprintf(why, sizeof why, "HTTP 206 without a matching Content-Range");
    } else if (r.got != r.cr_end - r.cr_start + 1) {
      transport = 1;
      snprintf(why, sizeof why, "short body: %lld of %lld bytes", (long long)r.got,
               (long long)(r.cr_end - r.cr_start + 1));
    }
    if (!why[0]) {
      if (first) f->val = r.val;
      else {
        char d[400];
        if (dc_validator_differs(&f->val, &r.val, d, sizeof d)) {
          snprintf(err, err_n, "%s: %s; reopen it to read the new version", f->name, d);
          return SQLITE_IOERR_READ;
        }
      }
      *got = r.got;
      throttle(f, r.got, t0, stop);
      return SQLITE_OK;
    }
    if (!dc_retryable(transport, status) || attempt >= tries) {
      snprintf(err, err_n, "%s: %s (after %d attempt%s)", f->name, why, attempt + 1, attempt ? "s" : "");
      return first ? SQLITE_CANTOPEN : SQLITE_IOERR_READ;
    }
    why[0] = 0;
  }
}

/* GET bytes [off, off+len) into buf on the file's own handle, with its retries.  Returns
** SQLITE_OK or an error with g_err set. */
static int http_get(dc_hfile *f, int64_t off, int64_t len, uint8_t *buf, int64_t *got, int first) {
  char err[900];
  if (!ensure_curl(f)) { set_error("%s: cannot start libcurl", f->name); return SQLITE_IOERR; }
  int rc = http_get_on(f, f->curl, f->retries, off, len, buf, got, first, err, sizeof err, NULL);
  if (rc != SQLITE_OK) set_error("%s", err);
  return rc;
}

/* --- the on-disk cache ---------------------------------------------------- */
static void cache_path(dc_hfile *f, int64_t idx, char *out, size_t n) {
  char name[96];
  dc_cache_name(name, sizeof name, f->key, f->bsize, idx);
  snprintf(out, n, "%s/%s", f->cache_dir, name);
}

static int disk_get(dc_hfile *f, int64_t idx, uint8_t *buf, int64_t len) {
  if (!f->cache_dir) return 0;
  char p[4096];
  cache_path(f, idx, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && st.st_size == len;
  int64_t have = 0;
  while (ok && have < len) {
    ssize_t k = pread(fd, buf + have, (size_t)(len - have), have);
    if (k <= 0) { ok = 0; break; }
    have += k;
  }
  if (ok) futimens(fd, NULL);            /* most recently used */
  close(fd);
  if (ok) { atomic_fetch_add(&st_disk_hits, 1); atomic_fetch_add(&st_disk_bytes, len); }
  return ok;
}

/* scan the cache directory: its usage, and when over budget (with incoming bytes
** to come) delete the least recently used blocks */
static void disk_scan(dc_hfile *f, int64_t incoming) {
  DIR *d = opendir(f->cache_dir);
  if (!d) return;
  int n = 0, cap = 0;
  dc_cachefile *files = NULL;
  char **names = NULL;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    if (strncmp(e->d_name, "dc-", 3) != 0 || l < 5 || strcmp(e->d_name + l - 4, ".blk") != 0) continue;
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", f->cache_dir, e->d_name);
    if (stat(p, &st) != 0) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      dc_cachefile *nf = realloc(files, sizeof *files * (size_t)cap);
      char **nn = realloc(names, sizeof *names * (size_t)cap);
      if (nf) files = nf;
      if (nn) names = nn;
      if (!nf || !nn) break;
    }
    names[n] = strdup(e->d_name);
    if (!names[n]) break;
    files[n].size = st.st_size;
    files[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    files[n].idx = n;
    n++;
  }
  closedir(d);
  int k = dc_evict_plan(files, n, f->cache_budget, incoming);
  int64_t used = 0;
  for (int i = 0; i < n; i++) {
    if (i < k) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", f->cache_dir, names[files[i].idx]);
      if (unlink(p) == 0) { atomic_fetch_add(&st_evictions, 1); continue; }
    }
    used += files[i].size;
  }
  f->cache_used = used;
  for (int i = 0; i < n; i++) free(names[i]);
  free(names); free(files);
}

static void disk_put(dc_hfile *f, int64_t idx, const uint8_t *buf, int64_t len) {
  if (!f->cache_dir || len > f->cache_budget) return;
  if (f->cache_used < 0 || f->cache_used + len > f->cache_budget) disk_scan(f, len);
  char p[4096], tmp[4200];
  cache_path(f, idx, p, sizeof p);
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", p, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  int64_t done = 0;
  while (done < len) {
    ssize_t k = write(fd, buf + done, (size_t)(len - done));
    if (k <= 0) break;
    done += k;
  }
  if (close(fd) != 0 || done != len || rename(tmp, p) != 0) { unlink(tmp); return; }
  f->cache_used += len;
  atomic_fetch_add(&st_disk_writes, 1);
}

/* --- blocks ---------------------------------------------------------------- */
static int on_disk(dc_hfile *f, int64_t idx) {
  if (!f->cache_dir) return 0;
  char p[4096];
  cache_path(f, idx, p, sizeof p);
  return access(p, R_OK) == 0;
}

/* Fetches blocks idx..last (all missing) in one request into f->rabuf. */
static int fetch_range(dc_hfile *f, int64_t idx, int64_t last, int64_t *total_out) {
  int64_t total = (last - idx) * f->bsize + dc_block_len(last, f->bsize, f->size);
  if (!f->rabuf || f->rabuf_cap < total) {
    uint8_t *nb = realloc(f->rabuf, (size_t)total);
    if (!nb) return SQLITE_IOERR_NOMEM;
    f->rabuf = nb; f->rabuf_cap = total;
  }
  if (g_trace) fprintf(stderr, "dchttp: %s blocks %lld..%lld (bytes %lld..%lld)\n", f->name, (long long)idx,
                       (long long)last, (long long)(idx * f->bsize), (long long)(idx * f->bsize + total - 1));
  if (f->local) {
    double t0 = now_s();
    int rc = f->local->pMethods->xRead(f->local, f->rabuf, (int)total, idx * f->bsize);
    if (rc != SQLITE_OK) { set_error("%s: read failed (%d)", f->name, rc); return rc; }
    atomic_fetch_add(&st_requests, 1);
    atomic_fetch_add(&st_bytes, total);
    throttle(f, total, t0, NULL);
  } else {
    int64_t got = 0;
    int rc = http_get(f, idx * f->bsize, total, f->rabuf, &got, 0);
    if (rc != SQLITE_OK) return rc;
    if (got != total) {
      set_error("%s: blocks %lld..%lld: %lld bytes, expected %lld", f->name, (long long)idx, (long long)last,
                (long long)got, (long long)total);
      return SQLITE_IOERR_READ;
    }
  }
  *total_out = total;
  return SQLITE_OK;
}

static int shared_get(dc_hfile *f, int64_t idx, uint8_t *out, int64_t len) {
  if (f->local || f->no_shared || !g_shared || f->bsize > g_shared_bsize) return 0;
  pthread_mutex_lock(&g_shared_lock);
  int ok = dc_sharedcache_get(g_shared, f->key ^ (uint64_t)f->bsize * 0x9E3779B97F4A7C15ull, idx, out, len);
  pthread_mutex_unlock(&g_shared_lock);
  if (ok) atomic_fetch_add(&st_shared_hits, 1);
  return ok;
}

static int shared_has(dc_hfile *f, int64_t idx) {
  if (f->local || f->no_shared || !g_shared || f->bsize > g_shared_bsize) return 0;
  pthread_mutex_lock(&g_shared_lock);
  int ok = dc_sharedcache_has(g_shared, f->key ^ (uint64_t)f->bsize * 0x9E3779B97F4A7C15ull, idx,
                              dc_block_len(idx, f->bsize, f->size));
  pthread_mutex_unlock(&g_shared_lock);
  return ok;
}

static void shared_put(dc_hfile *f, int64_t idx, const uint8_t *b, int64_t len) {
  if (f->local || f->no_shared || !g_shared || f->bsize > g_shared_bsize) return;
  pthread_mutex_lock(&g_shared_lock);
  dc_sharedcache_put(g_shared, f->key ^ (uint64_t)f->bsize * 0x9E3779B97F4A7C15ull, idx, b, len);
  pthread_mutex_unlock(&g_shared_lock);
}

/* --- prefetch: background requests for the blocks ahead of a sequential reader ------------
** When a miss continues the last one (an overflow chain: a tile, a long column), the blocks ahead
** are fetched by max_inflight threads of the file: 2 requests ahead at the start of a stream, one
** more each time the reader takes one, up to max_inflight + 1 (about readahead_kb); one request of
** `pf_chunk` blocks each (readahead_kb / max_inflight), each thread on its own curl handle (its
** own connection, throttled as one).  A request's bytes stay in its entry (pf_ent) until the
** reading thread needs one of its blocks: it waits for the entry if in flight, then installs its
** blocks into the memory block cache (and the disk cache) itself; the threads touch only their
** entries (under pf->mu), the process's shared block cache (its own lock) and the stats, never
** SQLite.  A prefetch request makes one attempt and checks the version like any other; when it
** fails, the reading thread fetches the blocks itself (with retries) and reports what fails
** then.  A miss that does not continue the stream drops the queued requests; the entries already
** fetched stay until an entry is needed for another window, then go to the disk cache.
** Memory: (max_inflight + 1) entries of pf_chunk blocks per file.
** Fork: the threads are the parent's; a child leaves the inherited state alone (never locks,
** joins or frees it) and starts its own. */
enum { PF_FREE = 0, PF_QUEUED, PF_BUSY, PF_DONE, PF_FAILED };
typedef struct {
  int state;
  int64_t first, n;
  uint8_t *buf;
} pf_ent;

struct dc_prefetch {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pid_t pid;
  dc_hfile *f;
  int nent, nth, inflight;
  pf_ent *ent;
  pthread_t *th;
  _Atomic int stop;
};

static void note_peak(int n) {
  int64_t p = atomic_load(&st_pf_peak);
  while (n > p && !atomic_compare_exchange_weak(&st_pf_peak, &p, n)) {}
}

static int pf_abort(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
  (void)a; (void)b; (void)c; (void)d;
  return atomic_load(&((dc_prefetch *)ud)->stop);     /* nonzero: abort the transfer (close) */
}

/* one prefetch request, one attempt: 1 when all n blocks from first are in buf */
static int pf_fetch(dc_prefetch *p, CURL **cp, int64_t first, int64_t n, uint8_t *buf) {
  dc_hfile *f = p->f;
  int64_t total = (n - 1) * f->bsize + dc_block_len(first + n - 1, f->bsize, f->size);
  if (f->local) {
    double t0 = now_s();
    int64_t done = 0;
    while (done < total) {
      ssize_t k = pread(f->pf_fd, buf + done, (size_t)(total - done), first * f->bsize + done);
      if (k <= 0) return 0;
      done += k;
    }
    atomic_fetch_add(&st_requests, 1);
    atomic_fetch_add(&st_bytes, total);
    throttle(f, total, t0, &p->stop);
    return 1;
  }
  if (!*cp && !(*cp = curl_easy_init())) return 0;
  curl_easy_reset(*cp);
  setup_curl(f, *cp);
  curl_easy_setopt(*cp, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(*cp, CURLOPT_XFERINFOFUNCTION, pf_abort);
  curl_easy_setopt(*cp, CURLOPT_XFERINFODATA, p);
  char err[900];
  int64_t got = 0;
  int rc = http_get_on(f, *cp, 0, first * f->bsize, total, buf, &got, 0, err, sizeof err, &p->stop);
  if (g_trace)
    fprintf(stderr, "dchttp: %s prefetched blocks %lld..%lld: %s\n", f->name, (long long)first,
            (long long)(first + n - 1), rc == SQLITE_OK ? "ok" : err);
  return rc == SQLITE_OK && got == total;
}

static void *pf_main(void *arg) {
  dc_prefetch *p = arg;
  CURL *c = NULL;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    pf_ent *e = NULL;
    while (!atomic_load(&p->stop)) {
      for (int i = 0; i < p->nent; i++)     /* the queued request nearest the reader first */
        if (p->ent[i].state == PF_QUEUED && (!e || p->ent[i].first < e->first)) e = &p->ent[i];
      if (e) break;
      pthread_cond_wait(&p->work, &p->mu);
    }
    if (atomic_load(&p->stop)) break;
    e->state = PF_BUSY;
    note_peak(++p->inflight);
    int64_t first = e->first, n = e->n;
    pthread_mutex_unlock(&p->mu);
    int ok = 0;
    if (!e->buf) e->buf = malloc((size_t)(p->f->pf_chunk * p->f->bsize));
    if (e->buf) ok = pf_fetch(p, &c, first, n, e->buf);
    /* into the process's shared cache here, off the reading thread (its copies into fresh memory
    ** are slow on some machines); it has its own lock and no SQLite */
    for (int64_t k = first; ok && k < first + n; k++)
      shared_put(p->f, k, e->buf + (k - first) * p->f->bsize, dc_block_len(k, p->f->bsize, p->f->size));
    atomic_fetch_add(&st_pf_requests, 1);
    if (!ok) atomic_fetch_add(&st_pf_failed, 1);
    pthread_mutex_lock(&p->mu);
    p->inflight--;
    e->state = ok ? PF_DONE : PF_FAILED;
    pthread_cond_broadcast(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  if (c) curl_easy_cleanup(c);
  return NULL;
}

/* the file's prefetcher of this process if it has started one, else NULL */
static dc_prefetch *pf_peek(dc_hfile *f) {
  if (f->pf && f->pf->pid != getpid()) f->pf = NULL;   /* a forked child: the parent's, left untouched */
  return f->pf;
}

/* the file's prefetcher in this process (its threads started on the first sequential miss), or
** NULL when off */
static dc_prefetch *pf_get(dc_hfile *f) {
  if (f->max_inflight <= 0) return NULL;
  if (pf_peek(f)) return f->pf;
  if (f->local && f->pf_fd < 0) {
    f->pf_fd = open(f->name, O_RDONLY | O_CLOEXEC);
    if (f->pf_fd < 0) { f->max_inflight = 0; return NULL; }
  }
  dc_prefetch *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->nent = f->max_inflight + 1;
  p->ent = calloc((size_t)p->nent, sizeof *p->ent);
  p->th = calloc((size_t)f->max_inflight, sizeof *p->th);
  if (!p->ent || !p->th) { free(p->ent); free(p->th); free(p); return NULL; }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->work, NULL);
  pthread_cond_init(&p->done, NULL);
  p->pid = getpid();
  p->f = f;
  sigset_t all, old;                     /* signals stay with the application's threads */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (int i = 0; i < f->max_inflight; i++) {
    if (pthread_create(&p->th[p->nth], NULL, pf_main, p) != 0) break;
    p->nth++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (!p->nth) {                         /* no thread: read as without prefetch */
    pthread_mutex_destroy(&p->mu); pthread_cond_destroy(&p->work); pthread_cond_destroy(&p->done);
    free(p->ent); free(p->th); free(p);
    f->max_inflight = 0;
    return NULL;
  }
  f->pf = p;
  return p;
}

static void pf_close(dc_hfile *f) {
  dc_prefetch *p = f->pf;
  f->pf = NULL;
  if (!p || p->pid != getpid()) return;  /* a forked child: not ours */
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, 1);
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < p->nth; i++) pthread_join(p->th[i], NULL);
  for (int i = 0; i < p->nent; i++) {
    if (p->ent[i].state == PF_DONE) atomic_fetch_add(&st_pf_unused, p->ent[i].n);
    free(p->ent[i].buf);
  }
  pthread_mutex_destroy(&p->mu); pthread_cond_destroy(&p->work); pthread_cond_destroy(&p->done);
  free(p->ent); free(p->th); free(p);
}

/* the entry holding block idx (queued, in flight or fetched), or NULL */
static pf_ent *pf_find(dc_prefetch *p, int64_t idx) {
  pf_ent *e = NULL;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nent && !e; i++) {
    pf_ent *x = &p->ent[i];
    if (x->state != PF_FREE && idx >= x->first && idx < x->first + x->n) e = x;
  }
  pthread_mutex_unlock(&p->mu);
  return e;
}

/* a block the reader has (memory, shared or disk cache) or has asked for needs no prefetch */
static int pf_held(dc_hfile *f, dc_prefetch *p, int64_t idx) {
  int64_t l;
  return dc_blockcache_get(f->mem, idx, &l) != NULL || pf_find(p, idx) != NULL || shared_has(f, idx) ||
         on_disk(f, idx);
}

/* an entry's blocks into the disk cache; into memory too when mem (the reader is about to use them).
** Called by the reading thread on a DONE entry (no thread touches it), which it then frees. */
static void pf_install(dc_hfile *f, dc_prefetch *p, pf_ent *e, int mem) {
  for (int64_t k = e->first; k < e->first + e->n; k++) {
    int64_t lk = dc_block_len(k, f->bsize, f->size);
    const uint8_t *src = e->buf + (k - e->first) * f->bsize;
    if (!f->local) disk_put(f, k, src, lk);      /* (the thread put it in the shared cache) */
    if (mem) {
      uint8_t *s = dc_blockcache_slot(f->mem, k);
      if (s) { memcpy(s, src, (size_t)lk); dc_blockcache_commit(f->mem, k, lk); }
    }
  }
  atomic_fetch_add(mem ? &st_pf_blocks : &st_pf_unused, e->n);
  pthread_mutex_lock(&p->mu);
  e->state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
}

/* queue requests for the blocks from `from` on, up to the window, in the free entries; the
** stale entries already fetched go to the caches first */
static void pf_schedule(dc_hfile *f, dc_prefetch *p, int64_t from) {
  int64_t nblocks = (f->size + f->bsize - 1) / f->bsize;
  if (f->pf_depth < 2) f->pf_depth = 2;
  if (f->pf_depth > p->nent) f->pf_depth = p->nent;
  int64_t limit = from + (int64_t)f->pf_depth * f->pf_chunk;
  if (f->pf_next < from || f->pf_next > limit) f->pf_next = from;
  int queued = 0;
  while (f->pf_next < limit && f->pf_next < nblocks) {
    if (pf_held(f, p, f->pf_next)) { f->pf_next++; continue; }
    /* a free entry, else one fetched (or failed) outside the window: its blocks to the caches */
    pf_ent *e = NULL, *old = NULL;
    int old_st = PF_FREE;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->nent && !e; i++) {
      pf_ent *x = &p->ent[i];
      if (x->state == PF_FREE) e = x;
      else if ((x->state == PF_DONE || x->state == PF_FAILED) && (x->first + x->n <= from || x->first >= limit))
        old = x;
    }
    if (!e && old && old->state == PF_FAILED) { old->state = PF_FREE; e = old; old = NULL; }
    else if (!e && old) old_st = PF_DONE;
    pthread_mutex_unlock(&p->mu);
    if (!e && old_st == PF_DONE) { pf_install(f, p, old, 0); e = old; }
    if (!e) break;
    int64_t n = 1;
    while (n < f->pf_chunk && f->pf_next + n < nblocks && !pf_held(f, p, f->pf_next + n)) n++;
    pthread_mutex_lock(&p->mu);
    e->first = f->pf_next; e->n = n; e->state = PF_QUEUED;
    pthread_mutex_unlock(&p->mu);
    f->pf_next += n;
    queued++;
  }
  if (queued) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
  }
}

/* Block idx from the prefetcher: waits for its request, installs its blocks into memory and
** returns the entry's last block + 1; 0 when it has not got it (not asked for, or failed). */
static int64_t pf_take(dc_hfile *f, dc_prefetch *p, pf_ent *e) {
  pthread_mutex_lock(&p->mu);
  if (e->state == PF_QUEUED || e->state == PF_BUSY) atomic_fetch_add(&st_pf_waits, 1);
  while (e->state == PF_QUEUED || e->state == PF_BUSY) pthread_cond_wait(&p->done, &p->mu);
  int st = e->state;
  if (st == PF_FAILED) e->state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
  if (st != PF_DONE) return 0;
  int64_t end = e->first + e->n;
  pf_install(f, p, e, 1);
  f->pf_depth++;                         /* the stream goes on: one more request ahead */
  return end;
}

/* the reader left the stream: queued requests dropped; those in flight or fetched stay until their
** entry is needed for another window (pf_schedule) */
static void pf_jump(dc_prefetch *p) {
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->nent; i++)
    if (p->ent[i].state == PF_QUEUED) p->ent[i].state = PF_FREE;
  pthread_mutex_unlock(&p->mu);
  p->f->pf_next = -1;
  p->f->pf_depth = 2;
}

/* A read: each block from memory, the disk cache, or fetched.  Missing blocks are fetched
** together, one request for the run of missing blocks the read covers; a read that continues
** where the last fetch ended is sequential (an overflow chain, a tile) and its fetch takes
** 2^run times as much ahead (dc_readahead_blocks), up to ra_blocks. */
static int hf_read(sqlite3_file *pf, void *out, int amt, sqlite3_int64 off) {
  dc_hfile *f = (dc_hfile *)pf;
  int64_t first, last;
  uint8_t *dst = out;
  if (!dc_blocks_for(off, amt, f->bsize, f->size, &first, &last)) {
    memset(out, 0, (size_t)amt);
    return SQLITE_IOERR_SHORT_READ;
  }
  int64_t end = off + amt < f->size ? off + amt : f->size;
  int64_t nblocks = (f->size + f->bsize - 1) / f->bsize;
  for (int64_t b = first; b <= last; b++) {
    int64_t bstart = b * f->bsize, blen;
    const uint8_t *blk = dc_blockcache_get(f->mem, b, &blen);
    dc_prefetch *p = blk ? NULL : pf_peek(f);
    pf_ent *e;
    int64_t pend;
    if (blk) atomic_fetch_add(&st_mem_hits, 1);
    else if (p && (e = pf_find(p, b)) && (pend = pf_take(f, p, e))) {
      /* a block of a prefetch request (waited for when in flight): in memory now with the
      ** request's other blocks; prefetch more */
      f->last_miss = pend - 1;
      pf_schedule(f, p, pend);
      b--;
      continue;
    } else if (!f->local) {
      blen = dc_block_len(b, f->bsize, f->size);
      uint8_t *slot = dc_blockcache_slot(f->mem, b);
      if (!slot) return SQLITE_IOERR_NOMEM;
      if (shared_get(f, b, slot, blen)) { dc_blockcache_commit(f->mem, b, blen); blk = slot; }
      else if (f->cache_dir && disk_get(f, b, slot, blen)) {
        dc_blockcache_commit(f->mem, b, blen);
        shared_put(f, b, slot, blen);
        blk = slot;
      }
    }
    if (blk) {
      int64_t from = (b == first ? off : bstart) - bstart, to = (end - bstart < blen ? end - bstart : blen);
      memcpy(dst + (bstart + from - off), blk + from, (size_t)(to - from));
      continue;
    }
    /* a miss that continues the last one: prefetch from it on, and wait for its request */
    if (b == f->last_miss + 1 && !p) p = pf_get(f);
    if (p) {
      e = NULL;
      if (b == f->last_miss + 1) {
        pf_schedule(f, p, b);
        e = pf_find(p, b);
      }
      if (e && (pend = pf_take(f, p, e))) {
        f->last_miss = pend - 1;
        pf_schedule(f, p, pend);
        b--;                             /* block b is in memory now */
        continue;
      }
      if (!e) pf_jump(p);                /* the reader left the stream */
    }
    /* a miss: the missing run of this read, and more ahead when reading sequentially */
    f->run = b == f->last_miss + 1 ? f->run + 1 : 0;
    int64_t need = last - b + 1;
    int64_t want = need * dc_readahead_blocks(f->run, f->ra_blocks);
    if (want > f->ra_blocks && want > need) want = f->ra_blocks > need ? f->ra_blocks : need;
    int64_t x = b;
    while (x + 1 < b + want && x + 1 < nblocks) {
      int64_t l2;
      if (dc_blockcache_get(f->mem, x + 1, &l2) || on_disk(f, x + 1) || (p && pf_find(p, x + 1))) break;
      x++;
    }
    f->last_miss = x;
    int64_t total;
    int rc = fetch_range(f, b, x, &total);
    if (rc != SQLITE_OK) return rc;
    /* this read's part of it */
    int64_t from = b == first ? off : bstart, to = end < bstart + total ? end : bstart + total;
    memcpy(dst + (from - off), f->rabuf + (from - bstart), (size_t)(to - from));
    /* every block into the disk cache; into memory those that fit, the last ones kept */
    int64_t nb = x - b + 1, keep_from = b + (nb > f->mem_slots ? nb - f->mem_slots : 0);
    for (int64_t k = b; k <= x; k++) {
      int64_t lk = dc_block_len(k, f->bsize, f->size);
      const uint8_t *src = f->rabuf + (k - b) * f->bsize;
      if (!f->local) { disk_put(f, k, src, lk); shared_put(f, k, src, lk); }
      if (k >= keep_from) {
        uint8_t *s2 = dc_blockcache_slot(f->mem, k);
        if (s2) { memcpy(s2, src, (size_t)lk); dc_blockcache_commit(f->mem, k, lk); }
      }
    }
    b = x;
  }
  if (end < off + amt) {
    memset(dst + (end - off), 0, (size_t)(off + amt - end));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

static int hf_close(sqlite3_file *pf) {
  dc_hfile *f = (dc_hfile *)pf;
  pf_close(f);
  if (f->pf_fd >= 0) close(f->pf_fd);
  if (f->local) f->local->pMethods->xClose(f->local);
  if (f->curl && f->pid == getpid()) curl_easy_cleanup(f->curl);
  curl_slist_free_all(f->headers);
  dc_blockcache_free(f->mem);
  free(f->rabuf);
  sqlite3_free(f->name); sqlite3_free(f->url); sqlite3_free(f->cache_dir);
  sqlite3_free(f->userpwd); sqlite3_free(f->sigv4);
  return SQLITE_OK;
}
static int hf_write(sqlite3_file *pf, const void *b, int n, sqlite3_int64 o) {
  (void)pf; (void)b; (void)n; (void)o;
  return SQLITE_READONLY;
}
static int hf_truncate(sqlite3_file *pf, sqlite3_int64 n) { (void)pf; (void)n; return SQLITE_READONLY; }
static int hf_sync(sqlite3_file *pf, int flags) { (void)pf; (void)flags; return SQLITE_OK; }
static int hf_size(sqlite3_file *pf, sqlite3_int64 *n) { *n = ((dc_hfile *)pf)->size; return SQLITE_OK; }
static int hf_lock(sqlite3_file *pf, int l) { (void)pf; (void)l; return SQLITE_OK; }
static int hf_check(sqlite3_file *pf, int *out) { (void)pf; *out = 0; return SQLITE_OK; }
static int hf_fcntl(sqlite3_file *pf, int op, void *arg) {
  dc_hfile *f = (dc_hfile *)pf;
  if (op == SQLITE_FCNTL_VFSNAME) { *(char **)arg = sqlite3_mprintf("%s", DC_VFS_NAME); return SQLITE_OK; }
  (void)f;
  return SQLITE_NOTFOUND;
}
static int hf_sector(sqlite3_file *pf) { (void)pf; return 4096; }
static int hf_devchar(sqlite3_file *pf) { (void)pf; return SQLITE_IOCAP_IMMUTABLE; }

static const sqlite3_io_methods hf_methods = {
  1, hf_close, hf_read, hf_write, hf_truncate, hf_sync, hf_size, hf_lock, hf_lock, hf_check,
  hf_fcntl, hf_sector, hf_devchar, NULL, NULL, NULL, NULL, NULL, NULL
};

static int remote_setup(dc_hfile *f, const char *zName) {
  char why[256];
  if (strncasecmp(zName, "s3://", 5) == 0) {
    const char *ep = getenv("DC_S3_ENDPOINT");
    if (!ep || !*ep) ep = getenv("AWS_ENDPOINT_URL");
    const char *region = getenv("AWS_REGION");
    if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region) region = "us-east-1";
    char u[4096];
    if (!dc_s3_url(zName, ep, region, u, sizeof u, why, sizeof why)) {
      set_error("%s: %s", zName, why);
      return SQLITE_CANTOPEN;
    }
    f->url = sqlite3_mprintf("%s", u);
    const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
    if (ak && *ak && sk && *sk) {
      f->userpwd = sqlite3_mprintf("%s:%s", ak, sk);
      f->sigv4 = sqlite3_mprintf("aws:amz:%s:s3", region);
      f->headers = curl_slist_append(f->headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
      const char *tok = getenv("AWS_SESSION_TOKEN");
      if (tok && *tok) {
        char *h = sqlite3_mprintf("x-amz-security-token: %s", tok);
        if (h) f->headers = curl_slist_append(f->headers, h);
        sqlite3_free(h);
      }
    }
  } else {
    f->url = sqlite3_mprintf("%s", zName);
  }
  if (!f->url) return SQLITE_NOMEM;
  f->retries = (int)param_int(zName, "retries", "DC_HTTP_RETRIES", 4);
  if (f->retries < 0) f->retries = 0;
  f->timeout_ms = (long)param_int(zName, "timeout_ms", "DC_HTTP_TIMEOUT_MS", 30000);
  if (f->timeout_ms < 1) f->timeout_ms = 1;
  const char *cd = sqlite3_uri_parameter(zName, "cache_dir");
  if (!cd) cd = getenv("DC_CACHE_DIR");
  if (cd && *cd) {
    if (mkdir(cd, 0755) != 0 && errno != EEXIST) {
      set_error("%s: cannot create the cache directory %s: %s", zName, cd, strerror(errno));
      return SQLITE_CANTOPEN;
    }
    f->cache_dir = sqlite3_mprintf("%s", cd);
    double mb = param_double(zName, "cache_mb", "DC_CACHE_MB");
    f->cache_budget = (int64_t)((mb > 0 ? mb : 1024) * 1048576.0);
    f->cache_used = -1;
  }
  /* the first block: the size and the validators of this version */
  uint8_t *slot = dc_blockcache_slot(f->mem, 0);
  if (!slot) return SQLITE_NOMEM;
  int64_t got = 0;
  int rc = http_get(f, 0, f->bsize, slot, &got, 1);
  if (rc != SQLITE_OK) return rc;
  f->size = f->val.size >= 0 ? f->val.size : got;
  if (!f->val.etag[0] && !f->val.last_modified[0])
    sqlite3_log(SQLITE_WARNING, "dchttp: %s has neither ETag nor Last-Modified: only its size guards against "
                "a change on the server", zName);
  f->key = dc_cache_key(f->url, &f->val);
  pthread_mutex_lock(&g_shared_lock);
  if (!g_shared && !g_shared_bsize) {
    /* slots of up to 1 MiB (larger blocks are not shared), as many as the budget holds */
    int64_t mb = param_int(NULL, NULL, "DC_HTTP_SHARED_MB", 256);
    g_shared_bsize = 1 << 20;
    if (mb > 0) g_shared = dc_sharedcache_new((int)mb, g_shared_bsize);
  }
  pthread_mutex_unlock(&g_shared_lock);
  dc_blockcache_commit(f->mem, 0, got);
  if (got == dc_block_len(0, f->bsize, f->size)) disk_put(f, 0, slot, got);
  return SQLITE_OK;
}

static int hv_open(sqlite3_vfs *vfs, const char *zName, sqlite3_file *pf, int flags, int *pOut) {
  (void)vfs;
  if (!zName || !(flags & SQLITE_OPEN_MAIN_DB)) {
    if (zName && dc_is_remote_name(zName)) {
      set_error("%s: dchttp opens the database itself only (no journal or WAL)", zName);
      return SQLITE_CANTOPEN;
    }
    return g_base->xOpen(g_base, zName, pf, flags, pOut);     /* temp files, local journals */
  }
  dc_hfile *f = (dc_hfile *)pf;
  memset(f, 0, sizeof *f);
  g_err[0] = 0;
  f->name = sqlite3_mprintf("%s", zName);
  int64_t bkb = param_int(zName, "block_kb", "DC_HTTP_BLOCK_KB", 1024);
  if (bkb < 4) bkb = 4;
  if (bkb > 65536) bkb = 65536;
  f->bsize = bkb << 10;
  int slots = (int)param_int(zName, "mem_blocks", "DC_HTTP_MEM_BLOCKS", 32);
  if (slots < 1) slots = 1;
  f->mem = dc_blockcache_new(slots, f->bsize);
  /* read-ahead: at most readahead_kb (default 16 MiB) and half the memory blocks */
  f->ra_blocks = (param_int(zName, "readahead_kb", "DC_HTTP_READAHEAD_KB", 16384) << 10) / f->bsize;
  if (f->ra_blocks > slots / 2) f->ra_blocks = slots / 2;
  if (f->ra_blocks < 1) f->ra_blocks = 1;
  f->last_miss = -2;
  f->mem_slots = slots;
  f->pf_fd = -1;
  f->pf_next = -1;
  /* prefetch: max_inflight requests (default 4; 0 or readahead_kb=0: off) of about
  ** readahead_kb / max_inflight each */
  int64_t mi = param_int(zName, "max_inflight", "DC_HTTP_MAX_INFLIGHT", 4);
  if (mi < 0) mi = 0;
  if (mi > 64) mi = 64;
  if (param_int(zName, "readahead_kb", "DC_HTTP_READAHEAD_KB", 16384) <= 0) mi = 0;
  f->max_inflight = (int)mi;
  f->pf_chunk = mi ? f->ra_blocks / mi : 1;
  if (f->pf_chunk < 1) f->pf_chunk = 1;
  f->no_shared = param_int(zName, "shared", NULL, 1) == 0;
  f->thr.latency_s = param_double(zName, "latency_ms", "DC_THROTTLE_LATENCY_MS") / 1000;
  f->thr.bytes_per_s = param_double(zName, "mbps", "DC_THROTTLE_MBPS") * 1e6;
  f->throttled = f->thr.latency_s > 0 || f->thr.bytes_per_s > 0;
  int rc;
  if (!f->name || !f->mem) rc = SQLITE_NOMEM;
  else if (dc_is_remote_name(zName)) rc = remote_setup(f, zName);
  else {
    f->local = (sqlite3_file *)(f + 1);
    int lf = (flags & ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY;
    rc = g_base->xOpen(g_base, zName, f->local, lf, NULL);
    if (rc != SQLITE_OK) { f->local = NULL; set_error("%s: cannot open", zName); }
    else {
      sqlite3_int64 sz = 0;
      rc = f->local->pMethods->xFileSize(f->local, &sz);
      f->size = sz;
    }
  }
  if (rc != SQLITE_OK) {                /* SQLite wants pMethods NULL after a failed open */
    hf_close(pf);
    f->base.pMethods = NULL;
    return rc;
  }
  f->base.pMethods = &hf_methods;
  atomic_fetch_add(&st_opens, 1);
  if (pOut) *pOut = SQLITE_OPEN_READONLY | SQLITE_OPEN_MAIN_DB;
  return SQLITE_OK;
}

static int hv_delete(sqlite3_vfs *v, const char *z, int sync) {
  (void)v;
  if (dc_is_remote_name(z)) return SQLITE_OK;
  return g_base->xDelete(g_base, z, sync);
}
static int hv_access(sqlite3_vfs *v, const char *z, int flags, int *out) {
  (void)v;
  if (dc_is_remote_name(z)) { *out = 0; return SQLITE_OK; }    /* no journal, no WAL beside a URL */
  return g_base->xAccess(g_base, z, flags, out);
}
static int hv_full(sqlite3_vfs *v, const char *z, int n, char *out) {
  (void)v;
  if (dc_is_remote_name(z)) {
    if ((int)strlen(z) >= n) return SQLITE_CANTOPEN;
    memcpy(out, z, strlen(z) + 1);
    return SQLITE_OK;
  }
  return g_base->xFullPathname(g_base, z, n, out);
}
static void *hv_dlopen(sqlite3_vfs *v, const char *z) { (void)v; return g_base->xDlOpen(g_base, z); }
static void hv_dlerror(sqlite3_vfs *v, int n, char *z) { (void)v; g_base->xDlError(g_base, n, z); }
static void (*hv_dlsym(sqlite3_vfs *v, void *p, const char *z))(void) { (void)v; return g_base->xDlSym(g_base, p, z); }
static void hv_dlclose(sqlite3_vfs *v, void *p) { (void)v; g_base->xDlClose(g_base, p); }
static int hv_random(sqlite3_vfs *v, int n, char *z) { (void)v; return g_base->xRandomness(g_base, n, z); }
static int hv_sleep(sqlite3_vfs *v, int us) { (void)v; return g_base->xSleep(g_base, us); }
static int hv_time(sqlite3_vfs *v, double *t) { (void)v; return g_base->xCurrentTime(g_base, t); }
static int hv_lasterr(sqlite3_vfs *v, int n, char *z) {
  (void)v;
  if (n > 0) snprintf(z, (size_t)n, "%s", g_err);
  return 0;
}
static int hv_time64(sqlite3_vfs *v, sqlite3_int64 *t) {
  (void)v;
  if (g_base->iVersion >= 2 && g_base->xCurrentTimeInt64) return g_base->xCurrentTimeInt64(g_base, t);
  double d;
  int rc = g_base->xCurrentTime(g_base, &d);
  *t = (sqlite3_int64)(d * 86400000.0);
  return rc;
}

static void stats_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  if (argc == 1) {
    const char *a = (const char *)sqlite3_value_text(argv[0]);
    if (!a || strcmp(a, "reset") != 0) {
      sqlite3_result_error(ctx, "dc_vfs_stats: the only argument it takes is 'reset'", -1);
      return;
    }
    st_requests = st_bytes = st_retries = st_mem_hits = st_disk_hits = st_disk_bytes = st_disk_writes = 0;
    st_evictions = st_errors = st_opens = st_throttle_ns = st_shared_hits = 0;
    st_pf_requests = st_pf_failed = st_pf_blocks = st_pf_unused = st_pf_waits = st_pf_peak = 0;
  }
  char *m = sqlite3_mprintf(
      "{\"requests\": %lld, \"bytes\": %lld, \"retries\": %lld, \"mem_hits\": %lld, \"disk_hits\": %lld, "
      "\"disk_bytes\": %lld, \"disk_writes\": %lld, \"evictions\": %lld, \"errors\": %lld, \"opens\": %lld, "
      "\"throttle_s\": %.6f, \"shared_hits\": %lld, \"prefetch_requests\": %lld, \"prefetch_failed\": %lld, "
      "\"prefetch_blocks_used\": %lld, \"prefetch_blocks_unused\": %lld, \"prefetch_waits\": %lld, "
      "\"prefetch_peak_inflight\": %lld}",
      (long long)st_requests, (long long)st_bytes, (long long)st_retries, (long long)st_mem_hits,
      (long long)st_disk_hits, (long long)st_disk_bytes, (long long)st_disk_writes, (long long)st_evictions,
      (long long)st_errors, (long long)st_opens, (double)st_throttle_ns * 1e-9,
      (long long)st_shared_hits, (long long)st_pf_requests, (long long)st_pf_failed, (long long)st_pf_blocks,
      (long long)st_pf_unused, (long long)st_pf_waits, (long long)st_pf_peak);
  if (!m) { sqlite3_result_error_nomem(ctx); return; }
  sqlite3_result_text(ctx, m, -1, sqlite3_free);
}

static void error_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc; (void)argv;
  sqlite3_result_text(ctx, g_err, -1, SQLITE_TRANSIENT);
}

static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;

/* registers the VFS once per process (and keeps this library loaded: the VFS
** outlives the connection that loaded it) and the SQL functions on db */
int dc_register_vfs(sqlite3 *db) {
  int rc = SQLITE_OK;
  pthread_mutex_lock(&g_reg_lock);
  if (!sqlite3_vfs_find(DC_VFS_NAME)) {
    g_base = sqlite3_vfs_find(NULL);
    const char *tr = getenv("DC_HTTP_TRACE");
    g_trace = tr && *tr && *tr != '0' ? atoi(tr) : 0;
    if (!g_base) rc = SQLITE_ERROR;
    else if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) rc = SQLITE_ERROR;
    else {
#ifndef SQLITE_CORE
      Dl_info di;
      if (dladdr((void *)dc_register_vfs, &di) && di.dli_fname) dlopen(di.dli_fname, RTLD_NOW | RTLD_NODELETE);
#endif
      memset(&g_vfs, 0, sizeof g_vfs);
      g_vfs.iVersion = 2;
      g_vfs.szOsFile = (int)sizeof(dc_hfile) + g_base->szOsFile;
      g_vfs.mxPathname = g_base->mxPathname > 4096 ? g_base->mxPathname : 4096;
      g_vfs.zName = DC_VFS_NAME;
      g_vfs.xOpen = hv_open; g_vfs.xDelete = hv_delete; g_vfs.xAccess = hv_access;
      g_vfs.xFullPathname = hv_full; g_vfs.xDlOpen = hv_dlopen; g_vfs.xDlError = hv_dlerror;
      g_vfs.xDlSym = hv_dlsym; g_vfs.xDlClose = hv_dlclose; g_vfs.xRandomness = hv_random;
      g_vfs.xSleep = hv_sleep; g_vfs.xCurrentTime = hv_time; g_vfs.xGetLastError = hv_lasterr;
      g_vfs.xCurrentTimeInt64 = hv_time64;
      rc = sqlite3_vfs_register(&g_vfs, 0);
      /* no fork inside a shared-cache copy: the child gets the lock free */
      if (rc == SQLITE_OK) pthread_atfork(shared_prepare, shared_release, shared_release);
    }
  }
  pthread_mutex_unlock(&g_reg_lock);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_stats", 0, SQLITE_UTF8, NULL, stats_func, NULL, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_stats", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL, stats_func, NULL,
                                 NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_error", 0, SQLITE_UTF8, NULL, error_func, NULL, NULL);
  return rc;
}
