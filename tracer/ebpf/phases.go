package ebpf

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// phaseLog times the stages of a run for --debug: start-up and teardown
// cost is what a user of a short target notices.
type phaseLog struct {
	on    bool
	last  time.Time
	steps []string
	notes []string
}

func newPhaseLog(on bool) *phaseLog { return &phaseLog{on: on, last: time.Now()} }

func (l *phaseLog) mark(what string) {
	if l == nil || !l.on {
		return
	}
	now := time.Now()
	l.steps = append(l.steps, fmt.Sprintf("%s %v", what, now.Sub(l.last).Round(100*time.Microsecond)))
	l.last = now
}

// note adds a line printed after the phases (empty: none).
func (l *phaseLog) note(s string) {
	if l == nil || !l.on || s == "" {
		return
	}
	l.notes = append(l.notes, s)
}

func (l *phaseLog) print() {
	if l == nil || !l.on {
		return
	}
	fmt.Fprintf(os.Stderr, "cudatrace: ebpf: %s\n", strings.Join(l.steps, ", "))
	for _, n := range l.notes {
		fmt.Fprintf(os.Stderr, "cudatrace: ebpf: %s\n", n)
	}
}
