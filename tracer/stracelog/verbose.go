package stracelog

import "strings"

// unverbose rewrites what strace -X verbose prints, a raw value followed by
// its decoding in a comment ("-100 /* AT_FDCWD */", "0x80002 /*
// O_RDWR|O_CLOEXEC */", "st_rdev=0x107 /* makedev(0x1, 0x7) */"), into the
// decoding alone, which is what the default -X abbrev prints and the
// argument parsers read. Quoted strings are copied as they are. A comment
// that does not follow a number (execve's "/* 39 vars */" follows an
// address, which is one) is left alone.
func unverbose(s string) string {
	if !strings.Contains(s, " /* ") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' {
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				b.WriteString(s[i:])
				return b.String()
			}
			b.WriteString(s[i : j+1])
			i = j
			continue
		}
		if c == ' ' && strings.HasPrefix(s[i:], " /* ") {
			end := strings.Index(s[i+4:], " */")
			if end >= 0 {
				out := b.String()
				tok := rawToken(out)
				if tok > 0 {
					b.Reset()
					b.WriteString(out[:len(out)-tok])
					b.WriteString(s[i+4 : i+4+end])
					i += 4 + end + len(" */") - 1
					continue
				}
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// rawToken is the length of the number that ends s ("-100", "0x80002",
// "020666"), or 0 when s does not end in one.
func rawToken(s string) int {
	i := len(s)
	for i > 0 && isAlnum(s[i-1]) {
		i--
	}
	if i < len(s) && i > 0 && s[i-1] == '-' {
		i--
	}
	tok := s[i:]
	if tok == "" || !(tok[0] >= '0' && tok[0] <= '9' || tok[0] == '-' && len(tok) > 1) {
		return 0
	}
	return len(tok)
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// decodeDevT splits a raw dev_t as glibc encodes it in struct stat and as
// mknod takes it (what -X raw prints instead of makedev(...)).
func decodeDevT(v uint64) (major, minor uint32) {
	major = uint32((v>>32)&0xfffff000 | (v>>8)&0xfff)
	minor = uint32((v>>12)&0xffffff00 | v&0xff)
	return major, minor
}
