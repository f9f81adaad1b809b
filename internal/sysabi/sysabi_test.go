package sysabi

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenFlagsString(t *testing.T) {
	for flags, want := range map[uint64]string{
		unix.O_RDONLY:                               "O_RDONLY",
		unix.O_RDWR | unix.O_CLOEXEC:                "O_RDWR|O_CLOEXEC",
		unix.O_WRONLY | unix.O_CREAT | unix.O_TRUNC: "O_WRONLY|O_CREAT|O_TRUNC",
		unix.O_RDWR | unix.O_SYNC:                   "O_RDWR|O_SYNC", // not O_DSYNC|0x100000
		unix.O_RDWR | unix.O_DSYNC:                  "O_RDWR|O_DSYNC",
		unix.O_RDWR | unix.O_TMPFILE:                "O_RDWR|O_TMPFILE", // not O_DIRECTORY|...
		unix.O_RDWR | unix.O_DIRECTORY:              "O_RDWR|O_DIRECTORY",
		3:                                           "O_ACCMODE",
		unix.O_RDWR | 1<<30:                         "O_RDWR|0x40000000",
	} {
		if got := OpenFlagsString(flags); got != want {
			t.Errorf("OpenFlagsString(%#x) = %q, want %q", flags, got, want)
		}
	}
}

// Every name OpenFlagsString prints reads back to its value.
func TestOpenFlagRoundTrip(t *testing.T) {
	values := OpenFlagValues()
	for _, table := range [][]Bit{accessModes, openFlags} {
		for _, f := range table {
			if v, ok := values[f.Name]; !ok || v != f.Value {
				t.Errorf("%s = %#x %v, want %#x", f.Name, v, ok, f.Value)
			}
			if table[0] != accessModes[0] && f.Value != 0 && OpenFlagsString(f.Value|unix.O_RDWR) != "O_RDWR|"+f.Name {
				t.Errorf("%s renders as %s", f.Name, OpenFlagsString(f.Value|unix.O_RDWR))
			}
		}
	}
	if values["FASYNC"] != unix.O_ASYNC || values["O_NDELAY"] != unix.O_NONBLOCK {
		t.Errorf("aliases: %#x %#x", values["FASYNC"], values["O_NDELAY"])
	}
}

func TestFileTypeOf(t *testing.T) {
	if ft, ok := FileTypeOf(unix.S_IFCHR | 0o666); !ok || ft.Symbol != "S_IFCHR" || ft.Noun != "character device" {
		t.Errorf("S_IFCHR|0666: %+v %v", ft, ok)
	}
	if ft, ok := FileTypeOf(unix.S_IFLNK | 0o777); !ok || ft.Symbol != "S_IFLNK" {
		t.Errorf("S_IFLNK: %+v %v", ft, ok)
	}
	if _, ok := FileTypeOf(0o644); ok {
		t.Error("a mode with no type bits has a type")
	}
}
