package stracelog

import (
	"cmp"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cudatrace/cudatrace/nvdev/nvfile"
	"github.com/cudatrace/cudatrace/tracer"
)

// proc is a thread group as far as the log shows it.
type proc struct {
	pid     int
	comm    string
	fds     map[int]fdInfo // NVIDIA device fds this process holds
	exitIdx int            // index of its exit event, or -1
}

// fdInfo is what an fd was opened on, learnt from an open in the log or
// from an -y/-yy annotation.
type fdInfo struct {
	path    string
	dev     *tracer.Dev
	cloexec bool
}

// task is one printed id: a thread, or a process's main thread.
type task struct {
	tid  int
	proc *proc
}

type pendKey struct {
	id   int
	name string
}

type pending struct {
	body    string
	t       int64
	hasTime bool
}

// interp turns records into events, keeping the per-process state a live
// tracer would read from the kernel: which fds are NVIDIA devices, the comm,
// which ids are threads of which process.
type interp struct {
	log      *Log
	tasks    map[int]*task
	root     *task // the first process in the log
	live     map[*task]struct{}
	children map[int]bool // ids a clone/fork in the log returned
	pending  map[pendKey]pending

	events []tracer.Event
	evTask []*task // who made each event; PID/TID are filled in at the end

	base          int64
	haveBase      bool
	sawPrefix     bool
	aliased       bool
	pidsFromNames bool
	recognised    int
	cur           call

	opts  Options
	folds map[foldKey]uint64 // calls per site, while Options fold
}

func newInterp() *interp {
	return &interp{
		log:      &Log{},
		tasks:    map[int]*task{},
		live:     map[*task]struct{}{},
		children: map[int]bool{},
		pending:  map[pendKey]pending{},
	}
}

func (in *interp) process(rec record) {
	if rec.hasTime {
		in.log.HasTimes = true
		if !in.haveBase {
			in.base, in.haveBase = rec.t, true
		}
	}
	tk := in.taskFor(rec)
	switch rec.kind {
	case recSignal, recNoise:
		in.recognised++
	case recUnfinished:
		in.recognised++
		key := pendKey{tk.tid, rec.name}
		if old, ok := in.pending[key]; ok {
			// The first half was never resumed (strace lost it).
			in.unfinished(tk, rec.name, old)
		}
		in.pending[key] = pending{body: rec.body, t: rec.t, hasTime: rec.hasTime}
	case recResumed:
		key := pendKey{tk.tid, rec.name}
		p, ok := in.pending[key]
		if !ok {
			// The first half is not in the log (it started before the log did).
			in.log.Skipped++
			return
		}
		delete(in.pending, key)
		in.recognised++
		in.syscall(tk, rec.name, strings.TrimRight(p.body, " ")+rec.body, p.t, p.hasTime)
	case recSyscall:
		in.syscall(tk, rec.name, rec.body, rec.t, rec.hasTime)
	case recExited, recKilled:
		in.recognised++
		in.exited(tk, rec)
	}
}

// taskFor finds the task a record belongs to.
func (in *interp) taskFor(rec record) *task {
	if !rec.hasID {
		if in.sawPrefix {
			// strace -f writing to stderr drops the prefix whenever only
			// one process is left.
			if len(in.live) == 1 {
				for t := range in.live {
					return t
				}
			}
			if in.root != nil {
				return in.root
			}
		}
		return in.task(0)
	}
	in.sawPrefix = true
	if t, ok := in.tasks[rec.id]; ok {
		return t
	}
	// Unprefixed lines came first: strace printed no prefix while it
	// traced one process. The first id that is nobody's child is that one.
	if t0, ok := in.tasks[0]; ok && !in.aliased && !in.children[rec.id] {
		in.aliased = true
		t0.tid, t0.proc.pid = rec.id, rec.id
		delete(in.tasks, 0)
		in.tasks[rec.id] = t0
		return t0
	}
	return in.task(rec.id)
}

