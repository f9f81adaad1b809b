package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// namesFile holds the RM class and control-command names, extracted from
// NVIDIA's headers with their source files.
const namesFile = "internal/gentables/nvidia-rm-names.json"

// rmName is one #define taken from a header.
type rmName struct {
	Value uint32 `json:"value"`
	Name  string `json:"name"`
	File  string `json:"file"` // path in open-gpu-kernel-modules
	// Finn is set for defines the FINN generator wrote ("finn: Evaluated
	// from ..."): real commands, which win over a same-valued sub-command.
	Finn bool `json:"finn,omitempty"`
}

type rmNames struct {
	Source   string   `json:"source"`
	Classes  []rmName `json:"classes"`
	Controls []rmName `json:"controls"`
}

var (
	defineRe   = regexp.MustCompile(`^#define\s+([A-Za-z0-9_]+)\s+\((0x[0-9a-fA-F]+)U?\)`)
	classFile  = regexp.MustCompile(`^cl([0-9a-f]{4})\.h$`)
	ctrlPrefix = regexp.MustCompile(`^NV([0-9A-F]{4})$`)
)

// extractNames reads class/clXXXX.h (the define whose value is XXXX names
// the class) and ctrl/**/*.h (NVXXXX_CTRL_CMD_* = class<<16 | category<<8 |
// index) under src/common/sdk/nvidia/inc of root.
func extractNames(root, tag, out string) error {
	inc := filepath.Join(root, "src/common/sdk/nvidia/inc")
	var n rmNames
	n.Source = "NVIDIA/open-gpu-kernel-modules " + tag + ": src/common/sdk/nvidia/inc/class/clXXXX.h (the define whose value is XXXX) and src/common/sdk/nvidia/inc/ctrl/**/*.h (NV*_CTRL_CMD_* defines)"
	err := filepath.WalkDir(inc, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".h") {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		defs, err := defines(p)
		if err != nil {
			return err
		}
		switch {
		case strings.Contains(rel, "/inc/class/"):
			m := classFile.FindStringSubmatch(filepath.Base(p))
			if m == nil {
				return nil
			}
			want, _ := strconv.ParseUint(m[1], 16, 32)
			for _, df := range defs {
				if df.Value == uint32(want) && !strings.HasSuffix(df.Name, "_MESSAGE_ID") && !strings.HasSuffix(df.Name, "_TYPEDEF") {
					n.Classes = append(n.Classes, rmName{df.Value, df.Name, rel, df.Finn})
				}
			}
		case strings.Contains(rel, "/inc/ctrl/"):
			for _, df := range defs {
				prefix, _, ok := strings.Cut(df.Name, "_CTRL_CMD_")
				if !ok || !strings.HasPrefix(prefix, "NV") || strings.Contains(prefix, "_CTRL") {
					continue
				}
				if m := ctrlPrefix.FindStringSubmatch(prefix); m != nil {
					class, _ := strconv.ParseUint(m[1], 16, 32)
					if df.Value>>16 != uint32(class) {
						continue // a field value, not a command of that class
					}
				}
				if df.Value&0xffff == 0 && !strings.HasSuffix(df.Name, "_NULL") {
					continue
				}
				n.Controls = append(n.Controls, rmName{df.Value, df.Name, rel, df.Finn})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, l := range []*[]rmName{&n.Classes, &n.Controls} {
		sort.SliceStable(*l, func(i, j int) bool {
			a, b := (*l)[i], (*l)[j]
			if a.Value != b.Value {
				return a.Value < b.Value
			}
			if a.Finn != b.Finn {
				return a.Finn
			}
			if a.File != b.File {
				return a.File < b.File
			}
			return a.Name < b.Name
		})
	}
	b, err := json.MarshalIndent(n, "", " ")
	if err != nil {
		return err
	}
	if len(n.Classes) == 0 || len(n.Controls) == 0 {
		return fmt.Errorf("%s: no class or control names found; is it an open-gpu-kernel-modules checkout?", root)
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}

type define struct {
	Name  string
	Value uint32
	Finn  bool
}

func defines(path string) ([]define, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only: a failed close loses nothing
	var out []define
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := defineRe.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[2], 0, 32)
		if err != nil {
			continue
		}
		out = append(out, define{m[1], uint32(v), strings.Contains(sc.Text(), "finn: Evaluated from")})
	}
	return out, sc.Err()
}
