package postgresql

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// hostileChunk is what the hostile servers below stream, written again and
// again from one buffer so that the servers allocate nothing while a probe
// is measured.
var hostileChunk = []byte(strings.Repeat("A", 64<<10))

// pgHeader returns a message header claiming length (which counts itself).
func pgHeader(typ byte, length uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{typ}, length)
}

// pgMessage returns a whole message.
func pgMessage(typ byte, body []byte) []byte {
	return append(pgHeader(typ, uint32(len(body)+4)), body...)
}

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

// hostileServer accepts connections on loopback, reads the startup packet
// and hands the connection to script. The scripts precompute what they
// send.
func hostileServer(t *testing.T, script func(c net.Conn)) probes.Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			if _, _, err := readStartup(bufio.NewReaderSize(c, 16)); err != nil {
				return
			}
			script(c)
		}()
	})
	return targetOf(t, l)
}

var (
	authOK       = pgMessage('R', binary.BigEndian.AppendUint32(nil, 0))
	readyForQ    = pgMessage('Z', []byte{'I'})
	keyData      = pgMessage('K', binary.BigEndian.AppendUint64(nil, 42))
	noticeSmall  = pgMessage('N', []byte("SNOTICE\x00C00000\x00Mhello\x00\x00"))
	loginPackets = append(append(append([]byte{}, authOK...), keyData...), readyForQ...)
)

