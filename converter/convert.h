/*
** convert.h — h5ad files to one deltacells dataset (the `convert` command).
*/
#ifndef CV_CONVERT_H
#define CV_CONVERT_H
#include <stdint.h>
#include "cv_util.h"
#include "dc_codec.h"

typedef struct cv_opts {
  const char **inputs;
  int n_inputs;
  const char *out;
  const char *layer;    /* NULL or a layer name */
  int raw;              /* read raw/X and raw/var */
  uint32_t tile_cells;  /* default 10000 */
  uint32_t chunks;      /* at most this many chunks per tile (default 8) */
  uint32_t chunk_cells; /* the fewest cells a chunk should hold (dc_encode_opts.chunk_cells;
                           main() sets DC_CHUNK_CELLS); 0: `chunks` per tile exactly */
  int level;            /* codec level; level_set = 0 uses the codec default */
  int level_set;
  int threads;          /* 0 = one per core */
  const char *gene_key; /* NULL or a var column */
  int codec;            /* DC_CODEC_*; 0 = the codec library's default (rans) */
  uint32_t genes_block; /* genes per stored block of the genes table; 0 = DC_GENES_BLOCK */
  int dataset_id_set;   /* dataset_id given (--dataset-id): reproducible output */
  uint64_t dataset_id;  /* else a random one (dc_meta.dataset_id, the seals' key) */
  int keep_gene_whitespace; /* else surrounding whitespace of gene names is removed */
  int all_features;     /* 10x inputs: keep features that are not gene expression */
  int genes_intersect;  /* store only the genes every input has (else the union) */
  double min_overlap;   /* warn when an input shares less than this fraction of its genes; 0 = 0.5 */
  int force, quiet;
  /* append (converter/merge_cmd.c), --gene-order: these names get gene ids 0 .. n_fixed_genes-1
  ** in this order, even where no input has them; the inputs' other genes follow by decreasing
  ** counts.  fixed_rep[i]: which gene of its name fixed gene i is (cv_gene_repeats: a dataset's
  ** are counted in its original order, genes.orig_index); NULL: counted in this list's order */
  const char *const *fixed_genes;
  const uint32_t *fixed_rep;
  uint32_t n_fixed_genes;
  struct dsw *tiles_to;  /* append: tiles go straight into this writer's dataset, numbered from
                         ** tile_base, their cells from cell_base (the output gets no tiles) */
  int64_t tile_base, cell_base;
  int no_sync;          /* a scratch output (append's): not fsync()ed */
  int genes_level;      /* zstd level of the genes table; 0: the default (append: 1, it is rewritten) */
  int obs_level;        /* zstd level of the obs blocks; 0: the default (append: 1, they are rewritten) */
} cv_opts;

int cv_convert(const cv_opts *o, cv_err *e);

#endif
