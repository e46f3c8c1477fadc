/*
** spare.c — the process-wide reserve of freed working buffers (dc_spare.h).  Pure C.
**
** Each buffer carries a 16-byte head with its capacity.  The reserve is an array of at most
** DC_SPARE_SLOTS buffers under one mutex; an allocation takes the smallest that fits (and is at
** most twice the request, so that a small request does not pin a large buffer), a free keeps
** the buffer while the reserve has room.  Fork: the mutex is taken around fork (pthread_atfork,
** registered on first use), so the child finds it free; the child's reserve is the parent's
** list, whose buffers are copy-on-write copies there: the child's next call frees them.
*/
#include "dc_spare.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define SPARE_HEAD 16

/* Under AddressSanitizer a buffer in the reserve is poisoned, and one handed out is unpoisoned
** only as far as the request: a use after free, or a read past the request into a larger
** recycled buffer, is still reported as with malloc. */
#if defined(__SANITIZE_ADDRESS__)
#define SPARE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARE_ASAN 1
#endif
#endif
#ifdef SPARE_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void *g_buf[DC_SPARE_SLOTS];   /* heads */
static size_t g_cap[DC_SPARE_SLOTS];  /* payload capacities */
static int g_n;
static size_t g_bytes;
static pid_t g_pid;                   /* the process the list belongs to (0: none yet) */

static void at_prepare(void) { pthread_mutex_lock(&g_mu); }
static void at_parent(void) { pthread_mutex_unlock(&g_mu); }
static void at_child(void) { pthread_mutex_unlock(&g_mu); }   /* g_pid tells the list is the parent's */
static void register_fork(void) { pthread_atfork(at_prepare, at_parent, at_child); }

static size_t cap_of(void *p) { return *(size_t *)(void *)((uint8_t *)p - SPARE_HEAD); }

static void free_head(void *h) {   /* a buffer of the reserve, freed */
  UNPOISON((uint8_t *)h + SPARE_HEAD, *(size_t *)h);
  free(h);
}

/* with the lock held: the list emptied, its buffers freed */
static void free_all(void) {
  for (int i = 0; i < g_n; i++) free_head(g_buf[i]);
  g_n = 0;
  g_bytes = 0;
}

/* with the lock held: the list, emptied first where it was inherited from the parent */
static void own_list(void) {
  pid_t me = getpid();
  if (g_pid == me) return;
  free_all();
  g_pid = me;
}

void *dc_spare_alloc(size_t n) {
  if (n > SIZE_MAX - SPARE_HEAD) return NULL;
  if (n >= DC_SPARE_MIN) {
    pthread_once(&g_once, register_fork);
    void *h = NULL;
    pthread_mutex_lock(&g_mu);
    own_list();
    int best = -1;
    for (int i = 0; i < g_n; i++)
      if (g_cap[i] >= n && g_cap[i] / 2 <= n && (best < 0 || g_cap[i] < g_cap[best])) best = i;
    if (best >= 0) {
      h = g_buf[best];
      g_bytes -= g_cap[best];
      g_n--;
      g_buf[best] = g_buf[g_n];
      g_cap[best] = g_cap[g_n];
    }
    pthread_mutex_unlock(&g_mu);
    if (h) {
      UNPOISON((uint8_t *)h + SPARE_HEAD, n);
      return (uint8_t *)h + SPARE_HEAD;
    }
  }
  void *h = malloc(SPARE_HEAD + (n ? n : 1));
  if (!h) return NULL;
  *(size_t *)h = n ? n : 1;
  return (uint8_t *)h + SPARE_HEAD;
}

void dc_spare_free(void *p) {
  if (!p) return;
  void *h = (uint8_t *)p - SPARE_HEAD;
  size_t cap = cap_of(p);
  if (cap >= DC_SPARE_MIN && cap <= DC_SPARE_MAX_BYTES) {
    pthread_once(&g_once, register_fork);
    pthread_mutex_lock(&g_mu);
    own_list();
    int kept = g_n < DC_SPARE_SLOTS && g_bytes + cap <= DC_SPARE_MAX_BYTES;
    if (kept) {
      POISON(p, cap);
      g_buf[g_n] = h;
      g_cap[g_n] = cap;
      g_n++;
      g_bytes += cap;
    }
    pthread_mutex_unlock(&g_mu);
    if (kept) return;
  }
  free(h);
}

void dc_spare_trim(void) {
  pthread_mutex_lock(&g_mu);
  own_list();
  free_all();
  pthread_mutex_unlock(&g_mu);
}

size_t dc_spare_bytes(int *n_buffers) {
  pthread_mutex_lock(&g_mu);
  own_list();
  size_t b = g_bytes;
  if (n_buffers) *n_buffers = g_n;
  pthread_mutex_unlock(&g_mu);
  return b;
}
