package stracelog

import (
	"strconv"
	"strings"

	"github.com/cudatrace/cudatrace/tracer"
)

// splitArgs splits "a, {b, c}, "d, e") = 0 <0.1>" into its top-level
// arguments and the text after the closing parenthesis. It is one pass over
// s: quotes (with backslash escapes), brackets and the <...> annotations of
// -y/-yy hide the commas inside them. ok is false when the closing
// parenthesis is missing (a line cut off).
func splitArgs(s string) (args []string, rest string, ok bool) {
	return scanArgs(s, true)
}

// skipArgs is splitArgs for calls nobody looks into: it only finds the end.
func skipArgs(s string) (rest string, ok bool) {
	_, rest, ok = scanArgs(s, false)
	return rest, ok
}

func scanArgs(s string, collect bool) (args []string, rest string, ok bool) {
	depth, angle := 0, 0
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			// Skip the string; an unterminated one means the line was cut.
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(s) {
				return nil, "", false
			}
		case c == '<':
			// An fd annotation follows the fd number, a name or another
			// annotation's path: 3</dev/null<char 1:3>>, AT_FDCWD</root>.
			if i > 0 && (isWordByte(s[i-1]) || angle > 0) {
				angle++
			}
		case c == '>':
			// "->" inside a socket annotation (TCP:[a->b]) is not a close.
			if angle > 0 && s[i-1] != '-' {
				angle--
			}
		case angle > 0:
			// Inside an annotation only the angle brackets count.
		case c == '(' || c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			if depth > 0 {
				depth--
			}
		case c == ')':
			if depth > 0 {
				depth--
				continue
			}
			if a := strings.TrimSpace(s[start:i]); collect && (a != "" || len(args) > 0) {
				args = append(args, a)
			}
			return args, s[i+1:], true
		case c == ',' && depth == 0:
			if collect {
				args = append(args, strings.TrimSpace(s[start:i]))
			}
			start = i + 1
		}
	}
	return nil, "", false
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '>'
}

// result is what follows " = ".
type result struct {
	val     int64 // the value, or -errno
	unknown bool  // "= ?": the call never returned (exit_group, a killed task)
	anno    annotation
}

// parseResult reads " = 3</dev/nvidiactl<char 195:255>> <0.000015>" or
// " = -1 EPERM (Operation not permitted)". ok is false when there is no "=".
func parseResult(rest string) (r result, ok bool) {
	s := strings.TrimLeft(rest, " ")
	if s == "" || s[0] != '=' {
		return r, false
	}
	s = strings.TrimLeft(s[1:], " ")
	if strings.HasPrefix(s, "?") {
		r.unknown = true
		return r, true
	}
	num := s
	if i := strings.IndexAny(s, " <"); i >= 0 {
		num = s[:i]
	}
	v, err := strconv.ParseInt(num, 0, 64)
	if err != nil {
		u, uerr := strconv.ParseUint(num, 0, 64)
		if uerr != nil {
			return r, false
		}
		v = int64(u)
	}
	r.val = v
	s = s[len(num):]
	if strings.HasPrefix(s, "<") {
		end := annotationEnd(s)
		if end < 0 {
			return r, false
		}
		r.anno = parseAnnotation(s[1 : end-1])
		s = s[end:]
	}
	if strings.HasPrefix(num, "-") {
		// "-1 ENOENT (No such file or directory)", or "-1 (errno 524)".
		// Without either the line was cut, and -1 would read as EPERM.
		s = strings.TrimLeft(s, " ")
		if e := errnoNumber(firstWord(s)); e != 0 {
			r.val = -int64(e)
		} else if n, i := leadingInt(strings.TrimPrefix(s, "(errno ")); strings.HasPrefix(s, "(errno ") && i > 0 {
			r.val = -int64(n)
		} else {
			return r, false
		}
	}
	return r, true
}

func firstWord(s string) string {
	if i := strings.IndexByte(s, ' '); i >= 0 {
		return s[:i]
	}
	return s
}