func (in *interp) task(id int) *task {
	if t, ok := in.tasks[id]; ok {
		return t
	}
	t := &task{tid: id, proc: &proc{pid: id, fds: map[int]fdInfo{}, exitIdx: -1}}
	in.tasks[id] = t
	in.live[t] = struct{}{}
	if in.root == nil {
		in.root = t
	}
	return t
}

// call is one complete syscall, ready for a handler.
type call struct {
	tk      *task
	name    string
	args    []string
	res     result
	t       int64
	hasTime bool
}

func (c *call) arg(i int) string {
	if i < len(c.args) {
		return c.args[i]
	}
	return ""
}

type handler func(in *interp, c *call)

var handlers = map[string]handler{
	"open": (*interp).open, "openat": (*interp).open, "openat2": (*interp).open, "creat": (*interp).open,
	"ioctl": (*interp).ioctl,
	"stat":  (*interp).stat, "lstat": (*interp).stat, "stat64": (*interp).stat, "lstat64": (*interp).stat,
	"newfstatat": (*interp).stat, "fstatat64": (*interp).stat, "statx": (*interp).stat,
	"access": (*interp).access, "faccessat": (*interp).access, "faccessat2": (*interp).access,
	"mknod": (*interp).mknod, "mknodat": (*interp).mknod,
	"unlink": (*interp).unlink, "unlinkat": (*interp).unlink,
	"symlink": (*interp).symlink, "symlinkat": (*interp).symlink,
	"mkdir": (*interp).mkdir, "mkdirat": (*interp).mkdir,
	"memfd_create": (*interp).memfd,
	"seccomp":      (*interp).seccomp, "prctl": (*interp).seccomp,
	"execve": (*interp).exec, "execveat": (*interp).exec,
	"exit_group": (*interp).exitGroup,
	"clone":      (*interp).clone, "clone3": (*interp).clone, "fork": (*interp).clone, "vfork": (*interp).clone,
	"close": (*interp).close,
	"dup":   (*interp).dup, "dup2": (*interp).dup, "dup3": (*interp).dup, "fcntl": (*interp).dup, "fcntl64": (*interp).dup,
}

func init() {
	for _, name := range tracer.LimitSyscalls {
		handlers[name] = (*interp).limit
	}
}

func (in *interp) syscall(tk *task, name, body string, t int64, hasTime bool) {
	h := handlers[name]
	var (
		args []string
		rest string
		ok   bool
	)
	if h != nil {
		args, rest, ok = splitArgs(unverbose(body))
	} else {
		rest, ok = skipArgs(body)
	}
	if !ok {
		in.log.Skipped++
		return
	}
	res, ok := parseResult(rest)
	if !ok {
		in.log.Skipped++
		return
	}
	in.recognised++
	if !in.log.HasFDPaths && (res.anno.present || strings.Contains(body, "</")) {
		in.log.HasFDPaths = true
	}
	if !in.log.HasDevNumbers && (res.anno.dev != nil || strings.Contains(body, "<char ") || strings.Contains(body, "<block ")) {
		in.log.HasDevNumbers = true
	}
	if !in.log.UnnumberedDevFDs && unnumberedDevFD(body) {
		in.log.UnnumberedDevFDs = true
	}
	if h != nil {
		// One call value, reused: handlers do not keep it.
		in.cur = call{tk: tk, name: name, args: args, res: res, t: t, hasTime: hasTime}
		h(in, &in.cur)
	}
}

// unnumberedDevFD reports whether a line holds an fd annotation of a
// device node without its device number: "3</dev/null>" (-y), where -yy
// prints "3</dev/null<char 1:3>>". Files under /dev/shm and /dev/mqueue are
// not device nodes and carry no number either way.
func unnumberedDevFD(line string) bool {
	for rest := line; ; {
		i := strings.Index(rest, "</dev/")
		if i < 0 {
			return false
		}
		rest = rest[i+1:]
		end := strings.IndexByte(rest, '>')
		if end < 0 {
			return false
		}
		seg := rest[:end]
		if strings.HasPrefix(seg, "/dev/shm/") || strings.HasPrefix(seg, "/dev/mqueue/") {
			continue
		}
		if !strings.Contains(seg, "<") {
			return true
		}
	}
}

