package redis

import (
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// hostileChunk is what the hostile servers below stream, written again and
// again from one buffer so that the servers allocate nothing while a probe
// is measured.
var hostileChunk = []byte(strings.Repeat("A", 64<<10))

// stream writes n bytes of chunk again and again, or until the client goes
// away.
func stream(c net.Conn, chunk []byte, n int) {
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := c.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// hostileServer accepts connections on loopback, reads the probe's
// commands and hands the connection to script.
func hostileServer(t *testing.T, script func(c net.Conn)) probes.Target {
	t.Helper()
	l := testnet.Listen(t, "tcp4", "127.0.0.1")
	var wg sync.WaitGroup
	// Registered first, run last: once the accept loop has ended.
	t.Cleanup(wg.Wait)
	testnet.Serve(t, l, func(c net.Conn) {
		wg.Go(func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			var req [512]byte
			if _, err := c.Read(req[:]); err != nil {
				return
			}
			script(c)
		})
	})
	return probes.TargetFrom(testnet.AddrPort(t, l))
}

// TestRedisHostileServers checks that whatever a server sends, one probe
// allocates little (all its allocations, server included, stay under
// 1 MiB: an upper bound of its heap growth) and fails with a reason by its
// deadline.
func TestRedisHostileServers(t *testing.T) {
	const (
		deadline  = 500 * time.Millisecond
		heapBound = 1 << 20
	)
	pong := []byte("+PONG\r\n")
	deep := []byte(strings.Repeat("*1\r\n", 1<<20))
	wide := []byte("+PONG\r\n*64\r\n" + strings.Repeat("*64\r\n"+strings.Repeat(":1\r\n", 64), 64))
	okForever := []byte(strings.Repeat("+OK\r\n", 10_000))
	bigBulk := []byte(bulk(strings.Repeat("b", 60_000)))
	manyBulks := append(append([]byte("+PONG\r\n*64\r\n"), []byte(strings.Repeat(string(bigBulk), 3))...), bigBulk...)
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		want   probes.Reason
		msg    string
	}{
		{"never answers", func(c net.Conn) { time.Sleep(2 * deadline) }, probes.ReasonTimeout, "reading the answer to PING"},
		{"endless bytes without CRLF", func(c net.Conn) {
			_, _ = c.Write([]byte("+"))
			stream(c, hostileChunk, 64<<20)
		}, probes.ReasonProtocol, "MaxLineBytes"},
		{"a megabyte of error", func(c net.Conn) {
			_, _ = c.Write([]byte("-ERR "))
			stream(c, hostileChunk, 1<<20)
		}, probes.ReasonProtocol, "MaxLineBytes"},
		{"bulk string of 2^40 bytes", func(c net.Conn) {
			_, _ = c.Write([]byte("$1099511627776\r\n"))
			stream(c, hostileChunk, 64<<20)
		}, probes.ReasonProtocol, "MaxBulkBytes"},
		{"array of 2^31 elements", func(c net.Conn) {
			_, _ = c.Write(append(append([]byte{}, pong...), "*2147483648\r\n"...))
			stream(c, okForever, 64<<20)
		}, probes.ReasonProtocol, "MaxArrayElements"},
		{"arrays nested a million deep", func(c net.Conn) {
			_, _ = c.Write(pong)
			_, _ = c.Write(deep)
		}, probes.ReasonProtocol, "MaxNesting"},
		{"64 arrays of 64", func(c net.Conn) { _, _ = c.Write(wide) }, probes.ReasonProtocol, "MaxValues"},
		{"256 KiB of bulk strings", func(c net.Conn) { _, _ = c.Write(manyBulks) }, probes.ReasonProtocol, "MaxResponseBytes"},
		{"bulk string claimed, never sent", func(c net.Conn) {
			_, _ = c.Write([]byte("+PONG\r\n*3\r\n$6\r\nmaster\r\n:0\r\n*1\r\n$60000\r\nabc"))
			time.Sleep(2 * deadline)
		}, probes.ReasonTimeout, "reading the answer to ROLE"},
		{"slow drip", func(c net.Conn) {
			for _, b := range []byte("+PONG\r\n*3\r\n$6\r\nmaster\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(deadline / 10)
			}
		}, probes.ReasonTimeout, "reading the answer to"},
		{"endless OK", func(c net.Conn) { stream(c, okForever, 64<<20) }, probes.ReasonProtocol, "PING answered a simple string, not PONG"},
		{"HTTP server", func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 67108864\r\n\r\n"))
			stream(c, hostileChunk, 64<<20)
		}, probes.ReasonProtocol, "unknown type 'H'"},
		{"RESP3 map", func(c net.Conn) {
			_, _ = c.Write([]byte("+PONG\r\n%2147483647\r\n"))
			stream(c, okForever, 64<<20)
		}, probes.ReasonProtocol, "unknown type '%'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := hostileServer(t, tc.script)
			p := newProber(t, Config{Role: RoleMaster, MaxReplicationLag: &ReplicationLag{Bytes: 1}})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := p.Probe(ctxTimeout(t, deadline), target)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v; %d bytes allocated", res, allocated)
			wantResult(t, res, tc.want, tc.msg)
			if allocated > heapBound {
				t.Errorf("the probe allocated %d bytes, more than %d", allocated, heapBound)
			}
			if res.Latency > deadline+time.Second {
				t.Errorf("the probe took %v with a %v deadline", res.Latency, deadline)
			}
			if len(res.Message) > probes.MaxMessageBytes {
				t.Errorf("the message has %d bytes, more than %d", len(res.Message), probes.MaxMessageBytes)
			}
		})
	}
}

// TestRedisLongServerError: a long error of the server, with control
// characters, becomes a printable message of at most
// probes.MaxMessageBytes.
func TestRedisLongServerError(t *testing.T) {
	text := "ERR " + strings.Repeat("é\x1b", 160) // 485 bytes with "-": within MaxLineBytes
	target := hostileServer(t, func(c net.Conn) { _, _ = c.Write([]byte("-" + text + "\r\n")) })
	res := newProber(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantResult(t, res, probes.ReasonQueryError, "redis: PING: the command failed: ERR é é")
	if strings.ContainsRune(res.Message, '\x1b') || len(res.Message) > probes.MaxMessageBytes {
		t.Errorf("message of %d bytes: %q", len(res.Message), res.Message)
	}
}
