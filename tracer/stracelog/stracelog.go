// Package stracelog imports strace output (strace -f -o FILE, or the
// per-process files of -ff) into the same tracer.Event stream the live
// tracers produce, so that a log a user pastes can be analysed like a live
// trace. It understands the common output options: pid prefixes, -t/-tt/-ttt/-r
// stamps, -T durations, -y/-yy fd annotations, and calls split into
// <unfinished ...> and <... resumed> halves.
//
// Events follow the live tracers' rules (which calls, which paths, paths as
// the program passed them), with one addition: an ioctl event carries the
// path of its fd when the log shows it, since without -yy that is the only
// sign of which device the fd was.
package stracelog

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// ErrNotStrace is returned for input with no strace output in it at all.
var ErrNotStrace = errors.New("not strace output: no line looks like a traced syscall")

// Log is what a strace log tells.
type Log struct {
	Events []tracer.Event
	// What the log could tell. Without HasPIDs every event has PID 0;
	// without HasTimes every Time is 0; without HasFDPaths (-y) ioctls are
	// matched to NVIDIA devices only through the opens the log shows;
	// without HasDevNumbers (-yy) opens carry no device number.
	HasPIDs, HasTimes, HasFDPaths, HasDevNumbers bool
	// UnnumberedDevFDs: an fd annotation names a device node (/dev/...)
	// without its number, as -y prints and -yy never does. A log with fd
	// paths and none of these may well be -yy that opened no device.
	UnnumberedDevFDs bool
	// Lines is how many lines were read; Skipped how many were not strace
	// output or were cut off. Syscalls that do not concern NVIDIA devices
	// are understood and dropped, not skipped.
	Lines, Skipped int
	// Unfinished counts NVIDIA-related calls whose result the log does not
	// show ("= ?", or <unfinished ...> never resumed): they have no event.
	Unfinished int
	// Exit is how the first process ended, if the log shows it.
	Exit *tracer.ExitStatus
	// Folded counts the successful repeats not kept as events (see
	// Options), per site, as a live backend's tracer.Result.Folded does.
	Folded []tracer.Folded
	// Overflow counts calls not kept past maxEvents (not execs or exits):
	// the log is then explained from part of it.
	Overflow uint64
}

// Options bound what a parse keeps, so that memory does not grow with the
// log: the successful repeats of a call site past the first N are counted,
// not kept, as tracer.Spec.FoldIoctlsAfter and FoldCallsAfter make a live
// backend do. 0 keeps every call (up to maxEvents).
type Options struct {
	FoldIoctlsAfter, FoldCallsAfter int
}

// maxEvents bounds the events kept (the recorder's own cap: diagnose/record
// stores no more); maxFoldSites the call sites counted, past which a new
// site's calls are kept within maxEvents.
const (
	maxEvents    = 200_000
	maxFoldSites = 100_000
)

// maxLine bounds the memory one line may take; the rest of a longer line
// is dropped and the line counted as skipped.
const maxLine = 1 << 20

// Parse reads one log, as written by strace -f -o FILE (or strace's stderr).
func Parse(r io.Reader) (*Log, error) { return ParseWith(r, Options{}) }

// ParseWith is Parse bounded by o.
func ParseWith(r io.Reader, o Options) (*Log, error) {
	in := newInterp()
	in.opts = o
	var clk clock
	var carry string
	err := readLines(r, func(line string, whole bool) {
		in.log.Lines++
		line, carry = unsplit(carry, line)
		if line == "" && carry != "" {
			return
		}
		rec, ok := parseLine(line, &clk)
		if !ok || !whole {
			in.log.Skipped++
			return
		}
		in.process(rec)
	})
	if err != nil {
		return nil, err
	}
	if carry != "" {
		in.log.Skipped++ // the log ends inside the split line
	}
	return in.finish()
}

// unsplit undoes what happens when strace writes to stderr and a message
// of its own lands inside a syscall line:
//
//	clone(child_stack=NULL, flags=...|SIGCHLDstrace: Process 15565 attached
//	, child_tidptr=0x7fb802387a10) = 15565
//
// It returns the line to parse ("" for none yet) and what to prepend to the
// next one.
func unsplit(carry, line string) (string, string) {
	if carry != "" {
		// One join per line: a message in the joined line stays, so
		// that no line is copied more than twice.
		return carry + line, ""
	}
	if i := strings.Index(line, "strace: Process "); i > 0 &&
		(strings.HasSuffix(line, " attached") || strings.HasSuffix(line, " detached")) {
		return "", line[:i]
	}
	return line, ""
}

