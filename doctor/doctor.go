// Package doctor checks, without running anything, whether CUDA can start
// on this host and in the containers it runs: device nodes, the device
// cgroup policy, container configs and CDI specs, the driver, and the
// environment. Every check is a pure function of a snapshot.Survey, so the
// checks run the same on a live host and on synthetic ones in tests; Host
// is the pipeline around them (survey, then checks).
package doctor

import (
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cudatrace/cudatrace/snapshot"
)

// Schema names the JSON document Result is encoded as
// (docs/doctor-schema.md). Bump the number when a field changes meaning or
// goes away; adding fields keeps it.
const Schema = "cudatrace.doctor/v1"

// Status is one check's outcome.
type Status string

const (
	Pass Status = "PASS" // nothing wrong
	Warn Status = "WARN" // may break CUDA, or breaks it in some cases
	Fail Status = "FAIL" // CUDA cannot start (for someone) until fixed
	Skip Status = "SKIP" // could not be checked; Summary says why
)

// Categories, in the order checks are reported.
const (
	CatNodes       = "nodes"
	CatPolicy      = "device policy"
	CatContainers  = "containers"
	CatDriver      = "driver"
	CatEnvironment = "environment"
)

// Check is one row of the doctor's report.
type Check struct {
	// ID is stable across versions: scripts and tickets refer to it.
	ID       string `json:"id"`
	Category string `json:"category"`
	Status   Status `json:"status"`
	// Subject is what was checked: a node, a container, a spec file.
	Subject string `json:"subject"`
	// Summary is one line: the verdict with its numbers.
	Summary string   `json:"summary"`
	Detail  []string `json:"detail,omitempty"`
	// Fix is the exact change, one step per line; empty for PASS and SKIP.
	Fix string `json:"fix,omitempty"`
}

// Counts is how many checks ended in each status.
type Counts struct {
	Pass int `json:"pass"`
	Warn int `json:"warn"`
	Fail int `json:"fail"`
	Skip int `json:"skip"`
}

// Result is the doctor's whole answer.
type Result struct {
	Schema  string    `json:"schema"`
	Tool    string    `json:"tool_version,omitempty"`
	TakenAt time.Time `json:"taken_at"`
	Host    struct {
		Hostname string `json:"hostname,omitempty"`
		Kernel   string `json:"kernel,omitempty"`
		Driver   string `json:"driver_version,omitempty"`
	} `json:"host"`
	// Subject is whose device policy was checked ("this process",
	// "process 42", "cgroup /lxc/101"), and User who the permissions were
	// checked for.
	Subject string `json:"subject"`
	User    string `json:"user"`
	// Status is the worst status of any check (SKIP counts as PASS).
	Status Status  `json:"status"`
	Counts Counts  `json:"counts"`
	Checks []Check `json:"checks"`
	// Unavailable lists what could not be read, one line each.
	Unavailable []string `json:"unavailable,omitempty"`
}

// Run checks a survey. It never fails: what cannot be judged is a SKIP.
func Run(sv *snapshot.Survey) *Result {
	res := &Result{Schema: Schema, Subject: sv.Subject}
	if sv.Base == nil {
		sv.Base = &snapshot.Snapshot{}
	}
	b := sv.Base
	res.TakenAt = b.TakenAt
	res.Host.Hostname, res.Host.Kernel, res.Host.Driver = b.Host.Hostname, b.Host.Kernel, b.Host.DriverVersion
	h := newHost(sv)
	res.User = h.userText()

	var checks []Check
	for _, f := range []func(*host) []Check{
		checkNodes, checkCharLinks,
		checkPolicy,
		checkContainers, checkCDI,
		checkDriver,
		checkEnvironment,
	} {
		checks = append(checks, f(h)...)
	}
	res.Checks = checks
	res.Status = Pass
	for i := range res.Checks {
		c := &res.Checks[i]
		sanitizeCheck(c)
		switch c.Status {
		case Pass:
			res.Counts.Pass++
		case Warn:
			res.Counts.Warn++
		case Fail:
			res.Counts.Fail++
		case Skip:
			res.Counts.Skip++
		}
		if rank(c.Status) > rank(res.Status) {
			res.Status = c.Status
		}
	}
	res.Unavailable = append(append([]string{}, b.Unavailable...), sv.Unavailable...)
	for i, u := range res.Unavailable {
		res.Unavailable[i] = Escape(u)
	}
	res.Host.Hostname = Escape(res.Host.Hostname)
	res.Host.Kernel = Escape(res.Host.Kernel)
	res.Host.Driver = Escape(res.Host.Driver)
	res.Subject, res.User = Escape(res.Subject), Escape(res.User)
	return res
}

func rank(s Status) int {
	switch s {
	case Fail:
		return 3
	case Warn:
		return 2
	}
	return 1
}

// worst is the more serious of two statuses (SKIP below PASS: one check
// that could be done and passed says more than one that could not).
func worst(a, b Status) Status {
	order := map[Status]int{Skip: 0, Pass: 1, Warn: 2, Fail: 3}
	if order[b] > order[a] {
		return b
	}
	return a
}

// sanitizeCheck escapes every string of a check. Most of what a check says
// comes from the system (paths, container names, config lines, kernel log
// lines), and none of it may reach a terminal as control characters.
func sanitizeCheck(c *Check) {
	c.Subject, c.Summary, c.Fix = Escape(c.Subject), Escape(c.Summary), escapeKeepNewlines(c.Fix)
	for i := range c.Detail {
		c.Detail[i] = Escape(c.Detail[i])
	}
}

// Escape makes s safe to print: invalid UTF-8, control and other
// non-graphic characters become Go escapes (\x1b, \u202e); everything
// printable, spaces included, stays as it is.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || (!unicode.IsGraphic(r) && r != ' ') || r == '\\' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16))
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsGraphic(r) || r == ' ':
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

func escapeKeepNewlines(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = Escape(lines[i])
	}
	return strings.Join(lines, "\n")
}
