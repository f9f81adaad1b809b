package analysis

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cudatrace/cudatrace/nvdev"
	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/snapshot"
	"github.com/cudatrace/cudatrace/tracer"
)

// Analyze finds the call that makes CUDA initialisation fail, explains it
// with the snapshot, and adds what else the trace shows. It is a pure
// function: the same inputs give the same Result, byte for byte.
func Analyze(events []tracer.Event, snap *snapshot.Snapshot) Result {
	return AnalyzeFacts(events, snap, Facts{})
}

// AnalyzeFacts is Analyze with what the tracer knew of its own view
// (whether CUDA's return codes were traced).
func AnalyzeFacts(events []tracer.Event, snap *snapshot.Snapshot, facts Facts) Result {
	if snap == nil {
		snap = &snapshot.Snapshot{}
	}
	a := &analyzer{ev: events, s: snap, fail: -1, retry: -1, byID: map[string]bool{}, facts: facts, unstored: facts.Unstored}
	a.cudaOutcome()
	a.pinpoint()
	if a.fail >= 0 {
		a.explaining = true
		a.explainFailing()
		a.explaining = false
	}
	a.checkAll()
	if f := a.cudaFailed(); f != nil && a.fail < 0 && !a.hasError() {
		a.cudaUnexplained(f)
	}
	a.noteIgnored()
	sort.SliceStable(a.out, func(i, j int) bool {
		return severityRank(a.out[i].Severity) < severityRank(a.out[j].Severity)
	})
	res := Result{Findings: a.out, Verdict: a.verdict()}
	if a.cuda.Status != "unknown" {
		res.CUDA = a.cuda
	}
	if res.Findings == nil {
		res.Findings = []Finding{}
	}
	if a.fail >= 0 {
		c := a.ev[a.fail]
		c.Argv = append([]string(nil), c.Argv...)
		c.Arg = append([]byte(nil), c.Arg...)
		if c.Dev != nil {
			d := *c.Dev
			c.Dev = &d
		}
		res.Failing = &c
	}
	return res
}

func severityRank(s Severity) int {
	switch s {
	case SeverityError:
		return 0
	case SeverityWarning:
		return 1
	}
	return 2
}

type analyzer struct {
	ev    []tracer.Event
	s     *snapshot.Snapshot
	fail  int // index of the failing call, -1 when none
	retry int // index of libcuda's retry of the failing open, -1 when none
	// chain holds failed mknod/unlink calls on the failing path before it:
	// the reason the node was still missing or stale.
	chain      []int
	out        []Finding
	byID       map[string]bool
	explaining bool
	cause      string // the verdict's "because" phrase

	facts    Facts
	unstored []Unstored  // calls counted but not in ev
	cuda     *CUDAResult // CUDA's own verdict
	cudaIdx  int         // index of the failing api event, -1 when none

	// lastOK indexes the last successful call of each process, kind and
	// path (built on first use): asking whether a failure was recovered
	// is then one lookup, not a scan of every later event (a log of 200k
	// processes each failing once was quadratic).
	lastOK map[okSite]int
}

type okSite struct {
	pid  int
	kind tracer.Kind
	path string
}

// lastSuccess is the index of pid's last successful kind call on path, -1
// when there is none.
func (a *analyzer) lastSuccess(pid int, kind tracer.Kind, path string) int {
	if a.lastOK == nil {
		a.lastOK = map[okSite]int{}
		for j := range a.ev {
			if o := &a.ev[j]; !o.Failed() {
				a.lastOK[okSite{o.PID, o.Kind, o.Path}] = j
			}
		}
	}
	if j, ok := a.lastOK[okSite{pid, kind, path}]; ok {
		return j
	}
	return -1
}

