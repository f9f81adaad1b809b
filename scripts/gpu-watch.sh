#!/usr/bin/env bash
# cudatrace watch on a real GPU host: watch runs in the background while
# scripts/gpu-acceptance.sh runs its healthy torch jobs and every broken
# state (its own functions, unchanged), then is stopped with SIGTERM.
# Needs only the static binaries gpu-acceptance.sh needs (bin/cudatrace,
# bin/scenario) and python3; no Go.
#
#   sudo scripts/gpu-watch.sh OUTDIR
#
# OUTDIR gets watch.jsonl (the diagnosis lines), watch.stderr, watch.rc,
# reports/ (--report-dir), metrics.txt (a scrape before SIGTERM),
# acceptance/ (gpu-acceptance.sh's output, timeline.txt included),
# by-state.tsv (each line joined to the state whose run it fell in) and
# leftovers.txt (ct_ BPF programs after watch exited: should be empty).
set -u
out=${1:?usage: gpu-watch.sh OUTDIR}
mkdir -p "$out/reports"
out=$(cd "$out" && pwd)
CT=$PWD/bin/cudatrace
[ -x "$CT" ] || { echo "missing $CT: build it first (make build)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
port=${METRICS_PORT:-9464}

"$CT" watch --format json --report-dir "$out/reports" --metrics "127.0.0.1:$port" \
  >"$out/watch.jsonl" 2>"$out/watch.stderr" &
wpid=$!
for _ in $(seq 1 120); do
  grep -q "watching this host" "$out/watch.stderr" && break
  kill -0 "$wpid" 2>/dev/null || { echo "watch exited:" >&2; cat "$out/watch.stderr" >&2; exit 1; }
  sleep 0.5
done
grep -q "watching this host" "$out/watch.stderr" || { echo "watch did not start" >&2; kill -TERM "$wpid"; exit 1; }
cat "$out/watch.stderr"

UPROBE_REPS=${UPROBE_REPS:-1} "$(dirname "$0")/gpu-acceptance.sh" "$out/acceptance" --overhead "${OVERHEAD_REPS:-1}"
sleep 3 # the last exits reach watch

python3 - "$port" >"$out/metrics.txt" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())
PY
kill -TERM "$wpid"
wait "$wpid"
echo $? >"$out/watch.rc"
echo "watch exited $(cat "$out/watch.rc")"; tail -1 "$out/watch.stderr"

# Each line to the state whose run it fell in (by its time).
python3 - "$out" >"$out/by-state.tsv" <<'PY'
import json, sys, datetime
out = sys.argv[1]
states = []
for l in open(out + "/acceptance/timeline.txt"):
    name, a, b = l.split()
    states.append((name, int(a), int(b)))
print("state\tpid\tcomm\tcause\tincomplete\tverdict")
for l in open(out + "/watch.jsonl"):
    d = json.loads(l)
    t = d["time"]
    # RFC 3339 with nanoseconds: keep microseconds for fromisoformat.
    head, _, frac = t.rstrip("Z").partition(".")
    ns = int(datetime.datetime.fromisoformat(head + "+00:00").timestamp()) * 10**9 + int((frac + "000000000")[:9])
    # The state running when the line was printed; else the last one that
    # ended within 3 s before it (a line comes at the process's exit).
    name = next((n for n, a, b in states if a <= ns <= b), None) or \
        next((n for n, a, b in reversed(states) if b <= ns <= b + 3 * 10**9), "?")
    print("\t".join(map(str, [name, d["pid"], d["comm"], d["cause"], d["incomplete"], d["verdict"]])))
PY
column -t -s "$(printf '\t')" "$out/by-state.tsv" 2>/dev/null | cut -c1-200 || cat "$out/by-state.tsv"

{ command -v bpftool >/dev/null && bpftool prog show | grep -E '\bname ct_' ; } >"$out/leftovers.txt" 2>&1
echo "ct_ programs left: $(grep -c ct_ "$out/leftovers.txt")"
