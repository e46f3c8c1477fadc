# deltacells — top-level build.  `make` builds everything into build/.
#   make        build the codec library, the SQLite extension, the converter, benchmarks, tests
#   make test   install missing Debian packages, build, run every test (also under ASan+UBSan)
#   make demo   install missing Debian packages, build, make a small dataset, query it, train an epoch
#   make fuzz-long   run each fuzz target for FUZZ_SECONDS (default 600) on build/corpus/NAME
#                    (fuzz_obs seeds it from the encoder; findings worth keeping go to tests/fuzz/corpus/)
PYTHON   ?= /usr/bin/python3
CC       ?= gcc
CLANG    ?= clang
BUILD    := build
PKGS     := libzstd libxxhash sqlite3 hdf5-serial

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
ZSTD_LIBS  := $(shell pkg-config --libs libzstd libxxhash 2>/dev/null)
SQLITE_LIBS:= $(shell pkg-config --libs sqlite3 2>/dev/null)
HDF5_LIBS  := $(shell pkg-config --libs hdf5-serial 2>/dev/null)

WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g
ALLCFLAGS = $(CFLAGS) $(WARN) -std=c11 -D_GNU_SOURCE -fPIC -pthread -MMD -MP \
            -Iext -Iext/codec -Iext/obs -I$(BUILD)/gen $(PKG_CFLAGS)
SANFLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDLIBS_CORE := $(ZSTD_LIBS) -lpthread -lm

