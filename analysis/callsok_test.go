package analysis

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// calls-ok says "fine" only when nothing on the node failed; ioctls that
// all failed are said so, not "7 ioctls (7 failed)" under "opened fine".
func TestCallsOKWording(t *testing.T) {
	ctl := dev(195, 255)
	b := newEvents(100, "python3").open("/dev/nvidiactl", unix.O_RDWR, 3, ctl)
	for range 3 {
		b.ioctl(3, 0xC00846D6, errno(unix.EINVAL), ctl)
	}
	a := Analyze(b.evs, h200())
	ok := find(t, a, "calls-ok")
	if strings.Contains(ok.Summary, "fine") || !strings.Contains(ok.Summary, "3 ioctl(s) on them failed") {
		t.Errorf("summary %q", ok.Summary)
	}
	mustContain(t, "calls-ok", detail(ok), "opened 1x, allowed; all 3 ioctls failed")

	b = newEvents(100, "python3").open("/dev/nvidiactl", unix.O_RDWR, 3, ctl).ioctl(3, 0xC00846D6, 0, ctl).ioctl(3, 0xC00846D6, errno(unix.EINVAL), ctl)
	ok = find(t, Analyze(b.evs, h200()), "calls-ok")
	mustContain(t, "calls-ok", detail(ok), "2 ioctls, 1 of them failed")

	b = newEvents(100, "python3").open("/dev/nvidiactl", unix.O_RDWR, 3, ctl).ioctl(3, 0xC00846D6, 0, ctl)
	ok = find(t, Analyze(b.evs, h200()), "calls-ok")
	if !strings.Contains(ok.Summary, "opened fine") {
		t.Errorf("all fine, yet summary %q", ok.Summary)
	}
}
