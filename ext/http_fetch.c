/*
** http_fetch.c — dchttp's fetch of byte ranges known ahead (dc_vfs_fetch: a tile's leaf page and
** overflow pages from the page map, a dataset's catalogue at connect): every block or span the
** process does not hold, requested at once on the file's prefetch threads, and waited for.
*/
#include <stdlib.h>
#include <string.h>
#include "vfs_http_int.h"

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* the part of range r = {offset, nbytes} inside the file: [*s, *e); 0 where none of it is */
static int in_file(const dc_hfile *f, const int64_t r[2], int64_t *s, int64_t *e) {
  if (r[1] <= 0 || r[0] < 0 || r[0] >= f->size) return 0;
  *s = r[0];
  *e = r[1] < f->size - r[0] ? r[0] + r[1] : f->size;
  return 1;
}

/* queue prefetch requests for blocks from..last (as far as the entries go), the stream bounded there */
static void queue_run(dc_hfile *f, dc_prefetch *p, int64_t from, int64_t last) {
  f->pf_begin = from;
  f->pf_end = last + 1;
  f->pf_depth = 1 << 30;
  dh_pf_schedule(f, p, from);
}

/* A span of dh_fetch_ranges: bytes [lo, hi), its request's entry */
typedef struct { int64_t lo, hi; pf_ent *e; unsigned seq; } fr_span;

static int cmp_span(const void *a, const void *b) {
  int64_t x = ((const fr_span *)a)->lo, y = ((const fr_span *)b)->lo;
  return x < y ? -1 : x > y;
}

/* a range's part of block b is here (the block whole, or a part holding that part) */
static int range_held(dc_hfile *f, int64_t b, int64_t s, int64_t e) {
  int64_t lo = b * f->bsize > s ? b * f->bsize : s, hi = (b + 1) * f->bsize < e ? (b + 1) * f->bsize : e;
  return dh_have_block(f, b) || dh_part_get(f, lo, hi - lo, NULL);
}

/* dh_fetch_ranges where the file's blocks go through the shared cache and there is no disk cache
** (dh_parts_used): each range is fetched as it is, in spans of at most an entry's blocks cut at
** block boundaries, its whole blocks into the shared cache and the parts of blocks at its ends
** into the parts (dh_span_put): a tile's first and last blocks hold parts of the tiles before and
** after it, which another process may be the one to read (with whole blocks the store served
** about 1.3x the bytes of tiles of about 2 blocks, 2 DataLoader workers).  Blocks or parts held
** already at a range's ends are left out. */
static int64_t fetch_spans(dc_hfile *f, int n, int64_t (*r)[2]) {
  dc_prefetch *p = dh_pf_get(f);
  int64_t chunk = (p ? f->pf_chunk : f->ra_blocks) * f->bsize, fetched = 0;
  fr_span *sp = NULL;
  int ns = 0, cap = 0;
  for (int i = 0; i < n; i++) {
    int64_t s, e;
    if (!in_file(f, r[i], &s, &e)) continue;
    int64_t b0 = s / f->bsize, b1 = (e - 1) / f->bsize;
    while (b0 <= b1 && range_held(f, b0, s, e)) s = ++b0 * f->bsize;
    while (b1 >= b0 && range_held(f, b1, s, e)) e = b1-- * f->bsize;
    for (int64_t lo = s; lo < e;) {        /* at most `chunk` bytes, cut at a block boundary */
      int64_t hi = (lo / f->bsize) * f->bsize + chunk;
      if (hi > e) hi = e;
      if (ns == cap) {
        fr_span *x = realloc(sp, sizeof *sp * (size_t)(cap = cap ? 2 * cap : 16));
        if (!x) { free(sp); dh_set_error("%s: out of memory", f->name); return -1; }
        sp = x;
      }
      sp[ns++] = (fr_span){lo, hi, NULL, 0};
      lo = hi;
    }
  }
  /* spans less than a block apart (a leaf page near its blob's pages, a catalogue's runs), one
  ** request where it fits an entry: the bytes between cost less than a request */
  if (ns > 1) qsort(sp, (size_t)ns, sizeof *sp, cmp_span);
  int k = 0;
  for (int i = 0; i < ns; i++) {
    if (k && sp[i].lo < sp[k - 1].hi + f->bsize &&
        (sp[i].hi > sp[k - 1].hi ? sp[i].hi : sp[k - 1].hi) - sp[k - 1].lo <= chunk) {
      if (sp[i].hi > sp[k - 1].hi) sp[k - 1].hi = sp[i].hi;
    } else {
      sp[k++] = sp[i];
    }
  }
  ns = k;
  if (p) dh_pf_jump(p);
  /* as many in flight as the entries take; each next one queued as one ends */
  int next = 0, rc = SQLITE_OK;
  for (int i = 0; i < ns && rc == SQLITE_OK; i++) {
    while (p && next < ns && (sp[next].e = dh_pf_queue_span(p, sp[next].lo, sp[next].hi - sp[next].lo, &sp[next].seq)))
      next++;
    if (next <= i) next = i + 1;            /* no entry was free for it: on this thread below */
    if (sp[i].e) dh_pf_wait_span(p, sp[i].e, sp[i].seq);
    int64_t len = sp[i].hi - sp[i].lo;
    if (!sp[i].e || !dh_span_held(f, sp[i].lo, len)) {
      /* not queued (no entry was free), or its request failed (or what it brought is gone): on
      ** this thread, with retries */
      uint8_t *buf = malloc((size_t)len);
      int64_t got = 0;
      rc = buf ? dh_get(f, sp[i].lo, len, buf, &got, 0) : SQLITE_IOERR_NOMEM;
      if (rc == SQLITE_OK && got == len) dh_span_put(f, sp[i].lo, len, buf);
      else if (rc == SQLITE_OK) { rc = SQLITE_IOERR_SHORT_READ; dh_set_error("%s: a short read", f->name); }
      else if (!buf) dh_set_error("%s: out of memory", f->name);
      free(buf);
      atomic_fetch_add(&dh_st.spans, 1);
    }
    fetched++;
  }
  /* (spans queued past a failure finish on their threads; their entries are taken again later) */
  free(sp);
  if (p) dh_pf_jump(p);
  return rc == SQLITE_OK ? fetched : -1;
}

