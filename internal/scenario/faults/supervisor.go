package faults

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's struct seccomp_notif and seccomp_notif_resp (linux/seccomp.h);
// x/sys/unix has the ioctl numbers but not the structs.
type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  [64]byte // struct seccomp_data
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// Supervisor answers the calls of SECCOMP_RET_USER_NOTIF filters with
// EPERM, as a container supervisor that refuses them would. Exec hands it
// each filter's listener over a unix socket; it serves a listener until no
// task uses that filter any more.
type Supervisor struct {
	ln       *net.UnixListener
	stop     chan struct{}
	wg       sync.WaitGroup
	answered atomic.Int64
	closed   sync.Once
}

// NewSupervisor listens on path (a new unix socket, usable by every user so
// that a target run as another user can reach it).
func NewSupervisor(path string) (*Supervisor, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o777); err != nil {
		_ = ln.Close() // best-effort cleanup: nothing to do if it fails
		return nil, err
	}
	s := &Supervisor{ln: ln, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Answered is how many calls the supervisor has refused.
func (s *Supervisor) Answered() int { return int(s.answered.Load()) }

// Close stops accepting, stops serving, and removes the socket. A call
// still waiting on a listener then fails with ENOSYS, as the kernel answers
// when the supervisor is gone.
func (s *Supervisor) Close() error {
	var err error
	s.closed.Do(func() {
		close(s.stop)
		err = s.ln.Close() // also removes the socket file
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			err = errors.New("seccomp supervisor: a listener did not stop within 5s")
		}
	})
	return err
}

func (s *Supervisor) accept() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		fd, err := receiveFD(conn)
		if err == nil {
			_, err = conn.Write([]byte{1})
			if err != nil {
				_ = unix.Close(fd) // best-effort cleanup: nothing to do if it fails
			}
		}
		_ = conn.Close() // best-effort cleanup: nothing to do if it fails
		if err != nil {
			continue // that target's Exec reports it
		}
		s.wg.Add(1)
		go s.serve(fd)
	}
}

func receiveFD(conn *net.UnixConn) (int, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a failed deadline only risks the test's own deadline
	_, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no fd in the message (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		for _, fd := range fds {
			_ = unix.Close(fd) // best-effort cleanup: nothing to do if it fails
		}
		return -1, fmt.Errorf("want one fd (%v)", err)
	}
	return fds[0], nil
}

// serve answers one listener until its filter has no task left (POLLHUP)
// or the supervisor closes. It polls with a timeout so that Close is seen.
func (s *Supervisor) serve(fd int) {
	defer s.wg.Done()
	defer func() { _ = unix.Close(fd) }() // best-effort cleanup: nothing to do if it fails
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 100)
		if err == unix.EINTR || n == 0 {
			continue
		}
		if err != nil || pfd[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		var req seccompNotif // the kernel wants it zeroed
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, uintptr(unsafe.Pointer(&req))); errno != 0 {
			continue // the caller died meanwhile (ENOENT) or a signal (EINTR)
		}
		resp := seccompNotifResp{ID: req.ID, Error: -int32(unix.EPERM)}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, uintptr(unsafe.Pointer(&resp))); errno == 0 {
			s.answered.Add(1)
		}
	}
}