// ParseFiles reads the per-process files of strace -ff -o FILE, named
// FILE.PID. The pid comes from each name's suffix. Lines are merged by
// timestamp when the files have them, else taken file by file in pid order.
func ParseFiles(paths []string) (*Log, error) { return ParseFilesWith(paths, Options{}) }

// ParseFilesWith is ParseFiles bounded by o.
func ParseFilesWith(paths []string, o Options) (*Log, error) {
	if len(paths) == 1 {
		if _, err := pidSuffix(paths[0]); err != nil {
			// One plain log given as a list.
			f, err := openLog(paths[0])
			if err != nil {
				return nil, err
			}
			defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
			return ParseWith(f, o)
		}
	}
	type file struct {
		pid  int
		recs []record
	}
	in := newInterp()
	in.opts = o
	files := make([]file, 0, len(paths))
	allTimed := true
	for _, p := range paths {
		pid, err := pidSuffix(p)
		if err != nil {
			return nil, err
		}
		f, err := openLog(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		var clk clock
		fl := file{pid: pid}
		err = readLines(f, func(line string, whole bool) {
			in.log.Lines++
			rec, ok := parseLine(line, &clk)
			if !ok || !whole {
				in.log.Skipped++
				return
			}
			// -ff files print no prefix; the file name says whose they are.
			rec.id, rec.hasID = pid, true
			allTimed = allTimed && rec.hasTime
			fl.recs = append(fl.recs, rec)
		})
		_ = f.Close() // read-only: a failed close loses nothing
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		files = append(files, fl)
	}
	// The parent forks before its children run, so pid order is the best
	// guess at the order of untimed files.
	slices.SortStableFunc(files, func(a, b file) int { return cmp.Compare(a.pid, b.pid) })
	var all []record
	for _, f := range files {
		all = append(all, f.recs...)
	}
	if allTimed {
		slices.SortStableFunc(all, func(a, b record) int { return cmp.Compare(a.t, b.t) })
	}
	in.pidsFromNames = true
	for _, rec := range all {
		in.process(rec)
	}
	return in.finish()
}

// openLog opens a log only if it is a regular file: /dev/zero would be read
// until killed, a FIFO with no writer would block.
func openLog(p string) (*os.File, error) { return snapshot.OpenRegular(p) }

// pidSuffix returns the PID in FILE.PID.
func pidSuffix(p string) (int, error) {
	base := filepath.Base(p)
	i := strings.LastIndexByte(base, '.')
	if i >= 0 {
		if pid, err := strconv.Atoi(base[i+1:]); err == nil && pid > 0 {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("%s: not a per-process strace file (FILE.PID from strace -ff)", p)
}

// readLines calls fn for each line, without its line ending. whole is false
// for a line longer than maxLine, of which only the start is passed.
func readLines(r io.Reader, fn func(line string, whole bool)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		chunk, isPrefix, err := br.ReadLine()
		if err == io.EOF {
			if long != nil {
				fn(string(long), false)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading strace log: %w", err)
		}
		if isPrefix || long != nil {
			if len(long) < maxLine {
				long = append(long, chunk[:min(len(chunk), maxLine-len(long))]...)
			}
			if isPrefix {
				continue
			}
			whole := len(long) < maxLine
			fn(strings.TrimSuffix(string(long), "\r"), whole)
			long = nil
			continue
		}
		fn(strings.TrimSuffix(string(chunk), "\r"), true)
	}
}

// NVIDIARelated reports whether the log shows any call that touches the
// NVIDIA driver. Exec and exit events are recorded for every process, and
// memfd_create for every caller, so a log of an unrelated program still has
// events (and seccomp filters too); this tells the caller when there is
// nothing to explain.
func (l *Log) NVIDIARelated() bool {
	for i := range l.Events {
		switch l.Events[i].Kind {
		case tracer.KindExec, tracer.KindExit, tracer.KindMemfd, tracer.KindSeccomp:
		default:
			return true
		}
	}
	return false
}
