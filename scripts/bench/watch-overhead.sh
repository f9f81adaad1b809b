#!/bin/sh
# watch-overhead.sh BUNDLE OUT [N] [REPS]: what `cudatrace watch` costs a
# process that never touches NVIDIA (issue 16: at most +30 ns per syscall).
# BUNDLE holds cudatrace, workload and bpfstats. Interleaved, REPS times:
# N getppid calls untraced; beside a running `cudatrace watch`; and with
# do-nothing programs on the syscall tracepoints (the hook's floor, no
# statistics); also N opens of a non-NVIDIA file (workload's device loop
# on /dev/null: open, a failing ioctl, close) untraced and beside watch,
# since every open on the host is looked at. One line per run in OUT/watch-overhead.txt.
set -eu
b=$(cd "$1" && pwd); out=$2; n=${3:-2000000}; reps=${4:-5}
mkdir -p "$out"
log=$out/watch-overhead.txt
: >"$log"
ns() { sed -n 's/.* ns_op=\([0-9.]*\).*/\1/p'; }
getppid() { "$b/workload" -mode getppid -n "$n" | ns; }
opens() { "$b/workload" -mode dev -path /dev/null -n $((n / 10)) | ns; }
start_watch() {
	"$b/cudatrace" watch --json >"$out/watch-lines.$1.jsonl" 2>"$out/watch-stderr.$1.txt" &
	wpid=$!
	sleep 3 # loaded and attached (it takes well under a second)
}
stop_watch() { kill -TERM "$wpid"; wait "$wpid" || echo "watch exited $?" >>"$log"; }
for r in $(seq "$reps"); do
	echo "rep $r untraced getppid $(getppid)" >>"$log"
	echo "rep $r untraced open $(opens)" >>"$log"
	start_watch "$r"
	echo "rep $r watch getppid $(getppid)" >>"$log"
	echo "rep $r watch open $(opens)" >>"$log"
	stop_watch
	echo "rep $r floor getppid $("$b/bpfstats" -floor -stats=false -- "$b/workload" -mode getppid -n "$n" | ns)" >>"$log"
done
# Medians and the added ns per call, against the untraced runs.
awk '{v[$3" "$4]=v[$3" "$4]" "$5} END {for (k in v) print k, v[k]}' "$log" | while read -r cfg call vals; do
	med=$(echo "$vals" | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	echo "$cfg $call median_ns=$med"
done | sort >"$out/watch-overhead-summary.txt"
cat "$out/watch-overhead-summary.txt"
