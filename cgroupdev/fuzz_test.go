package cgroupdev

import (
	"testing"

	"github.com/cilium/ebpf/asm"
)

func FuzzParseV1List(f *testing.F) {
	for _, s := range []string{"a *:* rwm\n", "c 195:* m\nc 195:255 rw\n", "b 7:0 r", "c 1:3", "c 4294967295:* rwm", "x\n\n\t", "c 1:2 rwmm"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		rules, err := ParseV1List(text)
		if err != nil {
			return
		}
		// Whatever parses must print and re-parse to the same rules.
		var out string
		for _, r := range rules {
			out += r.String() + "\n"
		}
		again, err := ParseV1List(out)
		if err != nil || len(again) != len(rules) {
			t.Fatalf("re-parse of %q: %v %v", out, again, err)
		}
		for i := range rules {
			if again[i] != rules[i] {
				t.Fatalf("rule %d: %+v became %+v", i, rules[i], again[i])
			}
		}
	})
}

func FuzzEmulate(f *testing.F) {
	nv := []Rule{{Type: TypeChar, Major: 195, Minor: -1, Access: AccessAll, Allow: true}}
	for _, p := range []asm.Instructions{
		systemdProgram(nv, false),
		lxcProgram(nv, false),
		runcShapedProgram(nv, true),
		{asm.Ja.Label("l").WithSymbol("l")},
	} {
		f.Add(assemble(f, p), uint8(2), uint32(195), uint32(0), uint8(6))
	}
	f.Add([]byte{0x18, 0, 0, 0, 0, 0, 0, 0}, uint8(1), uint32(0), uint32(0), uint8(1))
	f.Fuzz(func(t *testing.T, raw []byte, typ uint8, major, minor uint32, access uint8) {
		req := Request{Type: DevType(typ), Major: major, Minor: minor, Access: Access(access)}
		v := Emulate(raw, req)
		if v.Insns > MaxSteps {
			t.Fatalf("ran %d instructions, over the bound", v.Insns)
		}
		rules, def, ok := DecodeRules(raw)
		if ok && v.Err == nil {
			if want, _ := EvaluateRules(rules, def, req); want != v.Allowed && req.Type <= TypeChar && req.Access != 0 && req.Access <= AccessAll {
				t.Fatalf("decoded rules %v say %v, emulator %v", rules, want, v.Allowed)
			}
		}
	})
}
