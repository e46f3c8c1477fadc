/*
** obs_internal.h — what the files of the obs block library share (private).
** The byte layout is docs/format.md section 3.
*/
#ifndef DC_OBS_INTERNAL_H
#define DC_OBS_INTERNAL_H
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include "dc_obs.h"

#define OBS_MAGIC "DCOB"
#define OBS_VERSION 1
#define OBS_HDR_LEN 24

/* flags */
#define OBS_F_ZSTD 0x01     /* the payload is one zstd frame (else stored as is) */
#define OBS_F_NULLMAP 0x02  /* the payload starts with a validity bitmap         */

/* methods */
#define OBS_M_CAT1 1        /* category: code+1 as u8                    */
#define OBS_M_CAT2 2        /*           code+1 as u16, 2 byte planes    */
#define OBS_M_CAT4 3        /*           code+1 as u32, 4 byte planes    */
#define OBS_M_BITS 1        /* bool: one bit per non-NULL value          */
#define OBS_M_F64 1         /* real: IEEE binary64, 8 byte planes        */
#define OBS_M_F32 2         /* real: every value exact in binary32       */
#define OBS_M_FOR 3         /* int, real (integral): value - base        */
#define OBS_M_DELTA 4       /* int, real (integral): zigzag of deltas    */
#define OBS_M_TEXT 1        /* text: lengths, then the bytes             */
#define OBS_M_TEXT_DNA 2    /* text: leading A/C/G/T run 2-bit packed    */

/* the fixed part of FOR/DELTA/TEXT parameters */
#define OBS_INT_PARAMS 9    /* u8 width, i64 base                        */


static inline void obs_put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t obs_get32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline void obs_put64(uint8_t *p, uint64_t v) {
  obs_put32(p, (uint32_t)v); obs_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint64_t obs_get64(const uint8_t *p) {
  return (uint64_t)obs_get32(p) | (uint64_t)obs_get32(p + 4) << 32;
}
static inline uint64_t obs_zigzag(int64_t v) {
  return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline int64_t obs_unzigzag(uint64_t u) {
  return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}
/* smallest of 0, 1, 2, 4, 8 bytes that holds v */
static inline unsigned obs_width(uint64_t v) {
  return v == 0 ? 0 : v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
}

/* Byte planes: m values of w bytes; plane k (m bytes) holds byte k of each. */
void dc_obs_planes_put(uint8_t *dst, const uint64_t *v, size_t m, unsigned w);
void dc_obs_planes_get(const uint8_t *src, size_t m, unsigned w, uint64_t *v);
/* the same into 32-bit values: w at most 4 */
void dc_obs_planes_get32(const uint8_t *src, size_t m, unsigned w, uint32_t *v);

#endif
