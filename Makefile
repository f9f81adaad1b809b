# cudatrace. The generated eBPF objects are committed, so build and test
# need only Go; `make generate` needs clang-19, bpftool and libbpf-dev.
GO_MIN   := $(shell sed -n 's/^go //p' go.mod)
# sudo's secure_path leaves out /usr/local/go/bin, where Go's own installer
# puts go: look there, and in the PATH of the user who ran sudo, too.
ifeq ($(origin GO),undefined)
GO       := $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),$(if $(SUDO_USER),$(shell su -l '$(SUDO_USER)' -c 'command -v go' 2>/dev/null </dev/null)))
endif
ifeq ($(strip $(GO)),)
$(error go not found, not even in /usr/local/go/bin or $(or $(SUDO_USER),your user)'s PATH: install Go $(GO_MIN) or newer (https://go.dev/doc/install), or run make GO=/path/to/go)
endif
# Scripts and tests run go themselves (the tests build the binaries).
export PATH := $(dir $(GO)):$(PATH)
export GO
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      := bin
# make install: $(DESTDIR)$(PREFIX)/bin/cudatrace (in sudo's secure_path),
# the man page and the bash, zsh and fish completions where those look.
PREFIX   ?= /usr/local
DESTDIR  ?=

# What needs root (the demo, the privileged tests) runs as root: directly
# when make already does (a stock root install has no sudo), else through
# sudo, keeping this PATH (with go's directory) and the tests' switches.
ifeq ($(shell id -u),0)
AS_ROOT  :=
else
AS_ROOT  := sudo --preserve-env=CUDATRACE_REQUIRE_PRIVILEGED,CUDATRACE_TEST_TIMEOUT env PATH="$(PATH)" GO="$(GO)"
endif

.PHONY: all build bpf fakecuda generate check-generated test test-short test-stress test-kernels lint demo bench image image-push install uninstall clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cudatrace ./cmd/cudatrace

fakecuda:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/fakecuda ./testdata/fakecuda

# bpf2go compiles bpf/cudatrace.c and regenerates its Go twin; the results
# are committed, so only edits to bpf/ need this.
bpf:
	$(GO) generate ./tracer/ebpf/

# Everything generated: the eBPF objects, and nvdev/nvtables.go from
# nvdev/internal/gentables/nvidia-abi.json.
generate: bpf
	$(GO) generate ./nvdev/

# Regenerates in scratch copies and fails when the committed files are stale
# or the generation is not reproducible. Needs what `make generate` needs.
check-generated:
	GO=$(GO) ./scripts/check-generated.sh

# With a C compiler the suite runs under the race detector (and checkptr).
RACE := $(shell [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null && echo -race)

# The whole suite. Privileged tests run as root; with
# CUDATRACE_REQUIRE_PRIVILEGED=1 (CI) they fail instead of skipping. One
# package at a time (-p 1): the privileged tests check that nothing of
# cudatrace's (BPF programs, mounts, scratch cgroups) is left on the
# host, which another package's tests running beside them would upset.
# Each privileged test has its own deadline (CUDATRACE_TEST_TIMEOUT, 3m).
# With clang-19 installed it also checks the generated files. Only the
# tests run as root (through sudo when make does not).
test:
	$(GO) vet ./...
	@if command -v clang-19 >/dev/null; then GO=$(GO) ./scripts/check-generated.sh; \
	else echo "check-generated skipped: no clang-19 (make check-generated)"; fi
	$(AS_ROOT) $(GO) test $(RACE) -p 1 -count=1 -timeout 40m ./...

# The pure tier: no root, no BPF; privileged tests, and the slow ones (a
# browser, make install), skip under -short.
test-short:
	$(GO) test -short ./...

# The kernel matrix: the e2e scenarios of both backends and watch, in
# Debian's stock 5.10, 6.1 and 6.12 kernels booted in qemu (TCG). Needs root,
# qemu-system-x86, cpio, busybox-static and gcc; fetches the kernels once
# into .cache/kernels (CUDATRACE_KERNEL_CACHE). docs/kernels.md.
test-kernels:
	$(AS_ROOT) GO=$(GO) ./scripts/test-kernels.sh

# For developers (CI runs errcheck alone: building golangci-lint takes longer
# on its two cores than the suite). Pinned; the first run builds them.
GOLANGCI_LINT ?= github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
STATICCHECK   ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(GOLANGCI_LINT) run ./...

# The backends' packages -count=5 beside two CPU hogs, with -race and every
# test's deadline (scripts/test-stress.sh; COUNT and HOGS change them). Run
# as root for the privileged tests.
test-stress:
	$(AS_ROOT) GO=$(GO) RACE='$(RACE)' ./scripts/test-stress.sh

# Build, then diagnose the bundled fake CUDA target in a private /dev whose
# nvidia-uvm node a cgroup v2 device program denies. Builds as you, runs
# as root (through sudo when make does not).
demo: build fakecuda
	$(AS_ROOT) BIN=$(BIN) ./scripts/demo.sh

bench:
	./scripts/bench.sh

# The container image (Dockerfile: static, version-stamped, scratch) with
# podman or docker, whichever is installed; IMAGE names it.
CONTAINER_TOOL ?= $(or $(shell command -v podman 2>/dev/null),$(shell command -v docker 2>/dev/null),docker)
IMAGE    ?= cudatrace:$(VERSION)
image:
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# Builds, then pushes IMAGE (a registry path and a pinned tag, as the
# DaemonSet names it: make image-push IMAGE=ghcr.io/you/cudatrace:v0.1.0).
image-push: image
	$(CONTAINER_TOOL) push $(IMAGE)

# Installs what `make build` built, the man page and the completions it
# generates; through sudo when the destination is not yours to write.
# DESTDIR stages it (packaging): nothing is then asked of sudo.
MANDIR   = $(DESTDIR)$(PREFIX)/share/man/man1
BASHDIR  = $(DESTDIR)$(PREFIX)/share/bash-completion/completions
ZSHDIR   = $(DESTDIR)$(PREFIX)/share/zsh/site-functions
FISHDIR  = $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
INSTALLED = $(DESTDIR)$(PREFIX)/bin/cudatrace $(MANDIR)/cudatrace.1 $(BASHDIR)/cudatrace $(ZSHDIR)/_cudatrace $(FISHDIR)/cudatrace.fish
install: build
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	$(BIN)/cudatrace man >"$$tmp/cudatrace.1"; \
	for sh in bash zsh fish; do $(BIN)/cudatrace completion $$sh >"$$tmp/$$sh"; done; \
	sudo=; d='$(DESTDIR)$(PREFIX)'; while [ ! -e "$$d" ]; do d=$$(dirname "$$d"); done; \
	[ "$$(id -u)" = 0 ] || [ -w "$$d" ] || sudo=sudo; \
	set -x; \
	$$sudo install -D -m 0755 $(BIN)/cudatrace '$(DESTDIR)$(PREFIX)/bin/cudatrace'; \
	$$sudo install -D -m 0644 "$$tmp/cudatrace.1" '$(MANDIR)/cudatrace.1'; \
	$$sudo install -D -m 0644 "$$tmp/bash" '$(BASHDIR)/cudatrace'; \
	$$sudo install -D -m 0644 "$$tmp/zsh" '$(ZSHDIR)/_cudatrace'; \
	$$sudo install -D -m 0644 "$$tmp/fish" '$(FISHDIR)/cudatrace.fish'

uninstall:
	@sudo=; [ "$$(id -u)" = 0 ] || [ -w '$(DESTDIR)$(PREFIX)/bin' ] || sudo=sudo; \
	set -x; $$sudo rm -f $(INSTALLED)

clean:
	rm -rf $(BIN)
