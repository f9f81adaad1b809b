#!/bin/sh
# Records calls.c under strace in each output format the importer must read.
# Run as: sh testdata/strace/gen/gen.sh (needs gcc and strace; no GPU).
# The logs are committed; rerun only to refresh them (pids and times change).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$here/../synthetic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bin=$work/cuda-calls-with-a-long-name
gcc -O1 -Wall -pthread -o "$bin" "$here/calls.c"
mkdir -p "$out"
rm -rf "$out"/*
cd "$work"
set +e
strace -f -tt -yy -o "$out/f-tt-yy.strace" "$bin"
strace -f -tt -yy -o "$out/f-tt-yy-killed.strace" "$bin" kill
strace -f -t -o "$out/f-t.strace" "$bin"
strace -f -ttt -T -y -o "$out/f-ttt-T-y.strace" "$bin"
strace -f -r -y "$bin" 2>"$out/stderr-r-y.strace"
strace -o "$out/nof.strace" "$bin"
strace -f -tt -yy -o "$out/true.strace" /bin/true  # nothing NVIDIA-related
mkdir -p "$out/ff" "$out/ff-notime"
strace -ff -tt -yy -o "$out/ff/calls" "$bin"
strace -ff -o "$out/ff-notime/calls" "$bin"
exit 0
