/*
** sqlite_fork.c — SQLite's global mutexes across fork().
**
** A thread inside SQLite holds one of its static mutexes for a moment: the
** memory-statistics mutex in every sqlite3_malloc, the PRNG mutex while it
** makes random bytes, the unix VFS's mutex while it opens or closes a file.
** If another thread forks at that moment, the child starts with that mutex
** locked and no thread to unlock it: its first SQLite call that needs the
** mutex waits forever (a DataLoader worker that hangs before its first batch).
** The package's own threads are parked outside SQLite at a fork (the Python
** fork gate); a user's threads are not.
**
** So, once per process, the extension registers a pthread_atfork handler
** whose prepare step takes these mutexes, waiting for any thread inside them
** to leave, and whose parent and child steps release them.  A fork then waits
** at most for a thread's current SQLite step on a global mutex, never for a
** query.
**
** Order.  The prepare step takes them in an order consistent with how SQLite
** nests them (outermost first): OPEN (shared-cache btree open, which opens
** files and takes MAIN) -> PRNG (seeding calls sqlite3_vfs_find, MAIN) ->
** MAIN -> VFS1 (unix and memdb VFS, which allocate inside it) -> LRU -> PMEM
** -> MEM (innermost: SQLite takes no other mutex while holding it).  The
** application mutexes (APP1-3, VFS2-3) are left alone: their order is the
** application's.  pthread_atfork runs prepare handlers in reverse order of
** registration, so this one, registered first of the extension's (at its
** first load, before any connection uses it), runs last: the extension's
** own locks, under which SQLite memory may be freed (batch_ticket.c), are
** taken before SQLite's.  On dlclose of the extension glibc drops the handler
** with the library.
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
