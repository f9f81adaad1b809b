package report

import (
	"regexp"
	"strings"
)

var homePath = regexp.MustCompile(`/home/[^/\s"]+`)

// Redact removes what a bug ticket should not carry: user names, home
// directories, the host name and arguments beyond argv[0]. Device facts,
// numbers and findings stay, since they are the evidence.
func Redact(rep *Report) {
	users := map[string]bool{}
	if rep.Target.User != "" {
		users[rep.Target.User] = true
		rep.Target.User = "<user>"
	}
	if s := rep.Snapshot; s != nil {
		if s.Process.User != "" {
			users[s.Process.User] = true
			s.Process.User = "<user>"
		}
		s.Host.Hostname = ""
		for k, v := range s.Env {
			s.Env[k] = redactString(v, users)
		}
	}
	rep.Target.Argv = redactArgv(rep.Target.Argv)
	for i := range rep.Events {
		e := &rep.Events[i]
		e.Argv = redactArgv(e.Argv)
		e.Path = redactString(e.Path, users)
		e.Target = redactString(e.Target, users)
	}
	if f := rep.Analysis.Failing; f != nil {
		f.Argv = redactArgv(f.Argv)
		f.Path = redactString(f.Path, users)
	}
	for i := range rep.Analysis.Findings {
		f := &rep.Analysis.Findings[i]
		f.Summary = redactString(f.Summary, users)
		f.Fix = redactString(f.Fix, users)
		for j := range f.Detail {
			f.Detail[j] = redactString(f.Detail[j], users)
		}
	}
	rep.Analysis.Verdict = redactString(rep.Analysis.Verdict, users)
}

func redactArgv(argv []string) []string {
	if len(argv) <= 1 {
		return argv
	}
	out := []string{redactString(argv[0], nil)}
	for range argv[1:] {
		out = append(out, "<redacted>")
	}
	return out
}

func redactString(s string, users map[string]bool) string {
	s = homePath.ReplaceAllString(s, "/home/<user>")
	for u := range users {
		if len(u) > 2 { // short names would shred unrelated words
			s = strings.ReplaceAll(s, u, "<user>")
		}
	}
	return s
}
