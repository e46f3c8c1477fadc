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
**   mem_blocks blocks held in memory per open file (DC_HTTP_MEM_BLOCKS, 32): those the shared
**              cache does not hold (a file read with shared=0, or a shared cache under 4 times
**              mem_blocks, which would evict blocks before they are read); a block the shared
**              cache holds is read from there, only the part a read needs
**   shared     0: keep this file out of the process's shared block cache (DC_HTTP_SHARED_MB
**              MiB, default 256, of blocks up to 1 MiB, shared by the open files of one version)
**   cache_dir  on-disk block cache directory (DC_CACHE_DIR; none by default)
**   cache_mb   its budget in MiB (DC_CACHE_MB, default 1024)
**   max_inflight  prefetch: background requests in flight at most, each thread on its own curl
**              handle (DC_HTTP_MAX_INFLIGHT, default 4; 0, or readahead_kb=0: off)
**   revalidate_s  an open takes, without a request, a version of the same URL (and credential)
**              that this process's requests confirmed at most this many seconds ago, when
**              its first block is in the shared cache: another connection, a forked
**              DataLoader worker of a process that read it (DC_HTTP_REVALIDATE_S, 30; 0: every
**              open asks the server).  Its reads are checked as any open's: a request that
**              finds another version is an error, and the next open asks the server
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
** Files: this one is the sqlite3_vfs glue (open, read, close, the SQL functions); the request
** (http_transport.c), the caches (http_cache.c) and the prefetcher (http_prefetch.c) are apart,
** sharing vfs_http_int.h.
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
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "vfs_http_int.h"

#define DC_VFS_NAME "dchttp"

static sqlite3_vfs *g_base;          /* the default VFS we delegate local files and temp files to */
static sqlite3_vfs g_vfs;
_Thread_local char dh_err[1024];
int dh_trace;
dh_stats dh_st;

const char *dc_vfs_last_error(void) { return dh_err; }

void dh_set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dh_err, sizeof dh_err, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&dh_st.errors, 1);
  sqlite3_log(SQLITE_IOERR, "dchttp: %s", dh_err);
}

/* A parameter: the URI's `key`, else environment variable `env`, else dflt.  A value that is
** not a number in [lo, hi] (an integer where int) sets *bad and the open's error, naming it. */
static double param_num(const char *zName, const char *key, const char *env, double dflt, double lo, double hi,
                        int integer, int *bad) {
  const char *v = zName && key ? sqlite3_uri_parameter(zName, key) : NULL, *from = key;
  if (!v && env && (v = getenv(env)) != NULL) from = env;
  if (!v || !*v) return dflt;
  char *end = NULL;
  errno = 0;
  double x = integer ? (double)strtoll(v, &end, 10) : strtod(v, &end);
  while (end && isspace((unsigned char)*end)) end++;
  if (errno || end == v || !end || *end || !(x >= lo && x <= hi)) {
    if (!*bad)
      dh_set_error("%s: %s%s='%s': %s from %g to %g", zName, from == env ? "environment variable " : "", from, v,
                   integer ? "an integer" : "a number", lo, hi);
    *bad = 1;
    return dflt;
  }
  return x;
}
static int64_t param_int(const char *zName, const char *key, const char *env, int64_t dflt, int64_t lo, int64_t hi,
                         int *bad) {
  return (int64_t)param_num(zName, key, env, (double)dflt, (double)lo, (double)hi, 1, bad);
}

/* mkdir -p: 0 when dir is a directory now */
static int make_dirs(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof p) { errno = ENAMETOOLONG; return -1; }
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++)
    if (p[i] == '/' || p[i] == 0) {
      char c = p[i];
      p[i] = 0;
      if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
      p[i] = c;
    }
  struct stat st;
  if (stat(dir, &st) != 0) return -1;
  if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
  return 0;
}

/* A read at block b goes on from block `from` (where a sequential reader would read next): b is
** that block, or a few blocks later with every block between already in memory (the reader had
** them: a leaf page between two blobs, a stream's blocks it read before).  Pages far apart, with
** blocks between that nobody read, do not go on. */
int dh_have_block(dc_hfile *f, int64_t k) {        /* (vfs_http_int.h) */
  int64_t l;
  return dc_blockcache_get(f->mem, k, &l) != NULL || dh_shared_has(f, k);
}
static int goes_on(dc_hfile *f, int64_t from, int64_t b) {
  if (from < 0 || b < from || b - from > f->pf_chunk) return 0;
  for (int64_t k = from; k < b; k++)
    if (!dh_have_block(f, k)) return 0;
  return 1;
}

