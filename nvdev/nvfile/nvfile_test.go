package nvfile

import (
	"encoding/json"
	"os"
	"testing"
)

// The facts agree with the reviewed reference they come from.
func TestFactsMatchTheABIReference(t *testing.T) {
	raw, err := os.ReadFile("../internal/gentables/nvidia-abi.json")
	if err != nil {
		t.Fatal(err)
	}
	var abi struct {
		Nodes []struct {
			Path    string          `json:"path"`
			Major   json.RawMessage `json:"major"`
			Dynamic bool            `json:"major_is_dynamic"`
		} `json:"device_nodes"`
	}
	if err := json.Unmarshal(raw, &abi); err != nil {
		t.Fatal(err)
	}
	fixed := 0
	for _, n := range abi.Nodes {
		if !IsNode(n.Path) {
			t.Errorf("%s is an NVIDIA node, but IsNode says no", n.Path)
		}
		if n.Dynamic {
			continue
		}
		fixed++
		var major int
		if err := json.Unmarshal(n.Major, &major); err != nil || major != Major {
			t.Errorf("%s: major %s in the reference, Major is %d", n.Path, n.Major, Major)
		}
	}
	if fixed == 0 || len(abi.Nodes) < 5 {
		t.Errorf("%d nodes, %d of fixed major: not the reference's device_nodes", len(abi.Nodes), fixed)
	}
}

func TestPaths(t *testing.T) {
	for p, want := range map[string][2]bool{
		"/dev/nvidiactl":               {true, false},
		"/dev/nvidia-caps/nvidia-cap1": {true, false},
		"/dev/char/195:255":            {false, true},
		"/dev/char/195:0":              {false, true},
		"/dev/char/1955:0":             {false, false},
		"/dev/char/238:0":              {false, false},
		"/dev/null":                    {false, false},
		"dev/nvidiactl":                {false, false},
	} {
		if got := [2]bool{IsNode(p), IsFixedMajorLink(p)}; got != want {
			t.Errorf("%s: IsNode, IsFixedMajorLink = %v, want %v", p, got, want)
		}
	}
}
