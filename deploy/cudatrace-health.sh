#!/bin/sh
# cudatrace-health: `cudatrace doctor` for the health checks fleets already
# run. It never drains or flags a node because doctor itself failed or
# timed out: only a FAIL (doctor's exit 3) does that.
#
#   cudatrace-health.sh npd fail      node-problem-detector rule: 1 (NonOK) on a FAIL
#   cudatrace-health.sh npd warn      node-problem-detector rule: 1 (NonOK) on a WARN
#   cudatrace-health.sh slurm prolog       drain with the reason, exit 1 (job requeued)
#   cudatrace-health.sh slurm healthcheck  drain with the reason, exit 0
#
# Environment: CUDATRACE (the binary), CUDATRACE_TIMEOUT (seconds),
# CUDATRACE_NODENAME (Slurm's name for this node, else SLURMD_NODENAME,
# else hostname -s).
set -u

# Slurm runs prologs with no search path.
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
CUDATRACE=${CUDATRACE:-cudatrace}
maxreason=160

# doctor TIMEOUT ARGS...: doctor's JSON in $out, its exit status in $rc
# (124 when it timed out, 127 when it is missing).
doctor() {
	t=$1
	shift
	if command -v timeout >/dev/null 2>&1; then
		out=$(timeout -k 5 "$t" "$CUDATRACE" doctor --format json "$@" 2>/dev/null)
	else
		out=$("$CUDATRACE" doctor --format json "$@" 2>/dev/null)
	fi
	rc=$?
}

# headline STATUS: "id: summary" of the first check with STATUS in $out.
# doctor's JSON (docs/doctor-schema.md) is indented by Go's encoder: a
# check's own fields sit six spaces in, its closing brace four.
headline() {
	printf '%s\n' "$out" | awk -v want="$1" '
		/^      "(id|status|summary)": "/ {
			key = $1; gsub(/[":]/, "", key)
			val = $0; sub(/^      "[a-z]+": "/, "", val); sub(/",?$/, "", val)
			# JSON escapes (\\, \u001b, \n, \") are not text: each is a space.
			gsub(/\\\\/, " ", val)
			gsub(/\\u[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]/, " ", val)
			gsub(/\\./, " ", val)
			f[key] = val
		}
		/^    }/ {
			if (first == "" && f["status"] == want) first = f["id"] ": " f["summary"]
			delete f
		}
		END { print first }'
}

# sanitize TEXT: one line of at most $maxreason printable ASCII characters
# with no quote, $, `, ;, |, &, <, >, \ or newline. The text comes from the
# system (paths, kernel log lines), and schedulers show it to people and
# to scripts.
sanitize() {
	printf '%s' "$1" | tr -c 'A-Za-z0-9 ._,:/=+@%()-' ' ' | tr -s ' ' |
		sed 's/^ //; s/ $//' | cut -c "1-$maxreason"
}

npd() {
	# With a PID namespace of its own doctor would check NPD's container,
	# whose /dev has no GPU nodes: a false FAIL on every node.
	if [ "$(stat -L -c %i /proc/self/ns/pid 2>/dev/null)" != 4026531836 ]; then
		echo "cudatrace: not in the host's PID namespace (set hostPID: true)"
		exit 2
	fi
	doctor "${CUDATRACE_TIMEOUT:-50}" --pid 1
	case "$1:$rc" in
	fail:3) echo "$(sanitize "$(headline FAIL)")"; exit 1 ;;
	warn:5) echo "$(sanitize "$(headline WARN)")"; exit 1 ;;
	*:0 | *:3 | *:5) echo "cudatrace doctor: no ${1}ing check"; exit 0 ;;
	*:124 | *:137) echo "cudatrace doctor timed out"; exit 2 ;;
	*) echo "cudatrace doctor failed (exit $rc)"; exit 2 ;;
	esac
}

slurm() {
	case $1 in
	prolog) doctor "${CUDATRACE_TIMEOUT:-8}" ;;
	healthcheck) doctor "${CUDATRACE_TIMEOUT:-50}" ;;
	*) echo "cudatrace-health: slurm prolog|healthcheck" >&2; exit 2 ;;
	esac
	case $rc in
	0 | 5) exit 0 ;;
	3) ;;
	*)
		echo "cudatrace-health: cudatrace doctor failed (exit $rc); node left as it is" >&2
		exit 0
		;;
	esac
	node=${CUDATRACE_NODENAME:-${SLURMD_NODENAME:-$(hostname -s)}}
	reason=$(sanitize "cudatrace: $(headline FAIL)")
	if ! scontrol update nodename="$node" state=drain reason="$reason"; then
		echo "cudatrace-health: could not drain $node ($reason)" >&2
		exit 1
	fi
	echo "cudatrace-health: drained $node: $reason" >&2
	# A failed prolog requeues the job (held unless nohold_on_prolog_fail);
	# slurmctld keeps the reason of a node that is already draining.
	[ "$1" = prolog ] && exit 1
	exit 0
}

case ${1:-} in
npd) case ${2:-} in fail | warn) npd "$2" ;; esac ;;
slurm) slurm "${2:-}" ;;
esac
echo "usage: cudatrace-health.sh npd fail|warn | slurm prolog|healthcheck" >&2
exit 2
