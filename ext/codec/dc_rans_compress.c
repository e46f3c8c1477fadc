/*
** dc_rans_compress.c — encoder of the rANS codec (work in progress: the
** codec is not available yet and reports DC_EUNSUPPORTED).
*/
#include "dc_internal.h"

int dc_rans_build_model(const dc_csr *in, int level, void **model, dc_buf *shared, dc_error *err) {
  (void)in; (void)level; (void)shared;
  *model = NULL;
  dc_error_set(err, DC_EUNSUPPORTED, "encode: the rans codec is not available in this build yet");
  return DC_EUNSUPPORTED;
}
int dc_rans_encode_chunk(const dc_chunk_in *c, int level, const void *model, dc_buf *out, dc_error *err) {
  (void)c; (void)level; (void)model; (void)out;
  dc_error_set(err, DC_EUNSUPPORTED, "encode: the rans codec is not available in this build yet");
  return DC_EUNSUPPORTED;
}
void dc_rans_free_model(void *model) { (void)model; }
