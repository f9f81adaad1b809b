package accounts

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestParsePasswd(t *testing.T) {
	text := strings.Join([]string{
		"# comment",
		"root:x:0:0:root:/root:/bin/sh",
		"#nobody:x:1:1::/:/bin/false", // a commented-out entry
		"alice:x:1000:1000:Alice:/home/alice:/bin/sh",
		"+nis",                  // NIS compat: a directory service's entries
		"+@staff:::::::",        // a netgroup
		"-mallory:x:7:7::",      // an excluded user
		"broken:x:abc:1",        // uid not a number
		"neg:x:-1:1",            // nor is this
		"big:x:4294967296:1:::", // past 32 bits
		":x:5:5::/:",            // no name
		"short:x:6",             // three fields
		"bare:x:7:8",            // four fields: no home
		"",
		"bad",
		"dup:x:1000:9::/d:", // a second entry for uid 1000
	}, "\n")
	us, err := ParsePasswd(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := Users{
		{"root", 0, 0, "/root"},
		{"alice", 1000, 1000, "/home/alice"},
		{"bare", 7, 8, ""},
		{"dup", 1000, 9, "/d"},
	}
	if !slices.Equal(us, want) {
		t.Fatalf("parsed %+v, want %+v", us, want)
	}
	for _, tc := range []struct {
		uid  uint32
		want string
	}{{0, "root"}, {1000, "alice"}, {1, ""}, {7, "bare"}, {42, ""}} {
		if u, _ := us.ByID(tc.uid); u.Name != tc.want {
			t.Errorf("uid %d = %q, want %q", tc.uid, u.Name, tc.want)
		}
	}
	for name, ok := range map[string]bool{"alice": true, "bare": true, "broken": false, "mallory": false, "+nis": false, "": false} {
		if u, got := us.ByName(name); got != ok || (ok && u.Name != name) {
			t.Errorf("ByName(%q) = %+v, %v", name, u, got)
		}
	}
}

func TestParseGroup(t *testing.T) {
	text := "# comment\nroot:x:0:\nvideo:x:44:alice,bob\nrender:x:105:bob\ndocker:x:999:carol,,alice,\n+:::\nbad:x:nope:alice\nnomem:x:7\n:x:8:alice\nvideo2:x:44:alice\nalice:x:1000:\n"
	gs, err := ParseGroup(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range gs {
		names = append(names, g.Name)
	}
	if want := []string{"root", "video", "render", "docker", "nomem", "video2", "alice"}; !slices.Equal(names, want) {
		t.Errorf("groups %v, want %v", names, want)
	}
	if g, ok := gs.ByName("docker"); !ok || g.GID != 999 || !slices.Equal(g.Members, []string{"carol", "alice"}) {
		t.Errorf("docker = %+v, %v", g, ok)
	}
	if _, ok := gs.ByName("bad"); ok {
		t.Error("a group with a gid that is not a number was parsed")
	}
	for _, tc := range []struct {
		user    string
		primary uint32
		want    []uint32
	}{
		{"alice", 1000, []uint32{44, 999}}, // video2 repeats gid 44: once
		{"alice", 44, []uint32{999}},       // the primary group is not repeated
		{"bob", 100, []uint32{44, 105}},
		{"carol", 0, []uint32{999}},
		{"dave", 0, nil},
		{"", 0, nil}, // an empty member never matches
	} {
		if got := gs.Supplementary(tc.user, tc.primary); !slices.Equal(got, tc.want) {
			t.Errorf("Supplementary(%q, %d) = %v, want %v", tc.user, tc.primary, got, tc.want)
		}
	}
}

// A file past MaxBytes yields the entries before the bound, none cut in
// half, and ErrTooLarge; nothing past the bound is read.
func TestParseBounded(t *testing.T) {
	line := "u:x:1:1::/home/u:/bin/sh\n"
	var b bytes.Buffer
	whole := 0
	for b.Len()+len(line) < MaxBytes-10 {
		b.WriteString(line)
		whole++
	}
	b.WriteString(strings.Repeat("#", MaxBytes-10-b.Len()-1) + "\n")
	// The bound falls inside this entry: read whole, it would be uid 123456.
	b.WriteString("cut:x:123456:1::/:\n")
	b.WriteString("late:x:2:2::/:\n")
	r := &countingReader{r: bytes.NewReader(b.Bytes())}
	us, err := ParsePasswd(r)
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if r.n > MaxBytes+1 {
		t.Errorf("read %d bytes, want at most %d", r.n, MaxBytes+1)
	}
	if _, ok := us.ByName("cut"); ok {
		t.Error("the entry the bound cut was parsed")
	}
	if _, ok := us.ByName("late"); ok {
		t.Error("an entry past the bound was parsed")
	}
	if len(us) != whole {
		t.Errorf("%d entries before the bound, want %d", len(us), whole)
	}
	// One line as long as the bound: no entry, no panic.
	if us, err := ParseGroup(strings.NewReader("g:x:1:" + strings.Repeat("m,", MaxBytes))); !errors.Is(err, ErrTooLarge) || len(us) != 0 {
		t.Errorf("one huge line: %d groups, %v", len(us), err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestParseID(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "65534": true, "4294967295": true, "4294967296": false, "-1": false, "+1": false, "": false, "1e3": false, " 1": false} {
		if _, ok := ParseID(s); ok != want {
			t.Errorf("ParseID(%q) ok = %v, want %v", s, ok, want)
		}
	}
}
