/*
** dc_remote.h — the pure logic of the remote-file VFS (ext/vfs_http.c): block
** range math, the retry policy, the throttle, the response validators, the
** in-memory block cache, the on-disk cache's names and eviction plan, and the
** s3:// URL mapping.  No SQLite, no libcurl, no I/O: unit-tested in
** tests/c/test_remote.c.
*/
#ifndef DC_REMOTE_H
#define DC_REMOTE_H
#include <stddef.h>
#include <stdint.h>

/* --- block range math ---------------------------------------------------
** The file is cut into aligned blocks of bsize bytes; the last may be shorter.
** dc_blocks_for: the blocks [*first, *last] a read of len bytes at off touches,
** clipped to the file; returns 0 when nothing of the range lies in the file. */
int dc_blocks_for(int64_t off, int64_t len, int64_t bsize, int64_t fsize, int64_t *first, int64_t *last);
/* bytes of block idx (0 past the end) */
int64_t dc_block_len(int64_t idx, int64_t bsize, int64_t fsize);

/* Sequential read-ahead: after `run` misses of consecutive blocks, the next fetch takes
** 2^run blocks, at most max_blocks (at least 1). */
int64_t dc_readahead_blocks(int run, int64_t max_blocks);

/* --- retry policy --------------------------------------------------------
** transport: 1 when the transfer failed in a way worth retrying (timeout,
** reset, refused connection, short body), 0 otherwise; status: the HTTP status
** (0 when none came).  Returns 1 to retry: transport faults, 408, 429, 5xx. */
int dc_retryable(int transport, long status);
/* the pause before retry number attempt (1, 2, ...): base_ms * 2^(attempt-1),
** at most max_ms */
int64_t dc_backoff_ms(int attempt, int64_t base_ms, int64_t max_ms);

/* --- throttle --------------------------------------------------------------
** Emulates a store with a fixed latency per request and a bandwidth per
** connection: a request of n bytes takes latency + n / bandwidth.  Returns the
** seconds still to wait after a request that really took elapsed_s. */
typedef struct {
  double latency_s;       /* per request */
  double bytes_per_s;     /* 0: unlimited */
} dc_throttle;
double dc_throttle_wait(const dc_throttle *t, int64_t bytes, double elapsed_s);

/* --- validators: what identifies one version of the remote file ------------ */
typedef struct {
  char etag[160];
  char last_modified[64];
  int64_t size;           /* -1: unknown */
} dc_validator;
/* 0 when resp is the same version as at_open (fields absent in resp are not
** compared); otherwise 1 with the difference written into why */
int dc_validator_differs(const dc_validator *at_open, const dc_validator *resp, char *why, size_t why_n);
/* "bytes START-END/TOTAL" -> 1, or 0 when malformed (TOTAL "*" gives -1) */
int dc_parse_content_range(const char *v, int64_t *start, int64_t *end, int64_t *total);
/* copy a header value (after "Name:") into out, trimmed of blanks and CR/LF */
void dc_header_value(const char *v, size_t n, char *out, size_t out_n);

/* Where a reader reads in order, which the prefetcher follows (vfs_http.c).  next: the block
** after the last one read in order (-1: none yet); a read of that block, or up to one page
** after it (a page between: a leaf page between two blobs that SQLite had in its own cache, or
** read before the blob), is in order and moves it on.  A single read out of order (a row's
** leaf page, read before the row's overflow chain that lies before it) leaves it where it was;
** a read that starts where the last read out of order ended (alt) makes that the reader's new
** place (it moved on to the next blob, say).  Pages far apart never are in order. */
typedef struct dc_readorder {
  int64_t next, alt;
  int64_t page_blocks;          /* blocks a page spans, from the reads (at least 1) */
} dc_readorder;
void dc_readorder_init(dc_readorder *o);
int dc_readorder_in_order(const dc_readorder *o, int64_t b);
/* At the start of a read of amt bytes, blocks first .. last (blocks of bsize bytes). */
void dc_readorder_read(dc_readorder *o, int64_t first, int64_t last, int64_t amt, int64_t bsize);
/* Block b was read (from wherever it came). */
void dc_readorder_at(dc_readorder *o, int64_t b);

