package stracelog

import (
	"strings"

	"github.com/cudatrace/cudatrace/tracer"
)

// seccomp(2) operations and prctl's PR_SET_SECCOMP modes (linux/seccomp.h,
// linux/prctl.h); Event.Mode carries the SECCOMP_MODE_* value.
const (
	seccompModeStrict = 1
	seccompModeFilter = 2
	prSetSeccomp      = 22
)

var seccompOps = map[string]uint64{"SECCOMP_SET_MODE_STRICT": 0, "SECCOMP_SET_MODE_FILTER": 1}

var seccompModes = map[string]uint64{"SECCOMP_MODE_STRICT": seccompModeStrict, "SECCOMP_MODE_FILTER": seccompModeFilter}

var seccompFilterFlags = map[string]uint64{
	"SECCOMP_FILTER_FLAG_TSYNC": 1, "SECCOMP_FILTER_FLAG_LOG": 2, "SECCOMP_FILTER_FLAG_SPEC_ALLOW": 4,
	"SECCOMP_FILTER_FLAG_NEW_LISTENER": 8, "SECCOMP_FILTER_FLAG_TSYNC_ESRCH": 0x10,
	"SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV": 0x20,
}

// seccomp records seccomp(SECCOMP_SET_MODE_FILTER|STRICT, flags, prog) and
// prctl(PR_SET_SECCOMP, mode, prog): from then on the kernel may refuse
// this process's calls (and its later children's) before they reach any
// driver, and strace shows such a refusal exactly like the driver's own
// error. The event tells the analysis that a filter exists, who installed
// it and when. Other prctl options are not events.
func (in *interp) seccomp(c *call) {
	var mode, flags uint64
	switch c.name {
	case "seccomp":
		op, ok := parseBits(c.arg(0), seccompOps)
		if !ok || op > 1 {
			return // SECCOMP_GET_ACTION_AVAIL and friends change nothing
		}
		mode = seccompModeStrict
		if op == 1 {
			mode = seccompModeFilter
			flags, _ = parseBits(c.arg(1), seccompFilterFlags)
		}
	case "prctl":
		if opt, ok := parseBits(strings.TrimSpace(c.arg(0)), map[string]uint64{"PR_SET_SECCOMP": prSetSeccomp}); !ok || opt != prSetSeccomp {
			return
		}
		var ok bool
		if mode, ok = parseBits(c.arg(1), seccompModes); !ok || (mode != seccompModeStrict && mode != seccompModeFilter) {
			return
		}
	}
	in.emit(c, tracer.Event{Kind: tracer.KindSeccomp, Mode: uint32(mode), Flags: flags})
}