/* The blocks [*xbegin, *xend) of the read announced by dc_vfs_expect, seen from its block b (a miss,
** or a block the stream before it fetched): its pages from where it began (expect_from: the first
** page of the run of pages read in order that leads to b), that is its bytes, each page's 4-byte
** link to the next (<= 1/128 of a page of 512 bytes or more), and one page more (the size of that
** run's first read); where that run lies after b or too far before it to be the same, from b */
static void announced_blocks(const dc_hfile *f, int64_t b, int64_t nblocks, int64_t *xbegin, int64_t *xend) {
  int64_t n = f->expect_bytes, span = n + n / 120 + f->expect_page, xfrom = f->expect_from;
  *xbegin = b;
  *xend = b + f->expect_blocks;
  if (xfrom >= 0 && xfrom < (b + 1) * f->bsize && b * f->bsize - xfrom <= span) {
    *xbegin = xfrom / f->bsize;
    *xend = (xfrom + span) / f->bsize + 1;
  }
  if (*xend > nblocks) *xend = nblocks;
}

/* (vfs_http_int.h) */
void dh_install_fetched(dc_hfile *f, int64_t b, int64_t x, int64_t keep_from) {
  for (int64_t k = b; k <= x; k++) {
    int64_t lk = dc_block_len(k, f->bsize, f->size);
    const uint8_t *src = f->rabuf + (k - b) * f->bsize;
    if (!f->local) { dh_disk_put(f, k, src, lk); dh_shared_put(f, k, src, lk); }
    if (k >= keep_from && !dh_shared_keeps(f, k)) {
      uint8_t *s2 = dc_blockcache_slot(f->mem, k);
      if (s2) { memcpy(s2, src, (size_t)lk); dc_blockcache_commit(f->mem, k, lk); }
    }
  }
}

