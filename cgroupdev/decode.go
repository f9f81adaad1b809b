package cgroupdev

import (
	"fmt"
	"strings"
)

// Rule is one block of a device program, decoded back into the rule that
// generated it. Blocks are tried in order and the first that matches
// decides.
type Rule struct {
	Type         DevType // TypeAll when the block does not test the type
	Major, Minor int64   // -1 when the block does not test it
	Access       Access  // the access the block accepts; AccessAll when it does not test access
	Allow        bool
}

// String renders the rule in devices.list style with its verdict:
// "allow c 195:* rwm".
func (r Rule) String() string {
	verb := "deny"
	if r.Allow {
		verb = "allow"
	}
	return fmt.Sprintf("%s %s %s:%s %s", verb, r.Type, v1Num(r.Major), v1Num(r.Minor), r.Access)
}

// Matches reports whether the rule's block would fire for req.
func (r Rule) Matches(req Request) bool { return matches(r.Type, r.Major, r.Minor, r.Access, req) }

// matches is the one test of a device pattern, for cgroup v1 rules and
// decoded v2 blocks alike: the type (TypeAll: any), major and minor (-1:
// any), and every access asked for granted.
func matches(t DevType, major, minor int64, access Access, req Request) bool {
	if t != TypeAll && t != req.Type {
		return false
	}
	if major >= 0 && major != int64(req.Major) {
		return false
	}
	if minor >= 0 && minor != int64(req.Minor) {
		return false
	}
	return req.Access&^access == 0
}

// EvaluateRules judges req against decoded rules: the first match decides,
// otherwise defaultAllow. It returns the deciding rule's index, or -1.
func EvaluateRules(rules []Rule, defaultAllow bool, req Request) (allowed bool, index int) {
	for i, r := range rules {
		if r.Matches(req) {
			return r.Allow, i
		}
	}
	return defaultAllow, -1
}

// SummariseRules renders decoded rules for a person: "allows c 195:* rwm,
// c 226:* rw; denies everything else".
func SummariseRules(rules []Rule, defaultAllow bool) string {
	var allows, denies []string
	for _, r := range rules {
		s := fmt.Sprintf("%s %s:%s %s", r.Type, v1Num(r.Major), v1Num(r.Minor), r.Access)
		if r.Allow {
			allows = append(allows, s)
		} else {
			denies = append(denies, s)
		}
	}
	var parts []string
	if len(denies) > 0 {
		parts = append(parts, "denies "+strings.Join(denies, ", "))
	}
	if len(allows) > 0 {
		parts = append(parts, "allows "+strings.Join(allows, ", "))
	}
	if defaultAllow {
		parts = append(parts, "allows everything else")
	} else {
		parts = append(parts, "denies everything else")
	}
	return strings.Join(parts, "; ")
}

// Registers the common prologue fills (runc, crun, LXC and systemd all use
// the same one).
const (
	regType   = 2
	regAccess = 3
	regMajor  = 4
	regMinor  = 5
)

// DecodeRules recognises the block-structured programs that runc/crun, LXC
// and systemd generate and returns their rules in order and the default
// verdict. Each block is a run of "jump to the next block unless ..." guards
// on type, access, major and minor, ending in a return (runc, crun, LXC) or a
// jump to a shared "return 1" (systemd). The guards come in each
// generator's order (runc and crun test the type first, LXC and systemd the
// access); a rule of type 'a' has no type guard, "rwm" no access guard.
// Programs read back from the kernel are the verifier's rewrite: a rule
// made unreachable by an earlier one may have lost its verdict and last
// guard, and decodes to nothing. ok is false for any other shape.
//
// As a safety net the decoded rules are checked against Emulate on probe
// requests built from every value the program tests; any disagreement makes
// ok false, so a true ok can be relied on.
func DecodeRules(raw []byte) (rules []Rule, defaultAllow bool, ok bool) {
	prog, err := decodeInsns(raw)
	if err != nil || len(prog) == 0 {
		return nil, false, false
	}
	pc := 0
	if hasPrologue(prog) {
		pc = 6
	}
	for pc < len(prog) {
		rule, guards, end, next, good := decodeBlock(prog, pc)
		if !good {
			return nil, false, false
		}
		if guards > 0 && next == end {
			// Guards with no verdict after them, all jumping just past
			// themselves: a rule no request can reach (an earlier rule
			// catches all it would). The verifier proves its last guard
			// always taken and, loading as root, removes the dead
			// verdict: this is what the kernel hands back.
			if pc == 0 {
				return nil, false, false
			}
			pc = next
			continue
		}
		retVal, good := resolveReturn(prog, end)
		if !good {
			return nil, false, false
		}
		if guards == 0 {
			// An unconditional return: the program's default (anything
			// after it is unreachable).
			defaultAllow = retVal&1 == 1
			if !probeAgrees(raw, rules, defaultAllow) {
				return nil, false, false
			}
			return rules, defaultAllow, true
		}
		if pc == 0 {
			return nil, false, false // guards without the prologue that fills r2..r5
		}
		rule.Allow = retVal&1 == 1
		rules = append(rules, rule)
		pc = next
	}
	return nil, false, false
}

// hasPrologue reports whether the program starts with the shared prologue:
// r2 = type, r3 = access, r4 = major, r5 = minor.
func hasPrologue(p []insn) bool {
	if len(p) < 6 {
		return false
	}
	want := []insn{
		{code: clsLDX | modeMEM | sizeW, dst: 2, src: 1, off: 0},
		{code: clsALU | opAnd, dst: 2, imm: 0xffff},
		{code: clsLDX | modeMEM | sizeW, dst: 3, src: 1, off: 0},
		{code: clsALU | opRsh, dst: 3, imm: 16},
		{code: clsLDX | modeMEM | sizeW, dst: 4, src: 1, off: 4},
		{code: clsLDX | modeMEM | sizeW, dst: 5, src: 1, off: 8},
	}
	for i, w := range want {
		if p[i] != w {
			return false
		}
	}
	return true
}

