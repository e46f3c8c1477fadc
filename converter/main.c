/*
** main.c — the `deltacells` command line: convert, info, obs info, verify.
**
** Exit status: 0 success, 1 failure (message on stderr naming the file and
** the reason), 2 bad usage, 130 interrupted.
*/
#include <hdf5.h>
#include <limits.h>
#include <sqlite3.h>
#include <zlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "dc_seal.h"
#include "cv_util.h"
#include "dc_codec.h"
#include "dc_obs.h"
#include "export.h"
#include "inspect.h"
#include "dc_format.h"

#define DC_VERSION "0.1"
#include "merge.h"

static const char *HELP_MAIN =
    "usage: deltacells COMMAND [ARGS]\n"
    "\n"
    "Single-cell count matrices as one SQLite file: tiles of cells, genes, cell metadata.\n"
    "\n"
    "commands:\n"
    "  convert IN.h5ad [IN2 ...] -o OUT.dcdb [options]   h5ad / 10x files -> one dataset\n"
    "  info DATASET [--json]     cells, genes, nonzeros, tiles, bytes, codec settings, page map\n"
    "  obs info DATASET          one row per obs column: type, categories, stored size\n"
    "  verify DATASET            decode every tile and obs block, check every checksum\n"
    "  version                   the versions of deltacells, its format and libraries\n"
    "  export DATASET -o OUT.h5ad [--where SQL] [--genes FILE] [--obs COLS]   back to h5ad\n"
    "  genes DATASET [--json] [--order original|stored]   genes: stored and original order, counts\n"
    "  append DATASET IN.h5ad ...  add cells to a dataset in place (one transaction)\n"
    "  merge A.dcdb B.dcdb ... -o OUT.dcdb   datasets -> one dataset (tiles copied)\n"
    "  annotate DATASET TABLE.csv --key name|cell_id   add or replace obs columns\n"
    "\n"
    "`deltacells COMMAND --help` describes a command.  Query a dataset with the sqlite3\n"
    "shell: `sqlite3 OUT.dcdb` then `.load build/deltacells`.\n";

