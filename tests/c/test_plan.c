/*
** test_plan.c — the plan codec of every virtual table (ext/dc_plan.c, pure C: compiled in
** here directly), with the words of cells, expression, expression_long and tiles: every item
** written and read back, names with quotes, the argument cap, and bad plans (each a clear
** error, never a crash or an out-of-bounds read: run under ASan by make test).
*/
#include "dctest.h"
#include "../../ext/dc_plan.c"
#include "../../ext/cells_plan.h"

static const char *names[] = {"cell_id", "name", "tile", "cell_type", "n\"genes", "x", "\"\"", ""};
#define NCOLS ((int)(sizeof names / sizeof names[0]))
static const char *name_of(void *ctx, int col) { (void)ctx; return names[col]; }

static const dc_plan_word cells_words[] = CELLS_PLAN_WORDS;
static const dc_plan_table cells_t = {NCOLS, name_of, NULL, cells_words, 3};

static char *fmt_t(const dc_plan_table *t, const dc_plan_item *it, int n) {
  size_t len = dc_plan_format(t, it, n, NULL, 0);
  char *s = malloc(len + 1);
  size_t len2 = dc_plan_format(t, it, n, s, len + 1);
  DCT_CHECK(len2 == len && strlen(s) == len);
  return s;
}

static char *fmt(const dc_plan_item *it, int n) {
  return fmt_t(&cells_t, it, n);
}

static int parse(const char *z, int nargs, dc_plan_item *it, int *n, char *err) {
  return dc_plan_parse(&cells_t, z, nargs, it, nargs + 1, n, err, 200);
}

static int same(const dc_plan_item *a, const dc_plan_item *b) {
  return a->kind == b->kind && a->arg == b->arg &&
         (a->kind != CELLS_ITEM_TERM || (a->col == b->col && a->op == b->op && a->exact == b->exact));
}

