/*
** dc_rans_decompress.c — decoder of the rANS codec (work in progress: the
** codec is not available yet and reports DC_EUNSUPPORTED).
*/
#include "dc_internal.h"

int dc_rans_decode_chunk(dc_decoder *d, const uint8_t *shared, size_t shared_len,
                         const uint8_t *p, size_t len,
                         const dc_tile_hdr *h, uint32_t c, const dc_out *out, dc_error *err) {
  (void)d; (void)shared; (void)shared_len; (void)p; (void)len; (void)h; (void)out;
  dc_error_set(err, DC_EUNSUPPORTED, "chunk %u: the rans codec is not available in this build yet", c);
  return DC_EUNSUPPORTED;
}
void dc_rans_decoder_free(void *state) { (void)state; }
