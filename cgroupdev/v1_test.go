package cgroupdev

import (
	"fmt"
	"strings"
	"testing"
)

func TestAccessForOpen(t *testing.T) {
	tests := []struct {
		flags uint64
		want  Access
	}{
		{0, AccessRead},                       // O_RDONLY
		{1, AccessWrite},                      // O_WRONLY
		{2, AccessRead | AccessWrite},         // O_RDWR
		{3, AccessRead | AccessWrite},         // ACC_MODE(3) is read+write
		{0o1000, AccessRead | AccessWrite},    // O_RDONLY|O_TRUNC
		{0o1001, AccessWrite},                 // O_WRONLY|O_TRUNC
		{0o2000002, AccessRead | AccessWrite}, // O_RDWR|O_CLOEXEC
		{0o100, AccessRead},                   // O_CREAT adds nothing on an existing node
		{0o10000000, 0},                       // O_PATH: not checked
		{0o10000002, 0},
	}
	for _, tc := range tests {
		if got := AccessForOpen(tc.flags); got != tc.want {
			t.Errorf("AccessForOpen(%#o) = %q, want %q", tc.flags, got, tc.want)
		}
	}
}

func TestStrings(t *testing.T) {
	if s := (AccessRead | AccessWrite).String(); s != "rw" {
		t.Errorf("rw: %q", s)
	}
	if s := AccessAll.String(); s != "rwm" {
		t.Errorf("rwm: %q", s)
	}
	if s := AccessMknod.String(); s != "m" {
		t.Errorf("m: %q", s)
	}
	for typ, want := range map[DevType]string{TypeBlock: "b", TypeChar: "c", TypeAll: "a", 9: "?"} {
		if typ.String() != want {
			t.Errorf("%d: %q, want %q", typ, typ.String(), want)
		}
	}
	r := V1Rule{Type: TypeChar, Major: 195, Minor: -1, Access: AccessAll}
	if r.String() != "c 195:* rwm" {
		t.Errorf("V1Rule: %q", r)
	}
}

func TestParseV1List(t *testing.T) {
	good := "c 1:3 rwm\nc 195:* m\nb *:* r\nc 195:255 rw\na *:* rwm\n\nc 4294967295:0 w\n"
	rules, err := ParseV1List(good)
	if err != nil {
		t.Fatal(err)
	}
	want := []V1Rule{
		{TypeChar, 1, 3, AccessAll},
		{TypeChar, 195, -1, AccessMknod},
		{TypeBlock, -1, -1, AccessRead},
		{TypeChar, 195, 255, AccessRead | AccessWrite},
		{TypeAll, -1, -1, AccessAll},
		{TypeChar, -1, 0, AccessWrite}, // ~0 is how the kernel stores '*'
	}
	if len(rules) != len(want) {
		t.Fatalf("got %v", rules)
	}
	for i := range want {
		if rules[i] != want[i] {
			t.Errorf("rule %d = %+v, want %+v", i, rules[i], want[i])
		}
	}
	// Round trip through String.
	var lines []string
	for _, r := range rules[:5] {
		lines = append(lines, r.String())
	}
	if strings.Join(lines, "\n") != "c 1:3 rwm\nc 195:* m\nb *:* r\nc 195:255 rw\na *:* rwm" {
		t.Errorf("round trip: %q", lines)
	}

	bad := []struct{ text, want string }{
		{"c 1:3", "line 1"},
		{"c 1:3 rwm\nx 1:3 rwm", "line 2"},
		{"c 1-3 rwm", "not <major>:<minor>"},
		{"c 1:3 rwx", "not one of r, w, m"},
		{"c 1:3 rr", "repeats"},
		{"c -1:3 r", "major"},
		{"c 1:4294967296 r", "minor"},
		{"c 1:3 r extra", "3 fields"},
		{"c :3 r", "major"},
	}
	for _, tc := range bad {
		_, err := ParseV1List(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseV1List(%q) error %v, want one mentioning %q", tc.text, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error is not one line: %q", err)
		}
	}
}

func TestEvaluateV1(t *testing.T) {
	list, err := ParseV1List("c 1:3 rwm\nc 195:* m\nc 195:255 rw\nc 195:0 r\nb 7:* rw\n")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		req     Request
		allowed bool
		rule    string
	}{
		{Request{TypeChar, 195, 255, AccessRead | AccessWrite}, true, "c 195:255 rw"},
		{Request{TypeChar, 195, 7, AccessMknod}, true, "c 195:* m"},
		{Request{TypeChar, 195, 7, AccessRead}, false, ""},
		// rw needs one rule with both: c 195:0 r plus nothing else.
		{Request{TypeChar, 195, 0, AccessRead | AccessWrite}, false, ""},
		{Request{TypeChar, 195, 0, AccessRead}, true, "c 195:0 r"},
		{Request{TypeBlock, 1, 3, AccessRead}, false, ""},
		{Request{TypeBlock, 7, 3, AccessWrite}, true, "b 7:* rw"},
		{Request{TypeChar, 238, 0, AccessRead}, false, ""},
	}
	for _, tc := range tests {
		ok, rule := EvaluateV1(list, tc.req)
		got := ""
		if rule != nil {
			got = rule.String()
		}
		if ok != tc.allowed || got != tc.rule {
			t.Errorf("%+v: %v by %q, want %v by %q", tc.req, ok, got, tc.allowed, tc.rule)
		}
	}
	all, _ := ParseV1List("a *:* rwm\n")
	if ok, r := EvaluateV1(all, Request{TypeBlock, 8, 0, AccessAll}); !ok || r == nil {
		t.Errorf("a *:* rwm must allow everything")
	}
	if ok, _ := EvaluateV1(nil, Request{TypeChar, 1, 3, AccessRead}); ok {
		t.Errorf("an empty list must deny")
	}
}

func TestOpenChecks(t *testing.T) {
	tests := []struct {
		typ   DevType
		flags uint64
		want  string
	}{
		{TypeChar, 2, "[rw]"},
		{TypeChar, 3, "[rw]"},
		{TypeChar, 0o10000000, "[]"},
		{TypeBlock, 0, "[r r]"},
		{TypeBlock, 0o1000, "[rw r]"}, // O_TRUNC: may_open checks w, blkdev_open does not
		{TypeBlock, 3, "[rw ]"},       // neither FMODE_READ nor FMODE_WRITE: access 0
		{TypeBlock, 1, "[w w]"},
	}
	for _, tc := range tests {
		if got := fmt.Sprint(OpenChecks(tc.typ, tc.flags)); got != tc.want {
			t.Errorf("OpenChecks(%s, %#o) = %s, want %s", tc.typ, tc.flags, got, tc.want)
		}
	}
}
