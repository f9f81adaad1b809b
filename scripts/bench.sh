#!/usr/bin/env bash
# Benchmarks for issue 7: tracing overhead and event loss, cudatrace (eBPF,
# ptrace) side by side with strace. Needs root (BPF, mknod) and strace.
#
#   scripts/bench.sh [--quick] [--out DIR] [-- extra flags for scripts/bench/run]
#
# Prints one table, writes DIR/bench-results.csv (summary), DIR/bench-runs.csv
# (every run) and DIR/bench-overhead.svg. Default DIR: ./bench-out.
# --quick is a smoke run (< 1 minute). docs/benchmarks.md explains the rest.
set -euo pipefail

out=bench-out
runflags=()
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) runflags+=(-quick) ;;
	--out) out=$2; shift ;;
	--out=*) out=${1#--out=} ;;
	--) shift; runflags+=("$@"); break ;;
	-h|--help) sed -n '2,10p' "$0"; exit 0 ;;
	*) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

if [ "$(id -u)" != 0 ]; then
	echo "bench.sh: needs root (eBPF tracing, mknod)" >&2
	exit 1
fi

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
bin=$(mktemp -d /tmp/cudatrace-bench.XXXXXX)
# The workload opens this node: major 1 minor 9 (/dev/urandom, whose
# RNDGETENTCNT ioctl succeeds). The /dev/nvidia prefix makes cudatrace
# record the opens; --device-major 1 makes it record the ioctls.
node=/dev/nvidia-bench-$$-$RANDOM
cleanup() { rm -f "$node"; rm -rf "$bin"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$root"
export CGO_ENABLED=0
"${GO:-go}" build -trimpath -o "$bin/cudatrace" ./cmd/cudatrace
"${GO:-go}" build -trimpath -o "$bin/workload" ./scripts/bench/workload
"${GO:-go}" build -trimpath -o "$bin/run" ./scripts/bench/run
"${GO:-go}" build -trimpath -o "$bin/plot" ./scripts/bench/plot
cd - >/dev/null

mknod -m 0666 "$node" c 1 9

{
	echo "# $(date -u +%FT%TZ) $(uname -sr), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
	echo "# loadavg before: $(cat /proc/loadavg)"
	echo "# cudatrace $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown), $(strace -V 2>/dev/null | head -1)"
} | tee "$out/bench-env.txt"

"$bin/run" -bin "$bin" -out "$out" -node "$node" "${runflags[@]}"
echo "# loadavg after: $(cat /proc/loadavg)" | tee -a "$out/bench-env.txt"
"$bin/plot" -in "$out/bench-results.csv" -out "$out/bench-overhead.svg"
echo "wrote $out/bench-results.csv, $out/bench-runs.csv, $out/bench-overhead.svg"
