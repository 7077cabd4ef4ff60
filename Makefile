# weft: build and install the weft command and libweft (the C library: the Windows
# Fibers API, green threads, IPC and syslets, with the headers in include/weft/).
#   make build                      cargo build --release -p libweft -p libweft-hook -p weft-cli
#   make install [PREFIX=/usr/local] [DESTDIR=]
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]
#   make test                       every test: the workspace (Rust and C), the loom
#                                   models, weft-kv's client suite (pytest), the fiber
#                                   core on aarch64 under qemu when the cross toolchain
#                                   is installed, and the API docs building without a
#                                   warning; ends with "total: N passed, N failed,
#                                   N skipped" and fails if any test failed
#   make conformance                weft-kv measured with Redis 7.0's and redis-py's own
#                                   test suites (fetched once into ~/.cache/weft-conformance),
#                                   side by side with redis-server; fails on a test that is
#                                   not in tests/conformance/*-expected-failures.txt;
#                                   CONFORMANCE_ARGS="--units pubsub" passes options (see
#                                   tests/conformance/run --help); not part of make test
# make install puts weft in $(PREFIX)/bin, libweft.so and libweft.a in $(PREFIX)/lib,
# with libweft-hook.so and libweft-hook.a (libweft and the system-call layer,
# docs/hook.md: -lweft-hook), the headers in $(PREFIX)/include/weft and weft.pc in
# $(PREFIX)/lib/pkgconfig.
# NO_BUILD=1 installs what is already in $(BUILD_DIR) without running cargo (the weft
# command and libweft-hook only if they are there).

PREFIX     ?= /usr/local
CARGO      ?= cargo
PROFILE    ?= release
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
BUILD_DIR  ?= $(TARGET_DIR)/$(PROFILE)
VERSION    := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
BINDIR      = $(DESTDIR)$(PREFIX)/bin
LIBDIR      = $(DESTDIR)$(PREFIX)/lib
INCDIR      = $(DESTDIR)$(PREFIX)/include/weft
HEADERS     = $(wildcard include/weft/*.h)

.PHONY: all build install uninstall test test-aarch64 conformance

all: build

build:
	$(CARGO) build --profile $(if $(filter debug,$(PROFILE)),dev,$(PROFILE)) -p libweft -p libweft-hook -p weft-cli

install: $(if $(NO_BUILD),,build)
	install -d $(LIBDIR)/pkgconfig $(INCDIR)
	@if [ -z "$(NO_BUILD)" ] || [ -f $(BUILD_DIR)/weft ]; then \
		install -d $(BINDIR) && install -m 755 $(BUILD_DIR)/weft $(BINDIR)/weft; fi
	install -m 755 $(BUILD_DIR)/libweft.so $(LIBDIR)/libweft.so
	install -m 644 $(BUILD_DIR)/libweft.a $(LIBDIR)/libweft.a
	@if [ -z "$(NO_BUILD)" ] || [ -f $(BUILD_DIR)/libweft_hook.so ]; then \
		install -m 755 $(BUILD_DIR)/libweft_hook.so $(LIBDIR)/libweft-hook.so && \
		install -m 644 $(BUILD_DIR)/libweft_hook.a $(LIBDIR)/libweft-hook.a; fi
	install -m 644 $(HEADERS) $(INCDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' weft.pc.in > $(LIBDIR)/pkgconfig/weft.pc
	@# Let the dynamic loader find libweft.so at once when installing system-wide.
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(BINDIR)/weft
	rm -f $(LIBDIR)/libweft.so $(LIBDIR)/libweft.a $(LIBDIR)/pkgconfig/weft.pc
	rm -f $(LIBDIR)/libweft-hook.so $(LIBDIR)/libweft-hook.a
	rm -f $(addprefix $(INCDIR)/,$(notdir $(HEADERS)))
	-rmdir $(INCDIR) 2>/dev/null

# Every test, to the end whatever fails, with one summary line (tests/run-all says
# what each phase runs). WEFT_TEST_PHASES="rust loom pytest aarch64 docs" picks phases.
test:
	@CARGO="$(CARGO)" bash tests/run-all

# The fiber core (context switch, ownership, signals, overflow, registry) on aarch64.
test-aarch64:
	@CARGO="$(CARGO)" WEFT_TEST_PHASES=aarch64 bash tests/run-all

# Redis's test units and redis-py's test_commands.py against a fresh release build of
# weft kv serve, compared with the expected-failure lists (tests/conformance/run).
conformance:
	@CARGO="$(CARGO)" python3 tests/conformance/run $(CONFORMANCE_ARGS)