// decodeBlock reads the guards starting at pc. It returns the rule they
// describe, how many guards there were, the pc of the block's terminal, and
// the pc where the next block starts (the guards' common jump target).
func decodeBlock(p []insn, pc int) (r Rule, guards, end, next int, ok bool) {
	r = Rule{Type: TypeAll, Major: -1, Minor: -1, Access: AccessAll}
	next = -1
	target := func(i int) bool {
		t := i + 1 + int(p[i].off)
		if next == -1 {
			next = t
		}
		return t == next
	}
	seen := map[int]bool{}
	// A guard can jump to just past itself (the rest of its block removed
	// as dead code): the next block starts there, whatever it looks like.
	for pc < len(p) && pc != next {
		in := p[pc]
		cls := in.code & 0x07
		isJNEImm := (cls == clsJMP || cls == clsJMP32) && in.code&0xf8 == jNE
		if isJNEImm && (in.dst == regType || in.dst == regMajor || in.dst == regMinor) {
			if seen[int(in.dst)] || !target(pc) {
				return r, 0, 0, 0, false
			}
			seen[int(in.dst)] = true
			v := int64(uint32(in.imm))
			if cls == clsJMP && in.imm < 0 {
				// A 64-bit compare of a zero-extended u32 with a negative
				// (sign-extended) immediate never matches; not a rule shape.
				return r, 0, 0, 0, false
			}
			switch in.dst {
			case regType:
				if v != int64(TypeBlock) && v != int64(TypeChar) {
					return r, 0, 0, 0, false
				}
				r.Type = DevType(v)
			case regMajor:
				r.Major = v
			case regMinor:
				r.Minor = v
			}
			guards++
			pc++
			continue
		}
		// Access guard: tmp = r3; tmp &= mask; if tmp != r3 goto next.
		if pc+2 < len(p) && isAccessGuard(p[pc], p[pc+1], p[pc+2]) {
			if seen[regAccess] || !target(pc+2) {
				return r, 0, 0, 0, false
			}
			seen[regAccess] = true
			r.Access = Access(p[pc+1].imm) & AccessAll
			if r.Access == 0 {
				return r, 0, 0, 0, false
			}
			guards++
			pc += 3
			continue
		}
		break
	}
	if guards > 0 && next < pc {
		return r, 0, 0, 0, false
	}
	return r, guards, pc, next, true
}

func isAccessGuard(mov, and, jne insn) bool {
	t := mov.dst
	if t == regType || t == regAccess || t == regMajor || t == regMinor || t == 0 || t == 10 {
		return false
	}
	movOK := (mov.code == clsALU|opMov|srcX || mov.code == clsALU64|opMov|srcX) && mov.src == regAccess && mov.off == 0
	andOK := (and.code == clsALU|opAnd || and.code == clsALU64|opAnd) && and.dst == t
	jcls := jne.code & 0x07
	jneOK := (jcls == clsJMP || jcls == clsJMP32) && jne.code&0xf8 == jNE|srcX &&
		((jne.dst == t && jne.src == regAccess) || (jne.dst == regAccess && jne.src == t))
	return movOK && andOK && jneOK
}

// resolveReturn follows straight-line code from pc (moves of constants into
// r0 and unconditional jumps) to an exit, and returns r0 there.
func resolveReturn(p []insn, pc int) (uint64, bool) {
	var r0 uint64
	set := false
	for steps := 0; steps < 16; steps++ {
		if pc < 0 || pc >= len(p) {
			return 0, false
		}
		in := p[pc]
		switch {
		case (in.code == clsALU64|opMov || in.code == clsALU|opMov) && in.dst == 0 && in.off == 0:
			r0, set = uint64(uint32(in.imm)), true
			pc++
		case in.code == clsJMP|jA:
			pc += 1 + int(in.off)
		case in.code == clsJMP|jEXIT:
			return r0, set
		default:
			return 0, false
		}
	}
	return 0, false
}

// probeAgrees checks decoded rules against the emulator on every request
// that distinguishes them: both types, every access set, and each tested
// major and minor plus one value nobody tests.
func probeAgrees(raw []byte, rules []Rule, defaultAllow bool) bool {
	majors := []uint32{0, 4294967295}
	minors := []uint32{0, 4294967295}
	for _, r := range rules {
		if r.Major >= 0 {
			majors = append(majors, uint32(r.Major), uint32(r.Major)+1)
		}
		if r.Minor >= 0 {
			minors = append(minors, uint32(r.Minor), uint32(r.Minor)+1)
		}
	}
	if len(majors)*len(minors) > 4096 {
		// Big programs: probe majors and minors in pairs rather than as a product.
		for i := range max(len(majors), len(minors)) {
			if !probeOne(raw, rules, defaultAllow, majors[i%len(majors)], minors[i%len(minors)]) {
				return false
			}
		}
		return true
	}
	for _, maj := range majors {
		for _, min := range minors {
			if !probeOne(raw, rules, defaultAllow, maj, min) {
				return false
			}
		}
	}
	return true
}

func probeOne(raw []byte, rules []Rule, defaultAllow bool, maj, min uint32) bool {
	for _, t := range []DevType{TypeBlock, TypeChar} {
		for a := Access(1); a <= AccessAll; a++ {
			req := Request{Type: t, Major: maj, Minor: min, Access: a}
			v := Emulate(raw, req)
			want, _ := EvaluateRules(rules, defaultAllow, req)
			if v.Err != nil || v.Allowed != want {
				return false
			}
		}
	}
	return true
}
