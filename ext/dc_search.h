/*
** dc_search.h — the "last entry <= x" search, written once.
**
** Tiles, chunks and obs blocks each start at a first cell, in increasing order; the one
** holding cell x is the last whose first cell is <= x (the last of equal ones, so empty
** tiles or chunks are skipped).  Pure C, header only: no SQLite.
*/
#ifndef DC_SEARCH_H
#define DC_SEARCH_H
#include <stdint.h>

/* Sets OUT to the last index I in [0, N) with KEY <= X, where KEY is an expression in I
** (e.g. tiles[I].first_cell), for keys increasing in I; to 0 when N <= 1 or X < the first
** key.  OUT's type must hold N. */
#define DC_LAST_LE(OUT, N, I, KEY, X) do {                                  \
    int64_t dc_lo_ = 0, dc_hi_ = (int64_t)(N);   /* the answer is in [lo, hi) */ \
    while (dc_hi_ - dc_lo_ > 1) {                                           \
      int64_t I = dc_lo_ + (dc_hi_ - dc_lo_) / 2;                           \
      if ((KEY) <= (X)) dc_lo_ = I; else dc_hi_ = I;                        \
    }                                                                       \
    (OUT) = dc_lo_;                                                         \
  } while (0)

/* The same over an array of first cells. */
static inline int64_t dc_last_le(const int64_t *first, int64_t n, int64_t x) {
  int64_t out;
  DC_LAST_LE(out, n, i_, first[i_], x);
  return out;
}
#endif