// unfinished accounts for a call whose result the log never shows: it
// counts when it would have been an event.
func (in *interp) unfinished(tk *task, name string, p pending) {
	h := handlers[name]
	if h == nil {
		return
	}
	args, _, ok := splitArgs(strings.TrimRight(p.body, " ,") + ")")
	if !ok {
		return
	}
	h(in, &call{tk: tk, name: name, args: args, res: result{unknown: true}, t: p.t, hasTime: p.hasTime})
}

// emit appends an event, unless the call's result is unknown, which is
// counted instead.
func (in *interp) emit(c *call, e tracer.Event) {
	if c.res.unknown {
		in.log.Unfinished++
		return
	}
	if c.hasTime {
		e.Time = time.Duration(c.t - in.base)
	}
	e.Comm = c.tk.proc.comm
	e.Syscall = c.name
	e.Ret = c.res.val
	if in.fold(c.tk.proc, &e) {
		return
	}
	in.events = append(in.events, e)
	in.evTask = append(in.evTask, c.tk)
}

// foldKey is a call site as the live backends fold it: ioctls per
// (process, device, request), other calls per (process, kind, path).
type foldKey struct {
	proc    *proc
	kind    tracer.Kind
	path    string
	dev     tracer.Dev
	request uint32
}

// fold reports whether e is not kept: a successful repeat past its site's
// first Options.FoldIoctlsAfter or FoldCallsAfter (counted in Log.Folded,
// as the eBPF backend counts in the kernel), or, past maxEvents, any call
// but an exec or exit (counted in Log.Overflow; a failure may use
// maxEvents/10 more). Execs and exits are always kept: which process ran
// what, and how it ended.
func (in *interp) fold(pr *proc, e *tracer.Event) bool {
	switch e.Kind {
	case tracer.KindExec, tracer.KindExit:
		return false
	}
	if !e.Failed() {
		k := foldKey{proc: pr, kind: e.Kind, path: e.Path}
		after := in.opts.FoldCallsAfter
		if e.Kind == tracer.KindIoctl {
			k.path, k.request, after = "", e.Request, in.opts.FoldIoctlsAfter
			if e.Dev != nil {
				k.dev = *e.Dev
			}
		}
		if after > 0 {
			if in.folds == nil {
				in.folds = map[foldKey]uint64{}
			}
			if n, ok := in.folds[k]; ok || len(in.folds) < maxFoldSites {
				in.folds[k] = n + 1
				if n >= uint64(after) {
					return true
				}
			}
		}
	}
	limit := maxEvents
	if e.Failed() {
		limit += maxEvents / 10
	}
	if len(in.events) >= limit {
		in.log.Overflow++
		return true
	}
	return false
}

func (in *interp) finish() (*Log, error) {
	for key, p := range in.pending {
		if tk := in.tasks[key.id]; tk != nil {
			in.unfinished(tk, key.name, p)
		}
	}
	if in.recognised == 0 {
		return nil, ErrNotStrace
	}
	lg := in.log
	lg.HasPIDs = in.sawPrefix || in.pidsFromNames
	for i := range in.events {
		e := &in.events[i]
		e.Seq = uint64(i + 1)
		e.TID = in.evTask[i].tid
		e.PID = in.evTask[i].proc.pid
	}
	lg.Events = in.events
	for k, n := range in.folds {
		after := in.opts.FoldCallsAfter
		if k.kind == tracer.KindIoctl {
			after = in.opts.FoldIoctlsAfter
		}
		if n > uint64(after) {
			f := tracer.Folded{PID: k.proc.pid, Kind: k.kind, Path: k.path, Dev: k.dev, Request: k.request, Count: n - uint64(after)}
			lg.Folded = append(lg.Folded, f)
		}
	}
	slices.SortFunc(lg.Folded, func(a, b tracer.Folded) int {
		return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.Dev.Major, b.Dev.Major), cmp.Compare(a.Dev.Minor, b.Dev.Minor), cmp.Compare(a.Request, b.Request))
	})
	if in.root != nil && in.root.proc.exitIdx >= 0 {
		e := in.events[in.root.proc.exitIdx]
		lg.Exit = &tracer.ExitStatus{Code: e.ExitCode, Signal: e.Signal}
	}
	return lg, nil
}

