#!/usr/bin/env bash
# Records the real strace logs in testdata/strace/faults: fakecuda inside
# internal/scenario environments (stand-in nodes, see
# testdata/fakecuda/README.md) under the faults of issue 11, each written the
# way a user would record it. Needs root and strace; run from the repository
# root:
#
#   sudo testdata/strace/gen/faults.sh
#
# Pids and times change on every run; the tests depend on neither.
set -eu
out=testdata/strace/faults
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
CGO_ENABLED=0 go build -o "$bin/scenario" ./scripts/scenario
CGO_ENABLED=0 go build -o "$bin/fakecuda" ./testdata/fakecuda
SC=$bin/scenario FC=$bin/fakecuda
mkdir -p "$out"
# Logs are written to the scratch dir first: the scenario's private /dev is
# a tmpfs, but the rest of the file system is shared.
tmp=$bin/log
# clean: the same paths on every host (scratch dirs, the checkout).
clean() { sed "s|$bin/|/tmp/bin/|g; s|/tmp/cudatrace-scenario-[0-9]*/|/tmp/cudatrace-scenario/|g; s|<$PWD>|</repo>|g"; }

# run NAME SCENARIO-FLAGS... -- STRACE-FLAGS... : strace fakecuda in the
# scenario, with the faults set by the traced helper (so the filter is
# installed inside the logged process tree), and keep the log.
run() {
  local name=$1; shift
  local scen=()
  while [ "$1" != -- ]; do scen+=("$1"); shift; done; shift
  # shellcheck disable=SC2086 # FCARGS: extra fakecuda flags
  "$SC" --faults-on-target "${scen[@]}" -- strace -o "$tmp" "$@" -- "$FC" --proc-devices @PROC_DEVICES@ ${FCARGS:-} >"$bin/stdout"
  clean <"$tmp" >"$out/$name.strace"
  printf '%-28s %s\n' "$name" "$(cat "$bin/stdout")"
}

# A cgroup v2 program denying nvidia-uvm, logged with -X verbose (raw
# numbers, names in comments) and -X raw (numbers only).
run xverbose-deny-uvm --deny-v2 'c 7:* rwm' -- -f -X verbose
run xraw-deny-uvm --deny-v2 'c 7:* rwm' -- -f -X raw -tt
# Seccomp filters installed by the traced process itself: seccomp(2) refusing
# every ioctl (-yy, so the fd's device shows), prctl(PR_SET_SECCOMP) refusing
# NVIDIA's ioctls only, a USER_NOTIF filter answered EPERM by a supervisor,
# and one refusing openat.
run seccomp-ioctl --seccomp-deny ioctl -- -f -tt -yy
run seccomp-notify-ioctl --seccomp-deny ioctl --seccomp-notify -- -f -tt -yy
run seccomp-openat --seccomp-deny openat -- -f -ttt
FCARGS=--memfd run seccomp-memfd --seccomp-deny memfd_create -- -f -tt
# An fd limit too low for nvidia-uvm: EMFILE on a /dev/nvidia* open.
run nofile-emfile --nofile 6 -- -f -tt -y

# prctl(PR_SET_SECCOMP): the helper mode of the scenario binary, in the log.
"$SC" -- strace -o "$tmp" -f -tt -- "$SC" faultexec --seccomp-prctl --seccomp-deny ioctl:nvidia -- \
  "$FC" --proc-devices @PROC_DEVICES@ >"$bin/stdout"
clean <"$tmp" >"$out/seccomp-prctl-nvidia-ioctl.strace"
printf '%-28s %s\n' seccomp-prctl-nvidia-ioctl "$(cat "$bin/stdout")"

# strace -p: attached to a running fakecuda (a cuInit every 200ms) for about
# a second, after it started: no execve line, the first call mid-sequence.
attach() {
  local name=$1; shift
  rm -f "$bin/pid"
  "$SC" "$@" -- sh -c 'echo $$ >'"$bin/pid"'; exec "$0" "$@"' "$FC" --proc-devices @PROC_DEVICES@ --loop 0 --interval 200ms >/dev/null &
  local sc=$!
  while [ ! -s "$bin/pid" ]; do sleep 0.05; done
  sleep 0.3
  # To stderr, as most people run it: "strace: Process N attached" lines
  # and [pid N] prefixes.
  timeout -s INT 1.1 strace -f -tt -p "$(cat "$bin/pid")" 2>"$tmp" || true
  kill "$(cat "$bin/pid")"; wait "$sc" || true
  clean <"$tmp" >"$out/$name.strace"
  printf '%-28s %s lines\n' "$name" "$(wc -l <"$out/$name.strace")"
}
attach attach-deny-uvm --deny-v2 'c 7:* rwm'
# Attached after the filter was installed: the log cannot show it.
attach attach-seccomp-ioctl --seccomp-deny ioctl
