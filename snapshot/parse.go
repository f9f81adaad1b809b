package snapshot

import (
	"bufio"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/cudatrace/cudatrace/internal/procfs"
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
	infos := parseMountinfo(text)
	out := make([]Mount, 0, len(infos))
	for _, in := range infos {
		out = append(out, mountFromInfo(in))
	}
	return out
}

// parseMountinfo reads mountinfo with github.com/moby/sys/mountinfo. The
// library refuses a whole table for one bad line; then each line is parsed
// on its own, so that the bad one costs only itself.
func parseMountinfo(text string) []*mountinfo.Info {
	if infos, err := mountinfo.GetMountsFromReader(strings.NewReader(text), nil); err == nil {
		return infos
	}
	var out []*mountinfo.Info
	for _, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		if infos, err := mountinfo.GetMountsFromReader(strings.NewReader(line), nil); err == nil {
			out = append(out, infos...)
		}
	}
	return out
}

func mountFromInfo(in *mountinfo.Info) Mount {
	m := Mount{
		Root:       in.Root,
		MountPoint: in.Mountpoint,
		Options:    strings.Split(in.Options, ","),
		FSType:     in.FSType,
		Source:     in.Source,
	}
	m.NoDev = slices.Contains(m.Options, "nodev")
	m.Bind = m.Root != "/"
	return m
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
	// SeccompFilters counts the filters installed (Seccomp_filters, 5.9+).
	SeccompFilters int
}

// parseStatus picks what the snapshot needs from /proc/PID/status. Missing
// keys keep their zero value.
func parseStatus(text string) procStatus {
	f := procfs.ParseStatus(text)
	st := procStatus{Name: f["Name"], Groups: f.Uints("Groups"), NoNewPrivs: f["NoNewPrivs"] == "1"}
	// real, effective, saved, filesystem: access checks use the effective
	// (and fs) ids, which differ only in setuid programs.
	if ids := f.Uints("Uid"); len(ids) >= 2 {
		st.UID = ids[1]
	}
	if ids := f.Uints("Gid"); len(ids) >= 2 {
		st.GID = ids[1]
	}
	st.CapEff, _ = f.Hex("CapEff")
	st.CapBnd, _ = f.Hex("CapBnd")
	st.Seccomp, _ = f.Int("Seccomp")
	st.SeccompFilters, _ = f.Int("Seccomp_filters")
	return st
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

// kmsgRecord is one kernel log record: from /dev/kmsg
// ("prio,seq,usec,flags[,...];text") or from syslog(2) ("<prio>[secs] text").
type kmsgRecord struct {
	Level int    // syslog level: 3 err, 4 warning
	Seq   uint64 // 0 from syslog(2), which does not show it
	Usec  uint64 // since boot, on the printk clock either way
	// NoTime: syslog(2) without printk.time, so Usec is unknown.
	NoTime bool
	Text   string
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
	prio, err0 := strconv.Atoi(f[0])
	seq, err1 := strconv.ParseUint(f[1], 10, 64)
	usec, err2 := strconv.ParseUint(f[2], 10, 64)
	if err0 != nil || err1 != nil || err2 != nil {
		return kmsgRecord{}, false
	}
	// Continuation lines (" SUBSYSTEM=...") follow the message after a newline.
	text, _, _ = strings.Cut(text, "\n")
	return kmsgRecord{Level: prio & 7, Seq: seq, Usec: usec, Text: kmsgUnescape(text)}, true
}

// parseSyslogBuffer parses what syslog(2) SYSLOG_ACTION_READ_ALL returns:
// a line per record, "<prio>[    secs.usecs] text", with "[T123]" after the
// time under CONFIG_PRINTK_CALLER and no time under printk.time=0. The
// kernel repeats the prefix on each line of a multi-line record; those
// lines are joined with spaces, as /dev/kmsg's escaped newlines are (so the
// driver's "API mismatch" message is one line either way). The text is not
// escaped, so it is taken as it is.
func parseSyslogBuffer(buf []byte) []kmsgRecord {
	var out []kmsgRecord
	lastPrefix := ""
	for _, line := range strings.Split(string(buf), "\n") {
		prefix, rec, ok := parseSyslogLine(line)
		if !ok {
			lastPrefix = ""
			continue
		}
		if prefix == lastPrefix && !rec.NoTime && len(out) > 0 {
			out[len(out)-1].Text += " " + rec.Text
			continue
		}
		out = append(out, rec)
		lastPrefix = prefix
	}
	return out
}

func parseSyslogLine(line string) (prefix string, rec kmsgRecord, ok bool) {
	rest, found := strings.CutPrefix(line, "<")
	if !found {
		return "", rec, false
	}
	p, rest, found := strings.Cut(rest, ">")
	prio, err := strconv.Atoi(p)
	if !found || err != nil || prio < 0 {
		return "", rec, false
	}
	rec.Level = prio & 7
	if ts, after, found := strings.Cut(rest, "]"); found && strings.HasPrefix(ts, "[") {
		secs, frac, dot := strings.Cut(strings.TrimSpace(ts[1:]), ".")
		s, err1 := strconv.ParseUint(secs, 10, 64)
		u, err2 := strconv.ParseUint(frac, 10, 64)
		if dot && len(frac) == 6 && err1 == nil && err2 == nil {
			rec.Usec = s*1_000_000 + u
			rest = after
			if caller, after, found := strings.Cut(rest, "]"); found && isPrintkCaller(caller) {
				rest = after
			}
			rest = strings.TrimPrefix(rest, " ")
			rec.Text = rest
			return line[:len(line)-len(rest)], rec, true
		}
	}
	rec.NoTime = true
	rec.Text = rest
	return line[:len(line)-len(rest)], rec, true
}

// isPrintkCaller: "[    T123" or "[     C4" (CONFIG_PRINTK_CALLER: a task
// ID or a CPU), without the closing bracket.
func isPrintkCaller(s string) bool {
	id, ok := strings.CutPrefix(s, "[")
	id = strings.TrimLeft(id, " ")
	if !ok || len(id) < 2 || (id[0] != 'T' && id[0] != 'C') {
		return false
	}
	_, err := strconv.ParseUint(id[1:], 10, 32)
	return err == nil
}

// kmsgUnescape undoes /dev/kmsg's \xHH escapes of unprintable bytes. The
// driver's multi-line messages ("NVRM: API mismatch: ...\nNVRM: has the
// version ...") come back as one line, their newlines as spaces; what is
// still unprintable is escaped again where the text is shown.
func kmsgUnescape(s string) string {
	if !strings.Contains(s, `\x`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] == 'x' {
			if v, err := strconv.ParseUint(s[i+2:i+4], 16, 8); err == nil {
				c := byte(v)
				if c == '\n' {
					c = ' '
				}
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// kmsgMarks are what makes a kernel log line the driver's. Substring tests,
// not one regexp alternation: the regexp took ~18 ms over a 1,000-line log
// (every run reads the whole log), these ~0.2 ms.
var kmsgMarks = []string{"NVRM", "Xid", "nvidia-uvm", "nvidia-modeset", "API mismatch", "RmInitAdapter", "GSP", "nvidia-nvlink", "NVIDIA"}

func kmsgInteresting(text string) bool {
	for _, m := range kmsgMarks {
		if strings.Contains(text, m) {
			return true
		}
	}
	return false
}
