package stracelog

import "strings"

// recKind says what one line of strace output is.
type recKind uint8

const (
	recSyscall    recKind = iota // name(args) = ret
	recUnfinished                // name(args <unfinished ...>
	recResumed                   // <... name resumed>args) = ret
	recSignal                    // --- SIGCHLD {...} ---
	recExited                    // +++ exited with N +++
	recKilled                    // +++ killed by SIGX +++
	recNoise                     // strace's own messages: attached, detached, superseded
)

// record is one line, split into its prefix and its body but not yet
// interpreted. -ff files are merged at this level, before interpretation.
type record struct {
	id      int // the printed pid (a tid, strictly); 0 when not printed
	hasID   bool
	t       int64 // nanoseconds, on the clock the log uses
	hasTime bool
	kind    recKind
	name    string // syscall name
	body    string // syscall: after "name("; unfinished: the args so far; resumed: after "resumed>"
	code    int    // exited: the exit code; killed: the signal
}

// clock turns the timestamps of one file into nanoseconds that only go
// forwards: -t/-tt wrap at midnight, and -r prints deltas.
type clock struct {
	started  bool
	relative bool // -r: each stamp is the time since the previous line
	last     int64
	dayShift int64
}

const (
	day      = int64(24 * 3600 * 1e9)
	halfDay  = day / 2
	epoch80s = int64(1e8) // seconds: an absolute stamp (-ttt) is far above this, a -r delta far below
)

func (c *clock) clockTime(ns int64) int64 {
	ns += c.dayShift
	if c.started && ns < c.last-halfDay {
		c.dayShift += day
		ns += day
	}
	c.started, c.last = true, ns
	return ns
}

func (c *clock) numericTime(secs, ns int64) int64 {
	if !c.started {
		c.relative = secs < epoch80s
	}
	v := secs*1e9 + ns
	if c.relative {
		v += c.last
	}
	c.started, c.last = true, v
	return v
}

// parseLine splits one line. ok is false for anything that is not strace
// output, including a line cut off before its syscall name.
func parseLine(line string, clk *clock) (rec record, ok bool) {
	s := strings.TrimLeft(line, " \t")
	// Pid prefix: "639   " (-f -o FILE) or "[pid   639] " (-f to stderr).
	if strings.HasPrefix(s, "[pid") {
		rest := strings.TrimLeft(s[4:], " ")
		n, i := leadingInt(rest)
		if i == 0 || i >= len(rest) || rest[i] != ']' {
			return rec, false
		}
		rec.id, rec.hasID = n, true
		s = strings.TrimLeft(rest[i+1:], " ")
	} else if n, i := leadingInt(s); i > 0 && i < len(s) && s[i] == ' ' {
		rec.id, rec.hasID = n, true
		s = strings.TrimLeft(s[i:], " ")
	}
	s = parseStamp(s, &rec, clk)
	// -i prints the instruction pointer: "[00007f0a1b2c3d4e] ".
	if len(s) > 2 && s[0] == '[' {
		if j := strings.IndexByte(s, ']'); j > 1 && isHex(s[1:j]) {
			s = strings.TrimLeft(s[j+1:], " ")
		}
	}
	switch {
	case strings.HasPrefix(s, "--- "):
		rec.kind = recSignal
		return rec, true
	case strings.HasPrefix(s, "+++ "):
		return parseExitLine(s[4:], rec)
	case strings.HasPrefix(s, "<... "):
		rest := s[5:]
		j := strings.Index(rest, " resumed>")
		if j <= 0 || !isIdent(rest[:j]) {
			return rec, false
		}
		rec.kind, rec.name, rec.body = recResumed, rest[:j], rest[j+len(" resumed>"):]
		return rec, true
	case strings.HasPrefix(s, "strace: "):
		rec.kind = recNoise
		return rec, true
	}
	j := strings.IndexByte(s, '(')
	if j <= 0 || !isIdent(s[:j]) {
		return rec, false
	}
	rec.name, rec.body = s[:j], s[j+1:]
	if k := strings.LastIndex(rec.body, "<unfinished ...>"); k >= 0 && strings.TrimRight(rec.body[k+len("<unfinished ...>"):], " )") == "" {
		rec.kind, rec.body = recUnfinished, rec.body[:k]
		return rec, true
	}
	rec.kind = recSyscall
	return rec, true
}

// parseStamp reads -t (14:58:43), -tt (14:58:43.063709), -ttt
// (1700000000.063709) or -r (0.000123) stamps, and returns the rest.
func parseStamp(s string, rec *record, clk *clock) string {
	if len(s) >= 8 && s[2] == ':' && s[5] == ':' && isDigits(s[0:2]) && isDigits(s[3:5]) && isDigits(s[6:8]) {
		secs := int64(atoiSmall(s[0:2])*3600 + atoiSmall(s[3:5])*60 + atoiSmall(s[6:8]))
		ns, n := fraction(s[8:])
		rest := s[8+n:]
		if rest == "" || rest[0] != ' ' {
			return s
		}
		rec.t, rec.hasTime = clk.clockTime(secs*1e9+ns), true
		return strings.TrimLeft(rest, " ")
	}
	secs, i := leadingInt(s)
	if i == 0 || i >= len(s) || s[i] != '.' || i > 12 {
		return s
	}
	ns, n := fraction(s[i:])
	rest := s[i+n:]
	if n < 2 || rest == "" || rest[0] != ' ' {
		return s
	}
	rec.t, rec.hasTime = clk.numericTime(int64(secs), ns), true
	return strings.TrimLeft(rest, " ")
}

// fraction parses ".063709" into nanoseconds; n is how many bytes it used.
func fraction(s string) (ns int64, n int) {
	if len(s) < 2 || s[0] != '.' {
		return 0, 0
	}
	scale := int64(1e8)
	n = 1
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		ns += int64(s[n]-'0') * scale
		scale /= 10
		n++
	}
	if n == 1 {
		return 0, 0
	}
	return ns, n
}

func parseExitLine(s string, rec record) (record, bool) {
	switch {
	case strings.HasPrefix(s, "exited with "):
		n, i := leadingInt(s[len("exited with "):])
		if i == 0 {
			return rec, false
		}
		rec.kind, rec.code = recExited, n
		return rec, true
	case strings.HasPrefix(s, "killed by "):
		name := s[len("killed by "):]
		if k := strings.IndexAny(name, " +"); k >= 0 {
			name = name[:k]
		}
		sig := signalNumber(name)
		if sig == 0 {
			return rec, false
		}
		rec.kind, rec.code = recKilled, sig
		return rec, true
	case strings.HasPrefix(s, "superseded by execve"):
		rec.kind = recNoise
		return rec, true
	}
	return rec, false
}

// leadingInt parses the decimal digits at the start of s; i is how many
// bytes it used (0: none). It stops before overflowing.
func leadingInt(s string) (n, i int) {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i < 18 {
		n = n*10 + int(s[i]-'0')
		i++
	}
	return n, i
}

func atoiSmall(s string) int { n, _ := leadingInt(s); return n }

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return s != ""
}

// isIdent accepts syscall names, including strace's "???" for unknown ones
// and "syscall_0x1c3".
func isIdent(s string) bool {
	if s == "???" {
		return true
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && i > 0) {
			return false
		}
	}
	return s != "" && len(s) < 64
}
