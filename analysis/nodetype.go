package analysis

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/internal/sysabi"
	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// nonDevice is what an /dev/nvidia* path holds when it is not a device node.
type nonDevice struct {
	kind string // "a regular file", "a directory", "a symlink loop"
	seq  uint64 // the stat or open that showed it (0: the snapshot)
}

// fileKindWord names an st_mode's file type other than a device: "a
// regular file", "a symlink"; "" for a device.
func fileKindWord(mode uint32) string {
	t, ok := sysabi.FileTypeOf(mode)
	if !ok || t.Mode == unix.S_IFCHR || t.Mode == unix.S_IFBLK {
		return ""
	}
	if t.Mode == unix.S_IFIFO {
		return "a FIFO"
	}
	return "a " + t.Noun
}

// nonDeviceAt says whether path was something other than a character or
// block device in the target's view. The trace's own stat (the target's
// view at that moment) wins over the snapshot; an open that failed with
// ELOOP is a symlink loop whoever made it.
func nonDeviceAt(s *snapshot.Snapshot, evs []tracer.Event, path string) (nonDevice, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		e := &evs[i]
		if e.Path != path {
			continue
		}
		if e.Kind == tracer.KindOpen && e.Errno() == unix.ELOOP {
			return nonDevice{kind: "a symlink loop", seq: e.Seq}, true
		}
		if e.Kind != tracer.KindStat || e.Failed() || e.Mode == 0 {
			continue
		}
		if w := fileKindWord(e.Mode); w != "" && e.Mode&unix.S_IFMT != unix.S_IFLNK {
			return nonDevice{kind: w, seq: e.Seq}, true
		}
		if t := e.Mode & unix.S_IFMT; t == unix.S_IFCHR || t == unix.S_IFBLK {
			return nonDevice{}, false
		}
	}
	n := s.Node(path)
	if n == nil || !n.Exists {
		return nonDevice{}, false
	}
	switch n.Type {
	case "f":
		return nonDevice{kind: "a regular file"}, true
	case "d":
		return nonDevice{kind: "a directory"}, true
	}
	return nonDevice{}, false
}

// placeholderMade finds a process's mknod of path as a regular file: how a
// container runtime makes the target of a bind mount (LXC's create=file).
func placeholderMade(evs []tracer.Event, path string) *tracer.Event {
	for i := range evs {
		e := &evs[i]
		if e.Kind == tracer.KindMknod && e.Path == path && !e.Failed() && e.Mode&unix.S_IFMT == unix.S_IFREG {
			return e
		}
	}
	return nil
}

// checkNotCharDevice: an /dev/nvidia* path that is not a character device
// opens (a regular file opens fine) but reaches no driver, so CUDA fails on
// its first ioctl. Whoever created it, it is a finding.
func (a *analyzer) checkNotCharDevice() {
	for _, path := range a.nvidiaPaths() {
		nd, ok := nonDeviceAt(a.s, a.ev, path)
		if !ok || (nd.kind == "a directory" && nvfile.IsDir(path)) {
			continue
		}
		var d []string
		var events []uint64
		if nd.seq != 0 {
			events = append(events, nd.seq)
			for i := range a.ev {
				if a.ev[i].Seq == nd.seq {
					d = append(d, nvdev.CallLine(&a.ev[i]))
				}
			}
		} else {
			d = append(d, fmt.Sprintf("The snapshot of the target's /dev shows %s as %s.", path, nd.kind))
		}
		if a.openedOK(path) {
			d = append(d, "Opening it succeeds, but the fd reaches no driver: every NVIDIA ioctl on it fails (ENOTTY), so cuInit fails although no open did.")
		}
		inContainer := nvdev.RuntimeKind(a.s) != ""
		mk := placeholderMade(a.ev, path)
		if mk != nil {
			d = append(d, fmt.Sprintf("%s created it as an empty file (%s): the target of a bind mount, not a device node.", nvdev.Caller(mk), nvdev.FormatCall(mk)))
			events = append(events, mk.Seq)
		}
		if nd.kind == "a regular file" && (nvdev.RuntimeKind(a.s) == "lxc" || mk != nil) {
			d = append(d, fmt.Sprintf("That is the placeholder LXC creates for `lxc.mount.entry = %s %s none bind,optional,create=file`: the host's %s did not exist when the container started, so LXC bound nothing over it (`optional` makes that silent).", path, strings.TrimPrefix(path, "/"), path))
		} else if nd.kind == "a directory" {
			d = append(d, "A bind mount whose host source was missing when the container started leaves a directory (Docker's -v, LXC's create=dir).")
		}
		fix := nvdev.NodeCreateFix(path)
		if inContainer || mk != nil {
			fix += " Then restart the container, so that the runtime binds the real node over the placeholder."
		} else {
			fix += fmt.Sprintf(" Remove the %s first (`rm -r %s`).", strings.TrimPrefix(nd.kind, "a "), path)
		}
		if b := nvdev.BindNodeFix(a.s, path); b != "" {
			fix += "\n" + b
		}
		a.add(Finding{ID: "node-not-device", Severity: SeverityError,
			Summary: fmt.Sprintf("%s is %s, not a character device", path, nd.kind),
			Detail:  d, Fix: fix, Events: events},
			fmt.Sprintf("%s is %s, not a character device", path, nd.kind))
		return
	}
}

// nvidiaPaths are the /dev/nvidia* paths the trace or the snapshot names,
// in order of first appearance.
func (a *analyzer) nvidiaPaths() []string {
	seen := map[string]bool{}
	var out []string
	note := func(p string) {
		if isNvidiaNode(p) && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for i := range a.ev {
		note(a.ev[i].Path)
	}
	for i := range a.s.Nodes {
		note(a.s.Nodes[i].Path)
	}
	return out
}

// isDeviceMknod is whether a mknod asked for a device node; a regular file
// (mode S_IFREG, or 0, which mknod treats as S_IFREG) is a mount target.
func isDeviceMknod(e *tracer.Event) bool {
	t := e.Mode & unix.S_IFMT
	return t == unix.S_IFCHR || t == unix.S_IFBLK
}

// beforeOwnExec is whether the process that made call i exec'd later: the
// call was made while it was still the container runtime (or a shell)
// preparing the program, not by the program and its libcuda.
func (a *analyzer) beforeOwnExec(i int) bool {
	pid := a.ev[i].PID
	for j := i + 1; j < len(a.ev); j++ {
		if e := &a.ev[j]; e.PID == pid && e.Kind == tracer.KindExec && !e.Failed() {
			return true
		}
	}
	return false
}
