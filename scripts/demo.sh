#!/usr/bin/env bash
# The demo: the bundled fake CUDA target (testdata/fakecuda) runs libcuda's
# recorded cuInit sequence in a private /dev whose nvidia-uvm node a cgroup v2
# device program denies, the seed field failure (cuInit 999). cudatrace traces
# it and explains the denial. No GPU needed; root is (BPF, cgroups, mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "demo: needs root for BPF, cgroups and a private /dev: run make demo as root, or as a user with sudo" >&2
  exit 1
fi
mkdir -p bin
[ -x bin/cudatrace ] || CGO_ENABLED=0 "${GO:-go}" build -o bin/cudatrace ./cmd/cudatrace
[ -x bin/fakecuda ] || CGO_ENABLED=0 "${GO:-go}" build -o bin/fakecuda ./testdata/fakecuda
CGO_ENABLED=0 "${GO:-go}" build -o bin/scenario ./scripts/scenario

# Stand-in nodes: nvidiactl c 1:7, nvidia0 c 1:5, nvidia-uvm c 7:0, with a
# fake /proc/devices naming those majors after NVIDIA's drivers. The program
# denies major 7, as an LXC config that forgot nvidia-uvm's major does.
exec bin/scenario --nodes standin --proc-devices standin --deny-v2 'c 7:* rwm' -- \
  bin/cudatrace --proc-devices @PROC_DEVICES@ -o bin/demo-report.json -- \
  bin/fakecuda --proc-devices @PROC_DEVICES@
