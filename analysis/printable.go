package analysis

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Printable makes text from the target, a trace, a report file or a strace
// log safe to print: every rune that strconv.Quote would escape (control
// characters such as ESC, BEL, CR and LF, invalid UTF-8, invisible format
// characters like bidi overrides) is written as Quote writes it (\x1b, \n,
// \u202e), so nothing reaches a terminal raw and one call stays one line.
// Printable text, quotes and backslashes included, is unchanged.
//
// FormatCall already quotes paths with strconv.Quote; Printable is the
// same escaping for text that is not quoted, and renderers pass every
// string through it.
func Printable(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || !strconv.IsPrint(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])>>4, 16))
			b.WriteString(strconv.FormatUint(uint64(s[i])&0xf, 16))
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\x1b'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
