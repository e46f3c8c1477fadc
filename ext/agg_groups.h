/*
** agg_groups.h — the groups of dc_aggregate (ext/agg_groups.c), pure C (no SQLite): each
** distinct value of the group_by column gets a group number (a hash map over typed values,
** each value's bytes copied), and the groups' output order.  unit-tested in
** tests/c/test_agg_groups.c; ext/vtab_aggregate.c turns sqlite3_values into keys.
*/
#ifndef AGG_GROUPS_H
#define AGG_GROUPS_H
#include <stdint.h>

/* value types: SQLite's fundamental type codes (SQLITE_INTEGER ... SQLITE_NULL) */
enum { DC_GV_INTEGER = 1, DC_GV_FLOAT = 2, DC_GV_TEXT = 3, DC_GV_BLOB = 4, DC_GV_NULL = 5 };

typedef struct dc_gval {
  int type;                  /* DC_GV_* */
  int64_t i;
  double f;                  /* -0.0 is stored as 0.0: one group */
  unsigned char *s;          /* text/blob bytes: the map's copy (NUL-terminated), else NULL */
  int n;
  uint64_t hash;
  int64_t rank;              /* dictionary code of a category label, else -1 */
} dc_gval;

typedef struct dc_groups {
  dc_gval *g;                /* by group number */
  uint32_t n, cap;
  uint32_t *slot;            /* group number + 1, 0 = empty */
  uint32_t mask;
  int64_t null_group;        /* -1 until seen */
} dc_groups;

void dc_groups_init(dc_groups *m);
/* frees the map and the values it still owns */
void dc_groups_free(dc_groups *m);
/* The group number of a value (a new group, holding a copy of s, when unseen); -1 when out
** of memory.  type DC_GV_INTEGER reads i, DC_GV_FLOAT f, DC_GV_TEXT/BLOB s[0..n), NULL none. */
int64_t dc_groups_get(dc_groups *m, int type, int64_t i, double f, const void *s, int n);
/* frees values taken from a map (dc_groups_take) */
void dc_gvals_free(dc_gval *g, uint32_t n);
/* the map's values, by group number, now the caller's (*n of them); the map is left empty */
dc_gval *dc_groups_take(dc_groups *m, uint32_t *n);

/* qsort_r comparator of group numbers (uint32_t), base the groups' values: values with a
** dictionary rank by rank first, then numbers by value, text and blobs by bytes, NULL last */
int dc_group_cmp(const void *a, const void *b, void *base);
#endif
