package probes_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"
)

// The probers must leave nothing running once a probe has returned, whatever
// the server did; the harness's servers stop with each test's cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// probeTimeout is the budget of one probe: the default timeoutSeconds of
// Kubernetes probes.
const probeTimeout = time.Second

// target parses "ip:port" (as the harness's Addr methods return it).
func target(t testing.TB, addr string) probes.Target {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatalf("parsing %q: %v", addr, err)
	}
	return probes.TargetFrom(ap)
}

// probe runs one probe with a deadline of timeout.
func probe(p probes.Prober, tgt probes.Target, timeout time.Duration) probes.Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.Probe(ctx, tgt)
}

// expect runs one probe and fails the test unless its status and reason are
// exactly the expected ones.
func expect(t testing.TB, p probes.Prober, tgt probes.Target, status probes.Status, reason probes.Reason) probes.Result {
	t.Helper()
	res := probe(p, tgt, probeTimeout)
	check(t, res, status, reason)
	return res
}

func check(t testing.TB, res probes.Result, status probes.Status, reason probes.Reason) {
	t.Helper()
	if res.Status != status || res.Reason != reason {
		t.Fatalf("probe = %v, want %s (%s)", res, status, reason)
	}
	if res.Message == "" {
		t.Errorf("probe %v has no message", res)
	}
	if (res.Err == nil) != (status == probes.Success) {
		t.Errorf("probe %v: Err = %v, want an error exactly on failure", res, res.Err)
	}
}