/* Where the reader reads in order (dc_readorder, remote_logic.c) */
static int in_order(const dc_hfile *f, int64_t b) { return dc_readorder_in_order(&f->ro, b); }
static void read_at(dc_hfile *f, int64_t b) { dc_readorder_at(&f->ro, b); }

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
  dc_readorder_read(&f->ro, first, last, amt, f->bsize);
  /* an announced read begins where the run of pages read one after another that leads to its first
  ** miss begins (its first blocks may be here already: read with the blob before it).  Pages:
  ** reads of 512 bytes or more (the look at the header's change counter at the start of a
  ** statement is smaller), not page 1 (the header and schema, which a statement may read first) */
  if (f->expect_blocks > 0 && amt >= 512 && off > 0) {
    if (f->expect_from < 0 || first > f->expect_last + 1 || first < f->expect_from / f->bsize) {
      f->expect_from = off;
      f->expect_page = amt;
    }
    f->expect_last = last;
  }
  for (int64_t b = first; b <= last; b++) {
    int64_t bstart = b * f->bsize, blen;
    const uint8_t *blk = dc_blockcache_get(f->mem, b, &blen);
    dc_prefetch *p = blk ? NULL : dh_pf_peek(f);
    pf_ent *e;
    int64_t pend;
    if (blk) atomic_fetch_add(&dh_st.mem_hits, 1);
    else if (p && (e = dh_pf_find(p, b)) && (pend = dh_pf_take(f, p, e))) {
      /* a block of a prefetch request (waited for when in flight): in the shared cache (or in
      ** memory) now with the request's other blocks.  The stream moves on (more requests ahead)
      ** only when the reader reads in order (in_order); a block elsewhere in its window (a leaf
      ** page ahead of the blob being read, pages far apart) is
      ** taken and the stream stays: else each of many pages far apart, found in the window,
      ** would deepen the stream and it would fetch everything between them, while a scan that
      ** reads a leaf page ahead and comes back to its blob goes on */
      f->last_miss = pend - 1;
      if (f->expect_blocks > 0) {
        /* a block of an announced read that the stream before it fetched (its first blocks came
        ** with the read before it, or all of them did): the stream stops at the read's end here
        ** too, not only at a miss, else tiles read one after another, each found in the stream,
        ** would deepen it past the last one.  The announcement stays for a miss: the run of pages
        ** it counts from may begin before this block (expect_from moves back to it, and the end
        ** with it, at the next block taken) */
        int64_t xbegin, xend;
        announced_blocks(f, b, nblocks, &xbegin, &xend);
        f->pf_begin = xbegin;
        f->pf_end = xend > b + 1 ? xend : b + 1;
      }
      if (in_order(f, b)) dh_pf_advance(f, p, pend);
      b--;
      continue;
    } else if (!f->local) {
      blen = dc_block_len(b, f->bsize, f->size);
      /* from the process's shared cache, the part this read needs only: no copy of the block
      ** into this file's memory (a copy, and fresh pages, per connection and block) */
      int64_t from = (b == first ? off : bstart) - bstart, to = (end - bstart < blen ? end - bstart : blen);
      if (dh_shared_get(f, b, blen, from, to - from, dst + (bstart + from - off)) ||
          dh_part_get(f, bstart + from, to - from, dst + (bstart + from - off))) {   /* or a part of it */
        read_at(f, b);
        continue;
      }
      uint8_t *slot = NULL;
      if (f->cache_dir && (slot = dc_blockcache_slot(f->mem, b)) == NULL) return SQLITE_IOERR_NOMEM;
      if (slot && dh_disk_get(f, b, slot, blen)) {
        dc_blockcache_commit(f->mem, b, blen);
        dh_shared_put(f, b, slot, blen);
        blk = slot;
      }
    }
    if (blk) {
      int64_t from = (b == first ? off : bstart) - bstart, to = (end - bstart < blen ? end - bstart : blen);
      memcpy(dst + (bstart + from - off), blk + from, (size_t)(to - from));
      read_at(f, b);
      continue;
    }
    /* a miss that continues the last one, or the first of a read announced by dc_vfs_expect:
    ** prefetch from it on (an announced read: every request to its end at once), and wait for
    ** its request */
    int64_t expect = f->expect_blocks;
    if (expect > 0) {                       /* its end: counted from where it began, not from this miss */
      int64_t xbegin, xend;
      announced_blocks(f, b, nblocks, &xbegin, &xend);
      if (xend > b + 1) {
        f->pf_begin = xbegin;
        f->pf_end = xend;
      } else {                              /* this miss is at its end: nothing more to fetch for it */
        expect = 0;
        f->pf_end = 0;                      /* (nor for an announced read before it) */
      }
      f->expect_blocks = 0;                 /* an announcement is for one miss */
    } else if (f->pf_end && (b >= f->pf_end || b < f->pf_begin))
      f->pf_end = 0;                        /* a miss outside the announced read: the reader left it */
    int cont = goes_on(f, f->last_miss + 1, b);
    int seq = cont || expect > 0;
    if (seq && !p) p = dh_pf_get(f);
    if (p) {
      e = NULL;
      if (seq) {
        if (expect > 0) {
          int64_t xend = f->pf_end;
          dh_pf_jump(p);                    /* a new stream, whatever was queued */
          f->pf_end = xend;
          f->pf_depth = 1 << 30;            /* (dh_pf_schedule: at most its entries) */
        }
        dh_pf_schedule(f, p, b);
        e = dh_pf_find(p, b);
      }
      if (e && (pend = dh_pf_take(f, p, e))) {
        f->last_miss = pend - 1;
        f->ro.next = b;                  /* a stream starts here: the reader reads in order */
        dh_pf_advance(f, p, pend);
        b--;                             /* block b is in memory now */
        continue;
      }
      /* a miss outside a live stream: the first leaves it standing (a detour: SQLite reads a
      ** row's leaf page first, and a row's overflow chain lies before its leaf page, so a scan
      ** of blobs misses each next row's leaf page past the stream and comes back); a second one
      ** in a row means the reader left it: its queued requests are dropped */
      if (!e) {
        if (seq || f->pf_next < 0 || f->pf_detour) dh_pf_jump(p);
        else f->pf_detour = 1;
      }
    }
    /* a miss: the missing run of this read, and more ahead when reading sequentially */
    f->run = cont ? f->run + 1 : 0;
    int64_t need = last - b + 1;
    int64_t want = need * dc_readahead_blocks(f->run, f->ra_blocks);
    if (want > f->ra_blocks && want > need) want = f->ra_blocks > need ? f->ra_blocks : need;
    if (f->pf_end > b) {                    /* in an announced read (pf_begin <= b): to its end, as much as one request takes */
      int64_t ew = f->pf_end - b < f->ra_blocks ? f->pf_end - b : f->ra_blocks;
      want = ew > need ? ew : need;
    }
    int64_t x = b;
    while (x + 1 < b + want && x + 1 < nblocks) {
      if (dh_have_block(f, x + 1) || dh_on_disk(f, x + 1) || (p && dh_pf_find(p, x + 1))) break;
      x++;
    }
    f->last_miss = x;
    int64_t total;
    int rc = dh_fetch_range(f, b, x, &total);
    if (rc != SQLITE_OK) return rc;
    /* this read's part of it */
    int64_t from = b == first ? off : bstart, to = end < bstart + total ? end : bstart + total;
    memcpy(dst + (from - off), f->rabuf + (from - bstart), (size_t)(to - from));
    for (int64_t k = b; k <= x && k <= last; k++) read_at(f, k);
    /* every block into the disk cache; into memory those that fit, the last ones kept */
    int64_t nb = x - b + 1;
    dh_install_fetched(f, b, x, b + (nb > f->mem_slots ? nb - f->mem_slots : 0));
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
  dh_pf_close(f);
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
      dh_set_error("%s: %s", zName, why);
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
  int bad = 0;
  f->retries = (int)param_int(zName, "retries", "DC_HTTP_RETRIES", 4, 0, 100, &bad);
  f->timeout_ms = (long)param_int(zName, "timeout_ms", "DC_HTTP_TIMEOUT_MS", 30000, 1, 86400000, &bad);
  double mb = param_num(zName, "cache_mb", "DC_CACHE_MB", 1024, 0.001, 1e9, 0, &bad);
  if (bad) return SQLITE_CANTOPEN;
  const char *cd = sqlite3_uri_parameter(zName, "cache_dir");
  if (!cd) cd = getenv("DC_CACHE_DIR");
  if (cd && *cd) {
    if (make_dirs(cd) != 0) {
      dh_set_error("%s: cache directory %s: %s", zName, cd,
                   errno == ENOTDIR ? "not a directory" : strerror(errno));
      return SQLITE_CANTOPEN;
    }
    f->cache_dir = sqlite3_mprintf("%s", cd);
    f->cache_budget = (int64_t)(mb * 1048576.0);
    f->cache_used = -1;
  }
  f->who = dc_known_who(f->url, f->userpwd);
  dh_shared_init(f->shared_mb);
  /* a version this process confirmed moments ago (another connection, this worker's parent before
  ** the fork), its first block in the shared cache: no request.  A later request that finds
  ** another version is an error, as for any open (never a mix of two versions) */
  if (dh_known_take(f)) {
    atomic_fetch_add(&dh_st.opens_known, 1);
    int64_t len = dc_block_len(0, f->bsize, f->size);
    uint8_t *b0;       /* an open with a disk cache leaves the first block there, as one that fetched it */
    if (f->cache_dir && !dh_on_disk(f, 0) && (b0 = dc_blockcache_slot(f->mem, 0)) != NULL &&
        dh_shared_get(f, 0, len, 0, len, b0)) {
      dc_blockcache_commit(f->mem, 0, len);
      dh_disk_put(f, 0, b0, len);
    }
    return SQLITE_OK;
  }
  /* the first block: the size and the validators of this version */
  uint8_t *slot = dc_blockcache_slot(f->mem, 0);
  if (!slot) return SQLITE_NOMEM;
  int64_t got = 0;
  int rc = dh_get(f, 0, f->bsize, slot, &got, 1);
  if (rc != SQLITE_OK) return rc;
  f->size = f->val.size >= 0 ? f->val.size : got;
  if (!f->val.etag[0] && !f->val.last_modified[0]) {
    /* nothing tells this version from the next one of the same size: its blocks are kept for
    ** this connection only (in the disk cache or the process's shared cache, a replaced file
    ** was read from the old blocks by every later open) */
    sqlite3_log(SQLITE_WARNING, "dchttp: %s has neither ETag nor Last-Modified: not cached across opens", zName);
    sqlite3_free(f->cache_dir);
    f->cache_dir = NULL;
    f->no_shared = 1;
  }
  f->key = dc_cache_key(f->url, &f->val);
  dc_blockcache_commit(f->mem, 0, got);
  if (got == dc_block_len(0, f->bsize, f->size)) {
    dh_disk_put(f, 0, slot, got);
    dh_shared_put(f, 0, slot, got);
    dh_known_put(f);
  }
  return SQLITE_OK;
}

