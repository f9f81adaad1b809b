package analysis

import (
	"strconv"
	"testing"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/nvidia-uvm":             "/dev/nvidia-uvm",
		`say "hi" \ ◀ × → 195:255`:    `say "hi" \ ◀ × → 195:255`,
		"/dev/x\x1b[2J\x07\r\ny":      `/dev/x\x1b[2J\a\r\ny`,
		"bad\xff\xfeutf8":             `bad\xff\xfeutf8`,
		"rtl\u202eoverride\u200b":     `rtl\u202eoverride\u200b`,
		"tab\tdel\x7f c1\u009b":       `tab\tdel\x7f c1\u009b`,
		"replacement \ufffd is print": "replacement \ufffd is print",
		"":                            "",
	} {
		got := Printable(in)
		if got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
		// The same escapes as strconv.Quote, minus its quoting of " and \.
		for _, r := range got {
			if !strconv.IsPrint(r) {
				t.Errorf("Printable(%q) kept %U", in, r)
			}
		}
	}
}
