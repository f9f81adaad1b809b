package render_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cudatrace/cudatrace/analysis"
	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/render"
	"github.com/cudatrace/cudatrace/report"
	"github.com/cudatrace/cudatrace/snapshot"
)

func renderHTML(t *testing.T, rep *report.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := render.Report(&b, rep, render.FormatHTML, render.Options{}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// assertSelfContained fails when the page could fetch anything: an element
// that loads (script, link, img, ...), an attribute that names a URL, a
// CSS url() or @import; and it needs the CSP that forbids all of it.
func assertSelfContained(t *testing.T, page string) (text string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatalf("not HTML: %v", err)
	}
	csp := false
	var texts strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.ElementNode:
			switch n.Data {
			case "script", "link", "img", "iframe", "object", "embed", "video", "audio", "source", "base", "form":
				t.Errorf("a <%s> element in the page", n.Data)
			}
			for _, a := range n.Attr {
				switch strings.ToLower(a.Key) {
				case "src", "href", "srcset", "action", "formaction", "poster", "data", "background":
					t.Errorf("<%s %s=%q>: the page names a resource", n.Data, a.Key, a.Val)
				}
				if strings.HasPrefix(strings.ToLower(a.Key), "on") {
					t.Errorf("<%s %s>: an event handler", n.Data, a.Key)
				}
				if a.Key == "http-equiv" && strings.EqualFold(a.Val, "Content-Security-Policy") {
					for _, c := range n.Attr {
						if c.Key == "content" && strings.Contains(c.Val, "default-src 'none'") {
							csp = true
						}
					}
				}
			}
			if n.Data == "style" && n.FirstChild != nil {
				css := strings.ToLower(n.FirstChild.Data)
				if strings.Contains(css, "url(") || strings.Contains(css, "@import") {
					t.Error("the stylesheet fetches something")
				}
			}
		case html.TextNode:
			texts.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if !csp {
		t.Error("no Content-Security-Policy with default-src 'none'")
	}
	return texts.String()
}

// Every fixture's page fetches nothing and shows the verdict, each
// finding's summary and fix, and the failing call.
func TestHTMLSelfContained(t *testing.T) {
	for _, fx := range reportfixture.All {
		t.Run(fx.Name, func(t *testing.T) {
			rep := reportfixture.Build(t, fx)
			text := assertSelfContained(t, renderHTML(t, rep))
			norm := strings.Join(strings.Fields(text), " ")
			a := rep.Analysis
			want := []string{strings.ReplaceAll(a.Verdict, "`", "")}
			for _, f := range a.Findings {
				want = append(want, strings.ReplaceAll(f.Summary, "`", ""))
			}
			if a.Failing != nil {
				want = append(want, nvdev.FormatCall(a.Failing))
			}
			for _, w := range want {
				if !strings.Contains(norm, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("the page does not show %q", w)
				}
			}
		})
	}
}

// Strings the target controls become text, never markup, and never reach
// a terminal raw when the page is printed.
func TestHTMLEscapesTargetStrings(t *testing.T) {
	const attack = `<script>alert(1)</script><img src=x onerror=alert(2)>` + hostile
	rep := reportfixture.Build(t, reportfixture.All[0])
	for i := range rep.Events {
		rep.Events[i].Comm = "py" + attack
		if rep.Events[i].Path == "/dev/nvidia-uvm" {
			rep.Events[i].Path += attack
		}
	}
	s := rep.Snapshot
	s.Process.Comm = attack
	s.Nodes = append(s.Nodes, snapshot.Node{Path: "/dev/nvidia-uvm" + attack, Exists: true, Type: "c", Major: 238})
	s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": attack}
	s.KernelLog = append(s.KernelLog, snapshot.KernelLine{Seq: 1, Text: "NVRM: " + attack})
	rep.Analysis = analysis.Analyze(rep.Events, s)
	page := renderHTML(t, rep)
	assertPrintable(t, "html", page)
	text := assertSelfContained(t, page)
	if !strings.Contains(text, "<script>alert(1)</script>") {
		t.Error("the crafted name is not shown as text")
	}
}

// The page in a real browser: headless Chromium renders it (the DOM it
// built holds the verdict and the failing call's row) and takes a
// screenshot. The CSP in the page keeps it offline.
func TestHTMLInBrowser(t *testing.T) {
	privtest.Deadline(t)
	browser := findChromium(t)
	rep := reportfixture.Build(t, reportfixture.All[0]) // lxc-deny-uvm: a failing call and findings
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, []byte(renderHTML(t, rep)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	chrome := func(args ...string) []byte {
		cmd := exec.CommandContext(ctx, browser, chromiumArgs(dir, append([]string{"--window-size=1200,1600"}, args...)...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", browser, args, err, stderr.String())
		}
		return out
	}
	dom := string(chrome("--dump-dom", "file://"+page))
	if !strings.Contains(dom, `class="fail"`) || !strings.Contains(dom, "cgroup2-denied") {
		t.Errorf("the rendered DOM lacks the failing row or the finding:\n%.2000s", dom)
	}
	shot := filepath.Join(dir, "shot.png")
	chrome("--screenshot="+shot, "file://"+page)
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 10_000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot: %d bytes, %v", len(png), err)
	}
	if out := os.Getenv("CUDATRACE_HTML_SHOT"); out != "" {
		os.WriteFile(out, png, 0o644) // for a person to look at
	}
}
