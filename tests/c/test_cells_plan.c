/*
** test_cells_plan.c — the plan codec of `cells` (ext/cells_plan.c, pure C: compiled in here
** directly): every item written and read back, names with quotes, and bad plans (each a
** clear error, never a crash or an out-of-bounds read: run under ASan by make test).
*/
#include "dctest.h"
#include "../../ext/cells_plan.c"

static const char *names[] = {"cell_id", "name", "tile", "cell_type", "n\"genes", "x", "\"\"", ""};
#define NCOLS ((int)(sizeof names / sizeof names[0]))
static const char *name_of(void *ctx, int col) { (void)ctx; return names[col]; }

static char *fmt(const cells_plan_item *it, int n) {
  size_t len = cells_plan_format(it, n, name_of, NULL, NULL, 0);
  char *s = malloc(len + 1);
  size_t len2 = cells_plan_format(it, n, name_of, NULL, s, len + 1);
  DCT_CHECK(len2 == len && strlen(s) == len);
  return s;
}

static int parse(const char *z, int nargs, cells_plan_item *it, int *n, char *err) {
  return cells_plan_parse(z, nargs, NCOLS, name_of, NULL, it, nargs + 1, n, err, 200);
}

static int same(const cells_plan_item *a, const cells_plan_item *b) {
  return a->kind == b->kind && a->arg == b->arg &&
         (a->kind != CELLS_ITEM_TERM || (a->col == b->col && a->op == b->op && a->exact == b->exact));
}

static void test_format_words(void) {
  cells_plan_item it[5] = {
    {CELLS_ITEM_TERM, 3, CELLS_OP_EQ, 1, 0},
    {CELLS_ITEM_TERM, 4, CELLS_OP_GE, 0, 1},
    {CELLS_ITEM_ORDER, -1, 0, 1, -1},
    {CELLS_ITEM_LIMIT, -1, 0, 1, 2},
    {CELLS_ITEM_OFFSET, -1, 0, 1, 3},
  };
  char *s = fmt(it, 5);
  DCT_CHECKF(!strcmp(s, "#3 \"cell_type\" = ?1, #4 \"n\"\"genes\" >= ?2 prefilter, ORDER BY cell_id, LIMIT ?3, OFFSET ?4"),
             "%s", s);
  free(s);
  s = fmt(it, 0);
  DCT_CHECK(!strcmp(s, "scan"));
  free(s);
  /* a short buffer: truncated, NUL-terminated, the full length returned */
  char b[8];
  DCT_CHECK(cells_plan_format(it, 1, name_of, NULL, b, sizeof b) == strlen("#3 \"cell_type\" = ?1"));
  DCT_CHECK(!strcmp(b, "#3 \"cel"));
  DCT_CHECK(!strcmp(cells_op_word(CELLS_OP_NOTNULL), "IS NOT NULL") && !strcmp(cells_op_word(99), ""));
}

/* every operator on every column, written and read back */
static void test_roundtrip(void) {
  for (int col = 0; col < NCOLS; col++)
    for (int op = CELLS_OP_EQ; op <= CELLS_OP_NOTNULL; op++)
      for (int exact = 0; exact < 2; exact++) {
        cells_plan_item it[3] = {{CELLS_ITEM_TERM, 5, CELLS_OP_LT, 1, 1}, {CELLS_ITEM_TERM, col, op, exact, 0},
                                 {CELLS_ITEM_LIMIT, -1, 0, 1, 2}};
        char *s = fmt(it, 3);
        cells_plan_item got[4];
        int n = -1;
        char err[200];
        int rc = parse(s, 3, got, &n, err);
        DCT_CHECKF(rc == 0 && n == 3, "%s: %s", s, err);
        for (int i = 0; i < 3 && rc == 0; i++) DCT_CHECKF(same(&it[i], &got[i]), "%s item %d", s, i);
        free(s);
      }
  cells_plan_item got[1];
  int n = -1;
  char err[200];
  DCT_CHECK(parse("scan", 0, got, &n, err) == 0 && n == 0);
}

