package loader

import (
	"reflect"
	"syscall"
	"testing"
)

func TestConfigRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{Seccomp: []syscall.SockFilter{}},
		{NoNewPrivs: true, Seccomp: []syscall.SockFilter{{Code: 0x20, K: 4}, {Code: 6, Jt: 1, Jf: 2, K: 0x7ff00000}}},
		{Cred: true, UID: 65534, GID: 65534, Groups: []uint32{}, User: "nobody", Seccomp: []syscall.SockFilter{}},
		{Cred: true, UID: 1000, GID: 1000, Groups: []uint32{4, 27, 1000}, User: "ü ser", Seccomp: []syscall.SockFilter{{Code: 6, K: 0x7fff0000}}},
	} {
		b := c.Encode()
		p := b[len(ConfigMagic)+4:]
		if n := int(b[len(ConfigMagic)]) | int(b[len(ConfigMagic)+1])<<8; n != len(p) {
			t.Fatalf("length %d, payload %d", n, len(p))
		}
		got, ok := Decode(p)
		if !ok || !reflect.DeepEqual(*got, c) {
			t.Errorf("Decode(Encode(%+v)) = %+v, %v", c, got, ok)
		}
		// Every truncation, and any byte more, is refused.
		for i := range p {
			if _, ok := Decode(p[:i]); ok {
				t.Errorf("%+v: payload cut to %d bytes accepted", c, i)
			}
		}
		if _, ok := Decode(append(p[:len(p):len(p)], 0)); ok {
			t.Errorf("%+v: trailing byte accepted", c)
		}
	}
	if _, ok := Decode([]byte{4, 0, 0, 0, 0}); ok {
		t.Error("unknown flag accepted")
	}
}

func TestSplitNUL(t *testing.T) {
	for in, want := range map[string][]string{
		"":               {},
		"a\x00":          {"a"},
		"a\x00\x00b":     {"a", "", "b"},
		"x=1\x00y=2\x00": {"x=1", "y=2"},
	} {
		if got := splitNUL([]byte(in)); !reflect.DeepEqual(got, want) {
			t.Errorf("splitNUL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsLoader(t *testing.T) {
	for in, want := range map[string]bool{
		"cudatrace-loader\x00/bin/true\x00": true,
		"cudatrace-loader\x00":              false,
		"cudatrace-loaderx\x00a\x00":        false,
		"/usr/bin/cudatrace\x00--\x00":      false,
	} {
		if got := isLoader([]byte(in)); got != want {
			t.Errorf("isLoader(%q) = %v", in, got)
		}
	}
}