static const char *HELP_CONVERT =
    "usage: deltacells convert IN.h5ad [IN2 ...] -o OUT.dcdb [options]\n"
    "\n"
    "Converts inputs into one deltacells dataset.  Each input is, told apart by itself:\n"
    "  an h5ad file (as anndata writes it);\n"
    "  a 10x HDF5 file (filtered_feature_bc_matrix.h5 of CellRanger 3+, or CellRanger 2's);\n"
    "  a 10x Matrix Market directory: matrix.mtx[.gz], features.tsv[.gz] (or genes.tsv[.gz])\n"
    "  and barcodes.tsv[.gz], gzipped or not (or a PREFIXmatrix.mtx[.gz] file itself);\n"
    "  a loom file (/matrix genes x cells, or --layer NAME; row_attrs and col_attrs).\n"
    "10x barcodes name the cells; gene symbols name the genes, with the var columns\n"
    "gene_ids, feature_types (and genome) kept: --gene-key gene_ids keys by Ensembl id\n"
    "(a 10x input without gene names is named by its ids, with a note).  matrix.mtx is\n"
    "genes x cells (cells x genes is recognised; a square one is read genes x cells).\n"
    "\n"
    "  -o, --output OUT.dcdb  the dataset to write (required)\n"
    "  --layer NAME           read counts from layers/NAME instead of X\n"
    "  --raw                  read counts from raw/X (with raw/var) instead of X\n"
    "  --tile-cells N         cells per tile (default 10000); each input has tiles of its\n"
    "                         own (its last one shorter), so no tile spans two inputs\n"
    "  --chunks N             independently compressed chunks per tile (at most 256).  By\n"
    "                         default 8, one per 1 M nonzeros in tiles of more than 8 M (at\n"
    "                         most 32; past 8 a multiple of 4, so that 2 or 4 threads share\n"
    "                         a tile evenly), with at least 512 cells each where a tile has\n"
    "                         room for two (a small tile's streams stay long; 384 where\n"
    "                         rounding up to a multiple of 4 needs it)\n"
    "  --codec rans|zstd|rans-v1  tile codec (default rans: smaller than zstd and faster to\n"
    "                         encode and decode; zstd is the published design, kept to\n"
    "                         compare; rans-v1 is the first release's codec)\n"
    "  --level N              codec level (default: the codec's; for zstd 19, ~40 CPU-s a tile)\n"
    "  --threads N            encoder threads (default: one per core)\n"
    "  --gene-key VARCOL      join genes of several inputs by this var column (e.g. gene_ids)\n"
    "                         instead of the var index; it becomes the genes' name\n"
    "  --genes union|intersect  with several inputs: store every gene of any input (union,\n"
    "                         the default; a gene an input lacks is 0 in its cells) or only\n"
    "                         the genes every input has.  Either way the overlap is reported\n"
    "                         (genes in all inputs; per input the fraction of its genes that\n"
    "                         are shared), with a warning when an input shares under 50%\n"
    "  --all-features         10x inputs: keep features that are not 'Gene Expression'\n"
    "                         (antibody capture, CRISPR guides: told apart by the genes\n"
    "                         column feature_types); by default they are left out, with a\n"
    "                         note, as scanpy's read_10x_h5 and read_10x_mtx do\n"
    "  --keep-gene-whitespace keep gene names as they are; by default surrounding\n"
    "                         whitespace is removed (' TAZ' joins 'TAZ'), with a note\n"
    "  --genes-block N        genes per stored block of the genes table (default 1048576;\n"
    "                         smaller only to test readers on several blocks)\n"
    "  --dataset-id HEX       the dataset's id (16 hex digits), which keys the checksums that\n"
    "                         bind every tile and block to its place; default: a random one.\n"
    "                         Give the same id to get byte-identical output from the same\n"
    "                         input and options (never reuse one for different data)\n"
    "  --gene-order DATASET|FILE  number these genes first, in this order (a dataset's genes, or\n"
    "                         a text file of one name per line); the inputs' other genes follow\n"
    "                         by decreasing counts.  Shards converted with the same order merge\n"
    "                         (`deltacells merge`) by copying their tiles, without re-encoding\n"
    "  --force                replace OUT if it exists (never touched otherwise)\n"
    "  --quiet                no progress line and no summary\n"
    "\n"
    "X may be CSR (indices sorted or not: rows are sorted here), CSC or dense, of any\n"
    "integer or float type; floats must be whole numbers (normalised data is refused:\n"
    "use --layer counts or --raw).  Genes are\n"
    "renumbered by decreasing total counts (two passes over X).  With several inputs,\n"
    "genes are joined by name (the k-th repeat of a name in one file joins the k-th in\n"
    "another), obs columns are united (NULL where a file lacks one; int+bool -> int,\n"
    "numbers of different kinds -> real, anything else mixed -> text), and a categorical\n"
    "`source` column names each cell's file: its base name, or the shortest ending of its\n"
    "path that tells two inputs apart (s1/outs/x.h5 and s2/outs/x.h5); dc_meta's sources\n"
    "keep full paths.  Obs columns named like the cells table's own\n"
    "columns (cell_id, name, tile) are stored as NAME_1.\n"
    "\n"
    "Memory is bounded whatever the input size: (threads + 1) tiles in flight, each\n"
    "8 bytes per nonzero + 8 per cell, plus about 100 MiB of buffers (X read in slabs of\n"
    "1 Mi values, HDF5 chunk caches, a 16 MiB SQLite page cache); a 10,000-cell tile of\n"
    "23 M nonzeros is 190 MB.  CSC input is transposed through an unlinked spool file\n"
    "of 12 bytes per nonzero in OUT's directory, with at most 64 MiB of buffers (never\n"
    "less than 48 KiB per tile).  Obs columns are written block by block (65,536 cells).\n"
    "\n"
    "The dataset is written into a temporary file .OUT.tmp-XXXXXX beside OUT in one\n"
    "transaction and renamed into place: OUT is never partial, and an existing OUT stays\n"
    "intact until the new one replaces it whole.  A full disk, bad input, Ctrl-C or\n"
    "SIGTERM also remove the temporary file; SIGKILL (or a crash, or power loss) cannot,\n"
    "and leaves it behind: the next convert to the same OUT removes it, and any other\n"
    "such file of OUT whose writer is gone (each writer holds a lock on its own while it\n"
    "runs; a file still locked is left alone).  A progress line shows on a terminal.\n";

static const char *HELP_INFO =
    "usage: deltacells info DATASET [--json]\n"
    "\n"
    "Prints cells, genes, nonzeros, tiles, expression bytes (and bits per nonzero), obs\n"
    "bytes, file bytes, the codec settings and the source files.  --json prints one JSON\n"
    "object with n_cells, n_genes, nnz, tiles, expression_bytes, obs_bytes, file_bytes,\n"
    "bits_per_nnz, codec, level, chunks, chunk_cells (0: every tile has `chunks`), tile_cells,\n"
    "page_map, sources.  page_map (the map of each tile's pages that lets a remote reader fetch\n"
    "a tile in one round trip, docs/format.md): current, retired (a VACUUM or another schema\n"
    "change since) or none (written before it existed); the next append writes a new one.\n";

static const char *HELP_OBS =
    "usage: deltacells obs info DATASET\n"
    "\n"
    "One row per obs column (col 0 is the obs index): its type, number of categories,\n"
    "NULL count, stored size (blocks + dictionary) and that size scaled to 100 M cells.\n";

