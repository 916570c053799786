package mysql

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// hostileChunk is what the hostile servers below stream, written again and
// again from one buffer so that the servers allocate nothing while a probe
// is measured.
var hostileChunk = []byte(strings.Repeat("A", 64<<10))

// stream writes n bytes of hostileChunk, or until the client goes away.
func streamBytes(c net.Conn, n int) {
	for n > 0 {
		k := min(n, len(hostileChunk))
		if _, err := c.Write(hostileChunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// packet returns one packet.
func packet(seq byte, body []byte) []byte {
	return append([]byte{byte(len(body)), byte(len(body) >> 8), byte(len(body) >> 16), seq}, body...)
}

// readAny reads one packet from the client, whatever it is.
func readAny(c net.Conn) []byte {
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return nil
	}
	body := make([]byte, int(head[0])|int(head[1])<<8|int(head[2])<<16)
	if _, err := io.ReadFull(c, body); err != nil {
		return nil
	}
	return body
}

// hostileServer accepts connections on loopback and hands each to script;
// the scripts end with the test, when their connections are closed.
func hostileServer(t *testing.T, script func(c net.Conn)) probes.Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	serve(t, l, func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		wg.Go(func() {
			defer c.Close()
			script(c)
		})
	})
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return targetOf(t, l)
}

