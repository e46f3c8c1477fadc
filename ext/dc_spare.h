/*
** dc_spare.h — a process-wide reserve of freed working buffers (ext/spare.c).  Pure C.
**
** A connection's decoded obs blocks, their sorted orders and its read scratch are freed with
** the connection; the next connection's first query then wrote into fresh memory, a page fault
** per 4 KiB page (10-25 us each on the development VM: ~380 faults, most of a 6 ms first
** `WHERE n_counts > ?` on 100,000 cells, against 0.03 ms once warm).  Buffers of
** DC_SPARE_MIN bytes or more go to this reserve when freed (DC_SPARE_MAX_BYTES in all,
** DC_SPARE_SLOTS buffers) and the next allocation that fits takes one back: within a
** connection as across connections.  What the reserve holds stays allocated while the process
** lives (at most DC_SPARE_MAX_BYTES).  Thread-safe; across fork a child frees what it inherited
** (the parent's buffers would be copy-on-write there) and starts empty.
*/
#ifndef DC_SPARE_H
#define DC_SPARE_H
#include <stddef.h>

#define DC_SPARE_MIN ((size_t)64 << 10)
#define DC_SPARE_MAX_BYTES ((size_t)32 << 20)
#define DC_SPARE_SLOTS 32

/* n bytes (uninitialized), 16-byte aligned: a spare of at least n and at most 2n bytes when
** there is one, else malloc.  NULL when out of memory. */
void *dc_spare_alloc(size_t n);
/* Frees p (from dc_spare_alloc; NULL is nothing): into the reserve when it is large enough and
** the reserve has room, else free(). */
void dc_spare_free(void *p);
/* Frees everything the reserve holds (tests). */
void dc_spare_trim(void);
/* Bytes and buffers the reserve holds now. */
size_t dc_spare_bytes(int *n_buffers);

#endif
