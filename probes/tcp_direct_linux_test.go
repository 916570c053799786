//go:build linux

package probes

import (
	"context"
	"errors"
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
// itself (what a connect to a free local port can turn into) on a real one:
// bound to a port and connected to that same port, a simultaneous open
// with itself.
func TestConnectDirectSelfConnect(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	self := sa.(*syscall.SockaddrInet4)
	if err := syscall.Connect(fd, self); err != nil {
		t.Fatalf("connecting a socket to itself: %v", err)
	}
	ap := netip.AddrPortFrom(netip.AddrFrom4(self.Addr), uint16(self.Port))
	if err := checkConnected(context.Background(), ap, fd); err != errSelfConnect {
		t.Errorf("checkConnected of a socket connected to itself: %v, want errSelfConnect", err)
	}
	other := netip.AddrPortFrom(ap.Addr(), ap.Port()+1)
	if err := checkConnected(context.Background(), other, fd); err != nil {
		t.Errorf("checkConnected for another port: %v, want nil", err)
	}
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
