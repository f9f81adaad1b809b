package diagnose

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// withAccounts points -u's lookups at the given passwd and group text
// ("" means the file is missing, as in a scratch image).
func withAccounts(t *testing.T, passwd, group string) {
	t.Helper()
	dir := t.TempDir()
	set := func(v *string, name, text string) {
		old := *v
		*v = filepath.Join(dir, name)
		t.Cleanup(func() { *v = old })
		if text != "" {
			if err := os.WriteFile(*v, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	set(&passwdFile, "passwd", passwd)
	set(&groupFile, "group", group)
}

func TestLookupUser(t *testing.T) {
	withAccounts(t,
		"# comment\nroot:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:Alice:/home/alice:/bin/sh\n+nis\nbroken:x:abc:1\n",
		"root:x:0:\nalice:x:1000:\nvideo:x:44:alice,bob\nrender:x:105:bob\ndocker:x:999:carol,alice\n")
	for _, tc := range []struct {
		spec     string
		uid, gid uint32
		user     string
		groups   []uint32
	}{
		{"alice", 1000, 1000, "alice", []uint32{1000, 44, 999}},
		{"1000", 1000, 1000, "alice", []uint32{1000, 44, 999}},
		{"alice:video", 1000, 44, "alice", []uint32{44, 999}},
		{"alice:105", 1000, 105, "alice", []uint32{105, 44, 999}},
		{"4242:4343", 4242, 4343, "", []uint32{4343}}, // no entry needed
		{"root", 0, 0, "root", []uint32{0}},
	} {
		c, err := LookupUser(tc.spec)
		if err != nil {
			t.Errorf("-u %s: %v", tc.spec, err)
			continue
		}
		if c.UID != tc.uid || c.GID != tc.gid || c.User != tc.user || !slices.Equal(c.Groups, tc.groups) {
			t.Errorf("-u %s = %+v, want uid %d gid %d user %q groups %v", tc.spec, *c, tc.uid, tc.gid, tc.user, tc.groups)
		}
		// HOME comes from the entry (it used to stay /root).
		if want := map[string]string{"alice": "/home/alice", "root": "/root"}[tc.user]; c.Home != want {
			t.Errorf("-u %s: home %q, want %q", tc.spec, c.Home, want)
		}
	}
	for spec, want := range map[string]string{
		"mallory":     `unknown user "mallory"`,
		"4242":        "uid 4242 has no entry",
		"alice:nogrp": `unknown group "nogrp"`,
		"alice:":      "give USER, UID",
		":44":         "give USER, UID",
		"broken":      `unknown user "broken"`,
	} {
		if _, err := LookupUser(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("-u %s: %v, want %q", spec, err, want)
		}
	}
}

// A scratch image has no /etc/passwd: nobody is the kernel's overflow id
// and numeric ids need nothing.
func TestLookupUserWithoutPasswd(t *testing.T) {
	withAccounts(t, "", "")
	c, err := LookupUser("nobody")
	if err != nil || c.UID != 65534 || c.GID != 65534 || c.User != "nobody" {
		t.Errorf("-u nobody without /etc/passwd: %+v, %v", c, err)
	}
	c, err = LookupUser("65534:65534")
	if err != nil || c.UID != 65534 || c.GID != 65534 {
		t.Errorf("-u 65534:65534: %+v, %v", c, err)
	}
}
