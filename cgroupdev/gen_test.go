package cgroupdev

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// Generators for the device programs that systemd and LXC build, written
// from the shapes in container_device_programs of
// nvdev/internal/gentables/nvidia-abi.json (and the runtimes' sources),
// plus a runc-shaped one for tests that cannot call runc's real generator
// (it is only reachable through cgroups.DevicesSetV2, which needs root).

// prologue loads r2 = type, r3 = access, r4 = major, r5 = minor.
func prologue() asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word),
		asm.And.Imm32(asm.R2, 0xffff),
		asm.LoadMem(asm.R3, asm.R1, 0, asm.Word),
		asm.RSh.Imm32(asm.R3, 16),
		asm.LoadMem(asm.R4, asm.R1, 4, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, 8, asm.Word),
	}
}

func accessGuard(a Access, next string) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg32(asm.R1, asm.R3),
		asm.And.Imm32(asm.R1, int32(a)),
		asm.JNE.Reg(asm.R1, asm.R3, next),
	}
}

// systemdProgram builds systemd's shape: allow blocks (access, type, major,
// minor guards) jump to a shared PASS; no match falls through to DENY.
// DevicePolicy=strict with no rules is just "return 0". (With no rules and
// the PASS tail, PASS would be unreachable and the verifier would refuse the
// program; systemd always has its built-in entries then, so use "return 0".)
func systemdProgram(allow []Rule, denyEverything bool) asm.Instructions {
	if denyEverything || len(allow) == 0 {
		return asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}
	}
	p := prologue()
	for i, r := range allow {
		next := "sd-" + strconv.Itoa(i+1)
		var b asm.Instructions
		if r.Access&AccessAll != AccessAll {
			b = append(b, accessGuard(r.Access, next)...)
		}
		b = append(b, asm.JNE.Imm(asm.R2, int32(r.Type), next))
		if r.Major >= 0 {
			b = append(b, asm.JNE.Imm(asm.R4, int32(r.Major), next))
			if r.Minor >= 0 {
				b = append(b, asm.JNE.Imm(asm.R5, int32(r.Minor), next))
			}
		}
		b = append(b, asm.Ja.Label("sd-pass"))
		b[0] = b[0].WithSymbol("sd-" + strconv.Itoa(i))
		p = append(p, b...)
	}
	return append(p,
		asm.Mov.Imm(asm.R0, 0).WithSymbol("sd-"+strconv.Itoa(len(allow))),
		asm.Ja.Label("sd-exit"),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("sd-pass"),
		asm.Return().WithSymbol("sd-exit"),
	)
}

// lxcProgram builds LXC's shape: access guard first, then type (unless
// 'a'), major, minor; each block returns its allow value; the final return
// is the list type (allowlist 0, denylist 1).
func lxcProgram(rules []Rule, denylist bool) asm.Instructions {
	rules, denylist = lxcNormalise(rules, denylist)
	p := prologue()
	for i, r := range rules {
		next := "lxc-" + strconv.Itoa(i+1)
		var b asm.Instructions
		if r.Access&AccessAll != AccessAll {
			b = append(b, accessGuard(r.Access, next)...)
		}
		if r.Type != TypeAll {
			b = append(b, asm.JNE.Imm(asm.R2, int32(r.Type), next))
		}
		if r.Major >= 0 {
			b = append(b, asm.JNE.Imm(asm.R4, int32(r.Major), next))
		}
		if r.Minor >= 0 {
			b = append(b, asm.JNE.Imm(asm.R5, int32(r.Minor), next))
		}
		b = append(b, asm.Mov.Imm(asm.R0, b2i(r.Allow)), asm.Return())
		b[0] = b[0].WithSymbol("lxc-" + strconv.Itoa(i))
		p = append(p, b...)
	}
	return append(p, asm.Mov.Imm(asm.R0, b2i(denylist)).WithSymbol("lxc-"+strconv.Itoa(len(rules))), asm.Return())
}