/* --- in-memory cache of blocks (LRU, a fixed number of slots) --------------- */
typedef struct dc_blockcache dc_blockcache;
dc_blockcache *dc_blockcache_new(int slots, int64_t bsize);
void dc_blockcache_free(dc_blockcache *c);
/* the block's bytes (and its length in *len), or NULL when not held */
const uint8_t *dc_blockcache_get(dc_blockcache *c, int64_t idx, int64_t *len);
/* a buffer of bsize bytes for block idx, taking the least recently used slot;
** the block is held once dc_blockcache_commit(c, idx, len) is called */
uint8_t *dc_blockcache_slot(dc_blockcache *c, int64_t idx);
void dc_blockcache_commit(dc_blockcache *c, int64_t idx, int64_t len);
void dc_blockcache_clear(dc_blockcache *c);

/* --- a cache of blocks shared by the open files of a process (keyed by file version and
** block), a fixed number of slots of at most cap bytes; no locking here (the VFS holds a
** mutex around every call) */
typedef struct dc_sharedcache dc_sharedcache;
dc_sharedcache *dc_sharedcache_new(int slots, int64_t cap);
void dc_sharedcache_free(dc_sharedcache *c);
/* copies bytes [off, off + n) of block (key, idx), len bytes expected, into out; 1 when held
** (0 too for a range outside the block) */
int dc_sharedcache_get(dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len, int64_t off, int64_t n,
                       uint8_t *out);
/* 1 when block (key, idx) of len bytes is held (no copy, no change to the LRU order) */
int dc_sharedcache_has(const dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len);
/* stores a copy (a block over cap is not kept), evicting the least recently used: claim, copy,
** publish (below) in one call */
void dc_sharedcache_put(dc_sharedcache *c, uint64_t key, int64_t idx, const uint8_t *b, int64_t len);
/* Storing in two steps, so that a caller that locks around each call copies the block without
** its lock (a copy into fresh pages is slow on some machines; readers would wait on it):
** claim picks a slot for block (key, idx) of len bytes (an empty one, else the least recently
** used; never one being filled), marks it being filled (invisible to get and has, never
** picked) and returns its buffer, *slot its number.  NULL (*slot -1) when the block is held
** already, len is over cap, every slot is being filled, or out of memory: nothing to store.
** The caller copies the block in, then publish makes it visible (an older copy of the block
** goes). */
uint8_t *dc_sharedcache_claim(dc_sharedcache *c, uint64_t key, int64_t idx, int64_t len, int *slot);
void dc_sharedcache_publish(dc_sharedcache *c, int slot, uint64_t key, int64_t idx, int64_t len);
/* a forked child: the fills in progress at the fork (threads of the parent) never finish
** here; their slots become empty */
void dc_sharedcache_drop_fills(dc_sharedcache *c);

/* --- parts of blocks: byte ranges of a file version that lie inside blocks the process does not
** hold whole (the first and last pages of a tile fetched by its page map: the rest of those
** blocks belongs to tiles another process reads; fetching whole blocks cost the store about 1.3x
** the tiles' bytes over tiles of about 2 blocks).  A ring of cap bytes: each part is copied in
** after the last, from the start again where it does not fit, and the parts it overwrites go;
** at most DC_PARTS_MAX parts (the oldest goes).  No locking here (the VFS holds its mutex). */
enum { DC_PARTS_MAX = 512 };
typedef struct dc_partstore dc_partstore;
dc_partstore *dc_partstore_new(int64_t cap);
void dc_partstore_free(dc_partstore *s);
/* stores a copy of bytes [lo, lo + len) of version key (nothing where len is over cap or < 1) */
void dc_partstore_put(dc_partstore *s, uint64_t key, int64_t lo, const uint8_t *b, int64_t len);
/* 1 when one part holds all of bytes [off, off + n) of version key: copied into out (out may be
** NULL: only the answer) */
int dc_partstore_get(const dc_partstore *s, uint64_t key, int64_t off, int64_t n, uint8_t *out);

