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
// its time on the trace's timeline. /dev/kmsg is read without blocking: each
// read returns one record until EAGAIN says the buffer is drained. Where it
// cannot be opened (a container's /dev has no kmsg: it is not in the
// runtime's device allowlist), the same records come from syslog(2).
func (c *collector) collectKernelLog() {
	if c.opts.KmsgSince.IsZero() {
		return
	}
	k := kernelLog{c: c, boot: c.bootTime(), since: c.opts.KmsgSince.Add(-kmsgSlack)}
	if err := k.readKmsg(c.kmsgPath); err != nil {
		text, serr := c.readSyslog()
		if serr != nil {
			msg := "kernel log: " + c.kmsgPath + ": " + err.Error() + "; syslog(2): " + serr.Error()
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(serr, unix.EPERM) {
				msg += " (needs root or CAP_SYSLOG when kernel.dmesg_restrict=1)"
			}
			c.snap.Unavailable = append(c.snap.Unavailable, msg)
			return
		}
		if len(text) >= maxSyslogBytes {
			c.snap.Unavailable = append(c.snap.Unavailable,
				fmt.Sprintf("kernel log: syslog(2) buffer over %d MiB: only its newest part read", maxSyslogBytes>>20))
		}
		untimed := false
		for _, rec := range parseSyslogBuffer(text) {
			untimed = untimed || rec.NoTime
			k.keep(rec)
		}
		if untimed {
			c.snap.Unavailable = append(c.snap.Unavailable,
				"kernel log: syslog(2) lines carry no time (printk.time=0): only errors kept, as history")
		}
	}
	c.snap.KernelLog = append(k.older, c.snap.KernelLog...)
	if k.dropped > 0 {
		c.snap.Unavailable = append(c.snap.Unavailable,
			fmt.Sprintf("kernel log: %d later matching lines dropped (kept the first %d)", k.dropped, kmsgCap))
	}
}

// kernelLog sorts records into the window's lines and the older errors.
type kernelLog struct {
	c           *collector
	boot, since time.Time
	older       []KernelLine
	dropped     int
}

// readKmsg feeds every record of c.kmsgPath to keep (readKmsgFile). Only
// an open error is returned: it is what sends the collector to syslog(2);
// a later read error is listed and ends the read.
func (k *kernelLog) readKmsg(path string) error {
	var err, readErr error
	if h := k.c.opts.Host; h != nil {
		err, readErr = h.kernelRecords(k.keep)
	} else {
		err, readErr = readKmsgFile(path, k.keep)
	}
	if readErr != nil {
		k.c.snap.Unavailable = append(k.c.snap.Unavailable, "kernel log: read: "+readErr.Error())
	}
	return err
}

// readKmsgFile reads the kernel log records of path, /dev/kmsg or its
// stand-in (a plain file of records, or a FIFO, in tests: the tests read
// a fake log, never writing to the host's), without blocking: the device
// gives one record per read until EAGAIN. openErr is the open's error,
// readErr a later read's (which ends the read).
func readKmsgFile(path string, each func(kmsgRecord)) (openErr, readErr error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err, nil
	}
	defer func() { _ = unix.Close(fd) }() // read-only: a failed close loses nothing
	return nil, readKmsgFD(fd, each)
}

// readKmsgFD reads the records from fd (opened O_NONBLOCK) to the end of
// the buffer: from its start on a new descriptor, from where the last
// read stopped on one kept open (HostCache).
func readKmsgFD(fd int, each func(kmsgRecord)) error {
	buf := make([]byte, 16384)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.EINTR) {
			continue // EPIPE: the record we were at was overwritten; go on with the next
		}
		if errors.Is(err, unix.EAGAIN) {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		// One record per read from /dev/kmsg, followed by " KEY=value"
		// continuation lines; a plain file (tests) holds many records.
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if line == "" || line[0] == ' ' {
				continue
			}
			if rec, ok := parseKmsgRecord(line); ok {
				each(rec)
			}
		}
	}
}

func (k *kernelLog) keep(rec kmsgRecord) {
	if !kmsgInteresting(rec.Text) {
		return
	}
	s := k.c.snap
	if rec.NoTime {
		// When it was logged is unknown: only an error, and only as history.
		if rec.Level <= 3 || strings.Contains(rec.Text, "Xid") {
			k.addOlder(KernelLine{Text: rec.Text, Older: true})
		}
		return
	}
	at := k.boot.Add(time.Duration(rec.Usec) * time.Microsecond)
	t := at.Sub(k.c.opts.KmsgSince)
	line := KernelLine{Seq: rec.Seq, Text: rec.Text, T: &t}
	if at.Before(k.since) {
		// An error since boot (a GPU that failed to initialise at boot, an
		// Xid an hour ago) may be why CUDA fails now.
		if rec.Level <= 3 || strings.Contains(rec.Text, "Xid") {
			line.Older = true
			k.addOlder(line)
		}
		return
	}
	if len(s.KernelLog) >= kmsgCap {
		k.dropped++
		return
	}
	s.KernelLog = append(s.KernelLog, line)
}

func (k *kernelLog) addOlder(line KernelLine) {
	if len(k.older) == kmsgOlderCap {
		k.older = k.older[1:]
	}
	k.older = append(k.older, line)
}

// maxSyslogBytes bounds what syslog(2) reads: the kernel's buffer is
// usually 128 KiB to 2 MiB (log_buf_len); READ_ALL returns the newest text
// that fits.
const maxSyslogBytes = 8 << 20

// readSyslogBuffer reads the kernel's whole log buffer through syslog(2)
// (SYSLOG_ACTION_READ_ALL: nothing is consumed; CAP_SYSLOG under
// kernel.dmesg_restrict=1).
func readSyslogBuffer() ([]byte, error) {
	size, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return nil, err
	}
	size = min(max(size, 1<<16), maxSyslogBytes)
	buf := make([]byte, size)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
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