// hasError is whether any finding explains a failure.
func (a *analyzer) hasError() bool {
	for _, f := range a.out {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// add appends f unless a finding with its ID exists (the first, most
// specific one wins). cause, when set while explaining the failing call,
// becomes the verdict's reason.
func (a *analyzer) add(f Finding, cause string) {
	if a.byID[f.ID] {
		return
	}
	a.byID[f.ID] = true
	sort.Slice(f.Events, func(i, j int) bool { return f.Events[i] < f.Events[j] })
	a.out = append(a.out, f)
	if a.explaining && a.cause == "" && cause != "" {
		a.cause = cause
	}
}

// fatalOpenErrnos are the open errors libcuda cannot get past, so they
// count even when CUDA's own return code is unknown; with a known CUDA
// failure every errno counts.
var fatalOpenErrnos = map[syscall.Errno]bool{
	unix.EPERM: true, unix.EACCES: true, unix.ENOENT: true, unix.ENXIO: true,
	unix.ENODEV: true, unix.EIO: true, unix.EBUSY: true,
	unix.EMFILE: true, unix.ENFILE: true, unix.EISDIR: true, unix.ENOTDIR: true,
	unix.ELOOP: true, unix.ENOMEM: true,
}

// pinpoint picks the failing call: the first tier that finds one names
// it. The tiers are in order of how directly the call stops cuInit.
func (a *analyzer) pinpoint() {
	for _, tier := range []func() int{
		// A call that never returned ended the process (or thread) there:
		// whatever failed before it, the program got past.
		a.killedCall,
		// A device open that is never recovered from; MIG capability nodes
		// matter less than the core nodes, so they come after them.
		func() int { return a.failedNodeOpen(false) },
		func() int { return a.failedNodeOpen(true) },
		a.refusedNodeRepair,
		a.refusedIoctl,
		a.refusedMemfd,
		a.stubLibcuda,
		a.inbandSuspect,
	} {
		if i := tier(); i >= 0 {
			a.fail = i
			return
		}
	}
}

// failedNodeOpen is the first failed open of an NVIDIA node (a MIG
// capability node when caps) before CUDA failed that libcuda cannot get
// past; it sets a.retry and a.chain, the failed mknod/unlink calls on the
// same path before it.
func (a *analyzer) failedNodeOpen(caps bool) int {
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindOpen || !isNvidiaNode(e.Path) || !e.Failed() || !a.beforeCUDAFailure(i) {
			continue
		}
		if !fatalOpenErrnos[e.Errno()] && !e.NoEntry && a.cudaFailed() == nil {
			continue // without CUDA's verdict, only the errnos libcuda cannot get past
		}
		if _, ok := a.ignorable(i); ok || nvdev.IsCapsNode(e.Path) != caps {
			continue
		}
		a.retry = a.findRetry(i)
		for j := 0; j < i; j++ {
			p := &a.ev[j]
			if (p.Kind == tracer.KindMknod || p.Kind == tracer.KindUnlink) && p.Path == e.Path && p.Failed() {
				a.chain = append(a.chain, j)
			}
		}
		return i
	}
	return -1
}

// refusedNodeRepair is the first mknod or unlink of an NVIDIA node that
// was refused (EACCES, EPERM, EROFS) and never done later.
func (a *analyzer) refusedNodeRepair() int {
	for i := range a.ev {
		e := &a.ev[i]
		if _, ok := a.ignorable(i); ok || !a.beforeCUDAFailure(i) {
			continue
		}
		if (e.Kind == tracer.KindMknod || e.Kind == tracer.KindUnlink) && isNvidiaNode(e.Path) && e.Failed() &&
			(e.Errno() == unix.EACCES || e.Errno() == unix.EPERM || e.Errno() == unix.EROFS) && !a.recovered(i) {
			return i
		}
	}
	return -1
}

// refusedIoctl is the ioctl on an NVIDIA fd that the driver or a filter
// refused, by its own ordered tiers.
func (a *analyzer) refusedIoctl() int {
	ioctlTiers := []func(e *tracer.Event) bool{
		// Refused before the driver saw it: a seccomp filter. NVIDIA's
		// driver answers its own refusals in-band, so an EPERM/EACCES
		// ioctl is a filter's or an LSM's too.
		func(e *tracer.Event) bool { return e.NoEntry && e.Failed() },
		func(e *tracer.Event) bool { return e.Errno() == unix.EPERM || e.Errno() == unix.EACCES },
		func(e *tracer.Event) bool {
			return nvdev.IsRMRequest(e, nvdev.EscCheckVersionStr) && e.Errno() == unix.EINVAL
		},
		func(e *tracer.Event) bool { return e.Errno() == unix.EIO || e.Errno() == unix.ENODEV },
		func(e *tracer.Event) bool { rc, _, ok := nvdev.WaitOpenResult(e); return ok && rc != 0 },
		func(e *tracer.Event) bool {
			st, ok := nvdev.UVMInitStatus(e)
			return e.Request == nvdev.UVMInitialize && (e.Failed() || ok && st != 0)
		},
	}
	if a.cudaFailed() != nil {
		// CUDA failed: any failed ioctl on an NVIDIA fd before it is a
		// suspect, the last one first (libcuda stops at the fatal one).
		ioctlTiers = append(ioctlTiers, func(e *tracer.Event) bool { return e.Failed() })
	}
	for t, tier := range ioctlTiers {
		last := t == len(ioctlTiers)-1 && a.cudaFailed() != nil
		found := -1
		for i := range a.ev {
			e := &a.ev[i]
			if e.Kind == tracer.KindIoctl && e.FD >= 0 && a.beforeCUDAFailure(i) && tier(e) {
				found = i
				if !last {
					break
				}
			}
		}
		if found >= 0 {
			return found
		}
	}
	return -1
}

// refusedMemfd is the first memfd_create refused with EPERM (seccomp).
func (a *analyzer) refusedMemfd() int {
	for i := range a.ev {
		if e := &a.ev[i]; e.Kind == tracer.KindMemfd && e.Errno() == unix.EPERM && a.beforeCUDAFailure(i) {
			return i
		}
	}
	return -1
}

// stubLibcuda is the load of a stub libcuda (the build-time one).
func (a *analyzer) stubLibcuda() int {
	for i := range a.ev {
		if a.libKind(&a.ev[i]) == "stub" && a.beforeCUDAFailure(i) {
			return i
		}
	}
	return -1
}

// recovered is whether the same process later did the same thing to the
// same path successfully (a retry that worked, or a node libcuda repaired).
func (a *analyzer) recovered(i int) bool {
	e := &a.ev[i]
	return a.lastSuccess(e.PID, e.Kind, e.Path) > i
}

// findRetry finds libcuda's immediate retry of a failed open (O_CLOEXEC
// dropped, or O_RDONLY after O_RDWR).
func (a *analyzer) findRetry(i int) int {
	e := &a.ev[i]
	for j := i + 1; j < len(a.ev); j++ {
		o := &a.ev[j]
		if o.PID != e.PID || o.Kind != tracer.KindOpen || o.Path != e.Path {
			continue
		}
		if o.Failed() {
			return j
		}
		return -1
	}
	return -1
}

// failEvents are the Seq numbers that show the failure.
func (a *analyzer) failEvents() []uint64 {
	var s []uint64
	for _, j := range a.chain {
		s = append(s, a.ev[j].Seq)
	}
	s = append(s, a.ev[a.fail].Seq)
	if a.retry >= 0 {
		s = append(s, a.ev[a.retry].Seq)
	}
	return s
}

// headLines open the failing call's explanation: the call, its retry, the
// failed repairs before it, and the node.
func (a *analyzer) headLines(i int, f nodeFacts) []string {
	e := &a.ev[i]
	d := []string{nvdev.CallLine(e)}
	if i == a.fail && a.retry >= 0 {
		r := &a.ev[a.retry]
		d = append(d, fmt.Sprintf("Retried as `%s` %s.", nvdev.FormatCall(r), nvdev.FormatResult(r)))
	}
	if i == a.fail {
		for _, j := range a.chain {
			c := &a.ev[j]
			d = append(d, fmt.Sprintf("Before that, `%s` by %s %s.", nvdev.FormatCall(c), nvdev.Caller(c), nvdev.FormatResult(c)))
		}
	}
	d = append(d, f.describe(a.s))
	if mt := f.modeText(); mt != "" && f.exists != 0 {
		if e.Errno() == unix.EPERM {
			if ok, known := dacAllows(f, a.s.Process, e.Flags); (known && ok) || f.mode&0o006 == 0o006 {
				mt += ", so permissions are not the cause"
			}
		}
		d = append(d, mt+".")
	}
	return d
}

func (a *analyzer) explainFailing() {
	e := &a.ev[a.fail]
	if e.NoReturn {
		a.seccompKilled(a.fail)
		return
	}
	if e.NoEntry {
		a.seccompDenied(a.fail, false)
	}
	switch e.Kind {
	case tracer.KindOpen:
		switch e.Errno() {
		case unix.EPERM:
			a.explainEPERM(a.fail)
		case unix.EACCES:
			a.explainEACCES(a.fail)
		case unix.ENOENT:
			a.explainENOENT(a.fail)
		case unix.ENXIO:
			a.explainENXIO(a.fail)
		case unix.ENODEV:
			a.gpuLost(a.fail, SeverityError)
		case unix.EIO:
			a.rmInitFailed(a.fail, SeverityError)
		default:
			a.explainOtherErrno(a.fail)
		}
	case tracer.KindMknod, tracer.KindUnlink:
		a.explainRepairFailed(a.fail)
	case tracer.KindIoctl:
		a.explainIoctl(a.fail)
		if a.cause == "" {
			a.explainOtherErrno(a.fail)
		}
	case tracer.KindMemfd:
		a.seccompMemfd(a.fail)
	}
	if a.libKind(e) == "stub" {
		a.libcudaStub(a.fail)
	}
	if a.cause == "" {
		// Nothing above recognised it: still say what is known.
		f := factsFor(a.s, a.ev, a.fail, e, e.Path)
		d := []string{nvdev.CallLine(e)}
		if isNvidiaNode(e.Path) {
			d = a.headLines(a.fail, f)
		}
		if e.Errno() == unix.EBUSY {
			d = append(d, "EBUSY from the NVIDIA driver means the device is sequestered or its open queue is closed (e.g. during a GPU reset).")
		}
		a.add(Finding{ID: "call-failed", Severity: SeverityError,
			Summary: fmt.Sprintf("%s failed with %s", nvdev.FormatCall(e), e.ErrnoName()),
			Detail:  d, Events: a.failEvents()}, "")
		if a.cause == "" {
			a.cause = "the cause is not one cudatrace recognises"
		}
	}
}

func (a *analyzer) explainEACCES(i int) {
	e := &a.ev[i]
	f := factsFor(a.s, a.ev, i, e, e.Path)
	head := a.headLines(i, f)
	events := a.failEvents()
	if m := mountOf(a.s, f.snapNode, e.Path); m != nil && m.NoDev {
		d := append(head, fmt.Sprintf("%s lives on the mount %s (%s, options %s), which is mounted nodev: the kernel refuses to open any device node there with EACCES, before permissions or cgroups are checked.", e.Path, m.MountPoint, m.FSType, strings.Join(m.Options, ",")))
		if a.s.Process.UserNS {
			d = append(d, "The target runs in a user namespace; a filesystem mounted from inside an unprivileged user namespace is always nodev.")
		}
		a.add(Finding{ID: "nodev", Severity: SeverityError,
			Summary: fmt.Sprintf("%s is on a nodev mount (%s)", e.Path, m.MountPoint),
			Detail:  d,
			Fix:     fmt.Sprintf("Remount %s without nodev (`mount -o remount,dev %s`), or bind-mount the host's device nodes into the target's /dev instead of creating them on a nodev filesystem (e.g. `--device %s`, or an lxc.mount.entry bind).", m.MountPoint, m.MountPoint, e.Path),
			Events:  events}, fmt.Sprintf("%s is mounted nodev", m.MountPoint))
		return
	}
	p := a.s.Process
	if ok, known := dacAllows(f, p, e.Flags); known && !ok {
		d := append(head, fmt.Sprintf("The target runs as uid %d gid %d (groups %v): mode %04o with owner uid %d gid %d gives it no %s permission.", p.UID, p.GID, p.Groups, f.mode, f.uid, f.gid, accessWord(e.Flags)))
		fix := fmt.Sprintf("Let the user open it: add the user to group %d (`usermod -aG <group> <user>`), or have the driver create the nodes world-accessible (`options nvidia NVreg_DeviceFileMode=0666` or NVreg_DeviceFileGID=<gid> in /etc/modprobe.d/nvidia.conf, then reload the module), or `chmod 0666 %s`.", f.gid, e.Path)
		if m, ok := a.s.Driver.Params["DeviceFileMode"]; ok {
			d = append(d, fmt.Sprintf("The driver's DeviceFileMode is %s, DeviceFileGID %s (/proc/driver/nvidia/params); nvidia-modprobe creates the uvm nodes root:root regardless.", m, a.s.Driver.Params["DeviceFileGID"]))
		}
		if p.UserNS {
			d = append(d, "The target runs in a user namespace (rootless container): host groups it is not mapped into appear as nogroup, so group permission does not apply.")
			fix += "\nRootless containers: keep the supplementary groups (`--group-add keep-groups` with crun, or `--userns keep-id`), or make the node 0666."
		}
		a.add(Finding{ID: "mode-denied", Severity: SeverityError,
			Summary: fmt.Sprintf("%s (mode %04o, uid %d gid %d) does not let uid %d open it", e.Path, f.mode, f.uid, f.gid, p.UID),
			Detail:  d, Fix: fix, Events: events},
			fmt.Sprintf("mode %04o (uid %d gid %d) does not let uid %d open it", f.mode, f.uid, f.gid, p.UID))
		return
	}
	d := append(head, "Neither a nodev mount nor the node's mode explains it (as far as the snapshot shows). EACCES then comes from a Linux security module: AppArmor or SELinux (check the kernel log for apparmor=\"DENIED\" or avc: denied).")
	a.add(Finding{ID: "eacces-unexplained", Severity: SeverityError,
		Summary:  fmt.Sprintf("%s was refused with EACCES, probably by AppArmor/SELinux", e.Path),
		Detail:   d,
		Fix:      "Check the kernel log for an LSM denial; to confirm, run once with `--security-opt apparmor=unconfined` (Docker) or `lxc.apparmor.profile: unconfined` (LXC).",
		Inferred: true, Events: events}, "refused with EACCES (not nodev, not the mode)")
}

func accessWord(flags uint64) string {
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		return "read"
	case unix.O_WRONLY:
		return "write"
	}
	return "read/write"
}

