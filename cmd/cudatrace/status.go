package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cudatrace/cudatrace/tracer"
)

// statusInterval bounds how often the status line is redrawn.
const statusInterval = 100 * time.Millisecond

// statusLine is the one line shown on a terminal while tracing: what is
// traced, the calls so far, how many failed. It is redrawn in place and
// erased before the report prints; it never appears when stderr is not a
// terminal.
type statusLine struct {
	w        io.Writer
	width    int
	ansi     bool // erase with ESC[K; TERM=dumb gets spaces instead
	target   string
	attached bool

	calls, failed atomic.Uint64

	stopOnce sync.Once
	done     chan struct{}
	wg       sync.WaitGroup
	drawn    int // width of what is on screen, for erasing
}

// newStatusLine returns nil (a no-op status) unless stderr is a terminal.
func newStatusLine(stderr io.Writer, target string, attached bool) *statusLine {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	width := terminalWidth(f)
	if width <= 0 {
		return nil
	}
	return &statusLine{w: f, width: width, ansi: os.Getenv("TERM") != "dumb", target: target, attached: attached}
}

// count is called from the Sink for every event the backend delivers;
// execs and exits are not NVIDIA calls, and are not counted.
func (s *statusLine) count(e *tracer.Event) {
	if s == nil || e.Kind == tracer.KindExit || e.Kind == tracer.KindExec {
		return
	}
	s.calls.Add(1)
	if e.Failed() || e.APIFailed() {
		s.failed.Add(1)
	}
}

func (s *statusLine) start() {
	if s == nil {
		return
	}
	s.done = make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(statusInterval)
		defer t.Stop()
		last := ""
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				if line := s.text(); line != last {
					s.draw(line)
					last = line
				}
			}
		}
	}()
}

// stop erases the line; the report then prints where it was.
func (s *statusLine) stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		if s.done != nil {
			close(s.done)
			s.wg.Wait()
		}
		if s.drawn > 0 {
			s.erase()
		}
	})
}

func (s *statusLine) text() string {
	calls, failed := s.calls.Load(), s.failed.Load()
	line := fmt.Sprintf("cudatrace: tracing %s: %d NVIDIA call%s, %d failed", s.target, calls, plural(calls), failed)
	if s.attached {
		line += " · Ctrl-C to stop"
	}
	r := []rune(line)
	if limit := s.width - 1; len(r) > limit && limit > 0 {
		r = append(r[:limit-1], '…')
	}
	return string(r)
}

func (s *statusLine) draw(line string) {
	n := len([]rune(line))
	if s.ansi {
		_, _ = fmt.Fprintf(s.w, "\r%s\x1b[K", line)
	} else {
		_, _ = fmt.Fprintf(s.w, "\r%s%s", line, strings.Repeat(" ", max(s.drawn-n, 0)))
	}
	s.drawn = n
}

func (s *statusLine) erase() {
	if s.ansi {
		_, _ = io.WriteString(s.w, "\r\x1b[K")
	} else {
		_, _ = io.WriteString(s.w, "\r"+strings.Repeat(" ", s.drawn)+"\r")
	}
	s.drawn = 0
}

func plural(n uint64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// statusTarget names what is traced, with anything but printable
// characters replaced: argv comes from the user, but a PID's name from
// the target.
func statusTarget(argv []string, pids []int) string {
	if len(argv) > 0 {
		name := argv[0]
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		return printable(name)
	}
	var parts []string
	for _, pid := range pids {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if c := strings.TrimSpace(string(comm)); c != "" {
			parts = append(parts, fmt.Sprintf("%s[%d]", printable(c), pid))
		} else {
			parts = append(parts, fmt.Sprintf("PID %d", pid))
		}
	}
	return strings.Join(parts, ", ")
}

func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\uFFFD' {
			return '?'
		}
		return r
	}, s)
}