// runcShapedProgram follows runc's devicefilter.go layout: type guard
// first, then access, major, minor; 32-bit moves into r0.
func runcShapedProgram(rules []Rule, defaultAllow bool) asm.Instructions {
	p := prologue()
	for i, r := range rules {
		next := "runc-" + strconv.Itoa(i+1)
		b := asm.Instructions{asm.JNE.Imm(asm.R2, int32(r.Type), next)}
		if r.Access&AccessAll != AccessAll {
			b = append(b, accessGuard(r.Access, next)...)
		}
		if r.Major >= 0 {
			b = append(b, asm.JNE.Imm(asm.R4, int32(r.Major), next))
		}
		if r.Minor >= 0 {
			b = append(b, asm.JNE.Imm(asm.R5, int32(r.Minor), next))
		}
		b = append(b, asm.Mov.Imm32(asm.R0, b2i(r.Allow)), asm.Return())
		b[0] = b[0].WithSymbol("runc-" + strconv.Itoa(i))
		p = append(p, b...)
	}
	return append(p, asm.Mov.Imm32(asm.R0, b2i(defaultAllow)).WithSymbol("runc-"+strconv.Itoa(len(rules))), asm.Return())
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// assemble resolves jump labels (cilium/ebpf does that only when loading)
// and encodes the instructions as raw little-endian struct bpf_insn.
func assemble(t testing.TB, insns asm.Instructions) []byte {
	t.Helper()
	raw, err := assembleErr(insns)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func assembleErr(insns asm.Instructions) ([]byte, error) {
	insns = append(asm.Instructions(nil), insns...)
	at := map[string]int{}
	pos := make([]int, len(insns))
	off := 0
	for i, ins := range insns {
		pos[i] = off
		if s := ins.Symbol(); s != "" {
			at[s] = off
		}
		off += int(ins.Size() / asm.InstructionSize)
	}
	for i := range insns {
		ref := insns[i].Reference()
		if ref == "" || !insns[i].OpCode.Class().IsJump() {
			continue
		}
		target, ok := at[ref]
		if !ok {
			return nil, fmt.Errorf("undefined label %q", ref)
		}
		insns[i].Offset = int16(target - pos[i] - 1)
		insns[i] = insns[i].WithReference("")
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Random rule material: a small pool so that rules and requests collide.
var (
	poolMajors = []uint32{1, 195, 226, 238}
	poolMinors = []uint32{0, 3, 5, 255}
)

func randAccess(rng *rand.Rand) Access { return Access(1 + rng.IntN(7)) }

func randMajor(rng *rand.Rand) int64 {
	if rng.IntN(5) == 0 {
		return -1
	}
	if rng.IntN(10) == 0 {
		return 4 // not in the request pool
	}
	return int64(poolMajors[rng.IntN(len(poolMajors))])
}

func randMinor(rng *rand.Rand) int64 {
	if rng.IntN(4) == 0 {
		return -1
	}
	return int64(poolMinors[rng.IntN(len(poolMinors))])
}

func randType(rng *rand.Rand, allowAll bool) DevType {
	if allowAll && rng.IntN(6) == 0 {
		return TypeAll
	}
	if rng.IntN(3) == 0 {
		return TypeBlock
	}
	return TypeChar
}

func randRules(rng *rand.Rand, n int, typeAll, denies bool) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		r := Rule{Type: randType(rng, typeAll), Major: randMajor(rng), Minor: randMinor(rng), Access: randAccess(rng), Allow: true}
		if denies {
			r.Allow = rng.IntN(2) == 0
		}
		rules[i] = r
	}
	return rules
}

// systemdRules adapts random rules to what systemd can express: allow only,
// a type always, and no minor without a major.
func systemdRules(rules []Rule) []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		if r.Type == TypeAll {
			r.Type = TypeChar
		}
		if r.Major < 0 {
			r.Minor = -1
		}
		r.Allow = true
		out[i] = r
	}
	return out
}

func randRequest(rng *rand.Rand) Request {
	return Request{
		Type:   DevType(1 + rng.IntN(2)),
		Major:  poolMajors[rng.IntN(len(poolMajors))],
		Minor:  poolMinors[rng.IntN(len(poolMinors))],
		Access: randAccess(rng),
	}
}

// lxcNormalise applies what LXC does with a rule that restricts nothing
// ("a *:* rwm"): it is a global rule that switches the list type, not a
// block (a block without guards would make the rest unreachable, which the
// verifier rejects).
func lxcNormalise(rules []Rule, denylist bool) ([]Rule, bool) {
	var out []Rule
	for _, r := range rules {
		if r.Type == TypeAll && r.Major < 0 && r.Minor < 0 && r.Access&AccessAll == AccessAll {
			denylist = r.Allow
			continue
		}
		out = append(out, r)
	}
	return out, denylist
}