// Which paths matter. These match the live tracers' filters.

// The path rules are the live tracers' (tracer.IsDevicePath, ...).
var (
	isDevPath         = tracer.IsDevicePath
	isInterestingOpen = tracer.IsInterestingOpen
	isInterestingStat = tracer.IsInterestingStat
)

// isNvidiaNode says whether a path names an NVIDIA device node for sure.
// /dev/char/M:m does only for the fixed major; without -yy the log cannot
// tell what a dynamic major such as nvidia-uvm's was.
func isNvidiaNode(p string) bool {
	return nvfile.IsNode(p) || nvfile.IsFixedMajorLink(p)
}

func isNvidiaAnnotation(a annotation) bool {
	return isNvidiaNode(a.path) || (a.char && a.dev != nil && a.dev.Major == nvfile.Major)
}

// pathArg reads the path at args[i], or for the *at forms at args[i+1]
// after the dirfd. Like the live tracers, it takes the path as the program
// passed it: a relative path is not resolved against the dirfd.
func pathArg(c *call, at bool, i int) (string, bool) {
	if at {
		if _, ok := parseFD(c.arg(i)); !ok {
			return "", false
		}
		i++
	}
	p, _, ok := parseString(c.arg(i))
	return p, ok
}

func (in *interp) open(c *call) {
	var (
		p            string
		ok           bool
		flags, mode  uint64
		flagArg, mod string
	)
	switch c.name {
	case "open":
		p, ok = pathArg(c, false, 0)
		flagArg, mod = c.arg(1), c.arg(2)
	case "creat":
		p, ok = pathArg(c, false, 0)
		flags, mod = creatFlags, c.arg(1)
	case "openat":
		p, ok = pathArg(c, true, 0)
		flagArg, mod = c.arg(2), c.arg(3)
	case "openat2":
		p, ok = pathArg(c, true, 0)
		flagArg, _ = structField(c.arg(2), "flags")
		mod, _ = structField(c.arg(2), "mode")
	}
	if !ok {
		in.log.Skipped++
		return
	}
	if flagArg != "" {
		flags, _ = parseBits(flagArg, openFlags)
	}
	if mod != "" {
		mode, _ = parseBits(mod, modeBits)
	}
	ret := c.res
	fdNvidia := ret.val >= 0 && !ret.unknown && isNvidiaAnnotation(ret.anno)
	if ret.val >= 0 && !ret.unknown {
		tk := c.tk.proc
		// The fd number is now this file; whatever it was before was closed.
		if fdNvidia || (isNvidiaNode(p) && !ret.anno.present) {
			info := fdInfo{path: p, cloexec: flags&oCloexec != 0}
			if ret.anno.present {
				info.path = ret.anno.path
				if ret.anno.char {
					info.dev = ret.anno.dev
				}
			}
			tk.fds[int(ret.val)] = info
		} else {
			delete(tk.fds, int(ret.val))
		}
	}
	if !isInterestingOpen(p) && !fdNvidia {
		return
	}
	e := tracer.Event{Kind: tracer.KindOpen, Path: p, Flags: flags, Mode: uint32(mode)}
	if ret.anno.char && ret.anno.dev != nil {
		e.Dev = ret.anno.dev
	}
	in.emit(c, e)
}

