//go:build linux

package probes

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// directDialing reports whether a TCPProber without a Dialer connects with
// connectDirect.
const directDialing = true

// connectDirect opens a TCP connection to ap and closes it with a reset, as
// a TCPProber does through a net.Dialer, with about half the system calls.
// A net.Dialer registers every socket with the runtime's poller (epoll_ctl
// twice), reads both addresses back (getsockname, getpeername), sets
// TCP_NODELAY and builds a net.Conn: eleven system calls and a few
// allocations per probe, for a connection that sends nothing. Here the
// socket is non-blocking and, on the usual path, never meets the poller:
// to a target on this machine (a pod behind a veth pair, loopback) the
// handshake completes within connect itself, whose SYN the kernel processes
// on the way out, so a poll with no timeout finds the socket connected:
// socket, setsockopt, connect, ppoll, getsockname (the check for a socket
// connected to itself that net makes too: getpeername follows only when
// the local port is the target's), close. A handshake still in progress
// (a remote or slow target) waits for the poller under ctx's deadline and
// cancellation, as a net.Dialer would. Errors are *net.OpError as a
// net.Dialer's ("dial tcp 10.0.0.1:80: connect: connection refused").
func connectDirect(ctx context.Context, ap netip.AddrPort) error {
	// As net does (selfConnect in its tcpsock_posix.go): a connect to a
	// port of this machine with nothing listening can pick that very port
	// as its own and connect to itself. Try again; a third self-connect is
	// a refusal.
	for range 3 {
		err := connectOnce(ctx, ap)
		if err != errSelfConnect {
			return err
		}
	}
	return dialError(ap, os.NewSyscallError("connect", syscall.ECONNREFUSED))
}

// errSelfConnect is connectOnce's report of a socket connected to itself.
var errSelfConnect = errors.New("connected to itself")

// connectOnce is one attempt of connectDirect.
func connectOnce(ctx context.Context, ap netip.AddrPort) error {
	if err := ctx.Err(); err != nil {
		return dialError(ap, ctxError(err))
	}
	var (
		family int
		sa     syscall.Sockaddr
	)
	if ap.Addr().Is4() {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		return dialError(ap, os.NewSyscallError("socket", err))
	}
	// Close with a reset: see resetOnClose.
	if err := syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1}); err != nil {
		_ = syscall.Close(fd)
		return dialError(ap, os.NewSyscallError("setsockopt", err))
	}
	switch err := syscall.Connect(fd, sa); err {
	case nil, syscall.EISCONN:
	case syscall.EINPROGRESS, syscall.EALREADY, syscall.EINTR:
		return waitConnected(ctx, ap, fd)
	default:
		_ = syscall.Close(fd)
		return dialError(ap, os.NewSyscallError("connect", err))
	}
	err = checkConnected(ctx, ap, fd)
	_ = syscall.Close(fd)
	return err
}

// checkConnected is what connectOnce returns for fd once it is connected:
// errSelfConnect for a socket connected to itself, the context's error if
// it ended meanwhile (as a net.Dialer does), nil otherwise.
func checkConnected(ctx context.Context, ap netip.AddrPort, fd int) error {
	self, err := connectedToItself(ap, fd)
	if err != nil {
		return dialError(ap, err)
	}
	if self {
		return errSelfConnect
	}
	if err := ctx.Err(); err != nil {
		return dialError(ap, ctxError(err))
	}
	return nil
}

// connectedToItself reports whether fd, connected for a connect to ap, is
// connected to itself: its own address is its peer's, as net compares them.
// The peer, not ap: a connect to the unspecified address (0.0.0.0:P,
// [::]:P) goes to this machine, whose socket then has a peer other than ap.
// The peer's port is always ap's, so a local port other than ap's settles
// it without asking for the peer, which is the usual path.
func connectedToItself(ap netip.AddrPort, fd int) (bool, error) {
	local, err := syscall.Getsockname(fd)
	if err != nil {
		return false, os.NewSyscallError("getsockname", err)
	}
	if port(local) != int(ap.Port()) {
		return false, nil
	}
	peer, err := syscall.Getpeername(fd)
	if err != nil {
		return false, os.NewSyscallError("getpeername", err)
	}
	return sameSockaddr(local, peer), nil
}