# --- sources -------------------------------------------------------------
CORE_SRC  := $(wildcard ext/codec/*.c) $(wildcard ext/obs/*.c)   # pure C: no SQLite, no HDF5
EXT_SRC   := $(wildcard ext/*.c)                                 # the SQLite extension
CONV_SRC  := $(wildcard converter/*.c)                           # the converter CLI (HDF5)
CTEST_SRC := $(wildcard tests/c/test_*.c)
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
BENCH_SRC := $(wildcard bench/*.c)

CORE_OBJ  := $(CORE_SRC:%.c=$(BUILD)/obj/%.o)
CORE_SOBJ := $(CORE_SRC:%.c=$(BUILD)/asan/obj/%.o)
EXT_OBJ   := $(EXT_SRC:%.c=$(BUILD)/obj/%.o)
EXT_COBJ  := $(EXT_SRC:%.c=$(BUILD)/core/%.o)
CONV_OBJ  := $(CONV_SRC:%.c=$(BUILD)/obj/%.o)
EXT_SOBJ  := $(EXT_SRC:%.c=$(BUILD)/asan/obj/%.o)
EXT_SCOBJ := $(EXT_SRC:%.c=$(BUILD)/asan/core/%.o)
CONV_SOBJ := $(CONV_SRC:%.c=$(BUILD)/asan/obj/%.o)
CTESTS    := $(CTEST_SRC:tests/c/%.c=$(BUILD)/tests/%)
CTESTS_SAN:= $(CTEST_SRC:tests/c/%.c=$(BUILD)/asan/tests/%)
FUZZERS   := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
BENCHES   := $(BENCH_SRC:bench/%.c=$(BUILD)/%)

LIBCORE     := $(BUILD)/libdccore.a
LIBCORE_SAN := $(BUILD)/asan/libdccore.a
EXTENSION   := $(BUILD)/deltacells.so
CONVERTER   := $(BUILD)/deltacells
# the extension and the converter built with ASan+UBSan (make test runs the SQL-file tests and
# a subset of pytest against them; a Python process loading the library needs libasan preloaded)
EXTENSION_SAN := $(BUILD)/asan/deltacells.so
CONVERTER_SAN := $(BUILD)/asan/deltacells

.PHONY: all deps test demo clean fuzz fuzz-long sanitize bench
all: $(LIBCORE) $(EXTENSION) $(CONVERTER) $(BENCHES) $(CTESTS)

deps:
	@sh scripts/install-deps.sh

# --- objects -------------------------------------------------------------
# ext/deltacells.c registers every ext/vtab_NAME.c through dc_register_NAME()
VTAB_NAMES := $(patsubst ext/vtab_%.c,%,$(wildcard ext/vtab_*.c))
$(BUILD)/gen/dc_modules.h: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' $(foreach n,$(VTAB_NAMES),'DC_MODULE($(n))') > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
FORCE:
$(EXT_OBJ) $(EXT_COBJ) $(EXT_SOBJ) $(EXT_SCOBJ): $(BUILD)/gen/dc_modules.h
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@
$(BUILD)/asan/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -c $< -o $@
# the extension compiled into the converter (SQLITE_CORE: calls libsqlite3 directly)
$(BUILD)/core/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -DSQLITE_CORE -c $< -o $@

$(BUILD)/asan/core/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -DSQLITE_CORE -c $< -o $@

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(LIBCORE_SAN): $(CORE_SOBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# --- products ------------------------------------------------------------
$(EXTENSION): $(EXT_OBJ) $(LIBCORE)
	$(CC) -shared -o $@ $(EXT_OBJ) $(LIBCORE) $(LDLIBS_CORE)
$(CONVERTER): $(CONV_OBJ) $(EXT_COBJ) $(LIBCORE)
	$(CC) -o $@ $(CONV_OBJ) $(EXT_COBJ) $(LIBCORE) $(HDF5_LIBS) $(SQLITE_LIBS) $(LDLIBS_CORE)
$(EXTENSION_SAN): $(EXT_SOBJ) $(LIBCORE_SAN)
	$(CC) -shared $(SANFLAGS) -o $@ $(EXT_SOBJ) $(LIBCORE_SAN) $(LDLIBS_CORE)
$(CONVERTER_SAN): $(CONV_SOBJ) $(EXT_SCOBJ) $(LIBCORE_SAN)
	$(CC) $(SANFLAGS) -o $@ $(CONV_SOBJ) $(EXT_SCOBJ) $(LIBCORE_SAN) $(HDF5_LIBS) $(SQLITE_LIBS) $(LDLIBS_CORE)
$(BUILD)/bench_%: bench/bench_%.c $(LIBCORE)
	$(CC) $(ALLCFLAGS) -O3 -o $@ $< $(LIBCORE) $(LDLIBS_CORE)
# reads datasets through SQLite (and nothing of the core library)
$(BUILD)/bench_blob_read: bench/bench_blob_read.c
	$(CC) $(ALLCFLAGS) -O3 -o $@ $< $(SQLITE_LIBS)
$(BUILD)/tests/%: tests/c/%.c tests/c/dctest.h $(LIBCORE)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -o $@ $< $(LIBCORE) $(LDLIBS_CORE)
$(BUILD)/asan/tests/%: tests/c/%.c tests/c/dctest.h $(LIBCORE_SAN)
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) $(SANFLAGS) -o $@ $< $(LIBCORE_SAN) $(LDLIBS_CORE)
# libFuzzer targets: clang, built from the core sources directly
$(BUILD)/fuzz/%: tests/fuzz/%.c $(CORE_SRC)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -std=c11 -D_GNU_SOURCE -Iext -Iext/codec -Iext/obs $(PKG_CFLAGS) \
	  -fsanitize=fuzzer,address,undefined -o $@ $< $(CORE_SRC) $(LDLIBS_CORE)

sanitize: $(CTESTS_SAN) $(EXTENSION_SAN) $(CONVERTER_SAN)
fuzz: $(FUZZERS)

FUZZ_SECONDS ?= 600
fuzz-long: $(FUZZERS)
	@for f in $(FUZZERS); do mkdir -p $(BUILD)/corpus/$$(basename $$f); \
	  $$f -max_total_time=$(FUZZ_SECONDS) $(BUILD)/corpus/$$(basename $$f) || exit 1; done

test: deps
	@$(MAKE) --no-print-directory all sanitize fuzz
	@PYTHON=$(PYTHON) bash tests/run_all.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@PYTHON=$(PYTHON) bash scripts/demo.sh

bench: all
	$(BUILD)/bench_decode

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
