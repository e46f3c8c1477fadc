/*
** vfs_http_int.h — what the parts of the dchttp VFS share (not a public interface):
** the open file (dc_hfile), the process-wide counters, and each part's functions.
**   vfs_http.c        the sqlite3_vfs / sqlite3_io_methods glue: open, read, close, stats
**   http_transport.c  one range request over libcurl (retries, validators), the throttle
**   http_cache.c      the on-disk block cache and the process's shared block cache
**   http_prefetch.c   background requests for the blocks ahead of a sequential reader
** The pure logic (block math, retry policy, validators, caches' data structures) is in
** remote_logic.c (dc_remote.h).
*/
#ifndef VFS_HTTP_INT_H
#define VFS_HTTP_INT_H
#include "dc_ext.h"
#include <curl/curl.h>
#include <stdatomic.h>
#include <sys/types.h>
#include "dc_remote.h"

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
  int64_t shared_mb;            /* DC_HTTP_SHARED_MB (default 256): the shared cache's size, if this open makes it */
  uint64_t who;                 /* dc_known_who: the URL and the credential it is read with */
  double revalidate_s;          /* URI revalidate_s: how recent a version this process confirmed may
                                   be for the open to take it without a request (0: never) */
  uint8_t *rabuf;               /* a read-ahead request's bytes */
  int64_t rabuf_cap;
  int max_inflight;             /* prefetch requests in flight at most (0: no prefetch) */
  int64_t pf_chunk;             /* blocks per prefetch request */
  int64_t pf_next;              /* the block after the last one queued for prefetch */
  int pf_depth;                 /* requests the current stream may have ahead (grows from 2) */
  dc_readorder ro;              /* where the reader reads in order (a take there moves the stream on) */
  int pf_detour;                /* a miss outside the live stream left it standing (hf_read) */
  int64_t pf_end;               /* the block after an announced read's end: nothing past it is
                                   fetched ahead (prefetch requests, read-ahead) until the reader
                                   misses a block outside [pf_begin, pf_end) (0: none) */
  int64_t pf_begin;             /* the announced read's first block */
  int64_t expect_blocks;        /* dc_vfs_expect: the next miss starts a sequential read of about
                                   this many blocks (0: none) */
  int64_t expect_bytes;         /* dc_vfs_expect: the announced read's length */
  int64_t expect_from;          /* since the announcement: the file offset where the latest run of
                                   pages read one after another begins (-1: none yet) */
  int64_t expect_last;          /* the last block of that run */
  int64_t expect_page;          /* the size of its first read (a page) */
  int pf_fd;                    /* a local file's descriptor for the prefetch threads (-1: none) */
  dc_prefetch *pf;              /* the prefetch threads (started on first use) */
} dc_hfile;

/* process-wide counters (dc_vfs_stats()); prefetch: requests made, of them failed, blocks the
** reader used, blocks fetched and never used, reads that waited for a request in flight, the
** most requests in flight at once on one file */
typedef struct {
  _Atomic int64_t shared_hits, requests, bytes, retries, mem_hits, disk_hits, disk_bytes, disk_writes, evictions,
      errors, opens, throttle_ns, disk_bad, opens_known;
  _Atomic int64_t pf_requests, pf_failed, pf_blocks, pf_unused, pf_waits, pf_peak;
  _Atomic int64_t spans, part_hits;   /* span requests (dh_fetch_ranges), reads served from parts */
} dh_stats;
extern dh_stats dh_st;
extern _Thread_local char dh_err[1024];   /* this thread's last reason (dc_vfs_error()) */
extern int dh_trace;                      /* DC_HTTP_TRACE=1: each block read goes to stderr */
/* sets this thread's reason, counts an error and logs it (vfs_http.c) */
void dh_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --- http_transport.c ----------------------------------------------------- */
double dh_now(void);
void dh_sleep(double s);
/* stop: a prefetch thread's flag (NULL on the reading thread): the wait ends early when it is set */
void dh_throttle(dc_hfile *f, int64_t bytes, double t0, _Atomic int *stop);
/* the options of a request of f on handle c (a fresh or reset handle) */
void dh_setup_curl(dc_hfile *f, CURL *c);
/* GET bytes [off, off+len) into buf on handle c, at most 1 + tries attempts.  first: the
** request at open (no validator to compare yet; it fills f->val).  Returns SQLITE_OK, or an
** error with the reason in err (dh_set_error is the caller's: a prefetch thread keeps it quiet). */
int dh_get_on(dc_hfile *f, CURL *c, int tries, int64_t off, int64_t len, uint8_t *buf, int64_t *got, int first,
              char *err, size_t err_n, _Atomic int *stop);
/* the same on the file's own handle, with its retries; dh_err set on error */
int dh_get(dc_hfile *f, int64_t off, int64_t len, uint8_t *buf, int64_t *got, int first);
/* blocks idx..last (all missing) in one request into f->rabuf; *total_out: their bytes */
int dh_fetch_range(dc_hfile *f, int64_t idx, int64_t last, int64_t *total_out);

/* --- vfs_http.c (what the fetch below shares with the read) ---------------- */
/* block k is in this file's memory or the process's shared cache */
int dh_have_block(dc_hfile *f, int64_t k);
/* blocks b..x of a request (in f->rabuf) into the caches: the disk cache and the process's shared
** cache; into this file's memory those from keep_from on that the shared cache does not keep */
void dh_install_fetched(dc_hfile *f, int64_t b, int64_t x, int64_t keep_from);