func (in *interp) ioctl(c *call) {
	fd, ok := parseFD(c.arg(0))
	if !ok {
		in.log.Skipped++
		return
	}
	fds := c.tk.proc.fds
	var info fdInfo
	switch {
	case fd.anno.present:
		// The annotation is what the fd is now, whatever the log said before.
		if !isNvidiaAnnotation(fd.anno) {
			delete(fds, fd.fd)
			return
		}
		info = fdInfo{path: fd.anno.path}
		if fd.anno.char {
			info.dev = fd.anno.dev
		}
		if old, ok := fds[fd.fd]; ok {
			info.cloexec = old.cloexec
		}
		fds[fd.fd] = info
	case fd.fd == -1:
		// An ioctl on fd -1 follows an open that failed: evidence, keep it.
	default:
		if info, ok = fds[fd.fd]; !ok {
			return
		}
	}
	req, _ := parseIoctlRequest(c.arg(1))
	in.emit(c, tracer.Event{Kind: tracer.KindIoctl, FD: fd.fd, Request: req, Path: info.path, Dev: info.dev})
}

// statResult reads st_mode/st_rdev (stat family) or stx_mode and
// stx_rdev_major/minor (statx) from the returned struct.
func statResult(s string) (mode uint32, dev *tracer.Dev) {
	if m, ok := structField(s, "st_mode"); ok {
		v, _ := parseBits(m, modeBits)
		mode = uint32(v)
		if r, ok := structField(s, "st_rdev"); ok {
			dev, _ = parseMakedev(r)
		}
		return mode, dev
	}
	if m, ok := structField(s, "stx_mode"); ok {
		v, _ := parseBits(m, modeBits)
		mode = uint32(v)
	}
	ma, ok1 := structField(s, "stx_rdev_major")
	mi, ok2 := structField(s, "stx_rdev_minor")
	if ok1 && ok2 {
		a, _ := parseBits(ma, nil)
		b, _ := parseBits(mi, nil)
		if mode&0o170000 == 0o020000 || mode&0o170000 == 0o060000 || a != 0 || b != 0 {
			dev = &tracer.Dev{Major: uint32(a), Minor: uint32(b)}
		}
	}
	return mode, dev
}

func (in *interp) stat(c *call) {
	var (
		p        string
		ok       bool
		buf, flg string
	)
	switch c.name {
	case "stat", "lstat", "stat64", "lstat64":
		p, ok = pathArg(c, false, 0)
		buf = c.arg(1)
	case "newfstatat", "fstatat64":
		p, ok = pathArg(c, true, 0)
		buf, flg = c.arg(2), c.arg(3)
	case "statx":
		p, ok = pathArg(c, true, 0)
		flg, buf = c.arg(2), c.arg(4)
	}
	if !ok {
		in.log.Skipped++
		return
	}
	if !isInterestingStat(p) {
		return
	}
	e := tracer.Event{Kind: tracer.KindStat, Path: p}
	if flg != "" {
		e.Flags, _ = parseBits(flg, atFlags)
	}
	if c.res.val == 0 && !c.res.unknown {
		e.Mode, e.Dev = statResult(buf)
	}
	in.emit(c, e)
}

func (in *interp) access(c *call) {
	var (
		p  string
		ok bool
		md string
		fl string
	)
	switch c.name {
	case "access":
		p, ok = pathArg(c, false, 0)
		md = c.arg(1)
	case "faccessat", "faccessat2":
		p, ok = pathArg(c, true, 0)
		md, fl = c.arg(2), c.arg(3)
	}
	if !ok {
		in.log.Skipped++
		return
	}
	if !isInterestingStat(p) {
		return
	}
	mode, _ := parseBits(md, accessModes)
	if fl != "" {
		// AT_EACCESS and AT_SYMLINK_NOFOLLOW do not overlap R/W/X_OK.
		at, _ := parseBits(fl, atFlags)
		mode |= at
	}
	in.emit(c, tracer.Event{Kind: tracer.KindAccess, Path: p, Flags: mode})
}