// repairTries describes libcuda's failed mknod/unlink/modprobe attempts on
// path before index upto.
func (a *analyzer) repairTries(upto int, path string) []string {
	var d []string
	p := a.s.Process
	for j := 0; j < upto; j++ {
		c := &a.ev[j]
		if (c.Kind == tracer.KindMknod || c.Kind == tracer.KindUnlink) && c.Path == path && c.Failed() && !containsIdx(a.chain, j) {
			d = append(d, fmt.Sprintf("libcuda tried `%s` → %s.", nvdev.FormatCall(c), c.ErrnoName()))
		}
	}
	if len(d) > 0 || len(a.chain) > 0 {
		if !p.CanMknod() {
			d = append(d, "The target cannot create device nodes (no CAP_MKNOD, or it runs in a user namespace), so libcuda cannot repair the node itself.")
		}
	}
	for _, m := range a.modprobeFailures() {
		if m.exec < upto {
			d = append(d, fmt.Sprintf("libcuda ran `%s`, which %s.", nvdev.FormatCall(&a.ev[m.exec]), m.how))
		}
	}
	return d
}

func containsIdx(xs []int, i int) bool {
	for _, x := range xs {
		if x == i {
			return true
		}
	}
	return false
}

func (a *analyzer) inContainer() bool {
	return nvdev.RuntimeKind(a.s) != "" || a.s.Process.UserNS
}

