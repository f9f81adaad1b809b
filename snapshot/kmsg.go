package snapshot

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kmsgCap bounds the kernel lines kept; a GPU in a bad state can log Xids
// in a loop.
const kmsgCap = 200

// kmsgOlderCap bounds the errors kept from before the window (the latest
// ones): history must not crowd out the trace's own lines.
const kmsgOlderCap = 50

// kmsgSlack widens the window because printk timestamps and the wall clock
// drift apart (suspend, NTP); a line too many beats the one that explains
// the failure.
const kmsgSlack = time.Second

// collectKernelLog keeps the driver-related kernel lines logged since
// KmsgSince, and the driver's errors before it (marked Older), each with
// its time on the trace's timeline. /dev/kmsg is read without blocking: each read returns one
// record until EAGAIN says the buffer is drained.
func (c *collector) collectKernelLog() {
	if c.opts.KmsgSince.IsZero() {
		return
	}
	fd, err := unix.Open(c.kmsgPath, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		hint := ""
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			hint = " (needs root or CAP_SYSLOG when kernel.dmesg_restrict=1)"
		}
		c.snap.Unavailable = append(c.snap.Unavailable, "kernel log: "+c.kmsgPath+": "+err.Error()+hint)
		return
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing

	boot := c.bootTime()
	since := c.opts.KmsgSince.Add(-kmsgSlack)
	dropped := 0
	var older []KernelLine
	buf := make([]byte, 16384)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.EINTR) {
			continue // EPIPE: the record we were at was overwritten; go on with the next
		}
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			c.snap.Unavailable = append(c.snap.Unavailable, "kernel log: read: "+err.Error())
			break
		}
		if n == 0 {
			break
		}
		// One record per read from /dev/kmsg, followed by " KEY=value"
		// continuation lines; a plain file (tests) holds many records.
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line == "" || line[0] == ' ' {
				continue
			}
			rec, ok := parseKmsgRecord(line)
			if !ok || !kmsgInteresting(rec.Text) {
				continue
			}
			at := boot.Add(time.Duration(rec.Usec) * time.Microsecond)
			t := at.Sub(c.opts.KmsgSince)
			line := KernelLine{Seq: rec.Seq, Text: rec.Text, T: &t}
			if at.Before(since) {
				// An error since boot (a GPU that failed to initialise
				// at boot, an Xid an hour ago) may be why CUDA fails now.
				if rec.Level <= 3 || strings.Contains(rec.Text, "Xid") {
					line.Older = true
					if len(older) == kmsgOlderCap {
						older = older[1:]
					}
					older = append(older, line)
				}
				continue
			}
			if len(c.snap.KernelLog) >= kmsgCap {
				dropped++
				continue
			}
			c.snap.KernelLog = append(c.snap.KernelLog, line)
		}
	}
	c.snap.KernelLog = append(older, c.snap.KernelLog...)
	if dropped > 0 {
		c.snap.Unavailable = append(c.snap.Unavailable,
			fmt.Sprintf("kernel log: %d later matching lines dropped (kept the first %d)", dropped, kmsgCap))
	}
}

// kernelBootTime estimates when the kernel's log clock started, from the wall
// clock minus CLOCK_MONOTONIC (what printk timestamps follow, suspend aside).
func kernelBootTime() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Time{}
	}
	return time.Now().Add(-time.Duration(ts.Nano()))
}
