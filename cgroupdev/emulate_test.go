package cgroupdev

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
)

// r0After runs a program and returns R0 at exit (verdicts only show bit 0).
func r0After(raw []byte, req Request) (uint64, error) {
	prog, err := decodeInsns(raw)
	if err != nil {
		return 0, err
	}
	m := &machine{prog: prog}
	binary.LittleEndian.PutUint32(m.ctx[0:], req.accessType())
	binary.LittleEndian.PutUint32(m.ctx[4:], req.Major)
	binary.LittleEndian.PutUint32(m.ctx[8:], req.Minor)
	m.r[1] = reg{kind: kCtx}
	m.r[10] = reg{kind: kStack, v: stackSize}
	r0, _, err := m.run()
	return r0, err
}

var nvctl = Request{Type: TypeChar, Major: 195, Minor: 255, Access: AccessRead | AccessWrite}

func TestEmulateArithmetic(t *testing.T) {
	ld := func(r asm.Register, v int64) asm.Instruction { return asm.LoadImm(r, v, asm.DWord) }
	tests := []struct {
		name  string
		insns asm.Instructions
		want  uint64
	}{
		{"mov64 imm sign-extends", asm.Instructions{asm.Mov.Imm(asm.R0, -1)}, ^uint64(0)},
		{"mov32 imm zero-extends", asm.Instructions{asm.Mov.Imm32(asm.R0, -1)}, 0xffffffff},
		{"ld_imm64", asm.Instructions{ld(asm.R0, 0x1122334455667788)}, 0x1122334455667788},
		{"add64", asm.Instructions{ld(asm.R0, 0xffffffff), asm.Add.Imm(asm.R0, 1)}, 0x100000000},
		{"add32 wraps", asm.Instructions{ld(asm.R0, 0xffffffff), asm.Add.Imm32(asm.R0, 1)}, 0},
		{"sub reg", asm.Instructions{asm.Mov.Imm(asm.R0, 10), asm.Mov.Imm(asm.R2, 3), asm.Sub.Reg(asm.R0, asm.R2)}, 7},
		{"sub32 borrows", asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Sub.Imm32(asm.R0, 1)}, 0xffffffff},
		{"mul", asm.Instructions{asm.Mov.Imm(asm.R0, 7), asm.Mul.Imm(asm.R0, 6)}, 42},
		{"div", asm.Instructions{asm.Mov.Imm(asm.R0, 43), asm.Div.Imm(asm.R0, 6)}, 7},
		{"div by zero is 0", asm.Instructions{asm.Mov.Imm(asm.R0, 43), asm.Mov.Imm(asm.R2, 0), asm.Div.Reg(asm.R0, asm.R2)}, 0},
		{"mod", asm.Instructions{asm.Mov.Imm(asm.R0, 43), asm.Mod.Imm(asm.R0, 6)}, 1},
		{"mod by zero keeps dst", asm.Instructions{asm.Mov.Imm(asm.R0, 43), asm.Mov.Imm(asm.R2, 0), asm.Mod.Reg(asm.R0, asm.R2)}, 43},
		{"mod32 by zero truncates", asm.Instructions{ld(asm.R0, 0x100000005), asm.Mov.Imm(asm.R2, 0), asm.Mod.Reg32(asm.R0, asm.R2)}, 5},
		{"div is unsigned", asm.Instructions{asm.Mov.Imm(asm.R0, -2), asm.Div.Imm(asm.R0, 2)}, 0x7fffffffffffffff},
		{"and or xor", asm.Instructions{asm.Mov.Imm(asm.R0, 0xf0), asm.Or.Imm(asm.R0, 0x0f), asm.And.Imm(asm.R0, 0x3c), asm.Xor.Imm(asm.R0, 0x1)}, 0x3d},
		{"lsh", asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.LSh.Imm(asm.R0, 40)}, 1 << 40},
		{"lsh32 drops high bits", asm.Instructions{asm.Mov.Imm(asm.R0, 3), asm.LSh.Imm32(asm.R0, 31)}, 0x80000000},
		{"lsh reg masks the count", asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Mov.Imm(asm.R2, 65), asm.LSh.Reg(asm.R0, asm.R2)}, 2},
		{"rsh", asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.RSh.Imm(asm.R0, 60)}, 0xf},
		{"arsh", asm.Instructions{asm.Mov.Imm(asm.R0, -16), asm.ArSh.Imm(asm.R0, 2)}, uint64(0xfffffffffffffffc)},
		{"arsh32", asm.Instructions{asm.Mov.Imm32(asm.R0, -16), asm.ArSh.Imm32(asm.R0, 2)}, 0xfffffffc},
		{"neg", asm.Instructions{asm.Mov.Imm(asm.R0, 5), asm.Neg.Imm(asm.R0, 0)}, uint64(0xfffffffffffffffb)},
		{"neg32", asm.Instructions{asm.Mov.Imm(asm.R0, 5), asm.Neg.Imm32(asm.R0, 0)}, 0xfffffffb},
		{"mov reg", asm.Instructions{asm.Mov.Imm(asm.R7, 9), asm.Mov.Reg(asm.R0, asm.R7)}, 9},
		{"mov32 reg truncates", asm.Instructions{ld(asm.R7, 0x1_0000_0009), asm.Mov.Reg32(asm.R0, asm.R7)}, 9},
		{"to big endian 16", asm.Instructions{asm.Mov.Imm(asm.R0, 0x1234), asm.HostTo(asm.BE, asm.R0, asm.Half)}, 0x3412},
		{"to little endian 32 truncates", asm.Instructions{ld(asm.R0, 0x1_2345_6789), asm.HostTo(asm.LE, asm.R0, asm.Word)}, 0x23456789},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := assemble(t, append(tc.insns, asm.Return()))
			got, err := r0After(raw, nvctl)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("r0 = %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestEmulateContextAndStack(t *testing.T) {
	tests := []struct {
		name  string
		insns asm.Instructions
		want  uint64
	}{
		{"access_type word", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 0, asm.Word)}, 0x00060002},
		{"access_type low half", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 0, asm.Half)}, 2},
		{"access_type high half", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 2, asm.Half)}, 6},
		{"access_type byte 2", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 2, asm.Byte)}, 6},
		{"major", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 4, asm.Word)}, 195},
		{"minor", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 8, asm.Word)}, 255},
		{"major+minor dword", asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 4, asm.DWord)}, 255<<32 | 195},
		{"ctx pointer arithmetic", asm.Instructions{asm.Mov.Reg(asm.R6, asm.R1), asm.Add.Imm(asm.R6, 8), asm.LoadMem(asm.R0, asm.R6, 0, asm.Word)}, 255},
		{"stack store/load", asm.Instructions{
			asm.StoreImm(asm.R10, -8, 0x77, asm.Word),
			asm.StoreImm(asm.R10, -4, 0x1, asm.Word),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord)}, 0x1_0000_0077},
		{"stack stx byte then dword", asm.Instructions{
			asm.Mov.Imm(asm.R2, 0),
			asm.StoreMem(asm.R10, -16, asm.R2, asm.DWord),
			asm.Mov.Imm(asm.R2, 0xab),
			asm.StoreMem(asm.R10, -15, asm.R2, asm.Byte),
			asm.LoadMem(asm.R0, asm.R10, -16, asm.DWord)}, 0xab00},
		{"spill and fill the ctx pointer", asm.Instructions{
			asm.StoreMem(asm.R10, -8, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R1, 0),
			asm.LoadMem(asm.R6, asm.R10, -8, asm.DWord),
			asm.LoadMem(asm.R0, asm.R6, 4, asm.Word)}, 195},
		{"atomic add on stack", asm.Instructions{
			asm.Mov.Imm(asm.R2, 40),
			asm.StoreMem(asm.R10, -8, asm.R2, asm.DWord),
			asm.Mov.Imm(asm.R2, 2),
			asm.StoreXAdd(asm.R10, asm.R2, asm.DWord),
			asm.LoadMem(asm.R0, asm.R10, -8, asm.DWord)}, 0},
	}
	// StoreXAdd has no offset argument; fix the atomic case to use fp-8.
	tests[len(tests)-1].insns[3].Offset = -8
	tests[len(tests)-1].want = 42
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := assemble(t, append(tc.insns, asm.Return()))
			got, err := r0After(raw, nvctl)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("r0 = %#x, want %#x", got, tc.want)
			}
		})
	}
}

