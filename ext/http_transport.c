/*
** http_transport.c — one HTTP range request of the dchttp VFS over libcurl: the handle's
** options, the response's headers (validators, Content-Range), the checks on what came back,
** the retries with backoff, the version check against the file at open, and the throttle that
** emulates an object store (for remote and local files alike).  The retry policy, validators
** and Content-Range parsing themselves are pure logic in remote_logic.c.
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include "vfs_http_int.h"

double dh_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

void dh_sleep(double s) {
  if (s <= 0) return;
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
}

/* stop: a prefetch thread's flag (NULL on the reading thread): the wait ends early when it is set */
void dh_throttle(dc_hfile *f, int64_t bytes, double t0, _Atomic int *stop) {
  if (!f->throttled) return;
  double w = dc_throttle_wait(&f->thr, bytes, dh_now() - t0);
  atomic_fetch_add(&dh_st.throttle_ns, (int64_t)(w * 1e9));
  if (!stop) { dh_sleep(w); return; }
  for (double end = dh_now() + w; !atomic_load(stop);) {
    double left = end - dh_now();
    if (left <= 0) break;
    dh_sleep(left < 0.02 ? left : 0.02);
  }
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
void dh_setup_curl(dc_hfile *f, CURL *c) {
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
  dh_setup_curl(f, f->curl);
  return 1;
}

/* GET bytes [off, off+len) into buf on handle c, at most 1 + tries attempts.  first: the
** request at open (no validator to compare yet; it fills f->val).  Returns SQLITE_OK, or an
** error with the reason in err (set_error is the caller's: a prefetch thread keeps it quiet). */
int dh_get_on(dc_hfile *f, CURL *c, int tries, int64_t off, int64_t len, uint8_t *buf, int64_t *got,
                       int first, char *err, size_t err_n, _Atomic int *stop) {
  char range[64], why[512] = "";
  int64_t base_ms = 100, max_ms = 2000;
  snprintf(range, sizeof range, "%lld-%lld", (long long)off, (long long)(off + len - 1));
  for (int attempt = 0;; attempt++) {
    if (attempt) {
      atomic_fetch_add(&dh_st.retries, 1);
      int64_t d = dc_backoff_ms(attempt, base_ms, max_ms);
      dh_sleep((double)d / 1000);
    }
    dc_resp r;
    memset(&r, 0, sizeof r);
    r.buf = buf; r.cap = len; r.val.size = -1;
    curl_easy_setopt(c, CURLOPT_RANGE, range);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    double t0 = dh_now();
    CURLcode cc = curl_easy_perform(c);
    atomic_fetch_add(&dh_st.requests, 1);
    atomic_fetch_add(&dh_st.bytes, r.got);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int transport = 0;
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r.overflow)) {
      /* a fault of the URL or of the server's certificate is not a network's: no retry */
      int lasting = cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL || cc == CURLE_PEER_FAILED_VERIFICATION;
      transport = !lasting;
      snprintf(why, sizeof why, "%s%s", curl_easy_strerror(cc),
               cc == CURLE_URL_MALFORMAT ? " (a URL's spaces and other special characters are percent-encoded: %20)" : "");
    } else {
      dc_range_resp q = {r.overflow, status, first, off, len, r.got, r.have_cr, r.cr_start, r.cr_end};
      int v = dc_range_check(&q, &transport, why, sizeof why);
      char s3[300];         /* an object store says why in its body: S3's <Code> and <Message> */
      if (status >= 400 && r.got > 0 && dc_s3_error((const char *)buf, (size_t)r.got, s3, sizeof s3)) {
        size_t l = strlen(why);
        snprintf(why + l, sizeof why - l, " (%s)", s3);
      }
      if (v == DC_RESP_EMPTY) {
        snprintf(err, err_n, "%s: the file is empty (HTTP 416 for the first bytes)", f->name);
        return SQLITE_CANTOPEN;
      }
      if (v == DC_RESP_WHOLE) {      /* no range support but the whole (small) file came: accept it */
        r.val.size = r.got;
        r.cr_start = 0; r.cr_end = r.got - 1; r.have_cr = 1;
        status = 206;
      }
    }
    if (!why[0]) {
      if (first) f->val = r.val;
      else {
        char d[400];
        if (dc_validator_differs(&f->val, &r.val, d, sizeof d)) {
          dh_known_forget(f);        /* the next open asks the server */
          snprintf(err, err_n, "%s: %s; reopen it to read the new version", f->name, d);
          return SQLITE_IOERR_READ;
        }
        dh_known_seen(f);
      }
      *got = r.got;
      dh_throttle(f, r.got, t0, stop);
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
** SQLITE_OK or an error with dh_err set. */
int dh_get(dc_hfile *f, int64_t off, int64_t len, uint8_t *buf, int64_t *got, int first) {
  char err[900];
  if (!ensure_curl(f)) { dh_set_error("%s: cannot start libcurl", f->name); return SQLITE_IOERR; }
  int rc = dh_get_on(f, f->curl, f->retries, off, len, buf, got, first, err, sizeof err, NULL);
  if (rc != SQLITE_OK) dh_set_error("%s", err);
  return rc;
}

/* Fetches blocks idx..last (all missing) in one request into f->rabuf. */
int dh_fetch_range(dc_hfile *f, int64_t idx, int64_t last, int64_t *total_out) {
  int64_t total = (last - idx) * f->bsize + dc_block_len(last, f->bsize, f->size);
  if (!f->rabuf || f->rabuf_cap < total) {
    uint8_t *nb = realloc(f->rabuf, (size_t)total);
    if (!nb) return SQLITE_IOERR_NOMEM;
    f->rabuf = nb; f->rabuf_cap = total;
  }
  if (dh_trace) fprintf(stderr, "dchttp: %.3f %d %s blocks %lld..%lld (bytes %lld..%lld)\n", dh_now(), (int)getpid(), f->name, (long long)idx,
                       (long long)last, (long long)(idx * f->bsize), (long long)(idx * f->bsize + total - 1));
  if (f->local) {
    double t0 = dh_now();
    int rc = f->local->pMethods->xRead(f->local, f->rabuf, (int)total, idx * f->bsize);
    if (rc != SQLITE_OK) { dh_set_error("%s: read failed (%d)", f->name, rc); return rc; }
    atomic_fetch_add(&dh_st.requests, 1);
    atomic_fetch_add(&dh_st.bytes, total);
    dh_throttle(f, total, t0, NULL);
  } else {
    int64_t got = 0;
    int rc = dh_get(f, idx * f->bsize, total, f->rabuf, &got, 0);
    if (rc != SQLITE_OK) return rc;
    if (got != total) {
      dh_set_error("%s: blocks %lld..%lld: %lld bytes, expected %lld", f->name, (long long)idx, (long long)last,
                (long long)got, (long long)total);
      return SQLITE_IOERR_READ;
    }
  }
  *total_out = total;
  return SQLITE_OK;
}
