#!/bin/sh
# watch-overhead.sh BUNDLE OUT [N] [REPS]: what `cudatrace watch` costs a
# process that never touches NVIDIA (issue 16: at most +30 ns per syscall).
# BUNDLE holds cudatrace, workload and bpfstats. REPS rounds, each: N
# getppid calls untraced, beside a running `cudatrace watch`, and with
# do-nothing programs on the syscall tracepoints (the hook's floor, no
# statistics, bpfstats -floor -stats=false); and N/10 rounds of
# open+ioctl+close on /dev/null (not NVIDIA's: every open on the host is
# looked at) untraced and beside watch. The workload is pinned to one CPU
# (taskset, where there is one) and each configuration is paired with the
# untraced run of its own round; the summary gives the median of those
# paired differences. Raw lines: OUT/watch-overhead.txt.
set -eu
b=$(cd "$1" && pwd); out=$2; n=${3:-2000000}; reps=${4:-5}
mkdir -p "$out"
log=$out/watch-overhead.txt
: >"$log"
pin=
command -v taskset >/dev/null && pin="taskset -c $(($(nproc) - 1))"
ns() { sed -n 's/.* ns_op=\([0-9.]*\).*/\1/p'; }
getppid() { $pin "$b/workload" -mode getppid -n "$n" | ns; }
opens() { $pin "$b/workload" -mode dev -path /dev/null -n $((n / 10)) | ns; }
for r in $(seq "$reps"); do
	echo "$r untraced getppid $(getppid)" >>"$log"
	echo "$r untraced open $(opens)" >>"$log"
	"$b/cudatrace" watch --json >"$out/watch-lines.$r.jsonl" 2>"$out/watch-stderr.$r.txt" &
	wpid=$!
	i=0
	until grep -q "watching this host" "$out/watch-stderr.$r.txt" || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
	echo "$r watch getppid $(getppid)" >>"$log"
	echo "$r watch open $(opens)" >>"$log"
	kill -TERM "$wpid"
	wait "$wpid" || echo "# round $r: watch exited $?" >>"$log"
	echo "$r floor getppid $($pin "$b/bpfstats" -floor -stats=false -- "$b/workload" -mode getppid -n "$n" | ns)" >>"$log"
done
awk '
	/^#/ { next }
	{ v[$1 " " $2 " " $3] = $4; cfg[$2 " " $3] = 1; rounds[$1] = 1 }
	END {
		for (c in cfg) {
			split(c, p, " ")
			if (p[1] == "untraced") continue
			n = 0
			for (r in rounds) {
				base = v[r " untraced " p[2]]
				if (base != "" && v[r " " c] != "") d[++n] = v[r " " c] - base
			}
			# median of the paired differences (insertion sort: n is small)
			for (i = 2; i <= n; i++) { x = d[i]; for (j = i - 1; j >= 1 && d[j] > x; j--) d[j + 1] = d[j]; d[j + 1] = x }
			med = n % 2 ? d[(n + 1) / 2] : (d[n / 2] + d[n / 2 + 1]) / 2
			printf "%-8s %-8s +%.1f ns per call (median of %d paired rounds; min %.1f, max %.1f)\n", p[1], p[2], med, n, d[1], d[n]
		}
	}' "$log" | sort >"$out/watch-overhead-summary.txt"
cat "$out/watch-overhead-summary.txt"
