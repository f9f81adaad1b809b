package report

import (
	"regexp"
	"sort"
	"strings"

	"github.com/cudatrace/cudatrace/snapshot"
)

var homePath = regexp.MustCompile(`/home/[^/\s"':]+`)

// MaskSecrets masks credentials in every argv of the report by the rule
// the environment follows (snapshot.MaskArgv): a report carries no
// secrets, --redact or not. It is applied when a report is built, and
// again to reports written by older versions when they are redacted.
func MaskSecrets(rep *Report) {
	rep.Target.Argv = snapshot.MaskArgv(rep.Target.Argv)
	for i := range rep.Events {
		rep.Events[i].Argv = snapshot.MaskArgv(rep.Events[i].Argv)
	}
	if f := rep.Analysis.Failing; f != nil {
		f.Argv = snapshot.MaskArgv(f.Argv)
	}
}

// Redact removes what a bug ticket should not carry: user names, home
// directories, the host name and arguments beyond argv[0]. Device facts,
// numbers and findings stay, since they are the evidence. Every free-text
// field is scrubbed, not only the ones that hold the name by design: a
// kernel log line or a mount source can carry it too.
func Redact(rep *Report) {
	MaskSecrets(rep)
	r := redactor{}
	if u := rep.Target.User; u != "" && !systemUser[u] {
		r.add(u, "<user>")
		rep.Target.User = "<user>"
	}
	if s := rep.Snapshot; s != nil {
		if u := s.Process.User; u != "" && !systemUser[u] {
			r.add(u, "<user>")
			s.Process.User = "<user>"
		}
		if h := s.Host.Hostname; h != "" {
			r.add(h, "<host>")
			if short, _, ok := strings.Cut(h, "."); ok {
				r.add(short, "<host>")
			}
			s.Host.Hostname = ""
		}
	}
	r.sort()

	rep.Target.Argv = r.argv(rep.Target.Argv)
	r.strings(rep.Trace.Notes)
	r.strings(rep.Trace.Limits)
	for i := range rep.Events {
		e := &rep.Events[i]
		e.Argv = r.argv(e.Argv)
		e.Path = r.str(e.Path)
		e.Target = r.str(e.Target)
	}
	if f := rep.Analysis.Failing; f != nil {
		f.Argv = r.argv(f.Argv)
		f.Path = r.str(f.Path)
		f.Target = r.str(f.Target)
	}
	for i := range rep.Analysis.Findings {
		f := &rep.Analysis.Findings[i]
		f.Summary = r.str(f.Summary)
		f.Fix = r.str(f.Fix)
		r.strings(f.Detail)
	}
	rep.Analysis.Verdict = r.str(rep.Analysis.Verdict)

	s := rep.Snapshot
	if s == nil {
		return
	}
	// A report from an older version may hold any CUDA_* or NVIDIA_*
	// variable, an NVIDIA_API_KEY included.
	s.Env = snapshot.DiagnosticEnv(s.Env)
	for k, v := range s.Env {
		s.Env[k] = r.str(v)
	}
	for i := range s.Nodes {
		s.Nodes[i].LinkDest = r.str(s.Nodes[i].LinkDest)
	}
	for i := range s.Mounts {
		m := &s.Mounts[i]
		m.MountPoint, m.Root, m.Source = r.str(m.MountPoint), r.str(m.Root), r.str(m.Source)
		r.strings(m.Options)
	}
	for i := range s.KernelLog {
		s.KernelLog[i].Text = r.str(s.KernelLog[i].Text)
	}
	if c := s.CgroupV1; c != nil {
		c.Path = r.str(c.Path)
	}
	if c := s.CgroupV2; c != nil {
		c.Path = r.str(c.Path)
		for i := range c.Programs {
			c.Programs[i].AttachedTo = r.str(c.Programs[i].AttachedTo)
		}
	}
	s.Container.Unit = r.str(s.Container.Unit)
	r.strings(s.Unavailable)
}

// systemUser names say nothing about a person and are evidence (a target
// that ran as root cannot lack permissions); replacing "root" would also
// shred words such as rootfs.
var systemUser = map[string]bool{"root": true, "nobody": true}

type redactor struct{ words [][2]string }

func (r *redactor) add(word, with string) {
	if len(word) > 2 { // short names would shred unrelated words
		r.words = append(r.words, [2]string{word, with})
	}
}

// sort puts longer words first, so "ws7.corp.example" goes before "ws7".
func (r *redactor) sort() {
	sort.SliceStable(r.words, func(i, j int) bool { return len(r.words[i][0]) > len(r.words[j][0]) })
}

func (r *redactor) str(s string) string {
	if s == "" {
		return s
	}
	s = homePath.ReplaceAllString(s, "/home/<user>")
	for _, w := range r.words {
		s = strings.ReplaceAll(s, w[0], w[1])
	}
	return s
}

func (r *redactor) strings(ss []string) {
	for i := range ss {
		ss[i] = r.str(ss[i])
	}
}

func (r *redactor) argv(argv []string) []string {
	if len(argv) == 0 {
		return argv
	}
	out := []string{r.str(argv[0])}
	for range argv[1:] {
		out = append(out, "<redacted>")
	}
	return out
}