/* --- versions a process has confirmed, so that another open of the same file soon after need
** not ask the server again.  An entry: who (dc_known_who: the URL and the credential it was read
** with), the version's validators and size, and when a response of the server last confirmed it
** (seconds on a monotonic clock).  No locking here (the VFS holds its mutex around every call). */
enum { DC_KNOWN_MAX = 16 };
typedef struct {
  uint64_t who;
  dc_validator val;
  int64_t size;
  double at;
} dc_known;
typedef struct {
  dc_known e[DC_KNOWN_MAX];
  int n;
} dc_knownset;
uint64_t dc_known_who(const char *url, const char *credential);
/* who's version is (val, size), confirmed at now: its entry replaced, or added (the entry confirmed
** longest ago goes when the set is full) */
void dc_known_put(dc_knownset *s, uint64_t who, const dc_validator *val, int64_t size, double now);
/* a response at now confirmed who's version val: its entry's time moves on (only when the entry
** is of that version) */
void dc_known_seen(dc_knownset *s, uint64_t who, const dc_validator *val, double now);
/* who's entry when it was confirmed at most fresh_s seconds before now (fresh_s > 0), else NULL */
const dc_known *dc_known_get(const dc_knownset *s, uint64_t who, double now, double fresh_s);
/* who's version changed on the server: its entry goes */
void dc_known_forget(dc_knownset *s, uint64_t who);

/* --- on-disk cache ------------------------------------------------------------ */
/* a 64-bit key of one version of one file: URL, ETag, Last-Modified, size */
uint64_t dc_cache_key(const char *url, const dc_validator *v);
/* the file name of a block: "dc-KEY-BSIZEk-IDX.blk" */
void dc_cache_name(char *out, size_t n, uint64_t key, int64_t bsize, int64_t idx);
typedef struct {
  int64_t size;
  int64_t mtime_ns;
  int idx;                /* the caller's index of the file */
} dc_cachefile;
/* Sorts files oldest first and returns how many of the oldest to delete so
** that the rest plus incoming bytes fit in budget. */
int dc_evict_plan(dc_cachefile *files, int n, int64_t budget, int64_t incoming);

/* --- s3:// ---------------------------------------------------------------------
** "s3://bucket/key" -> an https URL: with endpoint (e.g. "http://127.0.0.1:9000"),
** path style ENDPOINT/bucket/key; without, https://bucket.s3.REGION.amazonaws.com/key.
** Returns 0 and writes why when the name is not of that form. */
int dc_s3_url(const char *s3, const char *endpoint, const char *region, char *out, size_t n, char *why,
              size_t why_n);
/* 1 for http://, https://, s3:// names */
int dc_is_remote_name(const char *name);
/* --- one range response ------------------------------------------------------
** What came back for a GET of bytes [off, off+len) whose transfer itself did not fail
** (a transfer error is the caller's: libcurl names it).  first: the request at open. */
typedef struct {
  int overflow;           /* the server sent more than len bytes (the transfer was cut) */
  long status;            /* HTTP status */
  int first;
  int64_t off, len, got;  /* asked for, and the body bytes that came */
  int have_cr;            /* a well-formed Content-Range: cr_start-cr_end */
  int64_t cr_start, cr_end;
} dc_range_resp;
enum { DC_RESP_OK = 0, DC_RESP_WHOLE, DC_RESP_EMPTY, DC_RESP_BAD };
/* DC_RESP_OK: the bytes asked for came; DC_RESP_WHOLE: the request at open got the whole (small)
** file with HTTP 200 (no range support): accept it as bytes 0..got-1; DC_RESP_EMPTY: the request
** at open got 416 (an empty file); DC_RESP_BAD: why says what is wrong, and *transport is 1 when it
** is a transport fault (a short body) for dc_retryable. */
int dc_range_check(const dc_range_resp *r, int *transport, char *why, size_t why_n);

/* S3's error document in the body of an error response (possibly cut short): "Code: Message"
** from its <Code> and <Message> elements, XML entities decoded, into out.  Returns 0 when the
** body has no complete <Code> element (not S3's, or cut before it). */
int dc_s3_error(const char *body, size_t n, char *out, size_t out_n);
#endif
