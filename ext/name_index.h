/*
** name_index.h — a hash index from names to ids over a stored text column (the `genes`
** table's name lookups): every id with a given name, in increasing id order.
**
** Pure C: no SQLite.  The index points into the caller's column (text, off, valid), which
** must outlive it.  Open addressing over 2^k >= 2n slots; ids of equal names chained.
*/
#ifndef NAME_INDEX_H
#define NAME_INDEX_H
#include <stdint.h>

typedef struct dc_nameidx {
  int64_t n;
  const char *text;         /* name of id i: text[off[i] .. off[i+1]), NULL when !valid[i] */
  const uint64_t *off;
  const uint8_t *valid;
  uint64_t mask;
  int64_t *slot;            /* first id of a name + 1; 0 = empty */
  int64_t *next;            /* next id with the same name, or -1 */
} dc_nameidx;

/* Builds the index of n names; -1 on out-of-memory (x left empty). */
int dc_nameidx_build(dc_nameidx *x, const char *text, const uint64_t *off, const uint8_t *valid, int64_t n);
/* The smallest id named s (len bytes), or -1; the next one is x->next[id] (-1 at the end). */
int64_t dc_nameidx_first(const dc_nameidx *x, const char *s, uint64_t len);
void dc_nameidx_free(dc_nameidx *x);
#endif