func (a *analyzer) explainENOENT(i int) {
	e := &a.ev[i]
	f := factsFor(a.s, a.ev, i, e, e.Path)
	f.exists = 0
	d := a.headLines(i, f)
	d = append(d, a.repairTries(i, e.Path)...)
	driverMissing := false
	if f.expOK {
		switch {
		case f.regOK:
			d = append(d, fmt.Sprintf("%s is registered at major %d (/proc/devices): the driver is loaded, but the node was not created in the target's /dev.", f.regName, f.regMajor))
		case len(a.s.ProcDevices) > 0:
			driverMissing = true
			d = append(d, fmt.Sprintf("%s is not in /proc/devices: its kernel module is not loaded, so there is nothing to create the node for.", f.exp.Names[0]))
		}
	}
	fix := a.missingNodeFix(e.Path)
	a.add(Finding{ID: "node-missing", Severity: SeverityError,
		Summary: fmt.Sprintf("%s does not exist", e.Path),
		Detail:  d, Fix: fix, Events: a.failEvents()}, fmt.Sprintf("%s does not exist", e.Path))
	if driverMissing {
		a.driverNotLoaded(f.exp.Names[0], a.failEvents())
	}
}

func (a *analyzer) explainENXIO(i int) {
	e := &a.ev[i]
	f := factsFor(a.s, a.ev, i, e, e.Path)
	d := a.headLines(i, f)
	if f.stale() {
		owner := fmt.Sprintf("major %d belongs to no driver now", f.dev.Major)
		if f.driver != "" {
			owner = fmt.Sprintf("major %d belongs to %s now", f.dev.Major, f.driver)
		}
		d = append(d, fmt.Sprintf("The node has major %d, but %s is registered at %d (/proc/devices); %s, hence ENXIO.", f.dev.Major, f.regName, f.regMajor, owner))
		d = append(d, a.repairTries(i, e.Path)...)
		a.nodeStale(e.Path, f, d, SeverityError, a.failEvents())
		return
	}
	if f.dev != nil && f.driver == "" && len(a.s.ProcDevices) > 0 {
		d = append(d, fmt.Sprintf("No driver owns major %d, so the kernel has nothing to open (ENXIO).", f.dev.Major))
		name := "nvidia"
		if f.expOK {
			name = f.exp.Names[0]
		}
		a.driverNotLoadedWith(name, d, a.failEvents())
		return
	}
	if nvdev.IsGPUNode(e.Path) {
		d = append(d, "The driver has no GPU at this minor (ENXIO: \"open of non-existent GPU\"): the GPU is absent, unbound, or failed to probe; check /proc/driver/nvidia/gpus and the kernel log.")
	}
	a.add(Finding{ID: "call-failed", Severity: SeverityError,
		Summary: fmt.Sprintf("%s failed with ENXIO", nvdev.FormatCall(e)),
		Detail:  d, Events: a.failEvents()}, "no device behind the node (ENXIO)")
}

