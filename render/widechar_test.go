package render

import (
	"strings"
	"testing"

	"github.com/clipperhouse/displaywidth"
)

// columnStart is the display column at which cell starts in line, or -1.
func columnStart(line, cell string) int {
	i := strings.Index(line, cell)
	if i < 0 {
		return -1
	}
	return displaywidth.String(line[:i])
}

// A path of CJK characters and an emoji takes two columns a character:
// the columns after it still line up, and no line is wider than asked.
func TestTimelineWideCharactersLineUp(t *testing.T) {
	rows := []timelineRow{
		{time: "0.001", proc: "python[10]", call: `openat("/data/模型/权重🚀.bin", O_RDONLY)`, result: "EACCES", dev: "-"},
		{time: "0.002", proc: "python[10]", call: `stat("/dev/nvidiactl")`, result: "0", dev: "nvidiactl"},
		{time: "0.003", proc: "python[10]", call: `openat("/データ/` + strings.Repeat("長い名前", 12) + `", O_RDWR)`, result: "ENOENT", dev: "-"},
	}
	for _, width := range []int{72, 100, 400} {
		var b strings.Builder
		if err := writeTimelineTable(&b, rows, width, palette{}); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		want := columnStart(lines[0], "RESULT")
		for _, r := range rows {
			found := false
			for _, l := range lines[2:] {
				if !strings.HasPrefix(l, r.time) {
					continue
				}
				found = true
				if got := columnStart(l, "  "+r.result+"  ") + 2; got != want {
					t.Errorf("width %d: RESULT of %q starts at column %d, header at %d:\n%s", width, r.call, got, want, b.String())
				}
			}
			if !found {
				t.Errorf("width %d: no line for %q", width, r.call)
			}
		}
		for _, l := range lines {
			if n := displaywidth.String(l); n > width && width < 400 {
				t.Errorf("width %d: %d-column line %q", width, n, l)
			}
		}
	}
}

func TestWrapCallWideCharacters(t *testing.T) {
	in := `openat("/` + strings.Repeat("模", 30) + `", O_RDONLY)`
	for _, width := range []int{9, 20, 31} {
		got := wrapCall(in, width)
		if strings.Join(got, "") == "" || !strings.Contains(strings.Join(got, ""), strings.Repeat("模", 2)) {
			t.Fatalf("wrapCall(%d) lost the text: %q", width, got)
		}
		for _, l := range got {
			if n := displaywidth.String(l); n > width {
				t.Errorf("wrapCall width %d: %d-column line %q", width, n, l)
			}
		}
		if joined := strings.ReplaceAll(strings.Join(got, ""), "  ", ""); strings.Count(joined, "模") != 30 {
			t.Errorf("wrapCall width %d dropped characters: %q", width, got)
		}
	}
}
