package redis

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// cannedServer answers every connection with the same bytes once it has
// read the probe's commands: the least server work, so that a benchmark
// measures the prober (its allocations include the server's accept).
func cannedServer(b *testing.B, answer string) probes.Target {
	l := testnet.Listen(b, "tcp4", "127.0.0.1")
	out := []byte(answer)
	var wg sync.WaitGroup
	// Registered first, run last: once the accept loop has ended.
	b.Cleanup(wg.Wait)
	testnet.Serve(b, l, func(c net.Conn) {
		wg.Go(func() {
			defer c.Close()
			var buf [512]byte
			if _, err := c.Read(buf[:]); err != nil {
				return
			}
			_, _ = c.Write(out)
			_, _ = io.Copy(io.Discard, c)
		})
	})
	return probes.TargetFrom(testnet.AddrPort(b, l))
}

func BenchmarkProbe(b *testing.B) {
	for _, bc := range []struct {
		name   string
		cfg    Config
		answer string
	}{
		{"PING", Config{}, "+PONG\r\n"},
		{"ROLE+INFO", Config{Role: RoleReplica, MaxReplicationLag: &ReplicationLag{Bytes: 1 << 20, Time: 20 * time.Second}},
			"+PONG\r\n" + replicaRole("10.0.0.1", 6379, "connected") + bulk(infoText("up", 0, 1, 100, 90))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			target := cannedServer(b, bc.answer)
			p := newProber(b, bc.cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			b.ReportAllocs()
			for b.Loop() {
				if res := p.Probe(ctx, target); !res.Passed() {
					b.Fatal(res)
				}
			}
		})
	}
}
