package grpchealth

import (
	"context"
	"crypto/tls"
	"testing"
	"time"
)

// The benchmarks probe a fake server in the same process: ns/op and
// allocs/op include the server's side of each call (net/http's HTTP/2
// server), and allocs/op counts both sides.

// BenchmarkProbe probes a loopback h2c server answering SERVING.
func BenchmarkProbe(b *testing.B) {
	srv := startFake(b, nil, answerServing(Serving))
	benchmarkProbe(b, newProber(b, Config{Service: "foo"}), srv)
}

// BenchmarkProbeTLS probes a loopback TLS server (ECDSA P-256, TLS 1.3).
func BenchmarkProbeTLS(b *testing.B) {
	ca := newCA(b, "bench CA")
	cert, _, _ := ca.Issue(b, "127.0.0.1")
	srv := startFake(b, &tls.Config{Certificates: []tls.Certificate{cert}}, answerServing(Serving))
	benchmarkProbe(b, newProber(b, Config{Service: "foo", TLS: true, CACert: ca.PEM}), srv)
}

func benchmarkProbe(b *testing.B, p *Prober, srv *fakeServer) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if res := p.Probe(ctx, srv.Target); !res.Passed() {
			b.Fatal(res)
		}
	}
}
