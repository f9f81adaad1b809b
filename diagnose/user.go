package diagnose

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/cudatrace/cudatrace/internal/accounts"
	"github.com/cudatrace/cudatrace/tracer"
)

// -u is resolved against the host's own /etc/passwd and /etc/group, parsed
// by internal/accounts: os/user needs cgo for its NSS lookups, and cudatrace
// is a static binary that must work in a scratch image with no /etc/passwd.
// Users that exist only in LDAP or sssd are given as UID:GID.
var (
	passwdFile      = "/etc/passwd"
	groupFile       = "/etc/group"
	overflowUIDFile = "/proc/sys/kernel/overflowuid"
	overflowGIDFile = "/proc/sys/kernel/overflowgid"
)

// LookupUser resolves -u: USER, UID, or either followed by :GROUP or :GID.
// Numbers need no entry in /etc/passwd; nobody is the kernel's overflow
// uid and gid when /etc/passwd lacks it (scratch images).
func LookupUser(spec string) (*tracer.Cred, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || (hasGroup && groupPart == "") {
		return nil, fmt.Errorf("-u %q: give USER, UID, USER:GROUP or UID:GID", spec)
	}
	users, err := readAccounts(passwdFile, accounts.ParsePasswd)
	if err != nil {
		return nil, err
	}
	cred := &tracer.Cred{}
	var entry accounts.User
	var found bool
	if n, ok := accounts.ParseID(userPart); ok {
		cred.UID = n
		entry, found = users.ByID(n)
	} else {
		entry, found = users.ByName(userPart)
		if !found && userPart == "nobody" {
			entry, found = overflowNobody(), true
		}
		if !found {
			return nil, fmt.Errorf("unknown user %q (not in %s; give UID:GID for a user only a directory service knows)", userPart, passwdFile)
		}
		cred.UID = entry.UID
	}
	if found {
		cred.User, cred.GID, cred.Home = entry.Name, entry.GID, entry.Home
	}
	groups, err := readAccounts(groupFile, accounts.ParseGroup)
	if err != nil {
		return nil, err
	}
	switch {
	case hasGroup:
		if n, ok := accounts.ParseID(groupPart); ok {
			cred.GID = n
		} else if g, ok := groups.ByName(groupPart); ok {
			cred.GID = g.GID
		} else {
			return nil, fmt.Errorf("unknown group %q (not in %s; give a GID)", groupPart, groupFile)
		}
	case !found:
		return nil, fmt.Errorf("uid %s has no entry in %s: give UID:GID", userPart, passwdFile)
	}
	// Supplementary groups, as initgroups(3) sets them: the primary group
	// and every group that lists the user by name.
	cred.Groups = append([]uint32{cred.GID}, groups.Supplementary(cred.User, cred.GID)...)
	return cred, nil
}

// overflowNobody is the kernel's nobody: the ids that unmapped ids show as.
func overflowNobody() accounts.User {
	read := func(path string) uint32 {
		b, err := os.ReadFile(path)
		if n, ok := accounts.ParseID(strings.TrimSpace(string(b))); err == nil && ok {
			return n
		}
		return 65534
	}
	return accounts.User{Name: "nobody", UID: read(overflowUIDFile), GID: read(overflowGIDFile)}
}

// readAccounts parses the host's account file path; a missing file has no
// entries.
func readAccounts[T any](path string, parse func(io.Reader) (T, error)) (T, error) {
	var none T
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return none, nil
	}
	if err != nil {
		return none, fmt.Errorf("read %s: %w", path, err)
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	entries, err := parse(f)
	if err != nil {
		return none, fmt.Errorf("read %s: %w", path, err)
	}
	return entries, nil
}
