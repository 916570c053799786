package mysql

import (
	"context"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testca"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// Every test talks to 127.0.0.1 or [::1] only, and must leave no goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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

// The loopback servers the tests probe (see testnet).
func listen(t testing.TB, network, host string) net.Listener { return testnet.Listen(t, network, host) }
func targetOf(t testing.TB, l net.Listener) probes.Target {
	return probes.TargetFrom(testnet.AddrPort(t, l))
}
func refusedTarget(t testing.TB, network, host string) probes.Target {
	return probes.TargetFrom(testnet.Refused(t, network, host))
}
func silentListener(t testing.TB, network, host string) probes.Target {
	return probes.TargetFrom(testnet.Silent(t, network, host))
}
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) { testnet.Serve(t, l, handle) }
func ctxTimeout(t testing.TB, d time.Duration) context.Context  { return testnet.Context(t, d) }