static const char *HELP_VERIFY =
    "usage: deltacells verify DATASET [--quiet] [--json]\n"
    "\n"
    "Checks everything a query relies on: every table the virtual tables read is there;\n"
    "dc_meta's n_cells, n_genes, nnz and n_tiles against the data; tiles numbered in order and\n"
    "covering every cell once; every tile decoded (every chunk checksum, cell offsets, gene\n"
    "order) and the genes table's totals against them; every seal (format version 3: a\n"
    "tile, block or dictionary moved, swapped, copied or edited); every obs and genes block\n"
    "decoded and its stored null count, min, max and present bitmap recomputed from its\n"
    "values; dictionaries against the codes; then, if all that passed, the queries a user\n"
    "runs (every row of cells, genes and tiles; dc_batch over each tile's first and last\n"
    "cell) through the extension itself.  Prints one line per fault, naming the tile, column\n"
    "or block and the reason: the first 20, then how many more.  --json prints one JSON\n"
    "object instead (path, ok, faults, messages: the first 20, not_shown, format_version,\n"
    "sealed, tiles, cells, nnz, genes, obs_blocks, duplicate_gene_names).  Gene names that\n"
    "occur more than once are a note, not a fault.  Exits 1 if there is any fault.\n";

static const char *HELP_EXPORT =
    "usage: deltacells export DATASET -o OUT.h5ad [--where SQL] [--genes FILE] [--obs COLS]\n"
    "                         [--order original|stored] [--force] [--quiet]\n"
    "\n"
    "Writes the dataset, or a selection of it, as an h5ad file that anndata (0.8+) and scanpy\n"
    "read: X as CSR (data, indices, indptr) in the input's dtype (int32 for datasets written\n"
    "before it was recorded), obs (categoricals as codes + categories, NULLs of int and bool\n"
    "columns as nullable arrays), var (the input's var columns; not total_counts, n_cells).\n"
    "\n"
    "  -o, --output OUT.h5ad  the file to write (a temporary file beside it, renamed into place)\n"
    "  --where SQL            the cells for which this SQL expression over the cells table is\n"
    "                         true, e.g. --where \"cell_type = 'B cell' AND n_genes > 500\"\n"
    "  --genes FILE           only these genes, one name a line, in the file's order\n"
    "  --obs COLS             only these obs columns (comma list; '' for none)\n"
    "  --order original|stored  gene order of X and var without --genes: the input's own\n"
    "                         (default; the union of the inputs' var, first input first) or the\n"
    "                         stored one (decreasing total counts)\n"
    "  --force                replace OUT if it exists\n"
    "\n"
    "It streams tile by tile: memory is one decoded tile (8 bytes a nonzero), the output's\n"
    "indptr and the selected cell ids (8 bytes a cell each), the genes table and obs blocks\n"
    "of 16,384 rows.  A text obs column with NULLs (a file without it) is written as a\n"
    "categorical with missing values (anndata 0.8 has no nullable strings).\n";

static const char *HELP_GENES =
    "usage: deltacells genes DATASET [--json] [--order original|stored]\n"
    "\n"
    "One line per gene: gene_id (the stored order: decreasing total counts), orig_index (its\n"
    "place in the input's var; with several inputs, in the union of their var, first input\n"
    "first), name, total_counts and n_cells.  --order original lists them in the input's\n"
    "order (default: stored).  Datasets written before the original order was recorded show\n"
    "orig_index = gene_id (and say so).  A tab, newline, carriage return or backslash in a\n"
    "name is written \\t, \\n, \\r, \\\\ (one line per gene); --json prints one JSON object.\n";

/* A usage error: one line, and where the help is (the command's words are
** those of its help's usage line: "usage: deltacells obs info DATASET" -> "obs info"). */
static const char *HELP_APPEND =
    "usage: deltacells append DATASET IN.h5ad [IN2.h5ad ...] [--layer NAME | --raw] [--gene-key VARCOL]\n"
    "                         [--threads N] [--quiet]\n"
    "\n"
    "Adds the cells of h5ad files to an existing dataset, in place, in one SQLite transaction:\n"
    "a crash or kill leaves the old dataset (the next read-write open rolls the journal back),\n"
    "and readers see the old or the new dataset, never a mix.  The new cells get new tiles,\n"
    "encoded with the dataset's codec settings; existing tiles are not touched.  Genes are\n"
    "matched by name: existing gene ids never change, genes new to the dataset get the next\n"
    "ids (by decreasing counts over the new files).  Obs columns are matched by name: a new\n"
    "column is NULL for the old cells, a column the new files lack is NULL for the new cells;\n"
    "int joins real, bool joins int, categorical joins text; any other mix of kinds is an\n"
    "error naming the column.  `source` names each cell's file (added if the dataset had one\n"
    "input).  Converting A then appending B gives the same cells, obs and counts per gene\n"
    "name as converting A and B together (gene ids and column order may differ).\n";

