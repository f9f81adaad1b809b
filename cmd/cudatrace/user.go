package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/tracer"
)

// -u is resolved against the host's own /etc/passwd and /etc/group, parsed
// here in Go: os/user needs cgo for its NSS lookups, and cudatrace is a
// static binary that must work in a scratch image with no /etc/passwd.
// Users that exist only in LDAP or sssd are given as UID:GID.
var (
	passwdFile      = "/etc/passwd"
	groupFile       = "/etc/group"
	overflowUIDFile = "/proc/sys/kernel/overflowuid"
	overflowGIDFile = "/proc/sys/kernel/overflowgid"
)

// maxAccountFile bounds what is read of /etc/passwd or /etc/group.
const maxAccountFile = 16 << 20

type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

// lookupUser resolves -u: USER, UID, or either followed by :GROUP or :GID.
// Numbers need no entry in /etc/passwd; nobody is the kernel's overflow
// uid and gid when /etc/passwd lacks it (scratch images).
func lookupUser(spec string) (*tracer.Cred, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || (hasGroup && groupPart == "") {
		return nil, fmt.Errorf("-u %q: give USER, UID, USER:GROUP or UID:GID", spec)
	}
	users, err := readPasswd(passwdFile)
	if err != nil {
		return nil, err
	}
	cred := &tracer.Cred{}
	var entry *passwdEntry
	if n, ok := parseID(userPart); ok {
		cred.UID = n
		entry = findUser(users, func(e passwdEntry) bool { return e.uid == n })
	} else {
		entry = findUser(users, func(e passwdEntry) bool { return e.name == userPart })
		if entry == nil && userPart == "nobody" {
			entry = overflowNobody()
		}
		if entry == nil {
			return nil, fmt.Errorf("unknown user %q (not in %s; give UID:GID for a user only a directory service knows)", userPart, passwdFile)
		}
		cred.UID = entry.uid
	}
	if entry != nil {
		cred.User, cred.GID, cred.Home = entry.name, entry.gid, entry.home
	}
	groups, err := readGroups(groupFile)
	if err != nil {
		return nil, err
	}
	switch {
	case hasGroup:
		if n, ok := parseID(groupPart); ok {
			cred.GID = n
		} else if g := findGroup(groups, groupPart); g != nil {
			cred.GID = g.gid
		} else {
			return nil, fmt.Errorf("unknown group %q (not in %s; give a GID)", groupPart, groupFile)
		}
	case entry == nil:
		return nil, fmt.Errorf("uid %s has no entry in %s: give UID:GID", userPart, passwdFile)
	}
	// Supplementary groups, as initgroups(3) sets them: the primary group
	// and every group that lists the user by name.
	cred.Groups = []uint32{cred.GID}
	if cred.User != "" {
		for _, g := range groups {
			if g.gid != cred.GID && g.hasMember(cred.User) {
				cred.Groups = append(cred.Groups, g.gid)
			}
		}
	}
	return cred, nil
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func findUser(users []passwdEntry, match func(passwdEntry) bool) *passwdEntry {
	for i := range users {
		if match(users[i]) {
			return &users[i]
		}
	}
	return nil
}

// overflowNobody is the kernel's nobody: the ids that unmapped ids show as.
func overflowNobody() *passwdEntry {
	read := func(path string) uint32 {
		b, err := os.ReadFile(path)
		if n, ok := parseID(strings.TrimSpace(string(b))); err == nil && ok {
			return n
		}
		return 65534
	}
	return &passwdEntry{name: "nobody", uid: read(overflowUIDFile), gid: read(overflowGIDFile)}
}

// readAccountFile returns the colon-separated lines of path; a missing
// file has none.
func readAccountFile(path string, fields int) ([][]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue // comments and NIS compat lines
		}
		if parts := strings.Split(line, ":"); len(parts) >= fields {
			out = append(out, parts)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// readPasswd parses name:password:uid:gid:gecos:home:shell lines.
func readPasswd(path string) ([]passwdEntry, error) {
	lines, err := readAccountFile(path, 4)
	if err != nil {
		return nil, err
	}
	var out []passwdEntry
	for _, p := range lines {
		uid, ok1 := parseID(p[2])
		gid, ok2 := parseID(p[3])
		if ok1 && ok2 && p[0] != "" {
			e := passwdEntry{name: p[0], uid: uid, gid: gid}
			if len(p) > 5 {
				e.home = p[5]
			}
			out = append(out, e)
		}
	}
	return out, nil
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

func (g groupEntry) hasMember(user string) bool {
	for _, m := range g.members {
		if m == user {
			return true
		}
	}
	return false
}

// readGroups parses name:password:gid:member,member lines.
func readGroups(path string) ([]groupEntry, error) {
	lines, err := readAccountFile(path, 3)
	if err != nil {
		return nil, err
	}
	var out []groupEntry
	for _, p := range lines {
		gid, ok := parseID(p[2])
		if !ok {
			continue
		}
		g := groupEntry{name: p[0], gid: gid}
		if len(p) > 3 && p[3] != "" {
			g.members = strings.Split(p[3], ",")
		}
		out = append(out, g)
	}
	return out, nil
}

func findGroup(groups []groupEntry, name string) *groupEntry {
	for i := range groups {
		if groups[i].name == name {
			return &groups[i]
		}
	}
	return nil
}