func (a *analyzer) nodeStale(path string, f nodeFacts, d []string, sev Severity, events []uint64) {
	fix := fmt.Sprintf("Recreate %s with the current major on the host: `rm %s && nvidia-modprobe%s -c=0` (or `mknod -m 666 %s c %d %d`).", path, path, uvmFlag(path), path, f.regMajor, f.dev.Minor)
	if a.inContainer() {
		if b := nvdev.BindNodeFix(a.s, path); b != "" {
			fix += "\n" + b + " A bind mount follows the host's node; a copied node keeps the old major."
		}
	}
	fix += "\nIf a CDI spec created the node, regenerate it: `nvidia-ctk cdi generate`."
	if n := nvdev.DynamicMajorNote(f.regMajor, f.regName); n != "" {
		fix += "\n" + n
	}
	a.add(Finding{ID: "node-stale-major", Severity: sev,
		Summary: fmt.Sprintf("%s is c %d:%d, but %s is now %d", path, f.dev.Major, f.dev.Minor, f.regName, f.regMajor),
		Detail:  d, Fix: fix, Events: events}, fmt.Sprintf("the node's major %d is stale; %s is %d", f.dev.Major, f.regName, f.regMajor))
}

func uvmFlag(path string) string {
	if strings.HasPrefix(path, "/dev/nvidia-uvm") {
		return " -u"
	}
	return ""
}