static const char *HELP_MERGE =
    "usage: deltacells merge A.dcdb B.dcdb [C.dcdb ...] -o OUT.dcdb [--threads N] [--force] [--quiet]\n"
    "\n"
    "Joins datasets into a new one (written beside OUT and renamed into place): cells of A,\n"
    "then B, ...  A's tiles and gene ids are kept; the other datasets' genes are matched by\n"
    "name (new ones get the next ids).  A tile whose genes all keep their ids is copied as\n"
    "it is; otherwise it is decoded and encoded again (the codec stores genes by rank), and\n"
    "the summary says how many.  Obs columns and `source` are joined as in `append`.\n"
    "OUT gets a new dataset id (every seal computed again, each checked first).  Tables,\n"
    "indexes, views and triggers of your own in A come along; A is read in one transaction.\n";

static const char *HELP_ANNOTATE =
    "usage: deltacells annotate DATASET TABLE.csv [--key name|cell_id] [--type COLUMN=KIND ...]\n"
    "                           [--schema COLUMNS.json] [--quiet]\n"
    "\n"
    "Adds obs columns from a CSV table (a header row, then one row per cell), or replaces the\n"
    "columns of the same name, in one transaction: the column of that name in the input files\n"
    "(one stored as NAME_1 because NAME differed only in case keeps its stored name), else the\n"
    "one of that name in another case (two such is an error).  The key column (the one\n"
    "named like --key, else the first) holds cell names (--key name, the default: the obs\n"
    "index, which must then be unique among the cells) or cell ids (--key cell_id).  Every\n"
    "other column is stored like a converted obs column (same blocks, statistics and seals),\n"
    "so the cells table filters on it.  Cells the table lacks get NULL; keys that match no\n"
    "cell are reported (how many, and the first five).  A table none of whose keys matches a\n"
    "cell (or with no rows) is an error, and nothing changes.  Empty fields, NA, NaN, null and None\n"
    "are NULL, except quoted in a text or category column (\"NA\" is then the label NA).  A column's kind is int if every value is an integer, else bool (true/false),\n"
    "else real, else category (text when more than half its values are distinct, or it has\n"
    "more than 65,536 labels); --type COLUMN=KIND sets it (category, text,\n"
    "int, real, bool).  Bad CSV (an unclosed quote, a row with more or fewer fields than the\n"
    "header, a value not of its column's kind) is an error naming the line.\n"
    "\n"
    "--schema COLUMNS.json gives columns the types a data frame had, as convert keeps them:\n"
    "{\"COLUMN\": {\"categories\": [\"b\", \"a\"], \"ordered\": true, \"dtype\": \"uint8\",\n"
    "\"categories_dtype\": \"int64\"}, ...}: a categorical's categories in their order (unused\n"
    "ones kept; a value outside them is an error) and whether they are ordered; a number\n"
    "column's dtype (int8, int16, int32, uint8, uint16, uint32; float16, float32: values must fit);\n"
    "the type of a categorical's categories (int8 .. int64, uint8 .. uint64, float32, float64,\n"
    "bool).  export and to_anndata give them back.  deltacells.annotate(path, data_frame)\n"
    "writes it.\n";

static int usage(const char *msg, const char *help) {
  char cmd[64] = "";
  const char *p = strstr(help, "usage: deltacells ");
  if (p) {
    p += strlen("usage: deltacells ");
    size_t n = 0;
    while (p[n] && ((p[n] >= 'a' && p[n] <= 'z') || (p[n] == ' ' && p[n + 1] >= 'a' && p[n + 1] <= 'z'))) n++;
    if (n && n < sizeof cmd - 1) { memcpy(cmd, p, n); cmd[n] = ' '; cmd[n + 1] = 0; }
  }
  fputs("deltacells: ", stderr);
  cv_put_text(stderr, msg);                /* an argument quoted in it may be any bytes */
  fprintf(stderr, " (see deltacells %s--help)\n", cmd);
  return 2;
}

/* usage(): OPTION needs a value */
static int usage_value(const char *opt, const char *help) {
  char m[160];
  snprintf(m, sizeof m, "%.100s needs a value", opt);
  return usage(m, help);
}

static int is_help(const char *a) { return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0; }

/* Parses an integer option value in [lo, hi]; else a usage error of help's command, -1. */
static int int_arg(const char *opt, const char *v, long lo, long hi, long *out, const char *help) {
  char *end, m[200];
  if (!v) return usage_value(opt, help), -1;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) {
    snprintf(m, sizeof m, "%.40s: '%.40s' is not an integer in %ld..%ld", opt, v, lo, hi);
    return usage(m, help), -1;
  }
  *out = x;
  return 0;
}

static int finish(int rc, cv_err *e) {
  if (rc) {
    fputs("deltacells: ", stderr);
    cv_put_text(stderr, e->msg);           /* it may quote a damaged input's bytes */
    fputc('\n', stderr);
    return cv_interrupted ? 130 : 1;
  }
  return 0;
}