// port is the port of an IP socket address, -1 for any other.
func port(sa syscall.Sockaddr) int {
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return sa.Port
	case *syscall.SockaddrInet6:
		return sa.Port
	}
	return -1
}

// sameSockaddr reports whether a and b are the same IP address and port.
func sameSockaddr(a, b syscall.Sockaddr) bool {
	switch a := a.(type) {
	case *syscall.SockaddrInet4:
		b, ok := b.(*syscall.SockaddrInet4)
		return ok && a.Port == b.Port && a.Addr == b.Addr
	case *syscall.SockaddrInet6:
		b, ok := b.(*syscall.SockaddrInet6)
		return ok && a.Port == b.Port && a.Addr == b.Addr
	}
	return false
}

// waitConnected waits for the outcome of the non-blocking connect of fd,
// and closes fd.
func waitConnected(ctx context.Context, ap netip.AddrPort, fd int) error {
	if done, err := connected(fd); done {
		if err == nil {
			err = checkConnected(ctx, ap, fd)
		}
		_ = syscall.Close(fd)
		return dialError(ap, err)
	}
	// Still in progress: wait for the socket to become writable through
	// the runtime's poller, which an *os.File of a non-blocking
	// descriptor uses, with its deadline and cancellation.
	f := os.NewFile(uintptr(fd), "tcp-probe")
	defer f.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	rc, err := f.SyscallConn()
	if err != nil {
		return dialError(ap, err)
	}
	var result error
	if err := rc.Write(func(fd uintptr) bool {
		done, err := connected(int(fd))
		if done && err == nil {
			err = checkConnected(ctx, ap, int(fd))
		}
		result = err
		return done
	}); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return dialError(ap, ctxError(ctxErr))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The poller's deadline, a moment before the context's.
			return dialError(ap, errTimeout{})
		}
		return dialError(ap, err)
	}
	return dialError(ap, result)
}

// connected reports whether the connect of fd is over and, if so, its
// error. It does not wait.
func connected(fd int) (bool, error) {
	pfd := pollFd{fd: int32(fd), events: pollOut}
	var zero syscall.Timespec
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return true, os.NewSyscallError("ppoll", errno)
		}
		if n == 0 {
			return false, nil
		}
		break
	}
	if pfd.revents == pollOut {
		return true, nil // writable, no error: connected
	}
	soErr, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	switch {
	case err != nil:
		return true, os.NewSyscallError("getsockopt", err)
	case soErr != 0:
		return true, os.NewSyscallError("connect", syscall.Errno(soErr))
	}
	// No error, yet not plainly writable: connected only if it has a
	// peer (as net checks), else the kernel's own answer for a closed
	// socket without an error.
	if _, err := syscall.Getpeername(fd); err != nil {
		if err == syscall.ENOTCONN {
			return true, os.NewSyscallError("connect", syscall.ECONNABORTED)
		}
		return true, os.NewSyscallError("getpeername", err)
	}
	return true, nil
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const (
	pollOut = 0x4
	pollErr = 0x8
	pollHup = 0x10
)

// ctxError is the error a net.Dialer reports for a context that ended:
// "i/o timeout" (a net.Error whose Timeout is true) or "operation was
// canceled".
func ctxError(err error) error {
	switch err {
	case context.DeadlineExceeded:
		return errTimeout{}
	case context.Canceled:
		return errCanceled{}
	}
	return err
}

// errTimeout is net's error for a dial whose context's deadline passed.
type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// Is makes errors.Is(err, context.DeadlineExceeded) true, as net's is.
func (errTimeout) Is(err error) bool { return err == context.DeadlineExceeded }

// errCanceled is net's error for a dial canceled by its context.
type errCanceled struct{}

func (errCanceled) Error() string { return "operation was canceled" }

// Is makes errors.Is(err, context.Canceled) true.
func (errCanceled) Is(err error) bool { return err == context.Canceled }

// dialError wraps err, if any, as a net.Dialer does; errSelfConnect is left
// for connectDirect to see.
func dialError(ap netip.AddrPort, err error) error {
	if err == nil || err == errSelfConnect {
		return err
	}
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: err}
}