func TestEmulateJumps(t *testing.T) {
	// Each program returns 1 when the jump is taken, 0 otherwise.
	jmp := func(op asm.JumpOp, a, b int64, w32 bool) []byte {
		var j asm.Instruction
		if w32 {
			j = op.Reg32(asm.R2, asm.R3, "yes")
		} else {
			j = op.Reg(asm.R2, asm.R3, "yes")
		}
		return assemble(t, asm.Instructions{
			asm.LoadImm(asm.R2, a, asm.DWord),
			asm.LoadImm(asm.R3, b, asm.DWord),
			j,
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("yes"),
			asm.Return(),
		})
	}
	tests := []struct {
		op    asm.JumpOp
		a, b  int64
		w32   bool
		taken bool
	}{
		{asm.JEq, 5, 5, false, true},
		{asm.JEq, 5, 6, false, false},
		{asm.JEq, 0x1_0000_0005, 5, false, false},
		{asm.JEq, 0x1_0000_0005, 5, true, true},
		{asm.JNE, 5, 6, false, true},
		{asm.JGT, -1, 1, false, true}, // unsigned
		{asm.JSGT, -1, 1, false, false},
		{asm.JGE, 3, 3, false, true},
		{asm.JSGE, -3, -3, false, true},
		{asm.JLT, 1, -1, false, true},
		{asm.JSLT, -1, 1, false, true},
		{asm.JLE, 4, 3, false, false},
		{asm.JSLE, -4, -3, false, true},
		{asm.JSet, 6, 2, false, true},
		{asm.JSet, 6, 1, false, false},
		{asm.JSLT, 0xffffffff, 0, true, true}, // -1 as 32 bits
		{asm.JSLT, 0xffffffff, 0, false, false},
	}
	for _, tc := range tests {
		v := Emulate(jmp(tc.op, tc.a, tc.b, tc.w32), nvctl)
		if v.Err != nil {
			t.Fatalf("%v %#x %#x: %v", tc.op, tc.a, tc.b, v.Err)
		}
		if v.Allowed != tc.taken {
			t.Errorf("%v(%#x, %#x, 32=%v) taken = %v, want %v", tc.op, tc.a, tc.b, tc.w32, v.Allowed, tc.taken)
		}
	}
}

