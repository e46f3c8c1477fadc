/*
** dc_select.h — the arguments naming cells and genes, parsed the same way by
** every table that takes them (dc_batch, dc_aggregate; ext/select.c).  On
** the querying thread only.  Errors: an SQLite code, and *pzErr set to
** "WHAT: reason" (WHAT = the table's name, e.g. "dc_batch").
*/
#ifndef DC_SELECT_H
#define DC_SELECT_H
#include "dc_reader.h"

/* "an integer", "a real", "text", "a blob" or "NULL" */
const char *dc_type_name(int sqlite_type);

/* Cells: a blob of little-endian int64 ids or a JSON array of integers, each
** in 0 .. n_cells-1 (checked); in the given order, repeats kept.  *out is
** sqlite3_malloc'ed. */
int dc_parse_cells(dc_reader *r, sqlite3_value *val, const char *what, int64_t **out, int64_t *out_n,
                   char **pzErr);

/* A gene panel: a JSON array of gene names or a blob of little-endian int32
** gene ids (each known and unique).  The last panel is kept while the
** argument and the data stay the same. */
typedef struct dc_panel {
  int type;                /* SQLITE_BLOB or SQLITE_TEXT; 0 = none */
  uint8_t *arg;
  int arg_len;
  uint64_t ns;             /* the reader's namespace it was made in */
  int32_t *map;            /* n_genes entries: panel position or -1 */
  int32_t *ids;            /* size entries: the gene id at each panel position */
  uint64_t *bits;          /* the members as a bitmap (batch_panel_bits) */
  int64_t size;            /* genes in the panel */
  int sorted;              /* positions increase with gene id */
} dc_panel;
int dc_panel_parse(dc_panel *p, sqlite3 *db, dc_reader *r, sqlite3_value *val, const char *what, char **pzErr);
void dc_panel_clear(dc_panel *p);

#endif
