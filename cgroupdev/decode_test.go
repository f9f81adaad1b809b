package cgroupdev

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf/asm"
)

func TestDecodeRulesShapes(t *testing.T) {
	nv := []Rule{
		{Type: TypeChar, Major: 195, Minor: -1, Access: AccessAll, Allow: true},
		{Type: TypeChar, Major: 226, Minor: -1, Access: AccessRead | AccessWrite, Allow: true},
		{Type: TypeChar, Major: 1, Minor: 3, Access: AccessRead | AccessWrite | AccessMknod, Allow: true},
	}
	mixed := []Rule{
		{Type: TypeAll, Major: -1, Minor: -1, Access: AccessMknod, Allow: true},
		{Type: TypeChar, Major: 238, Minor: 0, Access: AccessRead, Allow: false},
		{Type: TypeBlock, Major: 7, Minor: -1, Access: AccessAll, Allow: true},
	}
	tests := []struct {
		name     string
		insns    asm.Instructions
		rules    []Rule
		defAllow bool
	}{
		{"systemd allow list", systemdProgram(nv, false), nv, false},
		{"systemd strict empty", systemdProgram(nil, true), nil, false},
		{"systemd no rules", systemdProgram(nil, false), nil, false},
		{"lxc allowlist", lxcProgram(mixed, false), mixed, false},
		{"lxc denylist", lxcProgram(mixed[1:2], true), mixed[1:2], true},
		{"runc", runcShapedProgram(append(nv, mixed[1]), false), append(nv, mixed[1]), false},
		{"runc allow all", runcShapedProgram(nil, true), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rules, def, ok := DecodeRules(assemble(t, tc.insns))
			if !ok {
				t.Fatal("shape not recognised")
			}
			if def != tc.defAllow || fmt.Sprint(rules) != fmt.Sprint(tc.rules) {
				t.Fatalf("decoded %v default %v, want %v default %v", rules, def, tc.rules, tc.defAllow)
			}
		})
	}
	got := SummariseRules(nv[:2], false)
	if got != "allows c 195:* rwm, c 226:* rw; denies everything else" {
		t.Errorf("summary %q", got)
	}
}

func TestDecodeRulesRandom(t *testing.T) {
	rng := newRand(2)
	for i := 0; i < 300; i++ {
		rules := randRules(rng, rng.IntN(8), true, true)
		def := rng.IntN(2) == 0
		lxcRules, lxcDef := lxcNormalise(rules, def)
		for _, p := range []struct {
			shape string
			insns asm.Instructions
			rules []Rule
			def   bool
		}{
			{"lxc", lxcProgram(rules, def), lxcRules, lxcDef},
			{"systemd", systemdProgram(systemdRules(rules), false), systemdRules(rules), false},
		} {
			got, gotDef, ok := DecodeRules(assemble(t, p.insns))
			if !ok || gotDef != p.def || fmt.Sprint(got) != fmt.Sprint(p.rules) {
				t.Fatalf("%s: decoded %v/%v/%v, want %v default %v", p.shape, got, gotDef, ok, p.rules, p.def)
			}
		}
	}
}

func TestDecodeRulesRejects(t *testing.T) {
	tests := map[string]asm.Instructions{
		"helper call": {asm.FnKtimeGetNs.Call(), asm.Return()},
		"guard without prologue": {
			asm.JNE.Imm(asm.R4, 195, "x"), asm.Mov.Imm(asm.R0, 1), asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("x"), asm.Return()},
		"guards jumping to different places": append(prologue(),
			asm.JNE.Imm(asm.R4, 195, "a"), asm.JNE.Imm(asm.R5, 0, "b"), asm.Mov.Imm(asm.R0, 1), asm.Return(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("a"), asm.Return(),
			asm.Mov.Imm(asm.R0, 1).WithSymbol("b"), asm.Return()),
		"computed verdict": append(prologue(), asm.Mov.Reg(asm.R0, asm.R4), asm.Return()),
	}
	for name, insns := range tests {
		if rules, _, ok := DecodeRules(assemble(t, insns)); ok {
			t.Errorf("%s: decoded %v, want not recognised", name, rules)
		}
	}
	if _, _, ok := DecodeRules([]byte{1, 2, 3}); ok {
		t.Error("garbage decoded")
	}
}

// A rule that an earlier one makes unreachable comes back from the kernel
// without its verdict: "deny a *:0" leaves every later path with minor > 0,
// so the verifier (loading as root) proves the later "c 226:0" minor guard
// always taken and removes what follows it. The remaining guards jump to
// just past themselves, and the next block's access guard follows at once.
// This is that program as the kernel hands it back (seed 1025 of the
// kernel test).
func TestDecodeRulesVerifierRemovedRule(t *testing.T) {
	insns := append(prologue(),
		asm.JNE.Imm(asm.R5, 0, "b1"), asm.Mov.Imm(asm.R0, 0), asm.Return(),
		// deny c 226:* w
		asm.Mov.Reg32(asm.R1, asm.R3).WithSymbol("b1"), asm.And.Imm32(asm.R1, int32(AccessWrite)), asm.JNE.Reg(asm.R1, asm.R3, "b2"),
		asm.JNE.Imm(asm.R2, int32(TypeChar), "b2"), asm.JNE.Imm(asm.R4, 226, "b2"), asm.Mov.Imm(asm.R0, 0), asm.Return(),
		// deny c 226:0 rwm, its minor guard and verdict removed
		asm.JNE.Imm(asm.R2, int32(TypeChar), "b3").WithSymbol("b2"), asm.JNE.Imm(asm.R4, 226, "b3"),
		// allow b *:255 w
		asm.Mov.Reg32(asm.R1, asm.R3).WithSymbol("b3"), asm.And.Imm32(asm.R1, int32(AccessWrite)), asm.JNE.Reg(asm.R1, asm.R3, "b4"),
		asm.JNE.Imm(asm.R2, int32(TypeBlock), "b4"), asm.JNE.Imm(asm.R5, 255, "b4"), asm.Mov.Imm(asm.R0, 1), asm.Return(),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("b4"), asm.Return(),
	)
	rules, def, ok := DecodeRules(assemble(t, insns))
	want := []Rule{
		{Type: TypeAll, Major: -1, Minor: 0, Access: AccessAll},
		{Type: TypeChar, Major: 226, Minor: -1, Access: AccessWrite},
		{Type: TypeBlock, Major: -1, Minor: 255, Access: AccessWrite, Allow: true},
	}
	if !ok || !def || fmt.Sprint(rules) != fmt.Sprint(want) {
		t.Fatalf("decoded %v default %v ok %v, want %v default true", rules, def, ok, want)
	}
}
