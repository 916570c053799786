package probes

import (
	"bufio"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostileChunk is what the hostile servers below stream, written again and
// again from one buffer so that the servers allocate nothing while a probe
// is measured.
var hostileChunk = []byte(strings.Repeat("A", 64<<10))

// stream writes n bytes of hostileChunk, or until the client goes away.
func stream(c net.Conn, n int) {
	for n > 0 {
		k := min(n, len(hostileChunk))
		if _, err := c.Write(hostileChunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// rawHTTPServer answers every request on loopback with what script writes,
// after reading the request's header.
func rawHTTPServer(t *testing.T, script func(c net.Conn)) Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
				return
			}
			script(c)
		}()
	})
	return targetOf(t, l)
}

// rawTCPServer runs script on every connection as soon as it has read
// something (a TLS ClientHello, say).
func rawTCPServer(t *testing.T, script func(c net.Conn)) Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			if _, err := c.Read(make([]byte, 4096)); err != nil {
				return
			}
			script(c)
		}()
	})
	return targetOf(t, l)
}

// TestHTTPHostileServers checks that whatever a server answers, one HTTP
// probe allocates little (all allocations of the process during the probe
// stay under 1 MiB) and fails, or passes, by its deadline with a bounded
// message and error.
func TestHTTPHostileServers(t *testing.T) {
	const (
		deadline  = 500 * time.Millisecond
		heapBound = 1 << 20
	)
	bigHeader := []byte("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n")
	longReason := []byte("HTTP/1.1 503 " + strings.Repeat("busy ", 12_000) + "\r\nContent-Length: 0\r\n\r\n")
	longLocation := []byte("HTTP/1.1 503 Moved Away\r\nLocation: /" + strings.Repeat("x", 60_000) + "\r\nContent-Length: 0\r\n\r\n")
	earlyHints := []byte("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
	chunkExt := []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("e", 1<<20) + "\r\n")
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		status Status
		want   Reason
		https  bool
	}{
		{"TLS handshake message claiming 16 MiB", func(c net.Conn) {
			// A TLS record of 16 KiB whose handshake message (a
			// ServerHello) claims 16 MiB; then more of them.
			record := append([]byte{0x16, 0x03, 0x03, 0x40, 0x00, 0x02, 0xff, 0xff, 0xff}, hostileChunk[:16384-4]...)
			for range 1024 {
				if _, err := c.Write(record); err != nil {
					return
				}
			}
		}, Failure, ReasonTLS, true},
		{"1 MiB header field", func(c net.Conn) { _, _ = c.Write(bigHeader) }, Failure, ReasonProtocol, false},
		{"endless 1xx responses", func(c net.Conn) {
			for range 100_000 {
				if _, err := c.Write(earlyHints); err != nil {
					return
				}
			}
		}, Failure, ReasonProtocol, false},
		{"60 KB reason phrase", func(c net.Conn) { _, _ = c.Write(longReason) }, Failure, ReasonHTTPStatus, false},
		{"60 KB Location", func(c net.Conn) { _, _ = c.Write(longLocation) }, Failure, ReasonHTTPStatus, false},
		{"64 MiB body", func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 67108864\r\n\r\n"))
			stream(c, 64<<20)
		}, Success, ReasonOK, false},
		{"endless chunk extension", func(c net.Conn) { _, _ = c.Write(chunkExt) }, Failure, ReasonProtocol, false},
		{"header dripped byte by byte", func(c net.Conn) {
			for _, b := range []byte("HTTP/1.1 200 OK\r\nX-Slow: " + strings.Repeat("s", 100)) {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}, Failure, ReasonTimeout, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var target Target
			cfg := HTTPConfig{}
			if tc.https {
				target, cfg.Scheme, cfg.InsecureSkipVerify = rawTCPServer(t, tc.script), "https", true
			} else {
				target = rawHTTPServer(t, tc.script)
			}
			p := newHTTP(t, cfg)
			p.Probe(ctxTimeout(t, deadline), refusedTarget(t, "tcp4", "127.0.0.1")) // warm up the transport's lazy state
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := p.Probe(ctxTimeout(t, deadline), target)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v; %d bytes allocated", res, allocated)
			wantReason(t, res, tc.status, tc.want)
			if allocated > heapBound {
				t.Errorf("the probe allocated %d bytes, more than %d", allocated, heapBound)
			}
			if res.Latency > deadline+time.Second {
				t.Errorf("the probe took %v with a %v deadline", res.Latency, deadline)
			}
			if len(res.Message) > MaxMessageBytes {
				t.Errorf("the message has %d bytes, more than %d", len(res.Message), MaxMessageBytes)
			}
			if res.Err != nil && len(res.Err.Error()) > 2*MaxMessageBytes {
				t.Errorf("the error keeps %d bytes", len(res.Err.Error()))
			}
		})
	}
}
