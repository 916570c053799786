package grpchealth

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// TestProbesLeaveNothingReachable: a probe's connection, its buffers and
// its HTTP/2 state are garbage once it returns. With Go 1.26's
// Transport.NewClientConn every closed connection stayed reachable (12 KB
// each), and an agent probing 3,000 times a second held 500 MiB.
func TestProbesLeaveNothingReachable(t *testing.T) {
	const probes = 2000
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	// A server that keeps nothing of its requests, unlike startFake's.
	srv := &http.Server{Protocols: h2c, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/grpc")
		_, _ = w.Write(responseFrame(Serving))
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	})}
	l := listen(t, "tcp4", "127.0.0.1")
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	target := targetOf(t, l)
	p := newProber(t, Config{})

	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC() // sync.Pools drop their objects on the second
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for range probes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res := p.Probe(ctx, target)
		cancel()
		if !res.Passed() {
			t.Fatal(res)
		}
	}
	after := heap()
	grown := int64(after) - int64(before)
	t.Logf("heap %d KiB before %d probes, %d KiB after (%+d bytes a probe)", before>>10, probes, after>>10, grown/probes)
	if grown > 2<<20 {
		t.Errorf("the heap grew by %d KiB over %d probes (%d bytes each): their connections stay reachable", grown>>10, probes, grown/probes)
	}
}

// TestStalledDialEndsWithTheProbe: net/http dials in a goroutine of its
// own, without the request's deadline; a server that accepts and never
// answers the TLS ClientHello must still see the probe's connection
// closed when the probe ends, not when the pod dies.
func TestStalledDialEndsWithTheProbe(t *testing.T) {
	l := listen(t, "tcp4", "127.0.0.1")
	closed := make(chan time.Duration, 4)
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.Copy(io.Discard, c) // until the prober closes (or resets)
			closed <- time.Since(start)
		}()
	})
	p := newProber(t, Config{TLS: true, InsecureSkipVerify: true})
	res := p.Probe(ctxTimeout(t, 300*time.Millisecond), targetOf(t, l))
	wantReason(t, res, probes.Failure, probes.ReasonTimeout)
	select {
	case d := <-closed:
		if d > 2*time.Second {
			t.Errorf("the connection closed %v after it opened, long after the probe's 300ms", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the probe's connection is still open 5 s after the probe ended")
	}
}
