/*
** tenx.h — the converter's inputs other than h5ad: loom files (/matrix dense
** genes x cells, MAT_DENSE_T; row_attrs/col_attrs as var/obs), 10x Genomics HDF5 files
** (CellRanger 3+ `filtered_feature_bc_matrix.h5`, and CellRanger 2's
** one-group-per-genome layout) and 10x Matrix Market directories
** (matrix.mtx[.gz], features.tsv[.gz] or genes.tsv[.gz], barcodes.tsv[.gz]).
**
** Each is opened into the same h5file an h5ad gives (h5ad.h), so everything
** after opening is shared:
**   10x HDF5   /matrix is CSC of genes x cells, that is CSR of cells x genes:
**              read as MAT_CSR from the file itself.  obs: the barcodes (index);
**              var: features/name (index), features/id as `gene_ids`,
**              features/feature_type as `feature_types`, features/genome as
**              `genome` (as scanpy's read_10x_h5 names them).
**   10x mtx    the barcodes and features are read into an in-memory HDF5 file
**              (the same frames as above); the matrix's entries, in any order,
**              go through the transpose spool in pass 1 (MAT_SPOOL).
*/
#ifndef CV_TENX_H
#define CV_TENX_H
#include <stdint.h>
#include "h5ad.h"

/* Opens any input: a directory (or a *.mtx[.gz] file) as a 10x Matrix
** Market input, an HDF5 file as 10x HDF5 when it has that layout, else as
** h5ad (h5ad_open).  layer/raw apply to h5ad only. */
int cv_input_open(const char *path, const char *layer, int raw, const char *gene_key, h5file *f, cv_err *e);

/* MAT_SPOOL (an mtx input): reads the entries once, validates them, sums
** counts and cells per local gene into total[]/ncells[] and spools them by
** tile (tiles of tile_cells cells). progress(parg, entries done) now and then. */
int tenx_mtx_spool(h5file *f, const char *dir, uint32_t tile_cells, uint64_t *total, uint64_t *ncells,
                   void (*progress)(void *, uint64_t), void *parg, cv_err *e);

/* A 10x input's features whose feature_types is not "Gene Expression"
** (antibody capture, CRISPR guides, custom): their count, *other a mask by
** local gene (malloc'd; NULL when none), example: the first such type. */
uint64_t tenx_other_features(h5file *f, uint8_t **other, char *example, size_t n);

#endif
