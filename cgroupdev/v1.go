package cgroupdev

import (
	"fmt"
	"strconv"
	"strings"
)

// V1Rule is one line of a cgroup v1 devices.list.
type V1Rule struct {
	Type         DevType
	Major, Minor int64 // -1 means '*'
	Access       Access
}

// String renders the rule as devices.list does: "c 195:* rwm".
func (r V1Rule) String() string {
	return fmt.Sprintf("%s %s:%s %s", r.Type, v1Num(r.Major), v1Num(r.Minor), r.Access)
}

func v1Num(n int64) string {
	if n < 0 {
		return "*"
	}
	return strconv.FormatInt(n, 10)
}

// ParseV1List parses the contents of a devices.list file. Blank lines are
// skipped; anything else that is not "<a|b|c> <major|*>:<minor|*> <rwm subset>"
// is an error naming the line.
func ParseV1List(text string) ([]V1Rule, error) {
	var rules []V1Rule
	for i, line := range strings.Split(text, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		r, err := parseV1Line(line)
		if err != nil {
			return nil, fmt.Errorf("devices.list line %d: %q: %v", i+1, truncate(line, 60), err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func parseV1Line(line string) (V1Rule, error) {
	var r V1Rule
	f := strings.Fields(line)
	if len(f) != 3 {
		return r, fmt.Errorf("want 3 fields \"<type> <major>:<minor> <access>\", got %d", len(f))
	}
	switch f[0] {
	case "a":
		r.Type = TypeAll
	case "b":
		r.Type = TypeBlock
	case "c":
		r.Type = TypeChar
	default:
		return r, fmt.Errorf("device type %q is not a, b or c", f[0])
	}
	maj, min, ok := strings.Cut(f[1], ":")
	if !ok {
		return r, fmt.Errorf("device %q is not <major>:<minor>", f[1])
	}
	var err error
	if r.Major, err = parseV1Num(maj); err != nil {
		return r, fmt.Errorf("major: %v", err)
	}
	if r.Minor, err = parseV1Num(min); err != nil {
		return r, fmt.Errorf("minor: %v", err)
	}
	for _, c := range f[2] {
		var bit Access
		switch c {
		case 'r':
			bit = AccessRead
		case 'w':
			bit = AccessWrite
		case 'm':
			bit = AccessMknod
		default:
			return r, fmt.Errorf("access %q has %q, not one of r, w, m", f[2], c)
		}
		if r.Access&bit != 0 {
			return r, fmt.Errorf("access %q repeats %q", f[2], c)
		}
		r.Access |= bit
	}
	return r, nil
}

// parseV1Num parses a major or minor: '*' or a decimal u32 (the kernel keeps
// them as u32, and prints ~0 as '*').
func parseV1Num(s string) (int64, error) {
	if s == "*" {
		return -1, nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not '*' or a number below 2^32", s)
	}
	if n == 1<<32-1 {
		return -1, nil
	}
	return int64(n), nil
}

// Matches reports whether the rule grants req: same type (a matches any),
// same major and minor (or '*'), and every requested access bit present in
// this one rule. Like the kernel's match_exception, access is never pieced
// together from two rules.
func (r V1Rule) Matches(req Request) bool { return matches(r.Type, r.Major, r.Minor, r.Access, req) }

// EvaluateV1 judges req against a devices.list. The list is an allow list:
// a cgroup whose default is deny shows its exceptions, and one whose default
// is allow shows just "a *:* rwm". (That also means devices.list cannot show
// deny exceptions of an allow-by-default cgroup; the kernel hides them.)
// It returns the first rule that grants req, or nil when none does.
func EvaluateV1(rules []V1Rule, req Request) (allowed bool, decided *V1Rule) {
	for i := range rules {
		if rules[i].Matches(req) {
			return true, &rules[i]
		}
	}
	return false, nil
}
