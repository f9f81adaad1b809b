package report_test

import (
	"bytes"
	"context"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/cudatrace/cudatrace/annotate"
	"github.com/cudatrace/cudatrace/report"
)

func renderHTML(t *testing.T, rep *report.Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.Render(&b, rep, report.FormatHTML, report.RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The HTML report is one file that needs nothing else: no script, no
// stylesheet, image or frame from anywhere (the CSP forbids them too); it
// shows the verdict, the failing call, the findings and the timeline.
func TestHTMLSelfContained(t *testing.T) {
	rep := buildFixture(t, fixtures[0])
	page := renderHTML(t, rep)
	noActiveContent(t, page)
	if regexp.MustCompile(`(?i)url\(|@import|https?:`).MatchString(page) {
		t.Error("the page names a URL")
	}
	for _, want := range []string{"default-src 'none'", html.EscapeString(rep.Analysis.Verdict), "Failing call", "[cgroup2-denied]", "<table>", `class="fail"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// noActiveContent fails on any element or attribute that runs code or
// fetches something.
func noActiveContent(t *testing.T, page string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script", "link", "img", "iframe", "object", "embed", "base", "form":
				t.Errorf("<%s> in a self-contained report", n.Data)
			}
			for _, a := range n.Attr {
				if a.Key == "src" || a.Key == "href" || a.Key == "srcset" || strings.HasPrefix(a.Key, "on") {
					t.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
}

// Everything from the target is text in the page, never markup.
func TestHTMLEscapes(t *testing.T) {
	rep := buildFixture(t, fixtures[0])
	for i := range rep.Events {
		e := &rep.Events[i]
		e.Comm = `<script>alert(1)</script>` + hostile
		if e.Path == "/dev/nvidia-uvm" {
			e.Path += `"><img src=x onerror=alert(2)>`
		}
	}
	rep.Trace.Notes = append(rep.Trace.Notes, "</footer><script>alert(3)</script>")
	rep.Analysis = annotate.Analyze(rep.Events, rep.Snapshot)
	page := renderHTML(t, rep)
	assertPrintable(t, "html", page)
	noActiveContent(t, page)
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the crafted comm is not shown as text")
	}
}

// chromiumOwn are the hosts Chromium's own services call at start (update,
// network time, safe browsing) even with background networking off: not
// the page's.
var chromiumOwn = regexp.MustCompile(`^[A-Z]+ (https?://)?[^/ ]*\b(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)(:\d+)?[/ ]`)

// openInChromium loads page in headless Chromium, whose every request must
// go through a proxy of the test's, and returns the screenshot and the
// requests that were not Chromium's own.
func openInChromium(t *testing.T, chromium, page string) (shot string, requests []string) {
	t.Helper()
	dir := t.TempDir()
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan string, 64)
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				close(seen)
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			c.Close()
			select {
			case seen <- string(buf[:n]):
			default:
			}
		}
	}()
	shot = filepath.Join(dir, "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--proxy-server=http://"+proxy.Addr().String(),
		"--proxy-bypass-list=<-loopback>", "--window-size=1200,900", "--screenshot="+shot, "file://"+page)
	out, err := cmd.CombinedOutput()
	proxy.Close()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	for r := range seen {
		if !chromiumOwn.MatchString(r) {
			requests = append(requests, strings.SplitN(r, "\r\n", 2)[0])
		}
	}
	return shot, requests
}

// In a real headless Chromium, the page renders (a screenshot with the
// failed verdict's red bar) and makes no network request. A control page
// that fetches one image shows that the proxy does see the page's requests.
func TestHTMLInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium (apt-get install chromium)")
	}
	dir := t.TempDir()
	control := filepath.Join(dir, "control.html")
	if err := os.WriteFile(control, []byte(`<!DOCTYPE html><img src="http://canary.cudatrace.test/x.png">`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, reqs := openInChromium(t, chromium, control); !slices.ContainsFunc(reqs, func(r string) bool { return strings.Contains(r, "canary.cudatrace.test") }) {
		t.Fatalf("the control page's request did not reach the proxy (saw %q): the check below would prove nothing", reqs)
	}
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, []byte(renderHTML(t, buildFixture(t, fixtures[0]))), 0o644); err != nil {
		t.Fatal(err)
	}
	shot, reqs := openInChromium(t, chromium, page)
	if len(reqs) > 0 {
		t.Errorf("the report made network requests: %q", reqs)
	}
	if keep := os.Getenv("CUDATRACE_HTML_SCREENSHOT"); keep != "" {
		if b, err := os.ReadFile(shot); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The failed verdict's bar is light red (#fdecea) near the top.
	found := false
	for y := 0; y < 200 && !found; y++ {
		for x := 0; x < img.Bounds().Dx(); x += 4 {
			r, g, b, _ := img.At(x, y).RGBA()
			if r>>8 > 0xf5 && g>>8 > 0xe0 && g>>8 < 0xf0 && b>>8 > 0xe0 && b>>8 < 0xf0 {
				found = true
				break
			}
		}
	}
	if !found {
		t.Error("the screenshot shows no red verdict bar: the page did not render as styled")
	}
}
