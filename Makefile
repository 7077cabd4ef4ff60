# weft: build and install libweft, the Windows Fibers API on Linux.
#   make build                      cargo build --release -p weft-capi
#   make install [PREFIX=/usr/local] [DESTDIR=]
#   make uninstall [PREFIX=/usr/local] [DESTDIR=]
#   make test                       every test: the workspace (Rust and C), the loom
#                                   models of the message boxes, the park word and the
#                                   IPC protocol (built with loom's atomics), then the
#                                   fiber core on aarch64 under qemu when the cross
#                                   toolchain is installed (see README)
# NO_BUILD=1 installs what is already in $(BUILD_DIR) without running cargo.

PREFIX     ?= /usr/local
CARGO      ?= cargo
PROFILE    ?= release
TARGET_DIR ?= $(or $(CARGO_TARGET_DIR),target)
BUILD_DIR  ?= $(TARGET_DIR)/$(PROFILE)
VERSION    := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
LIBDIR      = $(DESTDIR)$(PREFIX)/lib
INCDIR      = $(DESTDIR)$(PREFIX)/include/weft
HEADERS     = $(wildcard include/weft/*.h)

.PHONY: all build install uninstall test test-aarch64

all: build

build:
	$(CARGO) build --profile $(if $(filter debug,$(PROFILE)),dev,$(PROFILE)) -p weft-capi

install: $(if $(NO_BUILD),,build)
	install -d $(LIBDIR)/pkgconfig $(INCDIR)
	install -m 755 $(BUILD_DIR)/libweft.so $(LIBDIR)/libweft.so
	install -m 644 $(BUILD_DIR)/libweft.a $(LIBDIR)/libweft.a
	install -m 644 $(HEADERS) $(INCDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' weft.pc.in > $(LIBDIR)/pkgconfig/weft.pc
	@# Let the dynamic loader find libweft.so at once when installing system-wide.
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ] && command -v ldconfig >/dev/null; then ldconfig; fi

uninstall:
	rm -f $(LIBDIR)/libweft.so $(LIBDIR)/libweft.a $(LIBDIR)/pkgconfig/weft.pc
	rm -f $(addprefix $(INCDIR)/,$(notdir $(HEADERS)))
	-rmdir $(INCDIR) 2>/dev/null

AARCH64 = aarch64-unknown-linux-gnu

test:
	$(CARGO) test --workspace
	$(CARGO) test -p weft-runtime --features loom --test loom_msgbox --test loom_park --test loom_ipc
	@$(MAKE) --no-print-directory test-aarch64

# The fiber core (context switch, ownership, signals, overflow, registry) on aarch64.
test-aarch64:
	@if rustup target list --installed 2>/dev/null | grep -qx $(AARCH64) \
	    && command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-gcc >/dev/null; then \
	  echo "cross-testing the fiber core on aarch64 under qemu"; \
	  $(CARGO) test -p weft-fiber --target $(AARCH64); \
	else \
	  echo "aarch64: cross toolchain not installed, fiber core NOT cross-tested (rustup target add $(AARCH64); apt-get install qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"; \
	fi
