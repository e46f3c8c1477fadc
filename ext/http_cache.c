/*
** http_cache.c — the dchttp VFS's block caches outside the open file: the on-disk cache
** (cache_dir: one file per block, named by file version and block, the block's bytes followed by
** their XXH3-64 (seeded with the name's key and index), so that a file damaged on disk, cut
** short or renamed is a miss, deleted and fetched again, never data; least recently used evicted
** over cache_mb) and the process's shared in-memory cache of blocks (the open files of one
** version share them: connections of a DataLoader worker, its prefetch thread, each epoch's
** new connection), behind one mutex.  The data structures and the eviction plan are pure logic
** in remote_logic.c.
*/
#include <dirent.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include "vfs_http_int.h"

/* blocks shared by the process's open files of the same version: DC_HTTP_SHARED_MB slots
** (default 256; 0: off) of blocks up to 1 MiB */
static dc_sharedcache *g_shared;
static int64_t g_shared_bsize, g_shared_slots;
static dc_knownset g_known;        /* versions confirmed, under g_shared_lock too */
static dc_partstore *g_parts;      /* parts of blocks (dc_partstore), under g_shared_lock too */
static pthread_mutex_t g_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static void shared_prepare(void) { pthread_mutex_lock(&g_shared_lock); }
static void shared_release(void) { pthread_mutex_unlock(&g_shared_lock); }
static void shared_child(void) {          /* the parent's threads filling slots are not here */
  if (g_shared) dc_sharedcache_drop_fills(g_shared);
  pthread_mutex_unlock(&g_shared_lock);
}

void dh_shared_atfork(void) { pthread_atfork(shared_prepare, shared_release, shared_child); }

void dh_shared_init(int64_t mb) {
  pthread_mutex_lock(&g_shared_lock);
  if (!g_shared && !g_shared_bsize) {
    /* slots of up to 1 MiB (larger blocks are not shared), as many as the budget holds
    ** (DC_HTTP_SHARED_MB, checked by the open: vfs_http.c) */
    g_shared_bsize = 1 << 20;
    if (mb > 0) g_shared = dc_sharedcache_new((int)mb, g_shared_bsize);
    if (g_shared) g_shared_slots = mb;
    /* parts: an eighth of the budget, at most 32 MiB (a tile's two edges each take at most a block) */
    if (g_shared) g_parts = dc_partstore_new((mb / 8 < 32 ? (mb / 8 > 1 ? mb / 8 : 1) : 32) << 20);
  }
  pthread_mutex_unlock(&g_shared_lock);
}

/* --- the on-disk cache ---------------------------------------------------- */
static void cache_path(dc_hfile *f, int64_t idx, char *out, size_t n) {
  char name[96];
  dc_cache_name(name, sizeof name, f->key, f->bsize, idx);
  snprintf(out, n, "%s/%s", f->cache_dir, name);
}

/* the check of a cached block: its bytes' XXH3-64, seeded with what names it */
static uint64_t block_sum(const dc_hfile *f, int64_t idx, const uint8_t *buf, int64_t len) {
  return XXH3_64bits_withSeed(buf, (size_t)len, f->key ^ ((uint64_t)idx * 0x9e3779b97f4a7c15ull));
}

static int read_full(int fd, uint8_t *buf, int64_t len, int64_t off) {
  for (int64_t have = 0; have < len;) {
    ssize_t k = pread(fd, buf + have, (size_t)(len - have), off + have);
    if (k <= 0) return 0;
    have += k;
  }
  return 1;
}

int dh_disk_get(dc_hfile *f, int64_t idx, uint8_t *buf, int64_t len) {
  if (!f->cache_dir) return 0;
  char p[4096];
  cache_path(f, idx, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st;
  uint8_t t[8];
  int ok = fstat(fd, &st) == 0 && st.st_size == len + 8 && read_full(fd, buf, len, 0) && read_full(fd, t, 8, len);
  uint64_t want = 0;
  for (int k = 0; ok && k < 8; k++) want |= (uint64_t)t[k] << (8 * k);
  int bad = !ok || want != block_sum(f, idx, buf, len);
  if (!bad) futimens(fd, NULL);            /* most recently used */
  close(fd);
  if (bad) {                               /* damaged, cut short, of another block or an older
                                           ** release's file: gone, and the block fetched again */
    if (unlink(p) == 0) { atomic_fetch_add(&dh_st.disk_bad, 1); f->cache_used = -1; }
    return 0;
  }
  atomic_fetch_add(&dh_st.disk_hits, 1);
  atomic_fetch_add(&dh_st.disk_bytes, len);
  return 1;
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
      if (unlink(p) == 0) { atomic_fetch_add(&dh_st.evictions, 1); continue; }
    }
    used += files[i].size;
  }
  f->cache_used = used;
  for (int i = 0; i < n; i++) free(names[i]);
  free(names); free(files);
}

