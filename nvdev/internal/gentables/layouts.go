package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	sizeKeyRe = regexp.MustCompile(`^(\d+)`)
	verGE     = regexp.MustCompile(`>=\s*(\d+(?:\.\d+)*)`)
	verRange  = regexp.MustCompile(`(\d+)\.x-(\d+)\.x`)
)

// version parses "535.43.02" or "580.142" (missing parts are 0).
func version(s string) ([3]int, error) {
	var v [3]int
	for i, p := range strings.SplitN(s, ".", 3) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return v, fmt.Errorf("driver version %q: %v", s, err)
		}
		v[i] = n
	}
	return v, nil
}

// rmLayoutFrom reads the first driver version a status_offset_by_size key
// ("32 (NVOS21, driver >= 535.43.02)", "40 (NVOS64, 515.x-520.x)", "32
// (NVOS21, driver <= 530.x)", "56") applies to; 0.0.0 when it has no lower
// bound.
func rmLayoutFrom(key string) ([3]int, error) {
	if m := verGE.FindStringSubmatch(key); m != nil {
		return version(m[1])
	}
	if m := verRange.FindStringSubmatch(key); m != nil {
		return version(m[1])
	}
	return [3]int{}, nil
}

func emitLayouts(b *bytes.Buffer, a *abi) error {
	b.WriteString(`// rmStatusLayouts: where each RM escape's params block keeps its NV_STATUS,
// by params size (_IOC_SIZE) and the first driver version the layout
// applies to. Source: nvidia-abi.json rm_escapes_detail (open-gpu-kernel-modules
// nvos.h, nv-unix-nvos-params-wrappers.h, nv-ioctl.h; gcc offsetof() per tag).
var rmStatusLayouts = map[uint32][]paramLayout{
`)
	names := make([]string, 0, len(a.RMEscapesDetail))
	for n := range a.RMEscapesDetail {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return a.RMEscapesDetail[names[i]].Nr < a.RMEscapesDetail[names[j]].Nr })
	for _, name := range names {
		d := a.RMEscapesDetail[name]
		if len(d.StatusBySize) == 0 {
			continue
		}
		type row struct {
			size, off uint32
			from      [3]int
			key       string
		}
		var rows []row
		for key, off := range d.StatusBySize {
			m := sizeKeyRe.FindStringSubmatch(key)
			if m == nil {
				return fmt.Errorf("%s: size key %q", name, key)
			}
			size, _ := strconv.Atoi(m[1])
			from, err := rmLayoutFrom(key)
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			rows = append(rows, row{uint32(size), off, from, key})
		}
		sort.Slice(rows, func(i, j int) bool {
			if rows[i].size != rows[j].size {
				return rows[i].size < rows[j].size
			}
			return fmt.Sprint(rows[i].from) < fmt.Sprint(rows[j].from)
		})
		fmt.Fprintf(b, "\t%d: { // %s\n", d.Nr, name)
		for _, r := range rows {
			src := d.Params
			if r.key != strconv.Itoa(int(r.size)) {
				src += "; " + r.key
			}
			fmt.Fprintf(b, "\t\t{Size: %d, From: DriverVersion{%d, %d, %d}, Status: %d, Source: %q},\n",
				r.size, r.from[0], r.from[1], r.from[2], r.off, src)
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}\n\n")

	b.WriteString(`// uvmStatusLayouts: where each UVM ioctl's params block keeps rmStatus, by
// the first driver version the layout applies to (UVM requests carry no
// size). Source: nvidia-abi.json uvm_ioctl_detail (open-gpu-kernel-modules
// kernel-open/nvidia-uvm/uvm_ioctl.h, uvm_linux_ioctl.h; offsetof() per tag).
var uvmStatusLayouts = map[uint32][]paramLayout{
`)
	names = names[:0]
	for n := range a.UVMDetail {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return a.UVMDetail[names[i]].Number < a.UVMDetail[names[j]].Number })
	for _, name := range names {
		d := a.UVMDetail[name]
		if len(d.Layouts) == 0 {
			continue
		}
		fmt.Fprintf(b, "\t%#x: { // %s\n", d.Number, name)
		for _, l := range d.Layouts {
			if l.Status == nil {
				continue
			}
			first, _, _ := strings.Cut(l.Versions, "..")
			from, err := version(first)
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			fmt.Fprintf(b, "\t\t{Size: %d, From: DriverVersion{%d, %d, %d}, Status: %d, Source: %q},\n",
				l.Size, from[0], from[1], from[2], *l.Status, "uvm_ioctl.h "+l.Versions)
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}\n\n")

	// Field offsets other than status (hClass, cmd, reply...): the
	// *_offset keys of rm_param_status_offsets.
	b.WriteString("// rmFieldOffsets: \"ESCAPE.field\" → byte offset in the params block, from\n// nvidia-abi.json rm_param_status_offsets (the same in every layout).\nvar rmFieldOffsets = map[string]int{\n")
	var keys []string
	fields := map[string]int{}
	for esc, raw := range a.RMParamOffsets {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			continue // the _note
		}
		for k, v := range m {
			var off int
			if !strings.HasSuffix(k, "_offset") || json.Unmarshal(v, &off) != nil {
				continue
			}
			key := esc + "." + strings.TrimSuffix(k, "_offset")
			fields[key] = off
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "\t%q: %d,\n", k, fields[k])
	}
	b.WriteString("}\n\n")
	return nil
}

// emitNames writes the RM class and control-command names: the classes
// nvidia-abi.json names first (its aliases win), then the headers'.
func emitNames(b *bytes.Buffer, a *abi) error {
	raw, err := os.ReadFile(namesFile)
	if err != nil {
		return err
	}
	var n rmNames
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("%s: %v", namesFile, err)
	}
	fmt.Fprintf(b, "// rmClassNames maps an RM class (hClass) to its name. Source: nvidia-abi.json\n// rm_classes_common, then %s.\nvar rmClassNames = map[uint32]string{\n", n.Source)
	seen := map[uint32]bool{}
	var common []kv
	for name, raw := range a.RMClassesCommon {
		var v uint32
		if json.Unmarshal(raw, &v) != nil {
			continue // _source and other notes
		}
		common = append(common, kv{v, name})
	}
	sort.Slice(common, func(i, j int) bool {
		return common[i].k < common[j].k || common[i].k == common[j].k && common[i].v < common[j].v
	})
	for _, c := range common {
		if !seen[c.k] {
			seen[c.k] = true
			fmt.Fprintf(b, "\t%#x: %q, // nvidia-abi.json rm_classes_common\n", c.k, c.v)
		}
	}
	for _, c := range n.Classes {
		if !seen[c.Value] {
			seen[c.Value] = true
			fmt.Fprintf(b, "\t%#x: %q, // %s\n", c.Value, c.Name, c.File)
		}
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(b, "// rmControlNames maps an RM control command (NVOS54 cmd) to its name.\n// Source: %s.\nvar rmControlNames = map[uint32]string{\n", n.Source)
	seen = map[uint32]bool{}
	for _, c := range n.Controls {
		// A *_INVALID define is a sentinel, not a command: naming 0xffff
		// NV0000_CTRL_CMD_SYSTEM_GPS_INVALID hid the bad command it was.
		if strings.HasSuffix(c.Name, "_INVALID") {
			continue
		}
		if !seen[c.Value] {
			seen[c.Value] = true
			fmt.Fprintf(b, "\t%#x: %q, // %s\n", c.Value, c.Name, c.File)
		}
	}
	b.WriteString("}\n\n")
	return nil
}
