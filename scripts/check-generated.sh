#!/usr/bin/env bash
# Regenerates what is generated from sources (the eBPF objects and their Go
# twins from bpf/cudatrace.c, nvdev/nvtables.go from nvidia-abi.json) in
# two scratch copies of the tree at different paths, and fails when they
# differ from each other (the build is not reproducible) or from the tree
# (a stale commit: run `make generate` and commit the result).
# Needs clang-19, llvm-strip, bpftool's headers (libbpf-dev) and Go.
set -euo pipefail
cd "$(dirname "$0")/.."

generated=(tracer/ebpf/bpf_bpfel.go tracer/ebpf/bpf_bpfel.o tracer/ebpf/fentry_bpfel.go tracer/ebpf/fentry_bpfel.o tracer/ebpf/oldkernel_bpfel.go tracer/ebpf/oldkernel_bpfel.o nvdev/nvtables.go)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for copy in a long/path/b; do
  mkdir -p "$tmp/$copy"
  # The working tree as git sees it: tracked and new files, not ignored ones.
  git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar -c --null -T - | tar -x -C "$tmp/$copy"
  (cd "$tmp/$copy" && "${GO:-go}" generate ./tracer/ebpf/ ./nvdev/) >/dev/null
done

fail=0
for f in "${generated[@]}"; do
  if ! cmp -s "$tmp/a/$f" "$tmp/long/path/b/$f"; then
    echo "check-generated: $f is not reproducible (two runs differ)" >&2
    fail=1
  elif ! cmp -s "$tmp/a/$f" "$f"; then
    echo "check-generated: $f is stale: run \`make generate\` and commit it" >&2
    fail=1
  fi
done
[ "$fail" = 0 ] && echo "check-generated: ${generated[*]} match their sources"
exit "$fail"
