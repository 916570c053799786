package postgresql

// The helpers below repeat a few of package probes' test helpers: test
// files cannot be imported, and a shared helper package would have to be
// imported by probes' internal tests, a cycle.

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"

	"github.com/swh-dev/swh/probes/internal/testca"
)

// Every test talks to 127.0.0.1 or [::1] only, and must leave no goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// listen opens a listener on a loopback address, skipping the test when the
// address family is not available.
func listen(t testing.TB, network, host string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func targetOf(t testing.TB, l net.Listener) probes.Target {
	t.Helper()
	tcp, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", l.Addr())
	}
	return probes.TargetFrom(tcp.AddrPort())
}

// refusedTarget returns a loopback port nothing listens on.
func refusedTarget(t testing.TB, network, host string) probes.Target {
	t.Helper()
	l := listen(t, network, host)
	target := targetOf(t, l)
	l.Close()
	return target
}

// silentListener accepts connections and never writes to them, until the
// test ends.
func silentListener(t testing.TB, network, host string) probes.Target {
	t.Helper()
	l := listen(t, network, host)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return targetOf(t, l)
}

// serve accepts connections and hands each to handle, until the test
// ends.
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
}

// ctxTimeout returns a context that expires after d.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialerFunc is a probes.Dialer made of a function.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

// ca is a throw-away certificate authority (testca, shared by the
// module's tests).
type ca = testca.CA

func newCA(t testing.TB, name string) *ca { return testca.New(t, name) }

func wantReason(t testing.TB, got probes.Result, status probes.Status, reason probes.Reason) {
	t.Helper()
	if got.Status != status || got.Reason != reason {
		t.Fatalf("got %v, want %s (%s)", got, status, reason)
	}
	if got.Message == "" {
		t.Errorf("result has no message: %#v", got)
	}
	if (got.Err == nil) != (status == probes.Success) {
		t.Errorf("Err = %v for a %s", got.Err, status)
	}
}