static int hv_open(sqlite3_vfs *vfs, const char *zName, sqlite3_file *pf, int flags, int *pOut) {
  (void)vfs;
  if (!zName || !(flags & SQLITE_OPEN_MAIN_DB)) {
    if (zName && dc_is_remote_name(zName)) {
      dh_set_error("%s: dchttp opens the database itself only (no journal or WAL)", zName);
      return SQLITE_CANTOPEN;
    }
    return g_base->xOpen(g_base, zName, pf, flags, pOut);     /* temp files, local journals */
  }
  dc_hfile *f = (dc_hfile *)pf;
  memset(f, 0, sizeof *f);
  dh_err[0] = 0;
  f->name = sqlite3_mprintf("%s", zName);
  int bad = 0;
  int64_t bkb = param_int(zName, "block_kb", "DC_HTTP_BLOCK_KB", 1024, 4, 65536, &bad);
  f->bsize = bkb << 10;
  int slots = (int)param_int(zName, "mem_blocks", "DC_HTTP_MEM_BLOCKS", 32, 1, 65536, &bad);
  int64_t ra_kb = param_int(zName, "readahead_kb", "DC_HTTP_READAHEAD_KB", 16384, 0, (int64_t)1 << 30, &bad);
  int64_t mi = param_int(zName, "max_inflight", "DC_HTTP_MAX_INFLIGHT", 4, 0, 64, &bad);
  int shared = (int)param_int(zName, "shared", NULL, 1, 0, 1, &bad);
  /* the process's shared block cache (made by its first remote open; 0: none) */
  f->shared_mb = param_int(zName, NULL, "DC_HTTP_SHARED_MB", 256, 0, 1 << 20, &bad);
  double lat_ms = param_num(zName, "latency_ms", "DC_THROTTLE_LATENCY_MS", 0, 0, 3600e3, 0, &bad);
  double mbps = param_num(zName, "mbps", "DC_THROTTLE_MBPS", 0, 0, 1e9, 0, &bad);
  f->revalidate_s = param_num(zName, "revalidate_s", "DC_HTTP_REVALIDATE_S", 30, 0, 1e9, 0, &bad);
  f->mem = bad ? NULL : dc_blockcache_new(slots, f->bsize);
  /* read-ahead: at most readahead_kb (default 16 MiB) and half the memory blocks */
  f->ra_blocks = (ra_kb << 10) / f->bsize;
  if (f->ra_blocks > slots / 2) f->ra_blocks = slots / 2;
  if (f->ra_blocks < 1) f->ra_blocks = 1;
  f->last_miss = -2;
  f->mem_slots = slots;
  f->pf_fd = -1;
  f->pf_next = -1;
  dc_readorder_init(&f->ro);
  /* prefetch: max_inflight requests (default 4; 0 or readahead_kb=0: off) of about
  ** readahead_kb / max_inflight each */
  if (ra_kb <= 0) mi = 0;
  f->max_inflight = (int)mi;
  f->pf_chunk = mi ? f->ra_blocks / mi : 1;
  if (f->pf_chunk < 1) f->pf_chunk = 1;
  f->no_shared = shared == 0;
  f->thr.latency_s = lat_ms / 1000;
  f->thr.bytes_per_s = mbps * 1e6;
  f->throttled = f->thr.latency_s > 0 || f->thr.bytes_per_s > 0;
  int rc;
  if (bad) rc = SQLITE_CANTOPEN;
  else if (!f->name || !f->mem) rc = SQLITE_NOMEM;
  else if (dc_is_remote_name(zName)) rc = remote_setup(f, zName);
  else {
    f->local = (sqlite3_file *)(f + 1);
    int lf = (flags & ~(SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)) | SQLITE_OPEN_READONLY;
    rc = g_base->xOpen(g_base, zName, f->local, lf, NULL);
    if (rc != SQLITE_OK) { f->local = NULL; dh_set_error("%s: cannot open", zName); }
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
  atomic_fetch_add(&dh_st.opens, 1);
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
  if (n > 0) snprintf(z, (size_t)n, "%s", dh_err);
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
    dh_st.requests = dh_st.bytes = dh_st.retries = dh_st.mem_hits = dh_st.disk_hits = dh_st.disk_bytes = dh_st.disk_writes = 0;
    dh_st.evictions = dh_st.errors = dh_st.opens = dh_st.throttle_ns = dh_st.shared_hits = dh_st.disk_bad = 0;
    dh_st.pf_requests = dh_st.pf_failed = dh_st.pf_blocks = dh_st.pf_unused = dh_st.pf_waits = dh_st.pf_peak = 0;
    dh_st.opens_known = dh_st.spans = dh_st.part_hits = 0;
  }
  char *m = sqlite3_mprintf(
      "{\"requests\": %lld, \"bytes\": %lld, \"retries\": %lld, \"mem_hits\": %lld, \"disk_hits\": %lld, "
      "\"disk_bytes\": %lld, \"disk_writes\": %lld, \"evictions\": %lld, \"errors\": %lld, \"opens\": %lld, "
      "\"throttle_s\": %.6f, \"shared_hits\": %lld, \"prefetch_requests\": %lld, \"prefetch_failed\": %lld, "
      "\"prefetch_blocks_used\": %lld, \"prefetch_blocks_unused\": %lld, \"prefetch_waits\": %lld, "
      "\"prefetch_peak_inflight\": %lld, \"disk_bad\": %lld, \"opens_known\": %lld, \"spans\": %lld, "
      "\"part_hits\": %lld}",
      (long long)dh_st.requests, (long long)dh_st.bytes, (long long)dh_st.retries, (long long)dh_st.mem_hits,
      (long long)dh_st.disk_hits, (long long)dh_st.disk_bytes, (long long)dh_st.disk_writes, (long long)dh_st.evictions,
      (long long)dh_st.errors, (long long)dh_st.opens, (double)dh_st.throttle_ns * 1e-9,
      (long long)dh_st.shared_hits, (long long)dh_st.pf_requests, (long long)dh_st.pf_failed, (long long)dh_st.pf_blocks,
      (long long)dh_st.pf_unused, (long long)dh_st.pf_waits, (long long)dh_st.pf_peak, (long long)dh_st.disk_bad,
      (long long)dh_st.opens_known, (long long)dh_st.spans, (long long)dh_st.part_hits);
  if (!m) { sqlite3_result_error_nomem(ctx); return; }
  sqlite3_result_text(ctx, m, -1, sqlite3_free);
}

