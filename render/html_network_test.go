package render_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatrace/cudatrace/internal/privtest"
	"github.com/cudatrace/cudatrace/internal/reportfixture"
)

// chromiumOwn are the hosts Chromium's own services call at start (update,
// network time, safe browsing) even with background networking off: not
// the page's.
var chromiumOwn = regexp.MustCompile(`^[A-Z]+ (https?://)?[^/ ]*\b(google\.com|googleapis\.com|gvt1\.com|gstatic\.com)(:\d+)?[/ ]`)

// findChromium is the headless browser the page tests use; without one
// they skip (CI installs it, and then a skip fails).
func findChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts headless Chromium: not under -short")
	}
	for _, b := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	privtest.Skip(t, "no headless Chromium (apt-get install chromium)")
	return ""
}

// chromiumArgs are the flags every run takes: headless, as root, with a
// fresh profile in dir and Chromium's own background traffic off.
func chromiumArgs(dir string, more ...string) []string {
	return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + filepath.Join(dir, "profile")}, more...)
}

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
	cmd := exec.CommandContext(ctx, chromium, chromiumArgs(dir, "--proxy-server=http://"+proxy.Addr().String(),
		"--proxy-bypass-list=<-loopback>", "--window-size=1200,900", "--screenshot="+shot, "file://"+page)...)
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

// The page makes no network request in a real headless Chromium, whose
// every request must go through a proxy of the test's; a control page that
// fetches one image shows that the proxy does see a page's requests.
// (TestHTMLInBrowser checks what it shows.)
func TestHTMLMakesNoRequest(t *testing.T) {
	privtest.Deadline(t)
	chromium := findChromium(t)
	dir := t.TempDir()
	control := filepath.Join(dir, "control.html")
	if err := os.WriteFile(control, []byte(`<!DOCTYPE html><img src="http://canary.cudatrace.test/x.png">`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, reqs := openInChromium(t, chromium, control); !slices.ContainsFunc(reqs, func(r string) bool { return strings.Contains(r, "canary.cudatrace.test") }) {
		t.Fatalf("the control page's request did not reach the proxy (saw %q): the check below would prove nothing", reqs)
	}
	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, []byte(renderHTML(t, reportfixture.Build(t, reportfixture.All[0]))), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, reqs := openInChromium(t, chromium, page); len(reqs) > 0 {
		t.Errorf("the report made network requests: %q", reqs)
	}
}