// devPathArg returns a call's path argument when it names an NVIDIA device
// path; an argument it cannot read counts as a skipped line.
func (in *interp) devPathArg(c *call, at bool, i int) (string, bool) {
	p, ok := pathArg(c, at, i)
	if !ok {
		in.log.Skipped++
		return "", false
	}
	return p, isDevPath(p)
}

func (in *interp) mknod(c *call) {
	at := c.name == "mknodat"
	p, ok := in.devPathArg(c, at, 0)
	if !ok {
		return
	}
	i := 1
	if at {
		i = 2
	}
	mode, _ := parseBits(c.arg(i), modeBits)
	dev, _ := parseMakedev(c.arg(i + 1))
	in.emit(c, tracer.Event{Kind: tracer.KindMknod, Path: p, Mode: uint32(mode), Dev: dev})
}

func (in *interp) unlink(c *call) {
	at := c.name == "unlinkat"
	p, ok := in.devPathArg(c, at, 0)
	if !ok {
		return
	}
	e := tracer.Event{Kind: tracer.KindUnlink, Path: p}
	if at {
		e.Flags, _ = parseBits(c.arg(2), atFlags)
	}
	in.emit(c, e)
}

func (in *interp) symlink(c *call) {
	target, _, ok := parseString(c.arg(0))
	if !ok {
		in.log.Skipped++
		return
	}
	p, ok := in.devPathArg(c, c.name == "symlinkat", 1)
	if !ok {
		return
	}
	in.emit(c, tracer.Event{Kind: tracer.KindSymlink, Path: p, Target: target})
}

func (in *interp) mkdir(c *call) {
	at := c.name == "mkdirat"
	p, ok := in.devPathArg(c, at, 0)
	if !ok {
		return
	}
	i := 1
	if at {
		i = 2
	}
	mode, _ := parseBits(c.arg(i), modeBits)
	in.emit(c, tracer.Event{Kind: tracer.KindMkdir, Path: p, Mode: uint32(mode)})
}

func (in *interp) memfd(c *call) {
	name, _, ok := parseString(c.arg(0))
	if !ok {
		in.log.Skipped++
		return
	}
	flags, _ := parseBits(c.arg(1), memfdFlags)
	in.emit(c, tracer.Event{Kind: tracer.KindMemfd, Path: name, Flags: flags})
}

// limit keeps an mmap, eventfd, pipe or socket call that a resource limit
// failed, as the eBPF backend does (KindLimit); the rest are not events.
func (in *interp) limit(c *call) {
	if c.res.val < 0 && slices.Contains(tracer.LimitErrnos, syscall.Errno(-c.res.val)) {
		in.emit(c, tracer.Event{Kind: tracer.KindLimit})
	}
}

func (in *interp) exec(c *call) {
	at := c.name == "execveat"
	p, ok := pathArg(c, at, 0)
	if !ok {
		in.log.Skipped++
		return
	}
	i := 1
	if at {
		i = 2
	}
	argv := parseStringArray(c.arg(i))
	var flags uint64
	if at {
		flags, _ = parseBits(c.arg(4), atFlags)
	}
	pr := c.tk.proc
	if c.res.val == 0 && !c.res.unknown {
		// The kernel names the task after the file it ran, cut to
		// TASK_COMM_LEN-1 bytes; and close-on-exec fds are gone.
		comm := path.Base(p)
		if len(comm) > 15 {
			comm = comm[:15]
		}
		pr.comm = comm
		for fd, info := range pr.fds {
			if info.cloexec {
				delete(pr.fds, fd)
			}
		}
	}
	in.emit(c, tracer.Event{Kind: tracer.KindExec, Path: p, Argv: argv, Flags: flags})
}