static void error_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc; (void)argv;
  sqlite3_result_text(ctx, dh_err, -1, SQLITE_TRANSIENT);
}

/* the dchttp file of db's schema, or NULL when that schema's file is no dchttp file */
static dc_hfile *hfile_of(sqlite3 *db, const char *schema) {
  sqlite3_file *pf = NULL;
  if (!schema || sqlite3_file_control(db, schema, SQLITE_FCNTL_FILE_POINTER, &pf) != SQLITE_OK || !pf ||
      pf->pMethods != &hf_methods)
    return NULL;
  return (dc_hfile *)pf;
}

int64_t dc_vfs_expect(sqlite3 *db, const char *schema, int64_t nbytes) {
  dc_hfile *f = hfile_of(db, schema);
  if (!f) return -1;
  /* the read may begin anywhere in its first block: one block more */
  f->expect_blocks = nbytes > 0 ? nbytes / f->bsize + 2 : 0;
  f->expect_bytes = nbytes > 0 ? nbytes : 0;
  f->expect_from = -1;
  return f->expect_blocks;
}

/* dc_vfs_fetch(schema, offset, nbytes [, offset, nbytes ...]) in SQL: the blocks of those byte
** ranges of schema's dchttp file that this process does not hold, requested at once and waited for
** (dh_fetch_ranges, http_fetch.c): where a reader knows where the pages it will read lie (a tile's leaf page and
** overflow chain: the page map, docs/format.md), one round trip instead of one per b-tree level.
** The blocks fetched; NULL for a file not read through dchttp; an error (dc_vfs_error's reason)
** when a request failed.  Call on the thread that runs the connection's queries. */
static void fetch_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  if (argc < 3 || argc % 2 == 0) {
    sqlite3_result_error(ctx, "dc_vfs_fetch: arguments are schema, then offset and nbytes pairs", -1);
    return;
  }
  int n = (argc - 1) / 2;
  int64_t r[32][2];
  if (n > 32) {
    sqlite3_result_error(ctx, "dc_vfs_fetch: at most 32 ranges", -1);
    return;
  }
  for (int i = 0; i < n; i++) {
    sqlite3_value *a = argv[1 + 2 * i], *b = argv[2 + 2 * i];
    if (sqlite3_value_type(a) != SQLITE_INTEGER || sqlite3_value_type(b) != SQLITE_INTEGER ||
        sqlite3_value_int64(a) < 0 || sqlite3_value_int64(b) < 0) {
      sqlite3_result_error(ctx, "dc_vfs_fetch: offsets and nbytes must be integers >= 0", -1);
      return;
    }
    r[i][0] = sqlite3_value_int64(a);
    r[i][1] = sqlite3_value_int64(b);
  }
  dc_hfile *f = hfile_of(sqlite3_context_db_handle(ctx), (const char *)sqlite3_value_text(argv[0]));
  if (!f) {
    sqlite3_result_null(ctx);
    return;
  }
  int64_t got = dh_fetch_ranges(f, n, r);
  if (got < 0) sqlite3_result_error(ctx, dh_err, -1);
  else sqlite3_result_int64(ctx, got);
}

