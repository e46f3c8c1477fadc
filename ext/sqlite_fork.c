/*
** sqlite_fork.c — SQLite's global mutexes across fork() (the rule, and why this
** handler is registered first: docs/threading.md, "Fork").
**
** A thread inside SQLite holds a static mutex for a moment (memory statistics
** in every sqlite3_malloc, the PRNG, the unix VFS); a fork at that moment gives
** a child in which it stays locked.  The handler's prepare step takes them,
** waiting for such a thread to leave; parent and child steps release them.
**
** The order of k_ids is how SQLite nests them, outermost first: OPEN (a
** shared-cache btree open opens files and takes MAIN) -> PRNG (seeding calls
** sqlite3_vfs_find, which takes MAIN) -> MAIN -> VFS1 (the unix and memdb VFS
** allocate inside it) -> LRU -> PMEM -> MEM (SQLite takes no other mutex while
** holding it).  APP1-3 and VFS2-3 are the application's, in its own order.
** On dlclose of the extension glibc drops the handler with the library.
*/
#include <pthread.h>
#include "dc_ext.h"

static const int k_ids[] = {
  SQLITE_MUTEX_STATIC_OPEN, SQLITE_MUTEX_STATIC_PRNG, SQLITE_MUTEX_STATIC_MAIN, SQLITE_MUTEX_STATIC_VFS1,
  SQLITE_MUTEX_STATIC_LRU,  SQLITE_MUTEX_STATIC_PMEM, SQLITE_MUTEX_STATIC_MEM,
};
#define N_IDS (sizeof k_ids / sizeof k_ids[0])
static sqlite3_mutex *g_mu[N_IDS];      /* NULL where SQLite runs without mutexes */

static void fork_prepare(void) {
  for (size_t k = 0; k < N_IDS; k++)
    if (g_mu[k]) sqlite3_mutex_enter(g_mu[k]);
}
/* parent and child alike: in the child the forking thread, the owner, is the one left */
static void fork_release(void) {
  for (size_t k = N_IDS; k-- > 0;)
    if (g_mu[k]) sqlite3_mutex_leave(g_mu[k]);
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void guard_register(void) {
  for (size_t k = 0; k < N_IDS; k++) g_mu[k] = sqlite3_mutex_alloc(k_ids[k]);
  if (pthread_atfork(fork_prepare, fork_release, fork_release) != 0)
    for (size_t k = 0; k < N_IDS; k++) g_mu[k] = NULL;    /* not registered: nothing to hold */
}

void dc_sqlite_fork_guard(void) { pthread_once(&g_once, guard_register); }
