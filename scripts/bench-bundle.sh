#!/usr/bin/env bash
# Builds the benchmark into DIR for a host without Go or strace (the GPU
# host): static cudatrace, workload, driver, bpfstats and profile.sh,
# optionally a baseline cudatrace built from git revision BASE (run beside
# this one as the ebpf-base configs), and this host's strace with its
# shared libraries.
#
#   scripts/bench-bundle.sh DIR [BASE]
#
# Then, on the other host, as root:  DIR/run-bench.sh OUT [flags for scripts/bench/run]
# or DIR/profile.sh DIR OUT [N] (per-program BPF statistics, the floor).
# Issue 31's PASS/MISS table (now, base, strace, goal) ends every run; in
# one device call of well under 10 minutes:
#   DIR/run-bench.sh OUT -reps 4 -workloads W1,W4,start,true -n1 100000 -n4 2000 -big 0
set -euo pipefail

[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
dir=$1
base=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
export CGO_ENABLED=0

cd "$root"
go build -trimpath -o "$dir/cudatrace" ./cmd/cudatrace
go build -trimpath -o "$dir/workload" ./scripts/bench/workload
go build -trimpath -o "$dir/run" ./scripts/bench/run
go build -trimpath -o "$dir/bpfstats" ./scripts/bench/bpfstats
cp scripts/bench/profile.sh "$dir/"
echo "cudatrace $(git describe --always --dirty 2>/dev/null || echo unknown)" >"$dir/VERSIONS"

if [ -n "$base" ]; then
	src=$(mktemp -d /tmp/cudatrace-base.XXXXXX)
	trap 'rm -rf "$src"' EXIT
	git archive "$base" | tar -x -C "$src"
	(cd "$src" && go build -trimpath -o "$dir/cudatrace-base" ./cmd/cudatrace)
	echo "cudatrace-base $(git rev-parse --short "$base")" >>"$dir/VERSIONS"
fi

# strace and the libraries it links, run through their own loader.
if s=$(command -v strace); then
	mkdir -p "$dir/strace-lib"
	cp "$s" "$dir/strace-lib/strace"
	ldd "$s" | awk '/=>/ {print $3} /^\t\/.*ld-linux/ {print $1}' | while read -r lib; do
		[ -f "$lib" ] && cp -L "$lib" "$dir/strace-lib/"
	done
	loader=$(basename "$(ldd "$s" | awk '/ld-linux/ {print $1}')")
	cat >"$dir/strace" <<EOS
#!/bin/sh
d=\$(dirname "\$0")/strace-lib
exec "\$d/$loader" --library-path "\$d" "\$d/strace" "\$@"
EOS
	chmod +x "$dir/strace"
	"$dir/strace" -V | head -1 >>"$dir/VERSIONS"
fi

cat >"$dir/run-bench.sh" <<'EOS'
#!/bin/sh
# run-bench.sh OUT [flags for run]: the benchmark, with the node it needs.
set -eu
d=$(cd "$(dirname "$0")" && pwd)
out=$1; shift
node=/dev/nvidia-bench-$$
mknod -m 0666 "$node" c 1 9
trap 'rm -f "$node"' EXIT
mkdir -p "$out"
{ uname -sr; nproc; cat /proc/loadavg; cat "$d/VERSIONS"; } >"$out/bench-env.txt"
base=
[ -x "$d/cudatrace-base" ] && base="-base $d/cudatrace-base"
strace=""
[ -x "$d/strace" ] && strace="$d/strace"
# shellcheck disable=SC2086
"$d/run" -bin "$d" -node "$node" -out "$out" -strace "$strace" $base "$@"
cat /proc/loadavg >>"$out/bench-env.txt"
EOS
chmod +x "$dir/run-bench.sh"
echo "wrote $dir: $(tr '\n' ';' <"$dir/VERSIONS")"