static int cmd_convert(int argc, char **argv) {
  cv_opts o;
  memset(&o, 0, sizeof o);
  o.tile_cells = 10000;
  o.chunks = DC_CHUNKS_MAX;
  o.chunk_cells = DC_CHUNK_CELLS;
  const char **in = calloc((size_t)argc + 1, sizeof *in);
  const char *gene_order = NULL;
  if (!in) return 1;
  o.inputs = in;
  for (int i = 0; i < argc; i++) {
    char *a = argv[i], *v = NULL, opt[64];
    if (is_help(a)) { fputs(HELP_CONVERT, stdout); free(in); return 0; }
    if (a[0] == '-' && a[1]) {
      snprintf(opt, sizeof opt, "%s", a);
      char *eq = strchr(opt, '=');
      if (eq && a[1] == '-') { *eq = 0; v = a + (eq - opt) + 1; }
      int takes = strcmp(opt, "-o") == 0 || strcmp(opt, "--output") == 0 || strcmp(opt, "--layer") == 0 ||
                  strcmp(opt, "--tile-cells") == 0 || strcmp(opt, "--chunks") == 0 || strcmp(opt, "--level") == 0 ||
                  strcmp(opt, "--threads") == 0 || strcmp(opt, "--gene-key") == 0 || strcmp(opt, "--codec") == 0 ||
                  strcmp(opt, "--genes-block") == 0 || strcmp(opt, "--dataset-id") == 0 || strcmp(opt, "--genes") == 0 ||
                  strcmp(opt, "--gene-order") == 0;
      if (takes && !v) {
        if (i + 1 >= argc) { free(in); return usage_value(opt, HELP_CONVERT); }
        v = argv[++i];
      } else if (!takes && v) {
        char m[128];
        snprintf(m, sizeof m, "%s takes no value", opt);
        free(in);
        return usage(m, HELP_CONVERT);
      }
      long x;
      if ((!strcmp(opt, "-o") || !strcmp(opt, "--output")) && o.out) { free(in); return usage("-o given twice", HELP_CONVERT); }
      if (!strcmp(opt, "-o") || !strcmp(opt, "--output")) o.out = v;
      else if (!strcmp(opt, "--layer")) o.layer = v;
      else if (!strcmp(opt, "--raw")) o.raw = 1;
      else if (!strcmp(opt, "--force")) o.force = 1;
      else if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) o.quiet = 1;
      else if (!strcmp(opt, "--gene-key")) o.gene_key = v;
      else if (!strcmp(opt, "--keep-gene-whitespace")) o.keep_gene_whitespace = 1;
      else if (!strcmp(opt, "--all-features")) o.all_features = 1;
      else if (!strcmp(opt, "--genes")) {
        if (!strcmp(v, "intersect")) o.genes_intersect = 1;
        else if (!strcmp(v, "union")) o.genes_intersect = 0;
        else { free(in); return usage("--genes: 'union' (the default) or 'intersect'", HELP_CONVERT); }
      }
      else if (!strcmp(opt, "--gene-order")) gene_order = v;
      else if (!strcmp(opt, "--tile-cells")) {
        if (int_arg(opt, v, 1, CV_MAX_TILE_CELLS, &x, HELP_CONVERT)) { free(in); return 2; }
        o.tile_cells = (uint32_t)x;
      } else if (!strcmp(opt, "--chunks")) {
        if (int_arg(opt, v, 1, DC_MAX_CHUNKS, &x, HELP_CONVERT)) { free(in); return 2; }
        o.chunks = (uint32_t)x;
        o.chunk_cells = 0;   /* given: exactly that many */
      } else if (!strcmp(opt, "--level")) {
        if (int_arg(opt, v, -1000, 1000, &x, HELP_CONVERT)) { free(in); return 2; }
        o.level = (int)x;
        o.level_set = 1;
      } else if (!strcmp(opt, "--genes-block")) {
        if (int_arg(opt, v, 1, DC_OBS_MAX_N, &x, HELP_CONVERT)) { free(in); return 2; }
        o.genes_block = (uint32_t)x;
      } else if (!strcmp(opt, "--dataset-id")) {
        if (dc_seal_parse_id(v, strlen(v), &o.dataset_id) != 0) {
          fprintf(stderr, "deltacells: --dataset-id: '%s' is not 16 hex digits\n", v);
          free(in);
          return 2;
        }
        o.dataset_id_set = 1;
      } else if (!strcmp(opt, "--threads")) {
        if (int_arg(opt, v, 0, 1024, &x, HELP_CONVERT)) { free(in); return 2; }
        o.threads = (int)x;
      } else if (!strcmp(opt, "--codec")) {
        o.codec = dc_codec_from_name(v);
        if (!o.codec) {
          fprintf(stderr, "deltacells: --codec: unknown codec '%s' (rans, zstd or rans-v1)\n", v);
          free(in);
          return 2;
        }
      } else {
        char m[128];
        snprintf(m, sizeof m, "unknown option %s", a);
        free(in);
        return usage(m, HELP_CONVERT);
      }
      continue;
    }
    in[o.n_inputs++] = a;
  }
  if (!o.n_inputs) { free(in); return usage("convert needs at least one input h5ad file", HELP_CONVERT); }
  if (!o.out) { free(in); return usage("convert needs -o OUT.dcdb", HELP_CONVERT); }
  if (o.layer && o.raw) { free(in); return usage("--layer and --raw exclude each other", HELP_CONVERT); }
  if (o.level_set && o.level != 0) {   /* the codec would quietly use its default (or clamp) */
    dc_encode_opts dflt;
    dc_encode_opts_default(&dflt);
    int codec = o.codec ? o.codec : dflt.codec, lo = 0, hi = 0;
    if (dc_codec_levels(codec, &lo, &hi) == 0 && (o.level < lo || o.level > hi)) {
      char m[160];
      snprintf(m, sizeof m, "--level %d: codec %s takes %d..%d (0: its default)", o.level, dc_codec_name(codec), lo, hi);
      free(in);
      return usage(m, HELP_CONVERT);
    }
  }
  cv_err e;
  e.msg[0] = 0;
  char **fixed = NULL;
  uint32_t n_fixed = 0, *fixed_rep = NULL;
  if (gene_order && cv_gene_order_load(gene_order, &fixed, &fixed_rep, &n_fixed, &e)) { free(in); return finish(-1, &e); }
  o.fixed_genes = (const char *const *)fixed;
  o.fixed_rep = fixed_rep;
  o.n_fixed_genes = n_fixed;
  int rc = cv_convert(&o, &e);
  for (uint32_t i = 0; i < n_fixed; i++) free(fixed[i]);
  free(fixed);
  free(fixed_rep);
  free(in);
  return finish(rc, &e);
}

