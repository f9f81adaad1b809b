package diagnose

import (
	"sync"

	"github.com/cudatrace/cudatrace/snapshot"
)

// maxLibraries bounds the library files read per session: a process opens
// libcuda and NVML a few times, a hostile one under many names.
const maxLibraries = 8

// libraries reads each libcuda and NVML file the target opens, at its open
// and beside the event stream (a FUSE file can take the guard's deadline),
// while the process is there to be read: which copy it loaded, and
// whether it fits the kernel module, is the verdict for 803, 804 and 34.
type libraries struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	seen  map[libraryKey]bool
	files []snapshot.LibraryFile
}

type libraryKey struct {
	pid  int
	path string
}

func (l *libraries) inspect(read func(int, string, bool) snapshot.LibraryFile, pid int, path string, sameRoot bool) {
	if read == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Per process: the same path in another container's root is another
	// file.
	key := libraryKey{pid, path}
	if l.seen[key] || len(l.seen) >= maxLibraries {
		return
	}
	if l.seen == nil {
		l.seen = map[libraryKey]bool{}
	}
	l.seen[key] = true
	i := len(l.files)
	l.files = append(l.files, snapshot.LibraryFile{PID: pid, Path: path})
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		lf := read(pid, path, sameRoot)
		l.mu.Lock()
		l.files[i] = lf
		l.mu.Unlock()
	}()
}

// wait returns the files read, in the order they were opened.
func (l *libraries) wait() []snapshot.LibraryFile {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.files
}