/* the most arguments a plan may have, and one more */
static void test_cap(void) {
  static cells_plan_item it[CELLS_MAX_ARGS + 1], got[CELLS_MAX_ARGS + 2];
  for (int i = 0; i < CELLS_MAX_ARGS; i++) it[i] = (cells_plan_item){CELLS_ITEM_TERM, 3 + i % 4, CELLS_OP_GT, 1, i};
  char *s = fmt(it, CELLS_MAX_ARGS);
  int n = -1;
  char err[200];
  DCT_CHECKF(cells_plan_parse(s, CELLS_MAX_ARGS, NCOLS, name_of, NULL, got, CELLS_MAX_ARGS + 1, &n, err, sizeof err) == 0 &&
             n == CELLS_MAX_ARGS, "%s", err);
  DCT_CHECK(cells_plan_parse(s, CELLS_MAX_ARGS + 1, NCOLS, name_of, NULL, got, CELLS_MAX_ARGS + 2, &n, err, sizeof err) == -1);
  DCT_CHECKF(strstr(err, "253 arguments") != NULL, "%s", err);
  /* an item array shorter than the plan: an error, no write past it */
  DCT_CHECK(cells_plan_parse(s, CELLS_MAX_ARGS, NCOLS, name_of, NULL, got, 10, &n, err, sizeof err) == -1);
  free(s);
}