// explainRepairFailed covers a failed mknod/unlink with no failing open
// after it (libcuda gave up, or the trace ended).
func (a *analyzer) explainRepairFailed(i int) {
	e := &a.ev[i]
	f := factsFor(a.s, a.ev, i, e, e.Path)
	d := []string{nvdev.CallLine(e), f.describe(a.s)}
	d = append(d, a.repairTries(i, e.Path)...)
	if !a.s.Process.CanMknod() {
		d = append(d, "The target cannot create device nodes (no CAP_MKNOD, or it runs in a user namespace).")
	}
	if e.Kind == tracer.KindUnlink && f.stale() {
		a.nodeStale(e.Path, f, d, SeverityError, []uint64{e.Seq})
		return
	}
	fix := a.missingNodeFix(e.Path)
	a.add(Finding{ID: "node-missing", Severity: SeverityError,
		Summary: fmt.Sprintf("%s is missing or wrong and libcuda could not recreate it", e.Path),
		Detail:  d, Fix: fix, Events: []uint64{e.Seq}}, fmt.Sprintf("libcuda could not recreate %s", e.Path))
}

func (a *analyzer) explainIoctl(i int) {
	e := &a.ev[i]
	switch {
	case e.Errno() == unix.ENOTTY && a.foreignNode(e):
		a.explainOtherErrno(i) // another driver's node: its major is the cause
	case nvdev.IsRMRequest(e, nvdev.EscCheckVersionStr) && e.Errno() == unix.EINVAL:
		a.versionMismatch(i)
	case e.Errno() == unix.EIO:
		a.rmInitFailed(i, SeverityError)
	case nvdev.IsRMRequest(e, nvdev.EscWaitOpenComplete) && !e.Failed():
		a.rmInitFailed(i, SeverityError)
	case e.Errno() == unix.ENODEV:
		a.gpuLost(i, SeverityError)
	case e.Request == nvdev.UVMInitialize:
		d := []string{nvdev.CallLine(e)}
		cause := "UVM initialisation failed"
		if st, ok := nvdev.UVMInitStatus(e); ok && st != 0 {
			d = append(d, "rmStatus: "+nvdev.StatusName(st)+".")
			cause += " with " + nvdev.StatusShort(st)
		}
		a.add(Finding{ID: "call-failed", Severity: SeverityError,
			Summary: "UVM_INITIALIZE on /dev/nvidia-uvm failed", Detail: d, Events: []uint64{e.Seq}}, cause)
	default:
		a.explainInband(i)
	}
}

