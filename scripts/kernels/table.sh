#!/usr/bin/env bash
# Reads one guest's serial log (scripts/kernels/init's markers and go test
# -v output) and prints each test's result, subtests (the backends)
# indented; fails unless every planned package passed and the guest ran to
# the end.
#   usage: table.sh LOG PLAN SUITE
set -uo pipefail
log=$1 plan=$2 suite=$3
tr -d '\r' <"$log" | sed -n 's/^KTEST-VARIANTS cudatrace: \(ebpf: \)*/   /p'
tr -d '\r' <"$log" | grep -E '^ *--- (PASS|FAIL|SKIP):' | sed -E 's/^( *)--- ([A-Z]+): ([^ ]+).*/\1\2 \3/' | sed 's/^/   /'
ok=0
while read -r suites pkg _; do
  case ",$suites," in *",$suite,"*|*,all,*) ;; *) continue ;; esac
  rc=$(tr -d '\r' <"$log" | sed -n "s|^KTEST-RESULT $pkg \([0-9]*\)\$|\1|p" | tail -1)
  if [ "$rc" != 0 ]; then
    if [ -n "$rc" ]; then echo "   $pkg: exit $rc"; else echo "   $pkg: did not finish (the guest crashed or timed out)"; fi
    ok=1
  fi
done <"$plan"
if tr -d '\r' <"$log" | grep -q -- '--- SKIP'; then
  echo "   skipped tests: the matrix must run them"
  ok=1
fi
tr -d '\r' <"$log" | grep -q '^KTEST-DONE' || { echo "   the guest did not reach the end: see its log"; ok=1; }
exit $ok
