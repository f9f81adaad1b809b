package render

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMarkdownCodeSpans(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/nvidia0": "`/dev/nvidia0`",
		"a`b":          "``a`b``",
		"`x``":         "``` `x`` ```",
		"a|b":          "`a|b`",
	} {
		if got := mdCode(in); got != want {
			t.Errorf("mdCode(%q) = %q, want %q", in, got, want)
		}
	}
	if got := mdTableCode("a|b"); got != "`a\\|b`" {
		t.Errorf("mdTableCode = %q", got)
	}
	if got := mdBlock("ok\n```\nend"); !strings.HasPrefix(got, "````\n") || !strings.HasSuffix(got, "\n````\n") {
		t.Errorf("mdBlock = %q", got)
	}
}

func TestWrapCall(t *testing.T) {
	cases := []struct {
		in    string
		width int
		want  []string
	}{
		{`stat("/dev/nvidiactl")`, 40, []string{`stat("/dev/nvidiactl")`}},
		{`openat("/dev/nvidia-uvm", O_RDWR|O_CLOEXEC)`, 30, []string{`openat("/dev/nvidia-uvm",`, `  O_RDWR|O_CLOEXEC)`}},
		{`symlink("../nvidia-caps/nvidia-cap1", "/dev/char/241:1")`, 40, []string{`symlink("../nvidia-caps/nvidia-cap1",`, `  "/dev/char/241:1")`}},
		// One argument longer than the width breaks after a slash.
		{`openat("/proc/driver/nvidia/capabilities/mig/config", O_RDONLY)`, 30, []string{`openat("/proc/driver/nvidia/`, `  capabilities/mig/config",`, `  O_RDONLY)`}},
		// No slash at all: a hard break.
		{"ioctl(8, " + strings.Repeat("X", 35) + ")", 20, []string{`ioctl(8,`, "  " + strings.Repeat("X", 18), "  " + strings.Repeat("X", 17) + ")"}},
	}
	for _, c := range cases {
		got := wrapCall(c.in, c.width)
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("wrapCall(%q, %d) =\n%q\nwant\n%q", c.in, c.width, got, c.want)
		}
		for _, l := range got {
			if utf8.RuneCountInString(l) > c.width {
				t.Errorf("line %q longer than %d", l, c.width)
			}
		}
	}
}
