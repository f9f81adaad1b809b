#!/usr/bin/env bash
# Compare a gpu-acceptance.sh run with the committed recordings
# (testdata/gpu): per state, CUDA's code, the finding IDs and the verdict
# with its numbers (PIDs, program IDs, times) masked. Prints one row a
# state and exits 1 when any state present in both differs.
#
#   scripts/gpu-compare.sh NEW_OUTDIR [OLD_DIR (default testdata/gpu)]
set -u
new=${1:?usage: gpu-compare.sh NEW_OUTDIR [OLD_DIR]}
old=${2:-$(dirname "$0")/../testdata/gpu}
python3 - "$new" "$old" <<'PY'
import json, os, re, sys
new, old = sys.argv[1:3]
def summary(d):
    p = os.path.join(d, "report.json")
    if not os.path.exists(p):
        return None
    a = json.load(open(p)).get("analysis", {})
    ids = [f.get("id") for f in a.get("findings", [])]
    cuda = [(c.get("func"), c.get("code")) for c in (a.get("cuda") or [])] if isinstance(a.get("cuda"), list) else a.get("cuda")
    v = re.sub(r"\d+", "N", a.get("verdict", ""))
    return ids, v, json.dumps(cuda, sort_keys=True)
bad = 0
for st in sorted(os.listdir(new)):
    n = summary(os.path.join(new, st))
    if n is None:
        continue
    o = summary(os.path.join(old, st))
    if o is None:
        print(f"NEW   {st}: {n[0]} | {n[1][:150]}")
        continue
    same = n == o
    bad += not same
    print(f"{'same ' if same else 'DIFF '} {st}: {n[0]}" + ("" if same else f"\n      was {o[0]}\n      now {n[1][:200]}\n      was {o[1][:200]}"))
sys.exit(1 if bad else 0)
PY
