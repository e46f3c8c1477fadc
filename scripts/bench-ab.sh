#!/bin/bash
# make bench-ab BASE=<rev> [AB_ARGS="--csr DIR ..."] [RUNS=11] [PATHS="avx2 scalar"]: the decoder of this tree against that of
# revision BASE, both linked into one bench_decode (build/ab/bench_decode_ab) and timed
# alternately on the same tiles, one path at a time (DC_SIMD=avx2, scalar, avx512 where the CPU
# has it).  On a shared machine two runs of two programs minutes apart differ by more than
# most changes to the decoder; decodes alternating in one process (ABBA) do not: A against A
# read 0.986-1.009 on the reference tile (2026-12-07), so a ratio inside that says nothing.
#
# How: BASE's tree is exported (git archive) to build/ab/base, its core library built there,
# and every global symbol it defines renamed with a base_ prefix (objcopy --redefine-syms), so
# both libraries link into one program.  BASE must share this tree's codec structs
# (dc_job, dc_out, dc_tile_hdr, dc_chunk_info, dc_error: checked below) and read what this
# tree's encoder writes.
set -euo pipefail
BASE=${BASE:-HEAD}
BUILD=${BUILD:-build}
AB="$BUILD/ab"
rev=$(git rev-parse --verify "$BASE^{commit}")
echo "bench-ab: this tree against $BASE ($rev)"

# the structs both decoders see must be the same text
structs() {
  awk '/^typedef struct (dc_job|dc_out|dc_tile_hdr|dc_chunk_info|dc_error) /,/^} /' "$@"
}
if ! diff -q <(git show "$rev:ext/codec/dc_codec.h" | structs) <(structs ext/codec/dc_codec.h) >/dev/null; then
  echo "bench-ab: $BASE's codec structs differ from this tree's (ext/codec/dc_codec.h): no A/B" >&2
  exit 2
fi

mkdir -p "$AB"
if [ "$(cat "$AB/base.rev" 2>/dev/null)" != "$rev" ]; then
  rm -rf "$AB/base" "$AB/base.rev"
  mkdir -p "$AB/base"
  git archive "$rev" | tar -x -C "$AB/base"
  make -s -C "$AB/base" -j"$(nproc)" build/libdccore.a
  nm -g --defined-only "$AB/base/build/libdccore.a" | awk 'NF == 3 { print $3 " base_" $3 }' | sort -u \
    > "$AB/base.syms"
  objcopy --redefine-syms="$AB/base.syms" "$AB/base/build/libdccore.a" "$AB/libdccore_base.a"
  echo "$rev" > "$AB/base.rev"
fi
make -s BUILD="$BUILD" "$AB/bench_decode_ab"

paths="scalar"                 # and the vector paths this CPU has (PATHS="avx2 ..." picks some)
grep -qw avx2 /proc/cpuinfo 2>/dev/null && paths="avx2 $paths"
grep -qw avx512bw /proc/cpuinfo 2>/dev/null && paths="$paths avx512"
paths=${PATHS:-$paths}
for p in $paths; do
  # shellcheck disable=SC2086
  DC_SIMD=$p "$AB/bench_decode_ab" --no-zstd --threads 1 --runs "${RUNS:-11}" ${AB_ARGS:-} | grep -E '^(input|decoder path|A/B)'
done