static void test_format_words(void) {
  dc_plan_item it[5] = {
    {CELLS_ITEM_TERM, 3, DC_OP_EQ, 1, 0},
    {CELLS_ITEM_TERM, 4, DC_OP_GE, 0, 1},
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
  DCT_CHECK(dc_plan_format(&cells_t, it, 1, b, sizeof b) == strlen("#3 \"cell_type\" = ?1"));
  DCT_CHECK(!strcmp(b, "#3 \"cel"));
  DCT_CHECK(!strcmp(dc_op_word(DC_OP_NOTNULL), "IS NOT NULL") && !strcmp(dc_op_word(99), ""));
}

/* every operator on every column, written and read back */
static void test_roundtrip(void) {
  for (int col = 0; col < NCOLS; col++)
    for (int op = DC_OP_EQ; op <= DC_OP_NOTNULL; op++)
      for (int exact = 0; exact < 2; exact++) {
        dc_plan_item it[3] = {{CELLS_ITEM_TERM, 5, DC_OP_LT, 1, 1}, {CELLS_ITEM_TERM, col, op, exact, 0},
                                 {CELLS_ITEM_LIMIT, -1, 0, 1, 2}};
        char *s = fmt(it, 3);
        dc_plan_item got[4];
        int n = -1;
        char err[200];
        int rc = parse(s, 3, got, &n, err);
        DCT_CHECKF(rc == 0 && n == 3, "%s: %s", s, err);
        for (int i = 0; i < 3 && rc == 0; i++) DCT_CHECKF(same(&it[i], &got[i]), "%s item %d", s, i);
        free(s);
      }
  dc_plan_item got[1];
  int n = -1;
  char err[200];
  DCT_CHECK(parse("scan", 0, got, &n, err) == 0 && n == 0);
}

/* the most arguments a plan may have, and one more */
static void test_cap(void) {
  static dc_plan_item it[DC_PLAN_MAX_ARGS + 1], got[DC_PLAN_MAX_ARGS + 2];
  for (int i = 0; i < DC_PLAN_MAX_ARGS; i++) it[i] = (dc_plan_item){CELLS_ITEM_TERM, 3 + i % 4, DC_OP_GT, 1, i};
  char *s = fmt(it, DC_PLAN_MAX_ARGS);
  int n = -1;
  char err[200];
  DCT_CHECKF(dc_plan_parse(&cells_t, s, DC_PLAN_MAX_ARGS, got, DC_PLAN_MAX_ARGS + 1, &n, err, sizeof err) == 0 &&
             n == DC_PLAN_MAX_ARGS, "%s", err);
  DCT_CHECK(dc_plan_parse(&cells_t, s, DC_PLAN_MAX_ARGS + 1, got, DC_PLAN_MAX_ARGS + 2, &n, err, sizeof err) == -1);
  DCT_CHECKF(strstr(err, "253 arguments") != NULL, "%s", err);
  /* an item array shorter than the plan: an error, no write past it */
  DCT_CHECK(dc_plan_parse(&cells_t, s, DC_PLAN_MAX_ARGS, got, 10, &n, err, sizeof err) == -1);
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
    {"ORDER BY cell_id, ORDER BY cell_id", 0, "a second ORDER BY cell_id"},
    {"ORDER BY tile", 0, "not a term"},
    {"ORDER BY cell_idx", 0, "not a term"},
    {"ORDER BY cell_id ?1", 1, "not a term"},
    {"LIMIT ?1 prefilter", 1, "junk after"},
    
    {"LIMIT 1", 1, "not a term"},
    {"scan, LIMIT ?1", 1, "not a term"},
    {"DROP TABLE cells", 0, "not a term or a word of this table (LIMIT, OFFSET, ORDER BY cell_id)"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dc_plan_item got[8];
    int n = 77;
    char err[200];
    int rc = dc_plan_parse(&cells_t, bad[i].plan, bad[i].nargs, got, 8, &n, err, sizeof err);
    DCT_CHECKF(rc == -1 && n == 0, "'%s' parsed", bad[i].plan);
    DCT_CHECKF(strstr(err, bad[i].why) != NULL, "'%s': error '%s', wanted '%s'", bad[i].plan, err, bad[i].why);
  }
  /* a NULL plan, a negative or huge argument count, no room for the error */
  dc_plan_item got[2];
  int n;
  char err[200];
  DCT_CHECK(dc_plan_parse(&cells_t, NULL, 0, got, 2, &n, err, sizeof err) == -1 && strstr(err, "no plan"));
  DCT_CHECK(dc_plan_parse(&cells_t, "scan", -1, got, 2, &n, err, sizeof err) == -1);
  DCT_CHECK(dc_plan_parse(&cells_t, "scan", 1 << 30, got, 2, &n, err, sizeof err) == -1);
  DCT_CHECK(dc_plan_parse(&cells_t, "junk", 0, got, 2, &n, NULL, 0) == -1);
  /* a long item is cut in the message, which stays within its buffer */
  char small[16];
  DCT_CHECK(dc_plan_parse(&cells_t, "#3 \"cell_type\" == ?1", 1, got, 2, &n, small, sizeof small) == -1 &&
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
          dc_plan_item got[8];
          int n;
          char err[200];
          if (dc_plan_parse(&cells_t, s, na, got, 8, &n, err, sizeof err) == 0) {
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

/* the words of the other tables: expression (one word), tiles (a word that is the start of
** another), and a table with no words */
static void test_other_tables(void) {
  static const dc_plan_word tw[] = {{"ORDER BY tile", 0}, {"ORDER BY tile DESC", 0}};
  static const dc_plan_word ew[] = {{"ORDER BY cell_id, gene_id", 0}};
  dc_plan_table tiles = {NCOLS, name_of, NULL, tw, 2};
  dc_plan_table expr_long = {NCOLS, name_of, NULL, ew, 1};
  dc_plan_table bare = {NCOLS, name_of, NULL, NULL, 0};
  dc_plan_item got[8];
  int n = -1;
  char err[200];
  /* tiles: "ORDER BY tile DESC" is not "ORDER BY tile" followed by junk */
  DCT_CHECKF(dc_plan_parse(&tiles, "#2 \"tile\" > ?1, ORDER BY tile DESC", 1, got, 8, &n, err, sizeof err) == 0, "%s", err);
  DCT_CHECK(n == 2 && got[0].kind == DC_ITEM_TERM && got[0].op == DC_OP_GT && got[0].exact && got[1].kind == 2 &&
            got[1].arg == -1);
  DCT_CHECK(dc_plan_parse(&tiles, "ORDER BY tile", 0, got, 8, &n, err, sizeof err) == 0 && n == 1 && got[0].kind == 1);
  DCT_CHECK(dc_plan_parse(&tiles, "ORDER BY tile DES", 0, got, 8, &n, err, sizeof err) == -1);
  /* both words: each at most once, so both parse; the table decides what that means */
  DCT_CHECK(dc_plan_parse(&tiles, "ORDER BY tile, ORDER BY tile DESC", 0, got, 8, &n, err, sizeof err) == 0 && n == 2);
  DCT_CHECK(dc_plan_parse(&tiles, "LIMIT ?1", 1, got, 8, &n, err, sizeof err) == -1 &&
            strstr(err, "(ORDER BY tile, ORDER BY tile DESC)"));
  /* a word holding ", ": written and read back whole */
  dc_plan_item it[2] = {{DC_ITEM_TERM, 0, DC_OP_IN, 0, 0}, {1, -1, 0, 1, -1}};
  char *s = fmt_t(&expr_long, it, 2);
  DCT_CHECKF(!strcmp(s, "#0 \"cell_id\" IN ?1 prefilter, ORDER BY cell_id, gene_id"), "%s", s);
  DCT_CHECKF(dc_plan_parse(&expr_long, s, 1, got, 8, &n, err, sizeof err) == 0 && n == 2 && got[1].kind == 1 &&
             got[0].op == DC_OP_IN && !got[0].exact, "%s", err);
  free(s);
  DCT_CHECK(dc_plan_parse(&expr_long, "ORDER BY cell_id", 0, got, 8, &n, err, sizeof err) == -1);
  /* no words at all */
  DCT_CHECK(dc_plan_parse(&bare, "scan", 0, got, 8, &n, err, sizeof err) == 0 && n == 0);
  DCT_CHECK(dc_plan_parse(&bare, "ORDER BY cell_id", 0, got, 8, &n, err, sizeof err) == -1 && strstr(err, "(none)"));
  /* words without an argument: more items than arguments (dc_aggregate: "log1p, names") */
  static const dc_plan_word aw[] = {{"log1p", 0}, {"names", 0}};
  dc_plan_table agg = {NCOLS, name_of, NULL, aw, 2};
  dc_plan_item many[DC_PLAN_MAX_ITEMS];
  DCT_CHECKF(dc_plan_parse(&agg, "#3 \"cell_type\" = ?1, log1p, names", 1, many, DC_PLAN_MAX_ITEMS, &n, err,
                           sizeof err) == 0 && n == 3 && many[1].kind == 1 && many[2].kind == 2, "%s", err);
  DCT_CHECK(dc_plan_parse(&agg, "names, log1p", 0, many, DC_PLAN_MAX_ITEMS, &n, err, sizeof err) == 0 && n == 2);
  DCT_CHECK(dc_plan_parse(&agg, "log1p, names", 0, many, 1, &n, err, sizeof err) == -1 && strstr(err, "more items"));
  /* a table of more words than DC_PLAN_MAX_WORDS is refused, not overrun */
  static const dc_plan_word nine[9] = {{"a", 0}, {"b", 0}, {"c", 0}, {"d", 0}, {"e", 0}, {"f", 0}, {"g", 0},
                                       {"h", 0}, {"i", 0}};
  dc_plan_table big = {NCOLS, name_of, NULL, nine, 9};
  DCT_CHECK(dc_plan_parse(&big, "i", 0, many, DC_PLAN_MAX_ITEMS, &n, err, sizeof err) == -1 && strstr(err, "9 words"));
  /* an item kind the table has no word for is written so that it cannot be read back */
  dc_plan_item odd = {5, -1, 0, 1, -1};
  s = fmt_t(&tiles, &odd, 1);
  DCT_CHECK(dc_plan_parse(&tiles, s, 0, got, 8, &n, err, sizeof err) == -1);
  free(s);
}

/* xFilter's side: the count must be the planned one and the string must parse */
static void test_take(void) {
  dc_plan_item it[2] = {{CELLS_ITEM_TERM, 0, DC_OP_EQ, 1, 0}, {CELLS_ITEM_TERM, 3, DC_OP_GT, 0, 1}};
  char *s = fmt(it, 2);
  dc_plan_item got[DC_PLAN_MAX_ITEMS];
  int n = -1;
  char why[200];
  DCT_CHECKF(dc_plan_take(&cells_t, 2, s, 2, got, &n, why, sizeof why) == 0 && n == 2 && same(&got[1], &it[1]), "%s: %s", s, why);
  /* a count other than the planned one, no string, too many arguments: refused, no reason */
  strcpy(why, "x");
  DCT_CHECK(dc_plan_take(&cells_t, 3, s, 2, got, &n, why, sizeof why) == -1 && why[0] == 0);
  strcpy(why, "x");
  DCT_CHECK(dc_plan_take(&cells_t, 2, NULL, 2, got, &n, why, sizeof why) == -1 && why[0] == 0);
  DCT_CHECK(dc_plan_take(&cells_t, DC_PLAN_MAX_ARGS + 1, s, DC_PLAN_MAX_ARGS + 1, got, &n, why, sizeof why) == -1 && why[0] == 0);
  /* a string the grammar refuses: its reason */
  DCT_CHECK(dc_plan_take(&cells_t, 1, s, 1, got, &n, why, sizeof why) == -1 && why[0] != 0);
  free(s);
}

int main(void) {
  DCT_RUN(test_format_words);
  DCT_RUN(test_roundtrip);
  DCT_RUN(test_cap);
  DCT_RUN(test_bad_plans);
  DCT_RUN(test_mutations);
  DCT_RUN(test_other_tables);
  DCT_RUN(test_take);
  return dct_done();
}
