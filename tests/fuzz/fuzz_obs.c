/*
** fuzz_obs.c — libFuzzer target: dc_obs_decode on arbitrary bytes never
** crashes, never reads out of bounds, and a block it accepts is consistent
** (NULL count, offsets within the text).  The first input byte chooses the
** kind and dictionary size the reader expects; the rest is the blob.  Seeds
** of every kind and method are made by the encoder on the first call.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "dc_obs.h"

static dc_obs_decoder *dec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!dec) dec = dc_obs_decoder_new();
  if (size < 1) return 0;
  dc_obs_expect ex;
  ex.kind = 1 + data[0] % 5;
  ex.n_categories = (uint32_t)(data[0] >> 3) * 9;
  uint32_t n = 0;
  int kind = 0;
  dc_error err;
  /* the reader knows n from its block row: take the header's when plausible */
  if (dc_obs_peek(data + 1, size - 1, &kind, &n, NULL, &err) != DC_OK || n > 100000) n = 100;
  ex.n = n;
  dc_obs_block b;
  if (dc_obs_decode(dec, data + 1, size - 1, &ex, &b, &err) != DC_OK) {
    if (!err.msg[0]) abort();
    return 0;
  }
  uint32_t nulls = 0;
  for (uint32_t i = 0; i < b.n; i++) {
    switch (b.kind) {
      case DC_OBS_CATEGORY:
        if (b.codes[i] < -1 || (ex.n_categories && b.codes[i] >= (int32_t)ex.n_categories)) abort();
        nulls += b.codes[i] == -1;
        break;
      case DC_OBS_REAL: nulls += isnan(b.f64[i]) != 0; break;
      case DC_OBS_TEXT:
        if (b.text_off[i + 1] < b.text_off[i]) abort();
        if (b.text_off[i + 1] > b.text_off[i]) (void)*(volatile const char *)(b.text + b.text_off[i + 1] - 1);
        nulls += !b.valid[i];
        break;
      default: nulls += !b.valid[i]; break;
    }
  }
  if (nulls != b.null_count) abort();
  return 0;
}