func (a *analyzer) seccompMemfd(i int) {
	e := &a.ev[i]
	d := []string{nvdev.CallLine(e)}
	n, known := a.targetFilters()
	inferred := n == 0
	switch {
	case inferred && known:
		d = append(d, "The snapshot shows no seccomp filter of the target's own (cudatrace's ptrace filter does not count), but memfd_create has no other common reason to return EPERM, so a seccomp filter (perhaps in a parent sandbox) is still the likely cause.")
	case inferred:
		d = append(d, "The target's seccomp state is unknown; memfd_create has no other common reason to return EPERM.")
	default:
		d = append(d, fmt.Sprintf("The target runs under %d seccomp filter(s) of its own (Seccomp: 2); one refuses memfd_create.", n))
	}
	d = append(d, "libcuda needs memfd_create; without it CUDA reports 304 (CUDA_ERROR_OPERATING_SYSTEM) while NVML still works.")
	a.add(Finding{ID: "seccomp-memfd", Severity: SeverityError,
		Summary:  "seccomp forbids memfd_create",
		Detail:   d,
		Fix:      "Allow memfd_create in the seccomp profile of the container or sandbox; `--security-opt seccomp=unconfined` (Docker) confirms it.",
		Inferred: inferred, Events: []uint64{e.Seq}}, "seccomp forbids memfd_create (CUDA error 304)")
}

// missingNodeFix: create the node on the host, and in a container also
// bind it in.
func (a *analyzer) missingNodeFix(path string) string {
	fix := nvdev.NodeCreateFix(path)
	if a.inContainer() {
		if b := nvdev.BindNodeFix(a.s, path); b != "" {
			fix += "\n" + b
		}
	}
	return fix
}

// callEvidence opens a finding about call i: for a failed open the node
// facts and the retries, otherwise the call itself.
func (a *analyzer) callEvidence(i int) ([]string, []uint64) {
	e := &a.ev[i]
	if e.Kind == tracer.KindOpen {
		return a.headLines(i, factsFor(a.s, a.ev, i, e, e.Path)), a.failEvents()
	}
	return []string{nvdev.CallLine(e)}, []uint64{e.Seq}
}

func (a *analyzer) gpuLost(i int, sev Severity) {
	var d []string
	var events []uint64
	if i >= 0 {
		d, events = a.callEvidence(i)
		d = append(d, "ENODEV from the NVIDIA driver means no GPU at that minor, or the GPU has been lost.")
	}
	d = append(d, a.kernelLines(nvdev.IsGPULostLine)...)
	a.add(Finding{ID: "gpu-lost", Severity: sev,
		Summary: "the GPU is lost (fell off the bus)",
		Detail:  d,
		Fix:     "This is a hardware or platform fault: check power, cooling and seating, then reset the GPU or reboot the host. Repeated Xid 79 needs the vendor.",
		Events:  events}, "the GPU is lost")
}

func (a *analyzer) rmInitFailed(i int, sev Severity) {
	var d []string
	var events []uint64
	if i >= 0 {
		e := &a.ev[i]
		d, events = a.callEvidence(i)
		if rc, st, ok := nvdev.WaitOpenResult(e); ok && rc != 0 {
			d = append(d, fmt.Sprintf("The open was non-blocking and finished in the background; NV_ESC_WAIT_OPEN_COMPLETE reports rc %d (%s), adapterStatus %s.", rc, unix.ErrnoName(unix.Errno(-rc)), nvdev.StatusName(st)))
		} else {
			d = append(d, "EIO from the NVIDIA driver means it could not initialise the GPU (rm_init_adapter failed).")
		}
	}
	d = append(d, a.kernelLines(nvdev.IsRMInitLine)...)
	a.add(Finding{ID: "rm-init-failed", Severity: sev,
		Summary: "the NVIDIA driver failed to initialise the GPU (RmInitAdapter)",
		Detail:  d,
		Fix:     fmt.Sprintf("Read the NVRM lines in the kernel log. Missing or mismatched GSP firmware: install the firmware for driver %s under /lib/firmware/nvidia/<version>/; a GPU in a bad state: reset it (`nvidia-smi -r`) or power-cycle the host.", orUnknown(a.s.Host.DriverVersion)),
		Events:  events}, "the driver could not initialise the GPU")
}

func orUnknown(s string) string {
	if s == "" {
		return "<version>"
	}
	return s
}

