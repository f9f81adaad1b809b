#!/usr/bin/env bash
# The backends' packages (tracer/ptrace, tracer/ebpf) under load: COUNT runs
# of each test (-count), beside HOGS busy loops, under the race detector
# when it is available, each privileged test with its own deadline
# (CUDATRACE_TEST_TIMEOUT, as in make test). A busy machine must change no
# result: a hang or a verdict that depends on timing is a bug to fix, never
# a deadline to raise. Run as root for the privileged tests.
#   scripts/test-stress.sh            # COUNT=5 HOGS=2
#   COUNT=2 scripts/test-stress.sh    # CI's bounded form
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
COUNT=${COUNT:-5}
HOGS=${HOGS:-2}
RACE=${RACE-$([ "$("$GO" env CGO_ENABLED)" = 1 ] && command -v "$("$GO" env CC)" >/dev/null && echo -race || true)}

hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_hogs EXIT
# Build first: the hogs are for the tests, not the compiler.
"$GO" test $RACE -count=1 -run '^$' ./tracer/ptrace ./tracer/ebpf >/dev/null
for _ in $(seq "$HOGS"); do
  sh -c 'while :; do :; done' &
  hogs+=($!)
done
echo "test-stress: $HOGS CPU hogs, -count=$COUNT ${RACE:-(no race detector)}"
# -p 1: the privileged tests check that nothing of cudatrace's is left on
# the host, which the other package's tests beside them would upset.
"$GO" test $RACE -p 1 -count="$COUNT" -timeout 40m ./tracer/ptrace ./tracer/ebpf
