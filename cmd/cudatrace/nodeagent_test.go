package main

import "testing"

func TestNodeAgent(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"watch", "--json"}, true},
		{[]string{"-q", "doctor"}, true},
		{[]string{"--", "doctor"}, false},       // a program named doctor
		{[]string{"python3", "watch.py"}, false}, // a traced command
		{[]string{"-p", "42"}, false},
		{nil, false},
	} {
		if got := nodeAgent(tc.args); got != tc.want {
			t.Errorf("nodeAgent(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
