#!/usr/bin/env bash
# cudatrace doctor on an NVIDIA host, healthy and inside each broken state of
# scripts/gpu-acceptance.sh (the same bin/scenario flags). Builds nothing:
#
#   make build && CGO_ENABLED=0 go build -o bin/scenario ./scripts/scenario
#   sudo scripts/gpu-doctor.sh OUTDIR
#
# Each run leaves OUTDIR/<state>/{doctor.json,doctor.txt,rc}. Run it from the
# shell the acceptance script runs in (same LD_LIBRARY_PATH), so the loader
# check finds the libcuda python3 finds.
set -u
out=${1:?usage: gpu-doctor.sh OUTDIR}
mkdir -p "$out"
CT=$PWD/bin/cudatrace
SC=$PWD/bin/scenario
for b in "$CT" "$SC"; do [ -x "$b" ] || { echo "missing $b: build it first" >&2; exit 1; }; done
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
uvm=${UVM_MAJOR:-$(awk '$2=="nvidia-uvm"{print $1}' /proc/devices)}

# doc NAME [SCENARIO FLAGS] -- [DOCTOR FLAGS]
doc() {
  local name=$1; shift
  local scen=() args=()
  while [ "$1" != -- ]; do scen+=("$1"); shift; done; shift
  args=("$@")
  local wrap=()
  [ ${#scen[@]} -gt 0 ] && wrap=("$SC" --nodes host --proc-devices host "${scen[@]}" --)
  mkdir -p "$out/$name"
  "${wrap[@]}" "$CT" doctor "${args[@]}" --format json >"$out/$name/doctor.json" 2>"$out/$name/stderr" </dev/null
  echo $? >"$out/$name/rc"
  "${wrap[@]}" "$CT" doctor "${args[@]}" >"$out/$name/doctor.txt" 2>&1 </dev/null
  printf '%-28s rc=%-3s %s\n' "$name" "$(cat "$out/$name/rc")" \
    "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["status"], r["counts"], "|", "; ".join(c["id"]+" "+c["subject"] for c in r["checks"] if c["status"] in ("FAIL","WARN")))' "$out/$name/doctor.json" 2>&1)"
}

doc 1-healthy-root   --
doc 1-healthy-nobody -- -u nobody
doc 2-deny-uvm       --deny-v2 "c $uvm:* rwm" --
doc 3-stale-allow    --allow-only-v2 'c 1:* rwm' --allow-only-v2 'c 5:* rwm' --allow-only-v2 'c 136:* rwm' --allow-only-v2 'c 195:* rwm' --allow-only-v2 'c 504:* rwm' --
doc 4-deny-195       --deny-v2 'c 195:* rwm' --
doc 5-uvm-missing    --drop nvidia-uvm --drop nvidia-uvm-tools -- -u nobody
doc 6-uvm-stale      --node-major nvidia-uvm=504 -- -u nobody
doc 7-nodev          --nodev --
