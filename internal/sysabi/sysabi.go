// Package sysabi is cudatrace's one table of Linux's open(2) flags and
// st_mode file types: the analysis and the fake target render them as strace
// prints them, and the strace-log importer reads strace's names back through
// the same table, so a flag means one thing everywhere.
package sysabi

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Bit is one named flag value.
type Bit struct {
	Value uint64
	Name  string
}

// accessModes are open(2)'s O_ACCMODE values; they are not bits.
var accessModes = []Bit{{unix.O_RDONLY, "O_RDONLY"}, {unix.O_WRONLY, "O_WRONLY"}, {unix.O_RDWR, "O_RDWR"}}

// openFlags are open(2)'s other flags in the order strace prints them:
// the multi-bit O_TMPFILE and O_SYNC first (each includes a single bit
// listed after it), then the single bits in value order.
var openFlags = []Bit{
	{unix.O_TMPFILE, "O_TMPFILE"},
	{unix.O_SYNC, "O_SYNC"},
	{unix.O_CREAT, "O_CREAT"},
	{unix.O_EXCL, "O_EXCL"},
	{unix.O_NOCTTY, "O_NOCTTY"},
	{unix.O_TRUNC, "O_TRUNC"},
	{unix.O_APPEND, "O_APPEND"},
	{unix.O_NONBLOCK, "O_NONBLOCK"},
	{unix.O_DSYNC, "O_DSYNC"},
	{unix.O_ASYNC, "O_ASYNC"},
	{unix.O_DIRECT, "O_DIRECT"},
	{unix.O_LARGEFILE, "O_LARGEFILE"},
	{unix.O_DIRECTORY, "O_DIRECTORY"},
	{unix.O_NOFOLLOW, "O_NOFOLLOW"},
	{unix.O_NOATIME, "O_NOATIME"},
	{unix.O_CLOEXEC, "O_CLOEXEC"},
	{unix.O_PATH, "O_PATH"},
}

// openFlagAliases are other spellings strace or libc use for the same bits.
var openFlagAliases = []Bit{{unix.O_NDELAY, "O_NDELAY"}, {unix.O_ASYNC, "FASYNC"}, {unix.O_RSYNC, "O_RSYNC"}}

// OpenFlagsString renders open(2) flags the way strace does:
// O_RDWR|O_CLOEXEC. Unknown bits are kept as a hex remainder, so nothing is
// hidden.
func OpenFlagsString(flags uint64) string {
	parts := []string{"O_ACCMODE"}
	for _, m := range accessModes {
		if flags&unix.O_ACCMODE == m.Value {
			parts[0] = m.Name
		}
	}
	rest := flags &^ unix.O_ACCMODE
	for _, f := range openFlags {
		// x/sys gives O_LARGEFILE as 0 where it is implicit (64-bit).
		if f.Value != 0 && rest&f.Value == f.Value {
			parts = append(parts, f.Name)
			rest &^= f.Value
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", rest))
	}
	return strings.Join(parts, "|")
}

// OpenFlagValues maps every open(2) flag name strace prints (O_RDWR,
// O_CLOEXEC, FASYNC) to its value, for reading strace's logs.
func OpenFlagValues() map[string]uint64 {
	m := map[string]uint64{}
	for _, table := range [][]Bit{accessModes, openFlags, openFlagAliases} {
		for _, f := range table {
			m[f.Name] = f.Value
		}
	}
	return m
}

// FileType is one st_mode file type.
type FileType struct {
	Mode   uint32 // the S_IFMT value
	Symbol string // as strace prints it: S_IFCHR
	Noun   string // in a sentence: character device
}

// FileTypes are Linux's seven file types.
var FileTypes = []FileType{
	{unix.S_IFREG, "S_IFREG", "regular file"},
	{unix.S_IFDIR, "S_IFDIR", "directory"},
	{unix.S_IFCHR, "S_IFCHR", "character device"},
	{unix.S_IFBLK, "S_IFBLK", "block device"},
	{unix.S_IFIFO, "S_IFIFO", "FIFO"},
	{unix.S_IFSOCK, "S_IFSOCK", "socket"},
	{unix.S_IFLNK, "S_IFLNK", "symlink"},
}

// FileTypeOf is the file type of an st_mode; false when its S_IFMT bits
// are none of Linux's seven.
func FileTypeOf(mode uint32) (FileType, bool) {
	for _, t := range FileTypes {
		if mode&unix.S_IFMT == t.Mode {
			return t, true
		}
	}
	return FileType{}, false
}