int64_t dh_fetch_ranges(dc_hfile *f, int n, int64_t (*r)[2]) {
  if (dh_parts_used(f)) return fetch_spans(f, n, r);
  int64_t nblocks = (f->size + f->bsize - 1) / f->bsize, fetched = 0;
  int m = 0;
  for (int i = 0; i < n; i++) {             /* byte ranges -> block runs [first, last] */
    int64_t s, e;
    if (!in_file(f, r[i], &s, &e)) continue;
    r[m][0] = s / f->bsize;
    r[m][1] = (e - 1) / f->bsize;
    m++;
  }
  qsort(r, (size_t)m, sizeof r[0], cmp_i64);
  int k = 0;
  for (int i = 0; i < m; i++) {
    if (k && r[i][0] <= r[k - 1][1] + 1) { if (r[i][1] > r[k - 1][1]) r[k - 1][1] = r[i][1]; }
    else { r[k][0] = r[i][0]; r[k][1] = r[i][1]; k++; }
  }
  dc_prefetch *p = dh_pf_get(f);
  if (p) {                                  /* every run queued (as far as the entries go), in order */
    dh_pf_jump(p);
    for (int i = 0; i < k; i++) queue_run(f, p, r[i][0], r[i][1]);
  }
  for (int i = 0; i < k; i++)
    for (int64_t b = r[i][0]; b <= r[i][1] && b < nblocks; b++) {
      if (dh_have_block(f, b) || dh_on_disk(f, b)) continue;
      pf_ent *e = p ? dh_pf_find(p, b) : NULL;
      if (!e && p) {                        /* not queued (no entry was free): from here on */
        queue_run(f, p, b, r[i][1]);
        e = dh_pf_find(p, b);
      }
      int64_t pend;
      if (e && (pend = dh_pf_take(f, p, e))) {
        fetched += pend - b;
        b = pend - 1;
        continue;
      }
      /* no prefetcher, or its request failed: on this thread, with retries */
      int64_t x = b, total;
      while (x < r[i][1] && x - b + 1 < f->ra_blocks && !dh_have_block(f, x + 1) && !(p && dh_pf_find(p, x + 1))) x++;
      if (dh_fetch_range(f, b, x, &total) != SQLITE_OK) {
        if (p) dh_pf_jump(p);
        return -1;
      }
      dh_install_fetched(f, b, x, b);
      fetched += x - b + 1;
      b = x;
    }
  if (p) dh_pf_jump(p);                     /* no stream goes on from here */
  return fetched;
}
