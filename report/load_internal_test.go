package report

import (
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
