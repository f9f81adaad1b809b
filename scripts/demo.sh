#!/usr/bin/env bash
# The demo: the bundled fake CUDA target (testdata/fakecuda) runs libcuda's
# recorded cuInit sequence in a private /dev whose nvidia-uvm node a cgroup v2
# device program denies, the seed field failure (cuInit 999). cudatrace traces
# it and explains the denial. No GPU needed; root is (BPF, cgroups, mounts).
# Exits 0 when cudatrace found the staged cause, 1 when it did not.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "demo: needs root for BPF, cgroups and a private /dev: run make demo as root, or as a user with sudo" >&2
  exit 1
fi
bin=${BIN:-bin} # make's BIN
mkdir -p "$bin"
[ -x "$bin/cudatrace" ] || CGO_ENABLED=0 "${GO:-go}" build -o "$bin/cudatrace" ./cmd/cudatrace
[ -x "$bin/fakecuda" ] || CGO_ENABLED=0 "${GO:-go}" build -o "$bin/fakecuda" ./testdata/fakecuda
CGO_ENABLED=0 "${GO:-go}" build -o "$bin/scenario" ./scripts/scenario

cat >&2 <<'TXT'
demo: a SIMULATION, no GPU involved. What is simulated:
  - the target: bin/fakecuda makes the device-node calls of libcuda's cuInit, in the order an
    H200 recording shows (testdata/strace/h200), returns the result through the cuInit of a tiny
    libcuda.so.1 it loads (so cudatrace's uretprobe reads CUDA's code as on a real run), and
    prints "cuInit N" as a one-line CUDA program;
  - the nodes: stand-ins in a private /dev: nvidiactl = c 1:7, nvidia0 = c 1:5, nvidia-uvm = c 7:0
    (other drivers' nodes: no NVIDIA driver is loaded), with a fake /proc/devices naming those
    majors after NVIDIA's drivers. Their ioctls are left out (--no-ioctls): those drivers answer
    ENOTTY, which no NVIDIA driver does;
  - the fault: a real cgroup v2 device program, attached to a real scratch cgroup, denies c 7:*,
    as an LXC config that forgot nvidia-uvm's major does.
  What is real: the tracing (eBPF, else ptrace), the snapshot, the cgroup program and its emulation.

TXT

# Stand-in nodes: nvidiactl c 1:7, nvidia0 c 1:5, nvidia-uvm c 7:0, with a
# fake /proc/devices naming those majors after NVIDIA's drivers. The program
# denies major 7, as an LXC config that forgot nvidia-uvm's major does.
rc=0
"$bin/scenario" --nodes standin --proc-devices standin --deny-v2 'c 7:* rwm' -- \
  "$bin/cudatrace" --proc-devices @PROC_DEVICES@ -o "$bin/demo-report.json" -- \
  "$bin/fakecuda" --proc-devices @PROC_DEVICES@ --no-ioctls --cuinit-lib --exit-nonzero || rc=$?

echo >&2
if [ "$rc" = 1 ] && grep -q '"cgroup2-denied"' "$bin/demo-report.json"; then
  echo "demo: as staged, the simulated cuInit failed (fakecuda exited 1, and cudatrace with it: it passes" >&2
  echo "      the target's status through), and cudatrace found the cause: the cgroup v2 program. The" >&2
  echo "      demo worked, so make demo exits 0. cudatrace report $bin/demo-report.json shows it again." >&2
  exit 0
fi
echo "demo: FAILED: cudatrace exited $rc (want 1, the target's status) or did not find the staged cgroup2-denied cause ($bin/demo-report.json)" >&2
exit 1