static int cmd_append_merge(int argc, char **argv, int merge) {
  const char *help = merge ? HELP_MERGE : HELP_APPEND;
  const char **in = calloc((size_t)argc + 1, sizeof *in);
  if (!in) return 1;
  int n = 0, quiet = 0, force = 0, threads = 0, raw = 0;
  const char *out = NULL, *layer = NULL, *gene_key = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (is_help(a)) { fputs(help, stdout); free(in); return 0; }
    if (a[0] == '-' && a[1]) {
      int takes = !strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--threads") || !strcmp(a, "--layer") ||
                  !strcmp(a, "--gene-key");
      const char *v = NULL;
      if (takes) {
        if (i + 1 >= argc) { free(in); return usage_value(a, help); }
        v = argv[++i];
      }
      long x;
      if (merge && (!strcmp(a, "-o") || !strcmp(a, "--output")) && out) { free(in); return usage("-o given twice", help); }
      if (merge && (!strcmp(a, "-o") || !strcmp(a, "--output"))) out = v;
      else if (!merge && !strcmp(a, "--layer")) layer = v;
      else if (!merge && !strcmp(a, "--gene-key")) gene_key = v;
      else if (!merge && !strcmp(a, "--raw")) raw = 1;
      else if (merge && !strcmp(a, "--force")) force = 1;
      else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
      else if (!strcmp(a, "--threads")) {
        if (int_arg(a, v, 0, 1024, &x, help)) { free(in); return 2; }
        threads = (int)x;
      } else {
        char m[128];
        snprintf(m, sizeof m, "unknown option %s", a);
        free(in);
        return usage(m, help);
      }
      continue;
    }
    in[n++] = a;
  }
  cv_err e;
  e.msg[0] = 0;
  int rc;
  if (merge) {
    if (n < 2) { free(in); return usage("merge needs at least two datasets", help); }
    if (!out) { free(in); return usage("merge needs -o OUT.dcdb", help); }
    cv_merge_opts o = {in, n, out, threads, force, quiet};
    rc = cv_merge(&o, &e);
  } else {
    if (n < 2) { free(in); return usage("append needs a dataset and at least one h5ad file", help); }
    if (layer && raw) { free(in); return usage("--layer and --raw exclude each other", help); }
    cv_append_opts o = {in[0], in + 1, n - 1, layer, raw, gene_key, threads, quiet};
    rc = cv_append(&o, &e);
  }
  free(in);
  return finish(rc, &e);
}

