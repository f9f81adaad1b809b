package snapshot

import (
	"bufio"
	"regexp"
	"strconv"
	"strings"
)

// ParseProcDevices returns the character-device section of /proc/devices in
// file order. A major can appear several times (195 is "nvidia",
// "nvidiactl" and "nvidia-modeset" from driver 545 on). Lines that do not
// parse are skipped; text without a "Character devices:" header is read as
// if it were all the character section.
func ParseProcDevices(text string) []DriverMajor {
	var out []DriverMajor
	inChar := !strings.Contains(text, "Character devices:")
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			inChar = true
			continue
		case line == "Block devices:":
			inChar = false
			continue
		case !inChar || line == "":
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		major, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			continue
		}
		out = append(out, DriverMajor{Major: uint32(major), Name: fields[1]})
	}
	return out
}

// ParseMountinfo parses /proc/PID/mountinfo (proc(5)). Mount points and
// roots are as the owning process sees them, with octal escapes (\040 for a
// space) decoded. Malformed lines are skipped.
func ParseMountinfo(text string) []Mount {
	var out []Mount
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// ID parent maj:min root mountpoint options [optional...] - fstype source superopts
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+3 {
			continue
		}
		m := Mount{
			Root:       unescapeMountinfo(f[3]),
			MountPoint: unescapeMountinfo(f[4]),
			Options:    strings.Split(f[5], ","),
			FSType:     f[sep+1],
			Source:     unescapeMountinfo(f[sep+2]),
		}
		for _, o := range m.Options {
			if o == "nodev" {
				m.NoDev = true
			}
		}
		m.Bind = m.Root != "/"
		out = append(out, m)
	}
	return out
}

// unescapeMountinfo decodes the kernel's \ooo escapes (space, tab, newline,
// backslash) in a mountinfo field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// superOptions returns the superblock options of a mountinfo line's mount,
// which ParseMountinfo does not keep (cgroup v1 lists its controllers there).
func superOptions(line string) []string {
	f := strings.Fields(line)
	for i := 6; i < len(f); i++ {
		if f[i] == "-" && i+3 < len(f) {
			return strings.Split(f[i+3], ",")
		}
	}
	return nil
}

// ParseNVIDIAParams parses /proc/driver/nvidia/params, whose lines look like
// "DeviceFileMode: 438" or `RegistryDwords: ""`. Values are kept as written
// except that surrounding double quotes are removed.
func ParseNVIDIAParams(text string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		key, val, ok := strings.Cut(line, ":")
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			continue
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
			val = val[1 : len(val)-1]
		}
		out[key] = val
	}
	return out
}

var driverVersionRE = regexp.MustCompile(`(?:^|\s)(\d+\.\d+(?:\.\d+)?)(?:\s|$)`)

// parseDriverVersion extracts "580.159.04" from the first line of
// /proc/driver/nvidia/version, e.g. "NVRM version: NVIDIA UNIX Open Kernel
// Module for x86_64  580.159.04  Release Build  (...)".
func parseDriverVersion(line string) string {
	if m := driverVersionRE.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// procStatus is what cudatrace needs from /proc/PID/status.
type procStatus struct {
	Name       string
	UID, GID   uint32 // effective ids
	Groups     []uint32
	CapEff     uint64
	CapBnd     uint64
	NoNewPrivs bool
	Seccomp    int
}

// parseStatus parses /proc/PID/status. Missing keys keep their zero value.
func parseStatus(text string) procStatus {
	var st procStatus
	for _, line := range strings.Split(text, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		f := strings.Fields(val)
		switch key {
		case "Name":
			st.Name = val
		case "Uid", "Gid":
			// real, effective, saved, filesystem: access checks use the
			// effective (and fs) ids, which differ only in setuid programs.
			if len(f) >= 2 {
				if v, err := strconv.ParseUint(f[1], 10, 32); err == nil {
					if key == "Uid" {
						st.UID = uint32(v)
					} else {
						st.GID = uint32(v)
					}
				}
			}
		case "Groups":
			for _, g := range f {
				if v, err := strconv.ParseUint(g, 10, 32); err == nil {
					st.Groups = append(st.Groups, uint32(v))
				}
			}
		case "CapEff":
			st.CapEff, _ = strconv.ParseUint(val, 16, 64)
		case "CapBnd":
			st.CapBnd, _ = strconv.ParseUint(val, 16, 64)
		case "NoNewPrivs":
			st.NoNewPrivs = val == "1"
		case "Seccomp":
			st.Seccomp, _ = strconv.Atoi(val)
		}
	}
	return st
}

// parsePasswd returns the name of uid in an /etc/passwd text, or "".
func parsePasswd(text string, uid uint32) string {
	want := strconv.FormatUint(uint64(uid), 10)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[2] == want && f[0] != "" && !strings.HasPrefix(f[0], "#") {
			return f[0]
		}
	}
	return ""
}

// cgroupLine is one line of /proc/PID/cgroup: "hierarchy:controllers:path".
type cgroupLine struct {
	Hierarchy   string
	Controllers []string
	Path        string
}

func parseCgroupFile(text string) []cgroupLine {
	var out []cgroupLine
	for _, line := range strings.Split(text, "\n") {
		h, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		ctl, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		var ctls []string
		if ctl != "" {
			ctls = strings.Split(ctl, ",")
		}
		out = append(out, cgroupLine{Hierarchy: h, Controllers: ctls, Path: path})
	}
	return out
}

// parseEnviron splits a NUL-separated /proc/PID/environ.
func parseEnviron(data []byte) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// kmsgRecord is one /dev/kmsg record: "prio,seq,usec,flags[,...];text".
type kmsgRecord struct {
	Seq  uint64
	Usec uint64 // since boot
	Text string
}

func parseKmsgRecord(rec string) (kmsgRecord, bool) {
	head, text, ok := strings.Cut(rec, ";")
	if !ok {
		return kmsgRecord{}, false
	}
	f := strings.Split(head, ",")
	if len(f) < 3 {
		return kmsgRecord{}, false
	}
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	usec, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return kmsgRecord{}, false
	}
	// Continuation lines (" SUBSYSTEM=...") follow the message after a newline.
	text, _, _ = strings.Cut(text, "\n")
	return kmsgRecord{Seq: seq, Usec: usec, Text: text}, true
}

var kmsgInteresting = regexp.MustCompile(`NVRM|Xid|nvidia-uvm|nvidia-modeset|API mismatch|RmInitAdapter|GSP|nvidia-nvlink|NVIDIA`)