/* dc_vfs_expect(schema, nbytes) in SQL: the blocks announced, NULL for a file not read through
** dchttp (dc_ext.h has what an announcement does) */
static void expect_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER || sqlite3_value_int64(argv[1]) < 0) {
    sqlite3_result_error(ctx, "dc_vfs_expect: nbytes must be an integer >= 0", -1);
    return;
  }
  int64_t n = dc_vfs_expect(sqlite3_context_db_handle(ctx), (const char *)sqlite3_value_text(argv[0]),
                            sqlite3_value_int64(argv[1]));
  if (n < 0) sqlite3_result_null(ctx);
  else sqlite3_result_int64(ctx, n);
}

/* dc_vfs_file(schema): that schema's dchttp file as it was opened, JSON: "shared" (1 when its
** blocks go through the process's shared block cache, so that another connection's reads of the
** same version reach it: the Python fetch-ahead's condition), "max_inflight", "block_kb",
** "readahead_kb", "size" (the file's bytes); NULL when the schema's file is no dchttp file */
static void file_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  dc_hfile *f = hfile_of(sqlite3_context_db_handle(ctx), (const char *)sqlite3_value_text(argv[0]));
  if (!f) {
    sqlite3_result_null(ctx);
    return;
  }
  char *j = sqlite3_mprintf("{\"shared\": %d, \"max_inflight\": %d, \"block_kb\": %lld, \"readahead_kb\": %lld, "
                            "\"size\": %lld}", dh_shared_used(f), f->max_inflight, (long long)(f->bsize >> 10),
                            (long long)((f->ra_blocks * f->bsize) >> 10), (long long)f->size);
  if (!j) sqlite3_result_error_nomem(ctx);
  else sqlite3_result_text(ctx, j, -1, sqlite3_free);
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
    dh_trace = tr && *tr && *tr != '0' ? atoi(tr) : 0;
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
      if (rc == SQLITE_OK) dh_shared_atfork();
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
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_file", 1, SQLITE_UTF8, NULL, file_func, NULL, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_fetch", -1, SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL, fetch_func, NULL,
                                 NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function(db, "dc_vfs_expect", 2, SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL, expect_func,
                                 NULL, NULL);
  return rc;
}
