package mysql

import (
	"context"
	"crypto/tls"
	"testing"
	"time"
)

// BenchmarkProbe measures a whole probe against the loopback test server:
// dial, greeting, mysql_native_password, SELECT, one row, COM_QUIT.
func BenchmarkProbe(b *testing.B) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"TLS", true}} {
		b.Run(tc.name, func(b *testing.B) {
			backend := &myBackend{password: "pw", column: &myColumn{0x08, text("1")}}
			cfg := Config{Password: "pw"}
			if tc.tls {
				ca := newCA(b, "bench CA")
				cert, _, _ := ca.Issue(b, "127.0.0.1")
				backend.tls = &tls.Config{Certificates: []tls.Certificate{cert}}
				cfg.TLSMode, cfg.CACert = TLSVerifyFull, ca.PEM
			}
			target := backend.start(b)
			p := newMy(b, cfg)
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if res := p.Probe(ctx, target); !res.Passed() {
					b.Fatal(res)
				}
				cancel()
			}
		})
	}
}
