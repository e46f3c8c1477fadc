/*
** shared_slots.c — one atomic operation for the Python package's batch hand-off between
** DataLoader workers and the main process (python/deltacells/_xfer.py, "lanes").
**
** A worker places a batch into a slot of a memory region shared with the main process
** (a memfd mapped before the fork); the main process hands the user tensors that view it.
** Each slot has a 64-bit state word in that region, changed by two processes: the worker
** takes and sends a slot, the main process marks it held and frees it when the user drops
** the tensors, and a worker that takes over a lane from a dead one frees what that one left.
** Python has no atomic compare-and-swap on shared memory, so the package calls this one
** through ctypes.  Pure of SQLite; exported by deltacells.map.
*/
#include <stdint.h>

int deltacells_slot_cas(uint64_t addr, int64_t expect, int64_t want);

/* 1 when the aligned word at addr held `expect` and now holds `want`; else 0, unchanged.
** A full barrier: what this process wrote or read before is ordered before the swap. */
int deltacells_slot_cas(uint64_t addr, int64_t expect, int64_t want) {
  int64_t *word = (int64_t *)(uintptr_t)addr;
  if (!word || ((uintptr_t)word & 7u)) return 0;
  return __atomic_compare_exchange_n(word, &expect, want, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ? 1 : 0;
}