func TestEmulateCountsInstructions(t *testing.T) {
	raw := assemble(t, asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Ja.Label("x"), asm.Mov.Imm(asm.R0, 0), asm.Return().WithSymbol("x")})
	v := Emulate(raw, nvctl)
	if v.Err != nil || !v.Allowed || v.Insns != 3 {
		t.Fatalf("verdict %+v, want allowed after 3 instructions", v)
	}
}

func TestEmulateErrors(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"empty", nil, "empty program"},
		{"ragged", []byte{1, 2, 3}, "multiple of 8"},
		{"helper", assemble(t, asm.Instructions{asm.FnGetCurrentUidGid.Call(), asm.Return()}), "helper 15"},
		{"ctx out of range", assemble(t, asm.Instructions{asm.LoadMem(asm.R0, asm.R1, 12, asm.Word), asm.Return()}), "outside struct bpf_cgroup_dev_ctx"},
		{"ctx write", assemble(t, asm.Instructions{asm.StoreImm(asm.R1, 0, 1, asm.Word), asm.Mov.Imm(asm.R0, 1), asm.Return()}), "read-only device context"},
		{"stack out of range", assemble(t, asm.Instructions{asm.LoadMem(asm.R0, asm.R10, 0, asm.Word), asm.Return()}), "outside the 512-byte stack"},
		{"load through a number", assemble(t, asm.Instructions{asm.LoadMem(asm.R0, asm.R2, 0, asm.Word), asm.Return()}), "not a pointer"},
		{"fall off the end", assemble(t, asm.Instructions{asm.Mov.Imm(asm.R0, 1)}), "out of the program"},
		{"infinite loop", assemble(t, asm.Instructions{asm.Ja.Label("l").WithSymbol("l")}), "gave up"},
		{"map load", assemble(t, asm.Instructions{asm.LoadMapPtr(asm.R2, 3), asm.Mov.Imm(asm.R0, 1), asm.Return()}), "pseudo source"},
		{"half an ld_imm64", assemble(t, asm.Instructions{asm.LoadImm(asm.R0, 1, asm.DWord)})[:8], "second half"},
		{"exit with pointer", assemble(t, asm.Instructions{asm.Mov.Reg(asm.R0, asm.R1), asm.Return()}), "context pointer in R0"},
		{"write r10", assemble(t, asm.Instructions{asm.Mov.Imm(asm.R10, 1), asm.Return()}), "frame pointer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := Emulate(tc.raw, nvctl)
			if v.Err == nil {
				t.Fatalf("no error, verdict %+v", v)
			}
			if !strings.Contains(v.Err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", v.Err, tc.want)
			}
		})
	}
}