/* --- http_fetch.c ---------------------------------------------------------- */
/* Fetches the blocks of byte ranges r[i] = {offset, nbytes} that this process does not hold, all
** requested at once (the file's prefetch requests, max_inflight in flight; on the calling thread
** when it has none, or where a request failed, with retries), and waits for them: they are then in
** the caches like any block read.  The ranges' blocks, in order, merged where they meet (r is
** overwritten with them); where parts are used (dh_parts_used), each range's bytes as they are
** (spans).  Returns the blocks (or spans) fetched, or -1 with dh_err set when a request failed
** after its retries.  No stream goes on from here.  dc_vfs_fetch in SQL. */
int64_t dh_fetch_ranges(dc_hfile *f, int n, int64_t (*r)[2]);

/* --- http_cache.c ---------------------------------------------------------- */
/* block idx (len bytes) from the on-disk cache into buf: 1 when held */
int dh_disk_get(dc_hfile *f, int64_t idx, uint8_t *buf, int64_t len);
/* stores block idx in the on-disk cache (evicting the least recently used over budget) */
void dh_disk_put(dc_hfile *f, int64_t idx, const uint8_t *buf, int64_t len);
int dh_on_disk(dc_hfile *f, int64_t idx);
/* the process's shared block cache (locked here; a no-op for a local, unshared or large-block file) */
int dh_shared_used(const dc_hfile *f);
/* block idx is in the shared cache and that cache holds at least 4 times the file's memory
** blocks, so that a block it has just taken stays there while a reader reads it: the block
** needs no copy in the file's memory (readers read it from the shared cache) */
int dh_shared_keeps(dc_hfile *f, int64_t idx);
/* bytes [off, off + n) of block idx (len bytes) into out: 1 when the cache holds it */
int dh_shared_get(dc_hfile *f, int64_t idx, int64_t len, int64_t off, int64_t n, uint8_t *out);
int dh_shared_has(dc_hfile *f, int64_t idx);
void dh_shared_put(dc_hfile *f, int64_t idx, const uint8_t *b, int64_t len);
/* parts of blocks (dc_partstore: byte ranges inside blocks not held whole; with the shared cache):
** get copies [off, off + n) into out where one part holds it (out NULL: only the answer); put
** stores a copy.  used: whether dh_fetch_ranges fetches parts for f (a remote file in the shared
** cache, no disk cache: the disk cache keeps whole blocks across runs) */
int dh_part_get(dc_hfile *f, int64_t off, int64_t n, uint8_t *out);
void dh_part_put(dc_hfile *f, int64_t lo, const uint8_t *b, int64_t len);
int dh_parts_used(const dc_hfile *f);
/* bytes [lo, lo + len) of f: its whole blocks into the shared cache, the parts of blocks at its
** ends into the parts; span_held: whether they are all there */
void dh_span_put(dc_hfile *f, int64_t lo, int64_t len, const uint8_t *b);
int dh_span_held(dc_hfile *f, int64_t lo, int64_t len);
/* creates the shared cache on the first remote open (DC_HTTP_SHARED_MB) */
void dh_shared_init(int64_t mb);   /* the first call makes it, with mb slots of 1 MiB (0: none) */
/* once, at the VFS's registration: no fork inside a shared-cache copy */
void dh_shared_atfork(void);

/* versions this process confirmed (dc_knownset, under the shared cache's lock; inherited by a
** forked child): take: an open of f may take the version of f->who confirmed at most
** f->revalidate_s seconds ago when block 0 of it is in the shared cache: 1, with f->val, f->size
** and f->key set.  put: the open's own request confirmed f's version.  seen: a later response
** matched it.  forget: it changed on the server (the next open asks again). */
int dh_known_take(dc_hfile *f);
void dh_known_put(const dc_hfile *f);
void dh_known_seen(const dc_hfile *f);
void dh_known_forget(const dc_hfile *f);

/* --- http_prefetch.c -------------------------------------------------------- */
typedef struct pf_ent pf_ent;
/* the file's prefetcher of this process if it has started one, else NULL */
dc_prefetch *dh_pf_peek(dc_hfile *f);
/* the file's prefetcher in this process (its threads started on the first sequential miss), or
** NULL when off */
dc_prefetch *dh_pf_get(dc_hfile *f);
void dh_pf_close(dc_hfile *f);
/* the entry holding block idx (queued, in flight or fetched), or NULL */
pf_ent *dh_pf_find(dc_prefetch *p, int64_t idx);
/* queue requests for the blocks from `from` on, up to the window */
void dh_pf_schedule(dc_hfile *f, dc_prefetch *p, int64_t from);
/* block idx from the prefetcher: waits for its request, installs its blocks into memory and
** returns the entry's last block + 1; 0 when it has not got it (not asked for, or failed) */
int64_t dh_pf_take(dc_hfile *f, dc_prefetch *p, pf_ent *e);
/* the stream goes on from block `from` after an in-order take: one request more ahead, queued */
void dh_pf_advance(dc_hfile *f, dc_prefetch *p, int64_t from);
/* the reader left the stream: queued requests dropped */
void dh_pf_jump(dc_prefetch *p);
/* a span request (bytes [lo, lo + len), at most an entry's pf_chunk blocks) in a free entry,
** fetched by the threads before any block request and put into the caches by dh_span_put; NULL
** when no entry is free (or len is over an entry).  *seq: what dh_pf_wait_span needs */
pf_ent *dh_pf_queue_span(dc_prefetch *p, int64_t lo, int64_t len, unsigned *seq);
/* waits for it (the entry is then free again); whether its bytes arrived is the caller's to check */
void dh_pf_wait_span(dc_prefetch *p, pf_ent *e, unsigned seq);
#endif