func (a *analyzer) versionMismatch(i int) {
	var d []string
	var events []uint64
	if i >= 0 {
		e := &a.ev[i]
		d = append(d, nvdev.CallLine(e), "The driver refused the version handshake (NV_ESC_CHECK_VERSION_STR → EINVAL): the user-space driver libraries and the kernel module are different versions.")
		events = []uint64{e.Seq}
		if len(e.Arg) > 8 {
			if v := nvdev.CString(e.Arg[8:]); v != "" {
				d = append(d, "The kernel module answered with its version: "+v+".")
			}
		}
	}
	if v := a.s.Host.DriverVersion; v != "" {
		d = append(d, "Kernel module: "+v+" (/proc/driver/nvidia/version).")
	}
	if libs := a.libraryVersions(); len(libs) > 0 {
		d = append(d, "User-space libraries opened: "+strings.Join(libs, ", ")+".")
	}
	d = append(d, a.kernelLines(func(t string) bool { return strings.Contains(t, "API mismatch") })...)
	summary, cause := "the NVIDIA user-space libraries do not match the kernel module", "the user-space driver does not match the kernel module"
	fix := "Reboot, or reload the kernel modules (`rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`), so the module matches the installed libraries. In containers, do not ship driver libraries in the image; let the NVIDIA Container Toolkit mount the host's."
	if j := a.mismatchedLibcuda(); j >= 0 {
		// The libcuda the process loaded is the other version: that copy,
		// and what made the loader take it, is the cause and the fix.
		l := &a.ev[j]
		lv, from := a.libcudaVersion(l)
		kind := ""
		if a.libKind(l) == "compat" {
			kind = " (a forward-compatibility copy)"
		}
		src, _ := a.libcudaSource(l)
		d = append(d, fmt.Sprintf("%s loaded %s%s: libcuda %s (%s).", nvdev.Caller(l), l.Path, kind, lv, from), src)
		summary = fmt.Sprintf("libcuda %s%s was loaded from %s, and the kernel module is %s", lv, kind, path.Dir(l.Path), a.moduleVersion())
		cause = fmt.Sprintf("it loaded libcuda %s%s from %s, and the kernel module is %s", lv, kind, path.Dir(l.Path), a.moduleVersion())
		fix = a.mismatchFix(l)
		events = append(events, l.Seq)
	}
	a.add(Finding{ID: "version-mismatch", Severity: SeverityError,
		Summary: summary,
		Detail:  d,
		Fix:     fix,
		Events:  events}, cause)
}

// libraryVersions lists the versioned NVIDIA libraries the trace opened
// (libcuda.so.580.159.04).
func (a *analyzer) libraryVersions() []string {
	seen := map[string]bool{}
	var out []string
	for i := range a.ev {
		e := &a.ev[i]
		if e.Kind != tracer.KindOpen || e.Failed() {
			continue
		}
		b := baseName(e.Path)
		if (strings.HasPrefix(b, "libcuda.so.") || strings.HasPrefix(b, "libnvidia-ml.so.")) && strings.Count(b, ".") >= 4 && !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

func (a *analyzer) kernelLines(match func(string) bool) []string {
	var d []string
	for _, l := range a.s.KernelLog {
		if match(l.Text) {
			d = append(d, "Kernel log: "+l.Text)
		}
	}
	return d
}

func (a *analyzer) driverNotLoaded(name string, events []uint64) {
	a.driverNotLoadedWith(name, nil, events)
}

func (a *analyzer) driverNotLoadedWith(name string, d []string, events []uint64) {
	a.driverNotLoadedSev(name, d, events, SeverityError)
}

func (a *analyzer) driverNotLoadedSev(name string, d []string, events []uint64, sev Severity) {
	var fix string
	switch name {
	case "nvidia-uvm":
		d = append(d, "nvidia-uvm is not in /proc/devices: the nvidia_uvm module is not loaded (it is loaded on demand, which fails without root or inside a container).")
		fix = "On the host: `nvidia-modprobe -u -c=0` or `modprobe nvidia_uvm`, and load it at boot (add nvidia_uvm to /etc/modules-load.d/nvidia.conf)."
	default:
		d = append(d, fmt.Sprintf("No NVIDIA driver is registered in /proc/devices (no major %d): the nvidia kernel module is not loaded.", nvfile.Major))
		fix = "Load it on the host (`modprobe nvidia`); if that fails, the kernel log says why: an unsigned module under Secure Boot (\"Key was rejected by service\"), a GPU the open module does not support, or a module built for another kernel."
	}
	a.add(Finding{ID: "driver-not-loaded", Severity: sev,
		Summary: fmt.Sprintf("the %s kernel driver is not loaded", name),
		Detail:  d, Fix: fix, Events: events}, fmt.Sprintf("the %s driver is not loaded", name))
}

// baseName is path.Base for a possibly empty path.
func baseName(p string) string {
	if p == "" {
		return ""
	}
	return path.Base(p)
}
