#!/bin/sh
# profile.sh BUNDLE OUT [N]: where a traced syscall's time goes (issue 19).
# BUNDLE holds cudatrace, workload and bpfstats (and cudatrace-base, the
# build before a change, to compare side by side). For each build, three
# interleaved rounds of W1 (N iterations of openat+ioctl+close) untraced and
# under cudatrace, with the kernel's BPF run-time statistics per program;
# then the floor: what a syscall pays for do-nothing programs on sys_enter
# and sys_exit, against getppid untraced (with the statistics on, then off:
# they add two clock reads to every program run).
set -eu
b=$(cd "$1" && pwd); out=$2; n=${3:-400000}
mkdir -p "$out"
node=/dev/nvidia-bench-$$
mknod -m 0666 "$node" c 1 9
trap 'rm -f "$node"' EXIT
{ uname -sr; nproc; cat /proc/loadavg; } >"$out/profile-env.txt"
builds=cudatrace
[ -x "$b/cudatrace-base" ] && builds="cudatrace cudatrace-base"
for round in 1 2 3; do
	for build in $builds; do
		echo "== round $round untraced W1"
		"$b/workload" -mode dev -path "$node" -n "$n"
		echo "== round $round $build W1"
		"$b/bpfstats" -- "$b/$build" -q --backend ebpf --device-major 1 -o /tmp/profile-report.json -- \
			"$b/workload" -mode dev -path "$node" -n "$n" 2>&1
		echo "== round $round $build W1 --no-fold"
		"$b/bpfstats" -- "$b/$build" -q --backend ebpf --no-fold --device-major 1 -o /tmp/profile-report.json -- \
			"$b/workload" -mode dev -path "$node" -n "$n" 2>&1
	done
	echo "== round $round untraced W2"
	"$b/workload" -mode getppid -n $((n * 5))
	echo "== round $round floor W2"
	"$b/bpfstats" -floor -- "$b/workload" -mode getppid -n $((n * 5)) 2>&1
	echo "== round $round floor W2, statistics off (the floor a traced run pays)"
	"$b/bpfstats" -floor -stats=false -- "$b/workload" -mode getppid -n $((n * 5)) 2>&1
done
cat /proc/loadavg >>"$out/profile-env.txt"
