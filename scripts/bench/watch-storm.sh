#!/bin/sh
# watch-storm.sh CUDATRACE OUT N [SECONDS] [WATCH_ARGS...]: cudatrace watch
# under a fork storm (issue 32 item 4). Starts CUDATRACE watch --json
# host-wide (WATCH_ARGS added: --report-dir DIR, -v ...), forks N short
# children (scripts/bench/storm.c, built here with cc) that each open
# /dev/nvidiactl, paced over SECONDS (0: as fast as they fork), waits
# until every child has its line or 60 s pass without a new one, then
# sends SIGTERM. Figures (one key=value line, also in OUT/result.txt):
#   lines       the storm's children with a line (of N), dup  those with more than one
#   rate        lines/s from the first child's exit to its last line
#   cpu_ms_per_line  the watch's CPU time (user + system, until SIGTERM) per
#               line: steadier than rate on a shared host
#   lag_p50/p99/max  seconds from a child's exit (its reap) to its line
#   rss_mb      the watch's peak RSS (VmHWM, read before SIGTERM)
#   term_s      SIGTERM to exit (TERM_AT_END=1: sent as soon as the storm
#               ends, its backlog queued; the drain after SIGTERM is bounded)
#   dropped, shed, incomplete  from the exit summary
# On a host without the NVIDIA driver /dev/nvidiactl does not exist:
# every child fails its open and is one diagnosis; NODE=PATH opens PATH
# instead (an NVIDIA-named node that opens, with -v, makes healthy lines:
# mknod /dev/nvidia-storm c 1 3 and --device-major 1). Run as root; other
# processes on the host that touch NVIDIA paths get lines too (not counted).
set -eu
ct=$1; out=$2; n=$3; secs=${4:-0}
shift 3; [ $# -gt 0 ] && shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
cc -O2 -o "$out/storm" "$here/storm.c"
: >"$out/stderr.txt"
"$ct" watch --json "$@" >"$out/lines.jsonl" 2>"$out/stderr.txt" &
wpid=$!
i=0
until grep -q "watching this host" "$out/stderr.txt"; do
	kill -0 $wpid 2>/dev/null || { cat "$out/stderr.txt" >&2; exit 1; }
	i=$((i + 1)); [ $i -lt 600 ] || { echo "watch did not start" >&2; kill -TERM $wpid; exit 1; }
	sleep 0.1
done
"$out/storm" "$n" "${NODE:-/dev/nvidiactl}" "$secs" >"$out/exits.txt" 2>"$out/storm.txt"
# Wait for the lines: until all N, or 60 s without a new one (TERM_AT_END=1:
# SIGTERM as soon as the storm ends, with its backlog still queued).
last=-1; still=0
while [ "${TERM_AT_END:-0}" != 1 ]; do
	got=$(wc -l <"$out/lines.jsonl")
	[ "$got" -ge "$n" ] && break
	if [ "$got" = "$last" ]; then still=$((still + 1)); [ $still -lt 60 ] || break; else still=0; fi
	last=$got
	sleep 1
done
grep VmHWM /proc/$wpid/status | awk '{print $2}' >"$out/hwm_kb"
# utime + stime in clock ticks (fields 14, 15; comm has no space here)
awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' /proc/$wpid/stat >"$out/cpu_s"
t0=$(date +%s.%N)
kill -TERM $wpid
wait $wpid || true
t1=$(date +%s.%N)
python3 - "$out" "$n" "$t0" "$t1" <<'PY'
import json, sys, datetime
out, n, t0, t1 = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
exits = {}
for l in open(out + "/exits.txt"):
    pid, ns = l.split()
    exits[int(pid)] = int(ns) / 1e9
seen, lags, last, incomplete = {}, [], 0.0, 0
for l in open(out + "/lines.jsonl"):
    try:
        j = json.loads(l)
    except ValueError:
        continue
    if j["pid"] not in exits:
        continue
    seen[j["pid"]] = seen.get(j["pid"], 0) + 1
    sec, _, frac = j["time"].rstrip("Z").partition(".")
    t = datetime.datetime.fromisoformat(sec + "+00:00").timestamp() + float("0." + (frac or "0"))
    lags.append(t - exits[j["pid"]])
    last = max(last, t)
    incomplete += j["incomplete"]
lags.sort()
q = lambda f: lags[min(len(lags) - 1, int(f * len(lags)))] if lags else float("nan")
first = min(exits.values())
err = open(out + "/stderr.txt").read()
import re
def num(pat):
    m = re.search(pat, err)
    return m.group(1) if m else "0"
hwm = int(open(out + "/hwm_kb").read() or 0)
cpu = float(open(out + "/cpu_s").read() or 0)
res = ("lines=%d/%d dup=%d rate=%.0f cpu_ms_per_line=%.2f lag_p50=%.1f lag_p99=%.1f lag_max=%.1f rss_mb=%.0f term_s=%.1f dropped=%s shed=%s incomplete=%d"
       % (len(seen), n, sum(1 for v in seen.values() if v > 1), len(lags) / max(last - first, 1e-9) if lags else 0,
          1000 * cpu / max(len(lags), 1),
          q(.5), q(.99), q(1), hwm / 1024, t1 - t0, num(r"(\d+) events? (?:were )?(?:lost|dropped)"),
          num(r"(\d+) processes in which something failed were not diagnosed"), incomplete))
print(res)
open(out + "/result.txt", "w").write(res + "\n")
PY
tail -3 "$out/stderr.txt"