void dh_disk_put(dc_hfile *f, int64_t idx, const uint8_t *buf, int64_t len) {
  if (!f->cache_dir || len + 8 > f->cache_budget) return;
  if (f->cache_used < 0 || f->cache_used + len + 8 > f->cache_budget) disk_scan(f, len + 8);
  char p[4096], tmp[4200];
  cache_path(f, idx, p, sizeof p);
  /* a name of this write alone: two threads of one process (connections of one version with one
  ** cache_dir) writing the same block would otherwise truncate and rename each other's file */
  static _Atomic long seq;
  snprintf(tmp, sizeof tmp, "%s.tmp%ld.%ld", p, (long)getpid(), atomic_fetch_add(&seq, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  uint64_t sum = block_sum(f, idx, buf, len);
  uint8_t t[8];
  for (int k = 0; k < 8; k++) t[k] = (uint8_t)(sum >> (8 * k));
  int64_t done = 0;
  while (done < len) {
    ssize_t k = write(fd, buf + done, (size_t)(len - done));
    if (k <= 0) break;
    done += k;
  }
  int tail = done == len && write(fd, t, 8) == 8;
  if (close(fd) != 0 || !tail || rename(tmp, p) != 0) { unlink(tmp); return; }
  f->cache_used += len + 8;
  atomic_fetch_add(&dh_st.disk_writes, 1);
}

/* --- blocks ---------------------------------------------------------------- */
/* a version's blocks in the shared cache: its key, and the block size (files of one version
** read with other block sizes have other blocks) */
static uint64_t slot_key(uint64_t key, int64_t bsize) { return key ^ (uint64_t)bsize * 0x9E3779B97F4A7C15ull; }

int dh_on_disk(dc_hfile *f, int64_t idx) {
  if (!f->cache_dir) return 0;
  char p[4096];
  cache_path(f, idx, p, sizeof p);
  return access(p, R_OK) == 0;
}

/* this file's blocks go through the process's shared block cache: a remote file, not opened with
** shared=0, its blocks no larger than the cache's, and the cache on (DC_HTTP_SHARED_MB > 0) */
int dh_shared_used(const dc_hfile *f) {
  return !f->local && !f->no_shared && g_shared && f->bsize <= g_shared_bsize;
}

int dh_shared_keeps(dc_hfile *f, int64_t idx) {
  return dh_shared_used(f) && g_shared_slots >= 4 * (int64_t)f->mem_slots && dh_shared_has(f, idx);
}

int dh_shared_get(dc_hfile *f, int64_t idx, int64_t len, int64_t off, int64_t n, uint8_t *out) {
  if (!dh_shared_used(f)) return 0;
  pthread_mutex_lock(&g_shared_lock);
  int ok = dc_sharedcache_get(g_shared, slot_key(f->key, f->bsize), idx, len, off, n, out);
  pthread_mutex_unlock(&g_shared_lock);
  if (ok) atomic_fetch_add(&dh_st.shared_hits, 1);
  return ok;
}

int dh_shared_has(dc_hfile *f, int64_t idx) {
  if (!dh_shared_used(f)) return 0;
  pthread_mutex_lock(&g_shared_lock);
  int ok = dc_sharedcache_has(g_shared, slot_key(f->key, f->bsize), idx,
                              dc_block_len(idx, f->bsize, f->size));
  pthread_mutex_unlock(&g_shared_lock);
  return ok;
}

void dh_shared_put(dc_hfile *f, int64_t idx, const uint8_t *b, int64_t len) {
  if (!dh_shared_used(f)) return;
  uint64_t key = slot_key(f->key, f->bsize);
  int slot;
  pthread_mutex_lock(&g_shared_lock);
  uint8_t *dst = dc_sharedcache_claim(g_shared, key, idx, len, &slot);
  pthread_mutex_unlock(&g_shared_lock);
  if (!dst) return;
  memcpy(dst, b, (size_t)len);              /* unlocked: readers of other blocks go on */
  pthread_mutex_lock(&g_shared_lock);
  dc_sharedcache_publish(g_shared, slot, key, idx, len);
  pthread_mutex_unlock(&g_shared_lock);
}

int dh_part_get(dc_hfile *f, int64_t off, int64_t n, uint8_t *out) {
  if (!dh_shared_used(f)) return 0;
  pthread_mutex_lock(&g_shared_lock);
  int ok = dc_partstore_get(g_parts, f->key, off, n, out);
  pthread_mutex_unlock(&g_shared_lock);
  if (ok && out) atomic_fetch_add(&dh_st.part_hits, 1);
  return ok;
}

void dh_part_put(dc_hfile *f, int64_t lo, const uint8_t *b, int64_t len) {
  if (!dh_shared_used(f)) return;
  pthread_mutex_lock(&g_shared_lock);      /* the copy too: a part is at most a block */
  dc_partstore_put(g_parts, f->key, lo, b, len);
  pthread_mutex_unlock(&g_shared_lock);
}

int dh_parts_used(const dc_hfile *f) { return g_parts && dh_shared_used(f) && !f->cache_dir; }

/* [lo, hi) cut into its head part [lo, b0 * bsize), whole blocks b0 .. b1 - 1 and tail part
** [*tail, hi); b0 == b1: inside one block, a part */
static void span_cut(const dc_hfile *f, int64_t lo, int64_t hi, int64_t *b0, int64_t *b1, int64_t *tail) {
  *b0 = (lo + f->bsize - 1) / f->bsize;           /* the first whole block */
  *b1 = hi / f->bsize;                            /* the block after the last whole one */
  if (hi == f->size) *b1 = (hi + f->bsize - 1) / f->bsize;   /* the file's last block, shorter, whole */
  if (*b1 < *b0) *b1 = *b0;
  *tail = *b1 * f->bsize < f->size ? *b1 * f->bsize : f->size;
}

void dh_span_put(dc_hfile *f, int64_t lo, int64_t len, const uint8_t *b) {
  int64_t hi = lo + len, b0, b1, tail;
  span_cut(f, lo, hi, &b0, &b1, &tail);
  if (b0 >= b1) {                                 /* inside one block */
    dh_part_put(f, lo, b, len);
    return;
  }
  if (lo < b0 * f->bsize) dh_part_put(f, lo, b, b0 * f->bsize - lo);
  for (int64_t k = b0; k < b1; k++)
    dh_shared_put(f, k, b + (k * f->bsize - lo), dc_block_len(k, f->bsize, f->size));
  if (hi > tail) dh_part_put(f, tail, b + (tail - lo), hi - tail);
}

int dh_span_held(dc_hfile *f, int64_t lo, int64_t len) {
  int64_t hi = lo + len, b0, b1, tail;
  span_cut(f, lo, hi, &b0, &b1, &tail);
  if (b0 >= b1) return dh_part_get(f, lo, len, NULL);
  if (lo < b0 * f->bsize && !dh_part_get(f, lo, b0 * f->bsize - lo, NULL)) return 0;
  for (int64_t k = b0; k < b1; k++)
    if (!dh_shared_has(f, k)) return 0;
  return hi <= tail || dh_part_get(f, tail, hi - tail, NULL);
}

/* --- versions confirmed ---------------------------------------------------- */
int dh_known_take(dc_hfile *f) {
  if (!(f->revalidate_s > 0) || !dh_shared_used(f)) return 0;
  int ok = 0;
  pthread_mutex_lock(&g_shared_lock);
  const dc_known *e = dc_known_get(&g_known, f->who, dh_now(), f->revalidate_s);
  if (e && e->size > 0) {
    uint64_t key = dc_cache_key(f->url, &e->val);
    ok = dc_sharedcache_has(g_shared, slot_key(key, f->bsize), 0,
                            dc_block_len(0, f->bsize, e->size));
    if (ok) {
      f->val = e->val;
      f->size = e->size;
      f->key = key;
    }
  }
  pthread_mutex_unlock(&g_shared_lock);
  return ok;
}

void dh_known_put(const dc_hfile *f) {
  if (!dh_shared_used(f)) return;
  pthread_mutex_lock(&g_shared_lock);
  dc_known_put(&g_known, f->who, &f->val, f->size, dh_now());
  pthread_mutex_unlock(&g_shared_lock);
}

void dh_known_seen(const dc_hfile *f) {
  if (!dh_shared_used(f)) return;
  pthread_mutex_lock(&g_shared_lock);
  dc_known_seen(&g_known, f->who, &f->val, dh_now());
  pthread_mutex_unlock(&g_shared_lock);
}

void dh_known_forget(const dc_hfile *f) {
  pthread_mutex_lock(&g_shared_lock);
  dc_known_forget(&g_known, f->who);
  pthread_mutex_unlock(&g_shared_lock);
}