// TestPostgreSQLHostileServers checks that whatever a server sends, one
// probe allocates little (all its allocations, server included, stay under
// 1 MiB: an upper bound of its heap growth) and fails with a reason by its
// deadline.
func TestPostgreSQLHostileServers(t *testing.T) {
	const (
		deadline  = 500 * time.Millisecond
		heapBound = 1 << 20
	)
	paramStatus := func(i int) []byte {
		return pgMessage('S', fmt.Appendf(nil, "param_%d\x00%s\x00", i, hostileChunk[:100]))
	}
	var manyParams []byte
	for i := range 4000 {
		manyParams = append(manyParams, paramStatus(i)...)
	}
	var manyNotices []byte
	for len(manyNotices) < 1<<20 {
		manyNotices = append(manyNotices, noticeSmall...)
	}
	scram := pgMessage('R', append(binary.BigEndian.AppendUint32(nil, 10), "SCRAM-SHA-256\x00\x00"...))
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		want   probes.Reason
	}{
		{"64 MiB error message", func(c net.Conn) {
			_, _ = c.Write(append(pgHeader('E', 64<<20), "SFATAL\x00C28000\x00M"...))
			stream(c, 64<<20)
		}, probes.ReasonProtocol},
		{"64 MiB plain-text error without NUL", func(c net.Conn) {
			_, _ = c.Write([]byte("Ecould not fork new process for connection: "))
			stream(c, 64<<20)
		}, probes.ReasonProtocol},
		{"error claiming 29 KB, sending 10 bytes", func(c net.Conn) {
			_, _ = c.Write(append(pgHeader('E', 29_000), "SFATAL\x00C2"...))
			time.Sleep(2 * deadline)
		}, probes.ReasonTimeout},
		{"512 MiB claimed after authentication", func(c net.Conn) {
			_, _ = c.Write(append(append([]byte{}, authOK...), append(pgHeader('S', 512<<20), "0123456789"...)...))
			time.Sleep(2 * deadline)
		}, probes.ReasonProtocol},
		{"512 MiB row after the query", func(c net.Conn) {
			_, _ = c.Write(loginPackets)
			_, _ = c.Read(make([]byte, 256))
			_, _ = c.Write(append(pgHeader('D', 512<<20), 0, 1))
			stream(c, 64<<20)
		}, probes.ReasonProtocol},
		{"endless notices", func(c net.Conn) {
			_, _ = c.Write(authOK)
			for range 64 {
				if _, err := c.Write(manyNotices); err != nil {
					return
				}
			}
		}, probes.ReasonProtocol},
		{"endless parameter statuses", func(c net.Conn) {
			_, _ = c.Write(authOK)
			_, _ = c.Write(manyParams)
		}, probes.ReasonProtocol},
		{"no ReadyForQuery", func(c net.Conn) {
			_, _ = c.Write(append(append([]byte{}, authOK...), keyData...))
			time.Sleep(2 * deadline)
		}, probes.ReasonTimeout},
		{"no answer to the query", func(c net.Conn) {
			_, _ = c.Write(loginPackets)
			time.Sleep(2 * deadline)
		}, probes.ReasonTimeout},
		{"two billion SCRAM iterations", func(c net.Conn) {
			_, _ = c.Write(scram)
			// SASLInitialResponse: 'p', length, "SCRAM-SHA-256\0",
			// length, "n,,n=,r=<client nonce>".
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			_, nonce, ok := strings.Cut(string(buf[:n]), ",r=")
			if !ok {
				return
			}
			_, _ = c.Write(pgMessage('R', fmt.Appendf(binary.BigEndian.AppendUint32(nil, 11), "r=%sservernonce,s=c2FsdA==,i=2147483647", nonce)))
			time.Sleep(2 * deadline)
		}, probes.ReasonAuth},
		{"HTTP server", func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 67108864\r\n\r\n"))
			stream(c, 64<<20)
		}, probes.ReasonProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := hostileServer(t, tc.script)
			p := newPG(t, Config{Password: "secret"})
			p.Probe(ctxTimeout(t, deadline), refusedTarget(t, "tcp4", "127.0.0.1")) // warm up pq's lazy state
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := p.Probe(ctxTimeout(t, deadline), target)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("%v; %d bytes allocated", res, allocated)
			wantReason(t, res, probes.Failure, tc.want)
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

// TestPostgreSQLLongServerError cuts a long (valid) error of the server to
// probes.MaxMessageBytes in the result.
func TestPostgreSQLLongServerError(t *testing.T) {
	text := strings.Repeat("é", 10_000) // 20,000 bytes, two per rune
	target := hostileServer(t, func(c net.Conn) {
		_, _ = c.Write(pgMessage('E', fmt.Appendf(nil, "SFATAL\x00C28P01\x00M%s\x00\x00", text)))
	})
	res := newPG(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantReason(t, res, probes.Failure, probes.ReasonAuth)
	if len(res.Message) > probes.MaxMessageBytes || !strings.HasSuffix(res.Message, "é…") {
		t.Errorf("message of %d bytes ends with %q", len(res.Message), res.Message[max(0, len(res.Message)-8):])
	}
	if !strings.HasPrefix(res.Message, "postgresql: connect: authentication failed (SQLSTATE 28P01): éé") {
		t.Errorf("message starts with %q", res.Message[:min(80, len(res.Message))])
	}
}

// TestPostgreSQLCleartextPassword checks that the password goes in clear
// text only to a verified server, or when allowed explicitly; MD5 is
// answered everywhere.
func TestPostgreSQLCleartextPassword(t *testing.T) {
	serverCA := newCA(t, "server CA")
	serverCert, _, _ := serverCA.Issue(t, "db.example.test", "127.0.0.1")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}}
	for _, tc := range []struct {
		name string
		tls  bool
		md5  bool
		cfg  Config
		want probes.Reason
	}{
		{"disable", false, false, Config{SSLMode: SSLDisable}, probes.ReasonAuth},
		{"disable, allowed", false, false, Config{SSLMode: SSLDisable, AllowCleartextPassword: true}, probes.ReasonOK},
		{"disable, MD5", false, true, Config{SSLMode: SSLDisable}, probes.ReasonOK},
		{"require without CA", true, false, Config{SSLMode: SSLRequire}, probes.ReasonAuth},
		{"require with CA", true, false, Config{SSLMode: SSLRequire, CACert: serverCA.PEM}, probes.ReasonOK},
		{"verify-ca", true, false, Config{SSLMode: SSLVerifyCA, CACert: serverCA.PEM}, probes.ReasonOK},
		{"verify-full", true, false, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM}, probes.ReasonOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &pgBackend{password: "s3cret", md5: tc.md5, column: &pgColumn{16, text("t")}}
			if tc.tls {
				backend.tls = serverTLS
			}
			target := backend.start(t)
			tc.cfg.Password = "s3cret"
			res := newPG(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			if res.Reason != tc.want {
				t.Fatalf("got %v, want %s", res, tc.want)
			}
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				_, _, _, ended := backend.snapshot()
				if ended == "" && time.Now().Before(deadline) {
					continue
				}
				if refused := tc.want != probes.ReasonOK; refused != (ended == "no password") {
					t.Errorf("the session ended with %q (password refused: %v)", ended, refused)
				}
				break
			}
			if tc.want == probes.ReasonAuth && !strings.Contains(res.Message, "clear text") {
				t.Errorf("message %q does not say why", res.Message)
			}
		})
	}
}
