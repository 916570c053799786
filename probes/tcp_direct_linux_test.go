//go:build linux

package probes

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestConnectDirectLikeDialer checks that connectDirect, which a TCPProber
// without a Dialer uses for IP targets, reports what a net.Dialer does:
// the same reason, message and errors.Is answers.
func TestConnectDirectLikeDialer(t *testing.T) {
	direct, _ := NewTCP(TCPConfig{})
	dialer, _ := NewTCP(TCPConfig{Dialer: newDefaultDialer()})
	if !direct.direct || dialer.direct {
		t.Fatalf("direct: %v and %v, want true and false", direct.direct, dialer.direct)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	accepting := listen(t, "tcp4", "127.0.0.1")
	serve(t, accepting, func(c net.Conn) { c.Close() })

	for _, tc := range []struct {
		name   string
		ctx    func() (context.Context, context.CancelFunc)
		target func(t *testing.T) Target
		reason Reason
		// is, when set: errors.Is(Result.Err, is) for the direct path
		// (a net.Dialer's timeout is often the poller's deadline error,
		// a moment before the context's, which is not DeadlineExceeded).
		is error
	}{
		{"accepting", background, func(t *testing.T) Target { return targetOf(t, accepting) }, ReasonOK, nil},
		{"accepting, IPv4-mapped IPv6", background, func(t *testing.T) Target {
			return Target{Host: "::ffff:127.0.0.1", Port: targetOf(t, accepting).Port}
		}, ReasonOK, nil},
		{"refused", background, func(t *testing.T) Target { return refusedTarget(t, "tcp4", "127.0.0.1") }, ReasonRefused, syscall.ECONNREFUSED},
		{"refused, IPv6", background, func(t *testing.T) Target { return refusedTarget(t, "tcp6", "::1") }, ReasonRefused, syscall.ECONNREFUSED},
		{"canceled before", func() (context.Context, context.CancelFunc) { return canceled, func() {} }, func(t *testing.T) Target { return targetOf(t, accepting) }, ReasonCanceled, context.Canceled},
		{"canceled while waiting", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, fullBacklogListener, ReasonCanceled, context.Canceled},
		{"timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, fullBacklogListener, ReasonTimeout, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target(t)
			ap, ok := ipTarget(target)
			if !ok {
				t.Fatalf("%v is not an IP target", target)
			}
			ctx, cancel := tc.ctx()
			start := time.Now()
			err := connectDirect(ctx, ap)
			cancel()
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("connectDirect took %v", took)
			}
			if (err == nil) != (tc.reason == ReasonOK) {
				t.Fatalf("connectDirect: %v, want reason %s", err, tc.reason)
			}
			var got [2]Result
			for i, p := range []*TCPProber{direct, dialer} {
				ctx, cancel := tc.ctx()
				got[i] = p.Probe(ctx, target)
				cancel()
				wantReason(t, got[i], statusOf(tc.reason), tc.reason)
				if i == 0 && tc.is != nil && !errors.Is(got[i].Err, tc.is) {
					t.Errorf("prober %d: errors.Is(%v, %v) is false", i, got[i].Err, tc.is)
				}
			}
			if got[0].Message != got[1].Message {
				t.Errorf("direct: %q, net.Dialer: %q", got[0].Message, got[1].Message)
			}
		})
	}
}

func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

func statusOf(r Reason) Status {
	if r == ReasonOK {
		return Success
	}
	return Failure
}

// TestConnectDirectWaits checks the direct connect's slower path: a
// handshake that does not complete within connect (here a SYN dropped by a
// full accept queue, retransmitted a second later) waits on the runtime's
// poller and passes when it completes.
func TestConnectDirectWaits(t *testing.T) {
	l, target := fullBacklog(t)
	go func() {
		time.Sleep(100 * time.Millisecond)
		if c, err := l.Accept(); err == nil { // room for the retransmitted SYN
			c.Close()
		}
	}()
	ap, _ := ipTarget(target)
	start := time.Now()
	if err := connectDirect(ctxTimeout(t, 5*time.Second), ap); err != nil {
		t.Fatalf("connectDirect: %v", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("connected after %v, before there was room for it", took)
	}
}

// TestConnectDirectSelfConnect checks the check for a socket connected to
// itself (what a connect to a free local port can turn into) on real
// sockets: one bound to a port and connected to that same port (a
// simultaneous open with itself) is refused whatever address the target
// named, the unspecified one included (a connect to 0.0.0.0:P or [::]:P
// goes to this machine); sockets connected to someone else are not, even
// from the target's port.
func TestConnectDirectSelfConnect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		connect func(t *testing.T) (fd int, peer netip.AddrPort)
		// target is what the probe named, from the socket's own address.
		target func(self netip.AddrPort) netip.AddrPort
		want   error
	}{
		{"itself, IPv4, named", selfConnected(syscall.AF_INET), same, errSelfConnect},
		{"itself, IPv4, as 0.0.0.0", selfConnected(syscall.AF_INET), unspecified, errSelfConnect},
		{"itself, IPv6, named", selfConnected(syscall.AF_INET6), same, errSelfConnect},
		{"itself, IPv6, as [::]", selfConnected(syscall.AF_INET6), unspecified, errSelfConnect},
		{"a listener, as 0.0.0.0", listenerConnected("127.0.0.1", ""), unspecified, nil},
		{"a listener, IPv6, as [::]", listenerConnected("::1", ""), unspecified, nil},
		// Same port on both ends, other addresses: only the peer tells.
		{"a listener, from its port", listenerConnected("127.0.0.1", "127.0.0.2"), same, nil},
		{"a listener, from its port, as 0.0.0.0", listenerConnected("127.0.0.1", "127.0.0.2"), unspecified, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, peer := tc.connect(t)
			ap := tc.target(peer)
			if err := checkConnected(context.Background(), ap, fd); err != tc.want {
				t.Errorf("checkConnected(%v): %v, want %v", ap, err, tc.want)
			}
		})
	}
}