static int cmd_annotate(int argc, char **argv) {
  const char **pos = calloc((size_t)argc + 1, sizeof *pos), **types = calloc((size_t)argc + 1, sizeof *types);
  if (!pos || !types) { free(pos); free(types); return 1; }
  int n = 0, nt = 0, quiet = 0;
  const char *key = "name", *schema = NULL;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (is_help(a)) { fputs(HELP_ANNOTATE, stdout); free(pos); free(types); return 0; }
    if (!strcmp(a, "--key") || !strcmp(a, "--type") || !strcmp(a, "--schema")) {
      if (i + 1 >= argc) { free(pos); free(types); return usage_value(a, HELP_ANNOTATE); }
      if (!strcmp(a, "--key")) key = argv[++i];
      else if (!strcmp(a, "--schema")) schema = argv[++i];
      else types[nt++] = argv[++i];
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = 1;
    else if (a[0] == '-' && a[1]) {
      char m[128];
      snprintf(m, sizeof m, "unknown option %s", a);
      free(pos); free(types);
      return usage(m, HELP_ANNOTATE);
    } else pos[n++] = a;
  }
  if (n != 2) { free(pos); free(types); return usage("annotate needs a dataset and one CSV table", HELP_ANNOTATE); }
  if (strcmp(key, "name") != 0 && strcmp(key, "cell_id") != 0) {
    free(pos); free(types);
    return usage("--key is name or cell_id", HELP_ANNOTATE);
  }
  for (int i = 0; i < nt; i++) {
    const char *eq = strrchr(types[i], '=');
    if (!eq || eq == types[i] || !dc_obs_kind_from_name(eq + 1)) {
      char m[200];
      snprintf(m, sizeof m, "--type %.80s: give COLUMN=KIND, KIND one of category, text, int, real, bool", types[i]);
      free(pos); free(types);
      return usage(m, HELP_ANNOTATE);
    }
  }
  cv_annotate_opts o = {pos[0], pos[1], key, types, nt, quiet, schema};
  cv_err e;
  e.msg[0] = 0;
  int rc = cv_annotate(&o, &e);
  free(pos);
  free(types);
  return finish(rc, &e);
}

/* info / obs info / verify: one dataset argument plus flags */
static int cmd_simple(int argc, char **argv, const char *help, int which) {
  const char *path = NULL;
  int json = 0, quiet = 0;
  for (int i = 0; i < argc; i++) {
    if (is_help(argv[i])) { fputs(help, stdout); return 0; }
    if (which != 1 && !strcmp(argv[i], "--json")) json = 1;
    else if (which == 2 && (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))) quiet = 1;
    else if (argv[i][0] == '-' && argv[i][1]) {
      char m[128];
      snprintf(m, sizeof m, "unknown option %s", argv[i]);
      return usage(m, help);
    } else if (path) return usage("one dataset at a time", help);
    else path = argv[i];
  }
  if (!path) return usage("which dataset?", help);
  cv_err e;
  e.msg[0] = 0;
  int rc = which == 0 ? cv_info(path, json, &e) : which == 1 ? cv_obs_info(path, &e) : cv_verify(path, quiet, json, &e);
  return finish(rc, &e);
}

static int cmd_export(int argc, char **argv) {
  ex_opts o;
  memset(&o, 0, sizeof o);
  for (int i = 0; i < argc; i++) {
    char *a = argv[i], *v = NULL, opt[64];
    if (is_help(a)) { fputs(HELP_EXPORT, stdout); return 0; }
    if (a[0] == '-' && a[1]) {
      snprintf(opt, sizeof opt, "%s", a);
      char *eq = strchr(opt, '=');
      if (eq && a[1] == '-') { *eq = 0; v = a + (eq - opt) + 1; }
      int takes = !strcmp(opt, "-o") || !strcmp(opt, "--output") || !strcmp(opt, "--where") ||
                  !strcmp(opt, "--genes") || !strcmp(opt, "--obs") || !strcmp(opt, "--order");
      if (takes && !v) {
        if (i + 1 >= argc) return usage_value(opt, HELP_EXPORT);
        v = argv[++i];
      } else if (!takes && v) {
        return usage("an option that takes no value was given one", HELP_EXPORT);
      }
      if ((!strcmp(opt, "-o") || !strcmp(opt, "--output")) && o.out) return usage("-o given twice", HELP_EXPORT);
      if (!strcmp(opt, "-o") || !strcmp(opt, "--output")) o.out = v;
      else if (!strcmp(opt, "--where")) o.where = *v ? v : NULL;
      else if (!strcmp(opt, "--genes")) o.genes_file = v;
      else if (!strcmp(opt, "--obs")) o.obs = v;
      else if (!strcmp(opt, "--order")) o.order = v;
      else if (!strcmp(opt, "--force")) o.force = 1;
      else if (!strcmp(opt, "--quiet") || !strcmp(opt, "-q")) o.quiet = 1;
      else {
        char m[128];
        snprintf(m, sizeof m, "unknown option %s", a);
        return usage(m, HELP_EXPORT);
      }
      continue;
    }
    if (o.path) return usage("one dataset at a time", HELP_EXPORT);
    o.path = a;
  }
  if (!o.path) return usage("which dataset?", HELP_EXPORT);
  if (!o.out) return usage("export needs -o OUT.h5ad", HELP_EXPORT);
  cv_err e;
  e.msg[0] = 0;
  return finish(cv_export(&o, &e), &e);
}

