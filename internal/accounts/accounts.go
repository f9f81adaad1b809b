// Package accounts is cudatrace's one parser of /etc/passwd and /etc/group
// (passwd(5), group(5)). cudatrace is a static binary with no NSS: -u and
// the snapshot read the files themselves, the host's or a target's. The
// parser takes a reader and the caller opens, so that files under a
// target's root are still read through snapshot's guarded opener.
package accounts

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MaxBytes bounds what is read of one file; a real one is far smaller.
const MaxBytes = 16 << 20

// ErrTooLarge is returned, with the entries before the bound, for a file
// longer than MaxBytes.
var ErrTooLarge = errors.New("larger than 16 MiB")

// User is one /etc/passwd entry.
type User struct {
	Name     string
	UID, GID uint32
	Home     string
}

// Group is one /etc/group entry.
type Group struct {
	Name    string
	GID     uint32
	Members []string
}

// Users are the entries of one passwd file, in its order.
type Users []User

// Groups are the entries of one group file, in its order.
type Groups []Group

// ParseID parses a decimal uid or gid.
func ParseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

// ParsePasswd parses name:password:uid:gid:gecos:home:shell lines. A line
// with fewer than four fields, no name or an id that is not a number is
// skipped.
func ParsePasswd(r io.Reader) (Users, error) {
	var out Users
	err := parse(r, 4, func(f []string) {
		uid, ok1 := ParseID(f[2])
		gid, ok2 := ParseID(f[3])
		if ok1 && ok2 {
			u := User{Name: f[0], UID: uid, GID: gid}
			if len(f) > 5 {
				u.Home = f[5]
			}
			out = append(out, u)
		}
	})
	return out, err
}

// ParseGroup parses name:password:gid:member,member lines. A line with
// fewer than three fields, no name or a gid that is not a number is
// skipped.
func ParseGroup(r io.Reader) (Groups, error) {
	var out Groups
	err := parse(r, 3, func(f []string) {
		gid, ok := ParseID(f[2])
		if !ok {
			return
		}
		g := Group{Name: f[0], GID: gid}
		if len(f) > 3 {
			for _, m := range strings.Split(f[3], ",") {
				if m != "" {
					g.Members = append(g.Members, m)
				}
			}
		}
		out = append(out, g)
	})
	return out, err
}

// parse calls entry with the fields of each line that has at least fields
// of them and a name. Comments and NIS compat lines ("+name", "-name",
// "+@netgroup") are skipped: they name entries a directory service holds.
func parse(r io.Reader, fields int, entry func([]string)) error {
	data, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return err
	}
	if len(data) > MaxBytes {
		// The line the bound cut is not an entry.
		data = data[:bytes.LastIndexByte(data[:MaxBytes], '\n')+1]
		err = ErrTooLarge
	}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		if f := strings.Split(line, ":"); len(f) >= fields && f[0] != "" {
			entry(f)
		}
	}
	return err
}

// ByName returns the first entry named name.
func (us Users) ByName(name string) (User, bool) {
	for _, u := range us {
		if u.Name == name {
			return u, true
		}
	}
	return User{}, false
}

// ByID returns the first entry with uid.
func (us Users) ByID(uid uint32) (User, bool) {
	for _, u := range us {
		if u.UID == uid {
			return u, true
		}
	}
	return User{}, false
}

// ByName returns the first group named name.
func (gs Groups) ByName(name string) (Group, bool) {
	for _, g := range gs {
		if g.Name == name {
			return g, true
		}
	}
	return Group{}, false
}

// Supplementary returns the gids of the groups that list user as a member,
// other than primary, in file order and each once: what initgroups(3) adds
// to the primary group. A user with no name has none.
func (gs Groups) Supplementary(user string, primary uint32) []uint32 {
	if user == "" {
		return nil
	}
	var out []uint32
	for _, g := range gs {
		for _, m := range g.Members {
			if m == user && g.GID != primary && !slices.Contains(out, g.GID) {
				out = append(out, g.GID)
				break
			}
		}
	}
	return out
}
