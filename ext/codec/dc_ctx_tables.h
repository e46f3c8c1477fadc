/*
** dc_ctx_tables.h — the decoding tables of codec `rans` (id 3), private to the
** decoder: the slot tables of the stream decoders and the symbol records of
** stage 3, built from a tile's shared section (its model) by dc_ctx_tables.c and
** used by dc_ctx_decompress.c.
*/
#ifndef DC_CTX_TABLES_H
#define DC_CTX_TABLES_H
#include "dc_ctx.h"

/* Bytes of one context's slot table: the vector decoders' (dc_ctx.h), or the
** portable decoder's: the slots' u16 frequencies, then their u16 biases, then
** their u8 symbols (each a load at a constant offset from the table and the
** slot: no shifts and masks, no address arithmetic). */
#define TAB_BYTES1(vec) ((vec) ? 4u * DC_CTX_M : 5u * DC_CTX_M)
/* A model of version 3 may hold pair contexts, whose slots carry two symbols: the vector
** decoders' u32 entries with the first symbol in their top byte, then a byte of second symbol
** per slot, or the portable decoder's u16 frequencies, u16 biases and two bytes of symbols per
** slot (dc_ctx.h).  One stride for all contexts. */
#define TAB_BYTES2(vec) ((vec) ? 5u * DC_CTX_M : 6u * DC_CTX_M)
#define TAB_BYTES(vec, ver) ((ver) == 3 ? TAB_BYTES2(vec) : TAB_BYTES1(vec))
/* The fast symbols as the portable stage 3 reads them (gap + 1 = g1 + (bits
** & gmask), count = cbase + (bits >> gb & cmask)), one array per field and
** per cell-size bucket, entry b * 256 + symbol for rank bucket b: every
** field is then one load at a constant offset from one base and the index
** (32-bit fields are memory operands on x86; no scaling of a record index).
** The u32 arrays lie PF_STRIDE apart (a cache line more than their size, so
** one entry's fields fall in different cache sets); then nb and gb bytes. */
#define PF_N      (DC_CTX_MAXRB * 256u)        /* entries per cell-size bucket */
#define PF_STRIDE (PF_N + 16u)                 /* u32s from one field to the next */
#define PF_GM     PF_STRIDE                    /* u32 offsets of the fields */
#define PF_CB     (2 * PF_STRIDE)
#define PF_CM     (3 * PF_STRIDE)
#define PF_U32    (4 * PF_STRIDE)              /* u32s before the bytes */
#define PF_GB     (PF_N + 64u)                 /* byte offset of gb from nb */
#define PF_BYTES  (4u * PF_U32 + 2u * PF_GB)   /* one cell-size bucket */
typedef struct ctx_state {
  uint8_t *key;                      /* the shared section the tables were built from */
  size_t key_len;
  uint32_t key_genes;                /* and the tile's gene count */
  int vec;                           /* 1: tables laid out for the vector decoders */
  uint32_t ver;                      /* model version: 2, or 3 (pair contexts) */
  size_t tstride;                    /* bytes of one context's table */
  dc_ctx_model m;
  uint16_t *nsym;                    /* per context: coded symbols + 1 (the escape), 0 = unused */
  uint8_t *pk;                       /* per context: K of a pair context, 0: one symbol per step */
  uint8_t *tab;                      /* n_ctx x tstride: the slot entries (dc_ctx.h) */
  dc_ctx_sinfo *inf;                        /* n_ctx x 256                              */
  uint8_t *pinf;                     /* nq x PF_BYTES, the portable stage 3's copy */
  uint8_t *nbt;                      /* vector layout: n_ctx x 256, inf's mantissa widths alone
                                        (cells that placing skips, 16 entries per shuffle on
                                        AVX2; the portable layout has them in pinf) */
  uint32_t *map;                     /* with a gene map: local id -> gene (n_local) */
  uint8_t *pesc;                     /* per pair context: 1 if the escape is among its top K
                                        (else only its raw symbols can hold one) */
  uint8_t *has_slow;                 /* per context: a coded symbol is slow (the
                                        escape is checked per chunk: see stage 2) */
  uint8_t *blk;                      /* nsym, pk, tab, inf, pinf, nbt, has_slow and pesc lie in one block
                                        (dc_mem_alloc_huge), kept when the set is built again */
  size_t blk_cap, blk_map;
} ctx_state;

/* The tables of the shared section sh (a tile's model) for a tile of n_genes genes, laid out
** for the vector decoders (vec) or the portable ones: from the decoder's cache of the last few
** tiles' tables, or built (the model checked; c names the chunk in errors). */
int dc_ctx_get_tables(dc_decoder *d, const uint8_t *sh, size_t sh_len, uint32_t n_genes, int vec,
                      uint32_t c, ctx_state **out, dc_error *err);
#endif