static int cmd_genes(int argc, char **argv) {
  const char *path = NULL;
  int json = 0, original = 0;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (is_help(a)) { fputs(HELP_GENES, stdout); return 0; }
    if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--order") || !strncmp(a, "--order=", 8)) {
      const char *v = a[7] == '=' ? a + 8 : i + 1 < argc ? argv[++i] : NULL;
      if (!v || (strcmp(v, "original") && strcmp(v, "stored"))) return usage("--order takes original or stored", HELP_GENES);
      original = !strcmp(v, "original");
    } else if (a[0] == '-' && a[1]) {
      char m[128];
      snprintf(m, sizeof m, "unknown option %s", a);
      return usage(m, HELP_GENES);
    } else if (path) return usage("one dataset at a time", HELP_GENES);
    else path = a;
  }
  if (!path) return usage("which dataset?", HELP_GENES);
  cv_err e;
  e.msg[0] = 0;
  return finish(cv_genes(path, json, original, &e), &e);
}

int main(int argc, char **argv) {
  /* No HDF5 clean-up at exit: after an output file's close failed (a full disk), HDF5 1.10's
  ** exit handler closed it again and crashed.  Every file this program writes is closed (and
  ** checked) before it exits.  Before any other HDF5 call, or it has no effect. */
  /* file names are file names: Debian's SQLite is built to read "file:..." as a URI, so that
  ** `deltacells info file:x.dcdb` opened x.dcdb (another dataset) without a word.  Before
  ** any other SQLite call (it configures this program's SQLite, not a library user's). */
  sqlite3_config(SQLITE_CONFIG_URI, 0);
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 errors become our messages */
  cv_install_signals();
  char simd_msg[192];
  if (dc_simd_env_check(simd_msg, sizeof simd_msg)) {
    fprintf(stderr, "deltacells: %s\n", simd_msg);
    return 2;
  }
  if (argc < 2) return usage("which command?", HELP_MAIN);
  const char *c = argv[1];
  if (is_help(c) || !strcmp(c, "help")) { fputs(HELP_MAIN, stdout); return 0; }
  if (!strcmp(c, "--version") || !strcmp(c, "version")) {
    static const char help_version[] = "usage: deltacells version\n\nThe versions of deltacells, its dataset format and the libraries it runs with.\n";
    if (argc > 2 && is_help(argv[2])) { fputs(help_version, stdout); return 0; }
    if (argc > 2) {
      char m[128];
      snprintf(m, sizeof m, "%s %.60s: version takes no arguments", c, argv[2]);
      return usage(m, help_version);
    }
    unsigned h1 = 0, h2 = 0, h3 = 0;
    H5get_libversion(&h1, &h2, &h3);
    printf("deltacells %s (dataset format %d; SQLite %s, HDF5 %u.%u.%u, zlib %s)\n", DC_VERSION, DC_FORMAT_VERSION,
           sqlite3_libversion(), h1, h2, h3, zlibVersion());
    return 0;
  }
  if (!strcmp(c, "convert")) return cmd_convert(argc - 2, argv + 2);
  if (!strcmp(c, "append")) return cmd_append_merge(argc - 2, argv + 2, 0);
  if (!strcmp(c, "annotate")) return cmd_annotate(argc - 2, argv + 2);
  if (!strcmp(c, "merge")) return cmd_append_merge(argc - 2, argv + 2, 1);
  if (!strcmp(c, "info")) return cmd_simple(argc - 2, argv + 2, HELP_INFO, 0);
  if (!strcmp(c, "verify")) return cmd_simple(argc - 2, argv + 2, HELP_VERIFY, 2);
  if (!strcmp(c, "export")) return cmd_export(argc - 2, argv + 2);
  if (!strcmp(c, "genes")) return cmd_genes(argc - 2, argv + 2);
  if (!strcmp(c, "obs")) {
    if (argc >= 3 && is_help(argv[2])) { fputs(HELP_OBS, stdout); return 0; }
    if (argc < 3 || strcmp(argv[2], "info") != 0) return usage("obs: the subcommand is `obs info DATASET`", HELP_OBS);
    return cmd_simple(argc - 3, argv + 3, HELP_OBS, 1);
  }
  static const char *const cmds[] = {"convert", "info", "obs", "verify", "version", "export", "genes", "append", "merge", "annotate", "help"};
  const char *best = cv_closest(c, cmds, (int)(sizeof cmds / sizeof *cmds));
  char m[300];
  snprintf(m, sizeof m, "unknown command '%.100s'%s%s%s", c, best ? "; did you mean '" : "", best ? best : "",
           best ? "'?" : "");
  return usage(m, HELP_MAIN);
}