static void test_bad_plans(void) {
  static const struct { const char *plan; int nargs; const char *why; } bad[] = {
    {"", 0, "empty plan"},
    {"scan ", 0, "not a term"},
    {"scan", 1, "?1 is not used"},
    {"#3 \"cell_type\" = ?1", 2, "?2 is not used"},
    {"#3 \"cell_type\" = ?2", 1, "out of 1..1"},
    {"#3 \"cell_type\" = ?0", 1, "out of 1..1"},
    {"#3 \"cell_type\" = ?", 1, "out of 1..1"},
    {"#3 \"cell_type\" = ?-1", 1, "out of 1..1"},
    {"#3 \"cell_type\" = ?99999999999999999999", 1, "out of 1..1"},
    {"#3 \"cell_type\" = ?1, #3 \"cell_type\" < ?1", 2, "used twice"},
    {"#8 \"\" = ?1", 1, "no column number in 0..7"},
    {"#-1 \"cell_id\" = ?1", 1, "no column number"},
    {"#\"cell_id\" = ?1", 1, "no column number"},
    {"#99999999999999999999 \"x\" = ?1", 1, "no column number"},
    {"#3 \"cell_typ\" = ?1", 1, "column 3 is \"cell_type\""},
    {"#3 \"cell_typex\" = ?1", 1, "column 3 is \"cell_type\""},
    {"#4 \"n\"genes\" = ?1", 1, "column 4 is"},
    {"#4 \"n\"\"genes", 1, "unterminated"},
    {"#3 cell_type = ?1", 1, "no quoted column name"},
    {"#3 \"cell_type\" == ?1", 1, "unknown operator"},
    {"#3 \"cell_type\" LIKE ?1", 1, "unknown operator"},
    {"#3 \"cell_type\" IS NULL", 1, "unknown operator"},
    {"#3 \"cell_type\" = 1", 1, "no argument"},
    {"#3 \"cell_type\"", 1, "no operator"},
    {"#3", 1, "no quoted column name"},
    {"#", 1, "no column number"},
    {"#3 \"cell_type\" = ?1 prefilterx", 1, "junk after"},
    {"#3 \"cell_type\" = ?1,#3 \"cell_type\" = ?2", 2, "junk after"},
    {"#3 \"cell_type\" = ?1, ", 1, "trailing"},
    {"LIMIT ?1, LIMIT ?2", 2, "a second LIMIT"},
    {"ORDER BY cell_id, ORDER BY cell_id", 0, "a second ORDER BY"},
    {"ORDER BY tile", 0, "not a term"},
    {"ORDER BY cell_idx", 0, "junk after"},
    {"LIMIT 1", 1, "not a term"},
    {"scan, LIMIT ?1", 1, "not a term"},
    {"DROP TABLE cells", 0, "not a term"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cells_plan_item got[8];
    int n = 77;
    char err[200];
    int rc = cells_plan_parse(bad[i].plan, bad[i].nargs, NCOLS, name_of, NULL, got, 8, &n, err, sizeof err);
    DCT_CHECKF(rc == -1 && n == 0, "'%s' parsed", bad[i].plan);
    DCT_CHECKF(strstr(err, bad[i].why) != NULL, "'%s': error '%s', wanted '%s'", bad[i].plan, err, bad[i].why);
  }
  /* a NULL plan, a negative or huge argument count, no room for the error */
  cells_plan_item got[2];
  int n;
  char err[200];
  DCT_CHECK(cells_plan_parse(NULL, 0, NCOLS, name_of, NULL, got, 2, &n, err, sizeof err) == -1 && strstr(err, "no plan"));
  DCT_CHECK(cells_plan_parse("scan", -1, NCOLS, name_of, NULL, got, 2, &n, err, sizeof err) == -1);
  DCT_CHECK(cells_plan_parse("scan", 1 << 30, NCOLS, name_of, NULL, got, 2, &n, err, sizeof err) == -1);
  DCT_CHECK(cells_plan_parse("junk", 0, NCOLS, name_of, NULL, got, 2, &n, NULL, 0) == -1);
  /* a long item is cut in the message, which stays within its buffer */
  char small[16];
  DCT_CHECK(cells_plan_parse("#3 \"cell_type\" == ?1", 1, NCOLS, name_of, NULL, got, 2, &n, small, sizeof small) == -1 &&
            strlen(small) == sizeof small - 1);
}

/* Every prefix and every one-byte change of valid plans: parsed or rejected, never a crash
** (ASan); what parses writes back to the same text. */
static void test_mutations(void) {
  const char *good[] = {"#3 \"cell_type\" IN ?1, #4 \"n\"\"genes\" IS NOT NULL ?2 prefilter, ORDER BY cell_id, LIMIT ?3, OFFSET ?4",
                        "#0 \"cell_id\" >= ?2, #2 \"tile\" < ?1", "#6 \"\"\"\"\"\" IS NULL ?1, #7 \"\" <= ?2"};
  const char subst[] = "#\"?, 0123456789LIMTOFSBYNUcel_id\x01\xff";
  int parsed = 0, rejected = 0;
  for (size_t g = 0; g < sizeof good / sizeof good[0]; g++) {
    size_t len = strlen(good[g]);
    int nargs = 0;
    for (const char *q = good[g]; (q = strchr(q, '?')); q++) nargs++;
    for (size_t cut = 0; cut <= len; cut++)
      for (size_t k = 0; k <= sizeof subst - 1; k++) {
        char *s = malloc(len + 1);   /* exactly sized: ASan sees a read past the NUL */
        memcpy(s, good[g], len + 1);
        if (k < sizeof subst - 1) { if (cut == len) { free(s); continue; } s[cut] = subst[k]; }
        else s[cut] = 0;   /* the prefix */
        for (int na = nargs - 1; na <= nargs; na++) {
          cells_plan_item got[8];
          int n;
          char err[200];
          if (cells_plan_parse(s, na, NCOLS, name_of, NULL, got, 8, &n, err, sizeof err) == 0) {
            parsed++;
            char *back = fmt(got, n);
            DCT_CHECKF(!strcmp(back, s), "'%s' reads back as '%s'", s, back);
            free(back);
          } else {
            rejected++;
            DCT_CHECK(err[0] != 0);
          }
        }
        free(s);
      }
  }
  DCT_CHECK(parsed > 3 && rejected > 1000);
}

int main(void) {
  DCT_RUN(test_format_words);
  DCT_RUN(test_roundtrip);
  DCT_RUN(test_cap);
  DCT_RUN(test_bad_plans);
  DCT_RUN(test_mutations);
  return dct_done();
}