// TestEmulateSameAsRules checks every generator shape against a direct
// evaluation of the rules it was built from.
func TestEmulateSameAsRules(t *testing.T) {
	rng := newRand(1)
	for i := 0; i < 300; i++ {
		rules := randRules(rng, rng.IntN(7), true, true)
		def := rng.IntN(2) == 0
		lxc := assemble(t, lxcProgram(rules, def))
		lxcRules, lxcDef := lxcNormalise(rules, def)
		sdRules := systemdRules(rules)
		sd := assemble(t, systemdProgram(sdRules, false))
		var runcRules []Rule
		for _, r := range rules {
			if r.Type != TypeAll {
				runcRules = append(runcRules, r)
			}
		}
		rc := assemble(t, runcShapedProgram(runcRules, def))
		for j := 0; j < 50; j++ {
			req := randRequest(rng)
			check := func(shape string, raw []byte, rules []Rule, def bool) {
				want, _ := EvaluateRules(rules, def, req)
				v := Emulate(raw, req)
				if v.Err != nil || v.Allowed != want {
					t.Fatalf("%s %v default %v, %+v: emulated %+v, want allowed=%v", shape, rules, def, req, v, want)
				}
			}
			check("lxc", lxc, lxcRules, lxcDef)
			check("systemd", sd, sdRules, false)
			check("runc", rc, runcRules, def)
		}
	}
}

func TestEvaluateV2(t *testing.T) {
	allow195 := assemble(t, systemdProgram([]Rule{{Type: TypeChar, Major: 195, Minor: -1, Access: AccessAll, Allow: true}}, false))
	allowAll := assemble(t, asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()})
	broken := assemble(t, asm.Instructions{asm.FnKtimeGetNs.Call(), asm.Return()})
	progs := func(raws ...[]byte) []Program {
		var out []Program
		for i, r := range raws {
			out = append(out, Program{ID: uint32(10 + i), Instructions: r})
		}
		return out
	}
	uvm := Request{Type: TypeChar, Major: 238, Minor: 0, Access: AccessRead | AccessWrite}

	if ok, denied, errs := EvaluateV2(progs(allowAll, allow195), nvctl); !ok || denied != nil || errs != nil {
		t.Errorf("nvidiactl: %v %v %v, want allowed", ok, denied, errs)
	}
	if ok, denied, errs := EvaluateV2(progs(allowAll, allow195), uvm); ok || len(denied) != 1 || denied[0] != 11 || errs != nil {
		t.Errorf("uvm: %v %v %v, want denied by 11", ok, denied, errs)
	}
	if ok, denied, errs := EvaluateV2(progs(allowAll, broken), nvctl); ok || denied != nil || len(errs) != 1 || !strings.Contains(errs[0].Error(), "program 11") {
		t.Errorf("broken: %v %v %v, want unknown with one error naming program 11", ok, denied, errs)
	}
	if ok, _, _ := EvaluateV2(nil, uvm); !ok {
		t.Errorf("no programs must allow")
	}
}

// Ensure the byte layout matches what cilium/ebpf writes for a register
// pair (dst in the low nibble on little-endian).
func TestDecodeInsnLayout(t *testing.T) {
	var buf bytes.Buffer
	if err := (asm.Instructions{asm.LoadMem(asm.R3, asm.R1, 4, asm.Word)}).Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	in := decodeInsn(buf.Bytes())
	if in.dst != 3 || in.src != 1 || in.off != 4 || in.code != clsLDX|modeMEM|sizeW {
		t.Fatalf("decoded %+v", in)
	}
}

func BenchmarkEmulateSystemd(b *testing.B) {
	rules := randRules(newRand(5), 20, false, false)
	raw := assemble(b, systemdProgram(systemdRules(rules), false))
	req := Request{Type: TypeChar, Major: 238, Minor: 0, Access: AccessRead | AccessWrite}
	for b.Loop() {
		Emulate(raw, req)
	}
}