func same(ap netip.AddrPort) netip.AddrPort { return ap }

func unspecified(ap netip.AddrPort) netip.AddrPort {
	if ap.Addr().Is4() {
		return netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port())
	}
	return netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port())
}

// selfConnected returns a loopback socket of family connected to itself,
// and its address.
func selfConnected(family int) func(t *testing.T) (int, netip.AddrPort) {
	return func(t *testing.T) (int, netip.AddrPort) {
		host := "127.0.0.1"
		if family == syscall.AF_INET6 {
			host = "::1"
		}
		fd := boundSocket(t, netip.AddrPortFrom(netip.MustParseAddr(host), 0))
		self := sockAddrPort(t, fd)
		if err := syscall.Connect(fd, sockaddrOf(self)); err != nil {
			t.Fatalf("connecting a socket to itself: %v", err)
		}
		return fd, self
	}
}

// listenerConnected returns a socket connected to a listener on host and
// the listener's address; the socket is bound to from, at the listener's
// port, unless from is empty.
func listenerConnected(host, from string) func(t *testing.T) (int, netip.AddrPort) {
	return func(t *testing.T) (int, netip.AddrPort) {
		network := "tcp4"
		if netip.MustParseAddr(host).Is6() {
			network = "tcp6"
		}
		l := listen(t, network, host)
		serve(t, l, func(c net.Conn) { _, _ = io.Copy(io.Discard, c); c.Close() })
		peer, err := netAddrPort(l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		local := netip.AddrPortFrom(peer.Addr(), 0)
		if from != "" {
			local = netip.AddrPortFrom(netip.MustParseAddr(from), peer.Port())
		}
		fd := boundSocket(t, local)
		if err := syscall.Connect(fd, sockaddrOf(peer)); err != nil {
			t.Fatalf("connecting to %v from %v: %v", peer, local, err)
		}
		return fd, peer
	}
}

// boundSocket returns a blocking TCP socket bound to ap, closed with t. It
// closes with a reset, leaving no TIME_WAIT behind to hold its address and
// port (a later listener may get the same port, and a later test bind to
// it).
func boundSocket(t *testing.T, ap netip.AddrPort) int {
	t.Helper()
	family := syscall.AF_INET
	if ap.Addr().Is6() {
		family = syscall.AF_INET6
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, sockaddrOf(ap)); err != nil {
		t.Fatalf("binding to %v: %v", ap, err)
	}
	return fd
}

func sockaddrOf(ap netip.AddrPort) syscall.Sockaddr {
	if ap.Addr().Is4() {
		return &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return &syscall.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

func sockAddrPort(t *testing.T, fd int) netip.AddrPort {
	t.Helper()
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	t.Fatalf("getsockname: %T", sa)
	return netip.AddrPort{}
}

// TestConnectDirectNoLeak checks that no path of connectDirect leaves a
// file descriptor open.
func TestConnectDirectNoLeak(t *testing.T) {
	accepting := listen(t, "tcp4", "127.0.0.1")
	serve(t, accepting, func(c net.Conn) { c.Close() })
	ok, _ := ipTarget(targetOf(t, accepting))
	refused, _ := ipTarget(refusedTarget(t, "tcp4", "127.0.0.1"))
	full, _ := ipTarget(fullBacklogListener(t))
	before := openFiles(t)
	for range 50 {
		if err := connectDirect(context.Background(), ok); err != nil {
			t.Fatal(err)
		}
		if err := connectDirect(context.Background(), refused); err == nil {
			t.Fatal("connected to a port nobody listens on")
		}
	}
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		if err := connectDirect(ctx, full); err == nil {
			t.Fatal("connected through a full accept queue")
		}
		cancel()
	}
	// The server closes what it accepted on its own time.
	after := openFiles(t)
	for deadline := time.Now().Add(2 * time.Second); after != before && time.Now().Before(deadline); after = openFiles(t) {
		time.Sleep(10 * time.Millisecond)
	}
	if after != before {
		t.Errorf("%d open files before, %d after", before, after)
	}
}

func openFiles(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