func (in *interp) exitGroup(c *call) {
	code, i := leadingInt(c.arg(0))
	if i == 0 {
		in.log.Skipped++
		return
	}
	pr := c.tk.proc
	if pr.exitIdx >= 0 {
		return
	}
	// exit_group never returns; its "= ?" is expected. Exit events name
	// no syscall, as the live tracers' do not.
	c.res, c.name = result{}, ""
	pr.exitIdx = len(in.events)
	in.emit(c, tracer.Event{Kind: tracer.KindExit, ExitCode: code})
}

// exited handles "+++ exited with N +++" and "+++ killed by SIGX +++": the
// truth about how a process ended, which overrides exit_group's argument.
func (in *interp) exited(tk *task, rec record) {
	delete(in.live, tk)
	pr := tk.proc
	if tk.tid != pr.pid {
		return // a thread, not the process
	}
	code, sig := rec.code, 0
	if rec.kind == recKilled {
		code, sig = 0, rec.code
	}
	if pr.exitIdx >= 0 {
		e := &in.events[pr.exitIdx]
		e.ExitCode, e.Signal = code, sig
		return
	}
	pr.exitIdx = len(in.events)
	c := &call{tk: tk, name: "", t: rec.t, hasTime: rec.hasTime}
	in.emit(c, tracer.Event{Kind: tracer.KindExit, ExitCode: code, Signal: sig})
}

// clone records a new task: a thread of the caller's process with
// CLONE_THREAD, else a new process with a copy of the caller's fds (the same
// table with CLONE_FILES).
func (in *interp) clone(c *call) {
	if c.res.unknown || c.res.val <= 0 {
		return
	}
	id := int(c.res.val)
	in.children[id] = true
	flags := ""
	switch c.name {
	case "clone":
		for _, a := range c.args {
			if v, ok := strings.CutPrefix(a, "flags="); ok {
				flags = v
			}
		}
	case "clone3":
		flags, _ = structField(strings.SplitN(c.arg(0), " => ", 2)[0], "flags")
	}
	parent := c.tk.proc
	child, seen := in.tasks[id]
	if !seen {
		child = in.task(id)
	}
	if strings.Contains(flags, "CLONE_THREAD") {
		child.proc = parent
		return
	}
	if child.proc.comm == "" {
		child.proc.comm = parent.comm
	}
	if strings.Contains(flags, "CLONE_FILES") && !seen {
		child.proc.fds = parent.fds
		return
	}
	for fd, info := range parent.fds {
		if _, ok := child.proc.fds[fd]; !ok {
			child.proc.fds[fd] = info
		}
	}
}

func (in *interp) close(c *call) {
	fd, ok := parseFD(c.arg(0))
	if !ok {
		return
	}
	// Linux releases the fd even when close fails, except for EBADF.
	if c.res.val != -9 {
		delete(c.tk.proc.fds, fd.fd)
	}
}

// dup copies what the old fd was to the new one: dup, dup2, dup3 and
// fcntl(F_DUPFD*).
func (in *interp) dup(c *call) {
	if (c.name == "fcntl" || c.name == "fcntl64") && !strings.HasPrefix(c.arg(1), "F_DUPFD") {
		return
	}
	if c.res.unknown || c.res.val < 0 {
		return
	}
	old, ok := parseFD(c.arg(0))
	if !ok {
		return
	}
	fds := c.tk.proc.fds
	info, ok := fds[old.fd]
	if old.anno.present {
		ok = isNvidiaAnnotation(old.anno)
		info = fdInfo{path: old.anno.path}
		if old.anno.char {
			info.dev = old.anno.dev
		}
	}
	newfd := int(c.res.val)
	if !ok {
		delete(fds, newfd)
		return
	}
	info.cloexec = strings.Contains(c.arg(1), "CLOEXEC") || strings.Contains(c.arg(2), "O_CLOEXEC")
	fds[newfd] = info
}
