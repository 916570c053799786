package grpchealth

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// The hostile servers below speak HTTP/2 by hand: a frame is a 9-byte
// header (24-bit length, type, flags, 31-bit stream ID) and a payload
// (RFC 9113, 4.1); header blocks are HPACK (RFC 7541) literals.

// HTTP/2 frame types and flags.
const (
	h2Data         = 0x0
	h2Headers      = 0x1
	h2Settings     = 0x4
	h2Ping         = 0x6
	h2Continuation = 0x9

	h2EndStream  = 0x1
	h2EndHeaders = 0x4
)

// h2Frame returns a frame of stream 1 (0 for SETTINGS and PING).
func h2Frame(typ, flags byte, payload []byte) []byte {
	stream := uint32(1)
	if typ == h2Settings || typ == h2Ping {
		stream = 0
	}
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags}
	b = binary.BigEndian.AppendUint32(b, stream)
	return append(b, payload...)
}

// hpackInt appends an HPACK integer with an n-bit prefix after first's
// high bits (RFC 7541, 5.1).
func hpackInt(b []byte, first byte, n uint, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(limit))
	for v -= limit; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f|0x80))
	}
	return append(b, byte(v))
}

// hpackField appends a literal header field without indexing, new name.
func hpackField(b []byte, name, value string) []byte {
	b = hpackInt(append(b, 0), 0, 7, uint64(len(name)))
	b = append(b, name...)
	b = hpackInt(b, 0, 7, uint64(len(value)))
	return append(b, value...)
}

var (
	// serverPreface is an empty SETTINGS frame, all an HTTP/2 server must
	// say first.
	serverPreface = h2Frame(h2Settings, 0, nil)
	// grpcHeaders is a response header block: :status 200 (static index
	// 8) and content-type application/grpc.
	grpcHeaders = hpackField([]byte{0x88}, "content-type", "application/grpc")
	// hostileChunk is what the servers stream, written again and again from
	// one buffer so that they allocate nothing while a probe is measured.
	hostileChunk = []byte(strings.Repeat("A", 64<<10))
)

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

// repeat writes b n times, or until the client goes away.
func repeat(c net.Conn, b []byte, n int) {
	for range n {
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// rawServer runs script on every connection once the client has sent its
// request's HEADERS, reading and discarding whatever else the client sends,
// and closes the connection once the client has closed it and script has
// returned: a script that returns early stalls the probe.
func rawServer(t *testing.T, script func(c net.Conn)) probes.Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			if err := awaitRequest(c); err != nil {
				return
			}
			done := make(chan struct{})
			go func() { defer close(done); script(c) }()
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close() // ends a script blocked writing
			<-done
		}()
	})
	return targetOf(t, l)
}

// awaitRequest reads the client's preface and frames up to the first
// HEADERS, a request's.
func awaitRequest(c net.Conn) error {
	buf := make([]byte, 16<<10)
	if _, err := io.ReadFull(c, buf[:24]); err != nil {
		return err
	}
	for {
		if _, err := io.ReadFull(c, buf[:9]); err != nil {
			return err
		}
		n, typ := int(buf[0])<<16|int(buf[1])<<8|int(buf[2]), buf[3]
		if n > len(buf) {
			return io.ErrShortBuffer
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return err
		}
		if typ == h2Headers {
			return nil
		}
	}
}

// silentAddr is a server that accepts connections and never writes.
func silentAddr(t *testing.T) netip.AddrPort { return testnet.Silent(t, "tcp4", "127.0.0.1") }

