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

.PHONY: all build bpf fakecuda generate check-generated test test-short test-stress test-kernels lint demo bench image clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/cudatrace ./cmd/cudatrace

fakecuda:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN)/fakecuda ./testdata/fakecuda

# bpf2go compiles bpf/cudatrace.c and regenerates its Go twin; the results
# are committed, so only edits to bpf/ need this.
bpf:
	$(GO) generate ./tracer/ebpf/

# Everything generated: the eBPF objects, and annotate/nvtables.go from
# annotate/internal/gentables/nvidia-abi.json.
generate: bpf
	$(GO) generate ./annotate/

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
# With clang-19 installed it also checks the generated files.
test:
	$(GO) vet ./...
	@if command -v clang-19 >/dev/null; then GO=$(GO) ./scripts/check-generated.sh; \
	else echo "check-generated skipped: no clang-19 (make check-generated)"; fi
	$(GO) test $(RACE) -p 1 -count=1 -timeout 40m ./...

# The pure tier: no root, no BPF; privileged tests skip under -short.
test-short:
	$(GO) test -short ./...

# The kernel matrix: the e2e scenarios of both backends and watch, in
# Debian's stock 5.10, 6.1 and 6.12 kernels booted in qemu (TCG). Needs root,
# qemu-system-x86, cpio, busybox-static and gcc; fetches the kernels once
# into .cache/kernels (CUDATRACE_KERNEL_CACHE). docs/kernels.md.
test-kernels:
	GO=$(GO) ./scripts/test-kernels.sh

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
	GO=$(GO) RACE='$(RACE)' ./scripts/test-stress.sh

# Build, then diagnose the bundled fake CUDA target in a private /dev whose
# nvidia-uvm node a cgroup v2 device program denies. Needs root.
demo: build fakecuda
	./scripts/demo.sh

bench:
	./scripts/bench.sh

# The container image (Dockerfile: static, version-stamped, scratch) with
# podman or docker, whichever is installed; IMAGE names it.
CONTAINER_TOOL ?= $(or $(shell command -v podman 2>/dev/null),$(shell command -v docker 2>/dev/null),docker)
IMAGE    ?= cudatrace:$(VERSION)
image:
	$(CONTAINER_TOOL) build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf $(BIN)