// annotationEnd returns the index just past the '>' that closes the '<' at
// s[0], or -1.
func annotationEnd(s string) int {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<':
			depth++
		case '>':
			if i > 0 && s[i-1] == '-' {
				continue
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// annotation is what -y/-yy print after an fd: the path and, with -yy, the
// device number of a device node.
type annotation struct {
	present bool
	path    string
	dev     *tracer.Dev
	char    bool // the device is a character device
}

// parseAnnotation reads the inside of <...>: "/dev/nvidiactl<char 195:255>",
// "/root", "/dev/nvidia-uvm (deleted)".
func parseAnnotation(s string) annotation {
	a := annotation{present: true}
	if strings.HasSuffix(s, ">") {
		if i := strings.LastIndex(s, "<"); i >= 0 {
			a.dev, a.char = parseDevAnnotation(s[i+1 : len(s)-1])
			s = s[:i]
		}
	}
	s = strings.TrimSuffix(s, " (deleted)")
	a.path = unescape(s)
	return a
}

// parseDevAnnotation reads "char 195:255" or "block 8:1".
func parseDevAnnotation(s string) (*tracer.Dev, bool) {
	kind, nums, found := strings.Cut(s, " ")
	if !found || (kind != "char" && kind != "block") {
		return nil, false
	}
	maj, min, found := strings.Cut(nums, ":")
	if !found {
		return nil, false
	}
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	return &tracer.Dev{Major: uint32(ma), Minor: uint32(mi)}, kind == "char"
}

// fdArg is an fd argument: "8</dev/nvidiactl<char 195:255>>", "AT_FDCWD</root>", "-1".
type fdArg struct {
	fd   int
	anno annotation
}

const atFDCWD = -100

func parseFD(s string) (fdArg, bool) {
	var a fdArg
	num := s
	if i := strings.IndexByte(s, '<'); i >= 0 {
		num = s[:i]
		rest := s[i:]
		end := annotationEnd(rest)
		// -y prints a memfd as 3</memfd:name>(deleted).
		if end < 0 || (end != len(rest) && rest[end:] != "(deleted)") {
			return a, false
		}
		a.anno = parseAnnotation(rest[1 : end-1])
	}
	if num == "AT_FDCWD" {
		a.fd = atFDCWD
		return a, true
	}
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return a, false
	}
	a.fd = int(n)
	return a, true
}

// parseString reads a quoted C string as strace prints it. truncated is set
// when strace cut it short ("abc"...). ok is false for anything else, such
// as an address printed instead of a string (0x7ffd...).
func parseString(s string) (str string, truncated, ok bool) {
	if len(s) < 2 || s[0] != '"' {
		return "", false, false
	}
	end := -1
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		if s[i] == '"' {
			end = i
			break
		}
	}
	if end < 0 {
		return "", false, false
	}
	return unescape(s[1:end]), strings.HasPrefix(s[end+1:], "..."), true
}

// unescape undoes strace's escaping: \" \\ \n \t and friends, \xHH, and up
// to three octal digits.
func unescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'v':
			b.WriteByte('\v')
		case 'f':
			b.WriteByte('\f')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'x':
			if i+2 < len(s) && isHex(s[i+1:i+3]) {
				v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
				b.WriteByte(byte(v))
				i += 2
			} else {
				b.WriteByte('x')
			}
		default:
			if e >= '0' && e <= '7' {
				v, n := 0, 0
				for n < 3 && i+n < len(s) && s[i+n] >= '0' && s[i+n] <= '7' {
					v = v*8 + int(s[i+n]-'0')
					n++
				}
				b.WriteByte(byte(v))
				i += n - 1
			} else {
				b.WriteByte(e)
			}
		}
	}
	return b.String()
}

// parseStringArray reads execve's argv: ["python3", "-c", "x"...] or
// ["a", "b", ...] when strace left elements out. It returns what it could read.
func parseStringArray(s string) []string {
	if len(s) < 2 || s[0] != '[' {
		return nil
	}
	inner, _, ok := splitArgs(s[1:] + ")")
	if !ok {
		return nil
	}
	var out []string
	for _, a := range inner {
		if a == "..." || strings.HasPrefix(a, "...") {
			break
		}
		a = strings.TrimSuffix(a, "]")
		str, _, ok := parseString(a)
		if !ok {
			break
		}
		out = append(out, str)
	}
	return out
}

// structField returns the value of key=value at the top level of a struct
// printed as {a=1, b=makedev(1, 2), ...}.
func structField(s, key string) (string, bool) {
	if len(s) < 2 || s[0] != '{' {
		return "", false
	}
	args, _, ok := splitArgs(strings.TrimSuffix(s[1:], "}") + ")")
	if !ok {
		return "", false
	}
	for _, a := range args {
		if v, found := strings.CutPrefix(a, key); found && strings.HasPrefix(v, "=") {
			return v[1:], true
		}
	}
	return "", false
}