// drain reads what the client sends until it goes away: a server that
// never answers.
func drain(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

var (
	greetingPacket = packet(0, (&myBackend{}).greeting())
	loginOK        = packet(2, okPacket)
)

// login greets, reads the handshake response and accepts it; it reports
// whether the client is still there.
func login(c net.Conn) bool {
	if _, err := c.Write(greetingPacket); err != nil || readAny(c) == nil {
		return false
	}
	_, err := c.Write(loginOK)
	return err == nil
}

// query logs in and reads the query.
func query(c net.Conn) bool { return login(c) && readAny(c) != nil }

// TestMySQLHostileServers checks that whatever a server sends, one probe
// allocates little (all its allocations, server included, stay under
// 1 MiB: an upper bound of its heap growth) and fails with a reason by its
// deadline.
func TestMySQLHostileServers(t *testing.T) {
	const (
		deadline  = 500 * time.Millisecond
		heapBound = 1 << 20
	)
	var manyRows []byte
	for seq := 3; len(manyRows) < 1<<20; seq++ {
		manyRows = append(manyRows, packet(byte(seq), []byte("\x011"))...)
	}
	columnDef := (&myBackend{column: &myColumn{0x08, text("1")}}).result()[1]
	for _, tc := range []struct {
		name   string
		mode   TLSMode
		script func(c net.Conn)
		want   probes.Reason
	}{
		{"never answers", TLSDisable, func(c net.Conn) { drain(c) }, probes.ReasonTimeout},
		{"endless bytes", TLSDisable, func(c net.Conn) { streamBytes(c, 64<<20) }, probes.ReasonProtocol},
		{"greeting of 16 MiB", TLSDisable, func(c net.Conn) {
			_, _ = c.Write([]byte{0xff, 0xff, 0xff, 0, protocolV10})
			streamBytes(c, 16<<20)
		}, probes.ReasonProtocol},
		{"login packet of 16 MiB", TLSDisable, func(c net.Conn) {
			if _, err := c.Write(greetingPacket); err != nil || readAny(c) == nil {
				return
			}
			_, _ = c.Write([]byte{0xff, 0xff, 0xff, 2, 0x01})
			streamBytes(c, 16<<20)
		}, probes.ReasonProtocol},
		{"endless authentication data", TLSDisable, func(c net.Conn) {
			// The driver takes the first as the end of a
			// mysql_native_password login; the rest is unexpected.
			if _, err := c.Write(greetingPacket); err != nil || readAny(c) == nil {
				return
			}
			for i := range 1000 {
				if _, err := c.Write(packet(byte(2+i), []byte{pktAuthMoreData, 3})); err != nil {
					return
				}
			}
		}, probes.ReasonProtocol},
		{"endless method switches", TLSDisable, func(c net.Conn) {
			if _, err := c.Write(greetingPacket); err != nil || readAny(c) == nil {
				return
			}
			for i := 0; ; i += 2 {
				sw := append([]byte("\xfemysql_native_password\x00"), append(scramble, 0)...)
				if _, err := c.Write(packet(byte(2+i), sw)); err != nil || readAny(c) == nil {
					return
				}
			}
		}, probes.ReasonProtocol},
		{"packet of 16 MiB after the query", TLSDisable, func(c net.Conn) {
			if !query(c) {
				return
			}
			_, _ = c.Write([]byte{0xff, 0xff, 0xff, 1, 1})
			streamBytes(c, 16<<20)
		}, probes.ReasonProtocol},
		{"2^40 columns", TLSDisable, func(c net.Conn) {
			if query(c) {
				_, _ = c.Write(packet(1, binary.LittleEndian.AppendUint64([]byte{0xfe}, 1<<40)))
				drain(c)
			}
		}, probes.ReasonProtocol},
		{"16 million columns", TLSDisable, func(c net.Conn) {
			if query(c) {
				_, _ = c.Write(packet(1, []byte{0xfd, 0xff, 0xff, 0xff}))
				for i := 0; ; i++ {
					if _, err := c.Write(packet(byte(2+i), columnDef)); err != nil {
						return
					}
				}
			}
		}, probes.ReasonProtocol},
		{"more results, then 2^40 columns", TLSDisable, func(c net.Conn) {
			if query(c) {
				// OK with SERVER_MORE_RESULTS_EXISTS: the driver reads
				// the next result's header.
				_, _ = c.Write(append(packet(1, []byte{0, 0, 0, 0x0a, 0, 0, 0}), packet(2, binary.LittleEndian.AppendUint64([]byte{0xfe}, 1<<40))...))
				drain(c)
			}
		}, probes.ReasonProtocol},
		{"endless rows", TLSDisable, func(c net.Conn) {
			if !query(c) {
				return
			}
			_, _ = c.Write(append(packet(1, []byte{1}), packet(2, columnDef)...))
			for range 64 {
				if _, err := c.Write(manyRows); err != nil {
					return
				}
			}
		}, probes.ReasonProtocol},
		{"slow drip", TLSDisable, func(c net.Conn) {
			// A byte of the greeting every 50 ms: never late enough
			// for a read to time out, always too late for the probe.
			for _, b := range greetingPacket {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}, probes.ReasonTimeout},
		{"slow rows", TLSDisable, func(c net.Conn) {
			if !query(c) {
				return
			}
			_, _ = c.Write(append(packet(1, []byte{1}), packet(2, columnDef)...))
			for i := 0; ; i++ {
				if _, err := c.Write(packet(byte(3+i), []byte("\x011"))); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}, probes.ReasonTimeout},
		{"no answer to the query", TLSDisable, func(c net.Conn) {
			if query(c) {
				drain(c)
			}
		}, probes.ReasonTimeout},
		{"LOCAL INFILE request", TLSDisable, func(c net.Conn) {
			if query(c) {
				_, _ = c.Write(packet(1, []byte("\xfb/etc/passwd")))
				readAny(c)
			}
		}, probes.ReasonProtocol},
		{"truncated OK packet", TLSDisable, func(c net.Conn) {
			// The driver would index past its end.
			if _, err := c.Write(greetingPacket); err == nil && readAny(c) != nil {
				_, _ = c.Write(packet(2, []byte{0, 0xfc}))
				drain(c)
			}
		}, probes.ReasonProtocol},
		{"greeting without the second part of the scramble", TLSDisable, func(c net.Conn) {
			g := (&myBackend{}).greeting()
			_, _ = c.Write(packet(0, g[:bytes.Index(g, scramble[:8])+8+1+2]))
			drain(c)
		}, probes.ReasonProtocol},
		{"switch to mysql_native_password without a scramble", TLSDisable, func(c net.Conn) {
			if _, err := c.Write(greetingPacket); err == nil && readAny(c) != nil {
				_, _ = c.Write(packet(2, []byte("\xfemysql_native_password\x00abc\x00")))
				drain(c)
			}
		}, probes.ReasonProtocol},
		{"a public key that is not RSA", TLSDisable, func(c net.Conn) {
			g := (&myBackend{plugin: "caching_sha2_password"}).greeting()
			if _, err := c.Write(packet(0, g)); err != nil || readAny(c) == nil {
				return
			}
			if _, err := c.Write(packet(2, []byte{pktAuthMoreData, sha2FullAuth})); err != nil || readAny(c) == nil {
				return
			}
			_, _ = c.Write(packet(4, append([]byte{pktAuthMoreData}, ecKeyPEM...)))
			drain(c)
		}, probes.ReasonProtocol},
		{"truncated column definition", TLSDisable, func(c net.Conn) {
			// The driver indexes past its end: a panic, recovered.
			if query(c) {
				_, _ = c.Write(append(packet(1, []byte{1}), packet(2, columnDef[:len(columnDef)-9])...))
				drain(c)
			}
		}, probes.ReasonProtocol},
		{"bytes in clear after the greeting, before TLS", TLSRequire, func(c net.Conn) {
			// An attacker's OK, to be read as if it came over TLS.
			g := (&myBackend{tls: &tls.Config{}}).greeting() // CLIENT_SSL
			_, _ = c.Write(append(packet(0, g), loginOK...))
			drain(c)
		}, probes.ReasonProtocol},
		{"HTTP server", TLSDisable, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 67108864\r\n\r\n"))
			streamBytes(c, 64<<20)
		}, probes.ReasonProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := hostileServer(t, tc.script)
			// Cleartext allowed: the servers get as far as they can.
			p := newMy(t, Config{Password: "secret", TLSMode: tc.mode, AllowCleartextPassword: true})
			p.Probe(ctxTimeout(t, deadline), refusedTarget(t, "tcp4", "127.0.0.1")) // warm up lazy state
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

// ecKeyPEM is a public key of another kind than RSA.
var ecKeyPEM = func() []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}()

// TestMySQLLongServerError cuts a long error of the server to
// probes.MaxMessageBytes in the result.
func TestMySQLLongServerError(t *testing.T) {
	long := strings.Repeat("é", 4000) // 8,000 bytes, two per rune
	target := hostileServer(t, func(c net.Conn) {
		if _, err := c.Write(greetingPacket); err == nil && readAny(c) != nil {
			_, _ = c.Write(packet(2, errPacket(1045, "28000", long)))
		}
	})
	res := newMy(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantReason(t, res, probes.Failure, probes.ReasonAuth)
	if len(res.Message) > probes.MaxMessageBytes || !strings.HasSuffix(res.Message, "é…") {
		t.Errorf("message of %d bytes ends with %q", len(res.Message), res.Message[max(0, len(res.Message)-8):])
	}
	if !strings.HasPrefix(res.Message, "mysql: connect: authentication failed (error 1045, SQLSTATE 28000): éé") {
		t.Errorf("message starts with %q", res.Message[:min(80, len(res.Message))])
	}
}
