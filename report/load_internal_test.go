package report

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// Load stops reading past maxReportSize with its own error, not a
// "truncated" one; a file of exactly the limit reads to its end.
func TestLoadLimitReader(t *testing.T) {
	for _, c := range []struct {
		size int
		want error
	}{{10, io.EOF}, {11, errTooLarge}} {
		lr := &limitReader{r: strings.NewReader(strings.Repeat(" ", c.size)), left: 10}
		n, err := io.Copy(io.Discard, lr)
		if c.want == io.EOF && (err != nil || n != 10) {
			t.Errorf("%d bytes: read %d, %v", c.size, n, err)
		}
		if c.want == errTooLarge && (err != errTooLarge || n != 10 || !strings.Contains(err.Error(), "larger than 1024 MiB")) {
			t.Errorf("%d bytes: read %d, %v; want %v", c.size, n, err, errTooLarge)
		}
	}
}

// JSON that is not an object, or has a wrong type, is named in words, not
// with a Go type.
func TestLoadWrongShape(t *testing.T) {
	for in, want := range map[string]string{
		"[]":                `a report is a JSON object, this file starts with "[]"`,
		`"text"`:            "a report is a JSON object",
		`{"schema": "one"}`: `field "schema" holds a JSON string`,
		`{"schema": 1, "tool": {"name": "cudatrace"}, "events": {}}`: `field "events" holds a JSON object`,
	} {
		_, err := Load(strings.NewReader(in))
		if err == nil || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go value") || strings.Contains(err.Error(), "struct") {
			t.Errorf("Load(%s) = %v, want %q", in, err, want)
		}
	}
}