// TestHostileServers checks that whatever a server sends, one probe fails
// with a reason by its deadline, with a bounded message, and allocates
// little: all the process's allocations during the probe, the server's
// included, stay under 1 MiB. Floods of frames net/http's HTTP/2 client
// processes one by one (empty DATA, PING) are bounded by the deadline
// only: net/http allocates some 64 bytes of garbage per frame, so for
// them the check is on the live heap, which must not grow by 1 MiB.
func TestHostileServers(t *testing.T) {
	const (
		deadline  = 500 * time.Millisecond
		heapBound = 1 << 20
	)
	withPreface := func(frames ...[]byte) []byte {
		return bytes.Join(append([][]byte{serverPreface}, frames...), nil)
	}
	validHeaders := h2Frame(h2Headers, h2EndHeaders, grpcHeaders)
	headersStart := h2Frame(h2Headers, 0, hpackField(nil, "x-a", strings.Repeat("a", 8<<10)))
	continuation := h2Frame(h2Continuation, 0, hpackField(nil, "x-b", strings.Repeat("b", 8<<10)))
	hugeValue := append(append([]byte{}, grpcHeaders...), 0, 3, 'x', '-', 'h') // a literal field x-h whose value
	hugeValue = hpackInt(hugeValue, 0, 7, 1<<30)                               // claims 1 GiB
	hugeValue = h2Frame(h2Headers, h2EndHeaders, append(hugeValue, hostileChunk[:100]...))
	gigaMessage := h2Frame(h2Data, 0, append([]byte{0, 0x40, 0, 0, 0}, hostileChunk[:8<<10]...))
	maxMessage := h2Frame(h2Data, 0, append([]byte{0, 0, 0, 4, 0}, hostileChunk[:16<<10-5]...))
	bigData := h2Frame(h2Data, 0, hostileChunk[:16<<10])
	var trailerFields []byte
	for len(trailerFields) < 15<<10 {
		trailerFields = hpackField(trailerFields, "x-trailer", strings.Repeat("t", 1000))
	}
	trailerStart := h2Frame(h2Headers, h2EndStream, trailerFields)
	trailerMore := h2Frame(h2Continuation, 0, trailerFields)
	ping := h2Frame(h2Ping, 0, make([]byte, 8))
	emptyData := h2Frame(h2Data, 0, nil)
	for _, tc := range []struct {
		name   string
		target func(t *testing.T) probes.Target
		want   probes.Reason
		churn  bool // bounded by the deadline: check the live heap
	}{
		{"never answers", func(t *testing.T) probes.Target {
			return probes.TargetFrom(silentAddr(t))
		}, probes.ReasonTimeout, false},
		{"endless bytes", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) { stream(c, 64<<20) })
		}, probes.ReasonProtocol, false},
		{"endless bytes after SETTINGS", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) { _, _ = c.Write(serverPreface); stream(c, 64<<20) })
		}, probes.ReasonProtocol, false},
		{"HEADERS and CONTINUATION flood", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(headersStart))
				repeat(c, continuation, 64<<10)
			})
		}, probes.ReasonProtocol, false},
		{"header value claiming 1 GiB", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(hugeValue))
				stream(c, 64<<20)
			})
		}, probes.ReasonProtocol, false},
		{"DATA declaring a 1 GiB message", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) { _, _ = c.Write(withPreface(validHeaders, gigaMessage)) })
		}, probes.ReasonProtocol, false},
		{"DATA flood past the message and the window", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(validHeaders, maxMessage))
				repeat(c, bigData, 1<<12)
			})
		}, probes.ReasonProtocol, false},
		{"trailer flood", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(validHeaders, responseFrameData(), trailerStart))
				repeat(c, trailerMore, 1<<12)
			})
		}, probes.ReasonProtocol, false},
		{"valid headers, then stalls", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) { _, _ = c.Write(withPreface(validHeaders)) })
		}, probes.ReasonTimeout, false},
		{"half a message, then stalls", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(validHeaders, h2Frame(h2Data, 0, []byte{0, 0, 0, 0, 2, 8})))
			})
		}, probes.ReasonTimeout, false},
		{"a message, no trailers, then stalls", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) { _, _ = c.Write(withPreface(validHeaders, responseFrameData())) })
		}, probes.ReasonTimeout, false},
		{"endless empty DATA frames", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(withPreface(validHeaders))
				repeat(c, emptyData, 1<<22)
			})
		}, probes.ReasonTimeout, true},
		{"endless PINGs", func(t *testing.T) probes.Target {
			return rawServer(t, func(c net.Conn) {
				_, _ = c.Write(serverPreface)
				repeat(c, ping, 1<<22)
			})
		}, probes.ReasonTimeout, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target(t)
			p := newProber(t, Config{Service: "foo"})
			p.Probe(ctxTimeout(t, deadline), refusedTarget(t)) // warm up the transport's lazy state
			var res probes.Result
			allocated, liveGrowth := measureHeap(func() { res = p.Probe(ctxTimeout(t, deadline), target) })
			t.Logf("%v; %d bytes allocated, live heap grew by %d bytes at most", res, allocated, liveGrowth)
			wantReason(t, res, probes.Failure, tc.want)
			switch {
			case !tc.churn && allocated > heapBound:
				t.Errorf("the probe allocated %d bytes, more than %d", allocated, heapBound)
			case tc.churn && liveGrowth > heapBound:
				t.Errorf("the live heap grew by %d bytes during the probe, more than %d", liveGrowth, heapBound)
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

// measureHeap runs f and returns the bytes the process allocated meanwhile
// and by how much the live heap grew at most, as garbage collections forced
// every 20 ms during f measure it.
func measureHeap(f func()) (allocated, liveGrowth uint64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	live := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	base := live()
	done := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		maxLive := base
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.GC()
			maxLive = max(maxLive, live())
			select {
			case <-done:
				peak <- maxLive
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	maxLive := <-peak
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, maxLive - base
}

// responseFrameData is a DATA frame holding a SERVING response message.
func responseFrameData() []byte { return h2Frame(h2Data, 0, responseFrame(Serving)) }

// TestLongStatusMessage cuts a long grpc-message in the result.
func TestLongStatusMessage(t *testing.T) {
	text := strings.Repeat("é", 4000) // 8,000 bytes, two per rune
	srv := startFake(t, nil, answerTrailersOnly("14", text))
	res := newProber(t, Config{Service: "foo"}).Probe(ctxTimeout(t, 5*time.Second), srv.Target)
	wantReason(t, res, probes.Failure, probes.ReasonGRPCStatus)
	if len(res.Message) > 400 || !strings.HasSuffix(res.Message, "é…") {
		t.Errorf("message of %d bytes: %q", len(res.Message), res.Message)
	}
}

// TestServerCloses checks that a server closing the connection, with a FIN
// or a reset, at any point before it answers, fails the probe with
// probes.ReasonReset, however the close races with the request (each case
// runs several times).
func TestServerCloses(t *testing.T) {
	linger0 := func(c net.Conn) { _ = c.(*net.TCPConn).SetLinger(0) }
	for _, tc := range []struct {
		name  string
		close func(c net.Conn)
	}{
		{"at once", func(c net.Conn) { _ = c.Close() }},
		{"at once, reset", func(c net.Conn) { linger0(c); _ = c.Close() }},
		{"after the preface", func(c net.Conn) {
			_, _ = io.ReadFull(c, make([]byte, 24))
			_ = c.Close()
		}},
		{"after the preface, with SETTINGS", func(c net.Conn) {
			_, _ = io.ReadFull(c, make([]byte, 24))
			_, _ = c.Write(serverPreface)
			_ = c.Close()
		}},
		{"after the request", func(c net.Conn) { _ = awaitRequest(c); _ = c.Close() }},
		{"after the request, reset", func(c net.Conn) { _ = awaitRequest(c); linger0(c); _ = c.Close() }},
		{"after the response headers", func(c net.Conn) {
			_ = awaitRequest(c)
			_, _ = c.Write(append(append([]byte{}, serverPreface...), h2Frame(h2Headers, h2EndHeaders, grpcHeaders)...))
			_ = c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := listen(t, "tcp4", "127.0.0.1")
			serve(t, l, tc.close) // in the accept loop: one connection at a time
			target := targetOf(t, l)
			p := newProber(t, Config{Service: "foo"})
			for range 10 {
				res := p.Probe(ctxTimeout(t, 5*time.Second), target)
				wantReason(t, res, probes.Failure, probes.ReasonReset)
			}
		})
	}
}
