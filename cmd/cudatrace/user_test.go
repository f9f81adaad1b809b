package main

import (
	"os/user"
	"testing"
)

// -u gives the target the user's home from the passwd entry (HOME used to
// stay /root).
func TestLookupUserHome(t *testing.T) {
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody here")
	}
	for _, name := range []string{"nobody", u.Uid} {
		c, err := lookupUser(name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Home != u.HomeDir || c.User != "nobody" {
			t.Errorf("lookupUser(%q) = %+v, want home %q", name, c, u.HomeDir)
		}
	}
}
