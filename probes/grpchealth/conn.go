package grpchealth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/swh-dev/swh/probes"
)

// probeState is what the dialers learn of one probe's connection, for
// check to explain a failure. It travels in the probe's context, the one
// net/http hands to the dialers.
type probeState struct {
	// probe is the probe's own context: the transport dials with
	// context.WithoutCancel of it, which keeps this state but drops the
	// deadline and the cancellation that must bound the dial.
	probe context.Context

	mu            sync.Mutex
	conn          *probeConn // the TCP connection, nil until dialed
	dialed        bool       // a dial began: a probe makes one connection
	done          bool       // the probe returned: its connection is closed
	certRequested bool       // the TLS server asked for a client certificate
	tls13         bool       // the TLS handshake settled on TLS 1.3
}

// errOneConnection refuses a second dial of one probe: net/http dials
// again when a connection ends before the request went out (a GOAWAY, a
// close), and a probe tells that, not what another connection would say.
var errOneConnection = fmt.Errorf("the server ended the connection before the request went out (a probe makes one connection): %w", io.ErrUnexpectedEOF)

// claim starts the probe's one dial.
func (s *probeState) claim() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialed || s.done {
		return errOneConnection
	}
	s.dialed = true
	return nil
}

// keep records the probe's connection, or closes it when the probe has
// returned already.
func (s *probeState) keep(c *probeConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		_ = c.Close()
		return false
	}
	s.conn = c
	return true
}

// finish closes the probe's connection, whatever the transport did with
// it, and any the transport would still dial.
func (s *probeState) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

// bounded returns ctx canceled when the probe ends, as the dial's context
// must be (see probeState.probe).
func bounded(ctx context.Context) (context.Context, func()) {
	s := stateOf(ctx)
	if s == nil || s.probe == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.probe, cancel)
	return ctx, func() { stop(); cancel() }
}

// probeStateKey is the context key of the probe's *probeState.
type probeStateKey struct{}

func stateOf(ctx context.Context) *probeState {
	s, _ := ctx.Value(probeStateKey{}).(*probeState)
	return s
}

// dial opens the probe's TCP connection, within the probe's time.
func (p *Prober) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, done := bounded(ctx)
	defer done()
	return p.dialConn(ctx, network, addr)
}

// dialConn opens the probe's one TCP connection and records it.
func (p *Prober) dialConn(ctx context.Context, network, addr string) (net.Conn, error) {
	s := stateOf(ctx)
	if s != nil {
		if err := s.claim(); err != nil {
			return nil, err
		}
	}
	conn, err := p.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	resetOnClose(conn)
	pc := &probeConn{Conn: conn}
	if s != nil && !s.keep(pc) {
		return nil, context.Canceled // the probe returned meanwhile
	}
	return pc, nil
}

// dialTLS opens the probe's connection and does the TLS handshake, which
// must agree on HTTP/2. The prober does the handshake itself because
// net/http would fall back to HTTP/1.1 silently when the server ignores
// ALPN.
func (p *Prober) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, done := bounded(ctx)
	defer done()
	conn, err := p.dialConn(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := p.tls
	if cfg.ServerName == "" {
		// Verify the certificate against the target, as the transport
		// would: a pod IP needs an IP SAN.
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, &tlsError{err: err}
	}
	cs := tc.ConnectionState()
	if s := stateOf(ctx); s != nil {
		s.mu.Lock()
		s.tls13 = cs.Version == tls.VersionTLS13
		s.mu.Unlock()
	}
	if cs.NegotiatedProtocol != "h2" {
		_ = tc.Close()
		return nil, protocolErrorf("the TLS server did not agree to HTTP/2 (ALPN protocol %q, want \"h2\")", cs.NegotiatedProtocol)
	}
	return tc, nil
}

// clientCertificate is the tls.Config's GetClientCertificate: it sends
// cert (nil: none) whatever CAs the server names as acceptable (Go's
// default would silently send nothing on a mismatch, and the failure would
// then look like the server's fault), and notes that the server asked.
func clientCertificate(cert *tls.Certificate) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if s := stateOf(cri.Context()); s != nil {
			s.mu.Lock()
			s.certRequested = true
			s.mu.Unlock()
		}
		if cert == nil {
			return &tls.Certificate{}, nil // no certificate
		}
		return cert, nil
	}
}

// resetOnClose sets SO_LINGER to 0, as the probes package does on its
// connections: the prober closes first, and a normal close would leave a
// TIME_WAIT socket for 60 s per probe, exhausting the ephemeral ports at
// a few hundred probes per second to one address. Conns that are not TCP
// (a custom Dialer may wrap them) are left alone.
func resetOnClose(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
}

// probeConn is the TCP connection of a probe (under TLS, if any). It
// keeps the first error reading from the server: when the server closes
// the connection before the request is sent, net/http's HTTP/2 client
// reports "client conn could not be established" and drops the cause, a
// reset or an EOF.
//
// It also keeps the first bytes the server sent: an HTTP/1 server answers
// the client's HTTP/2 preface with an HTTP/1 response and closes, and
// whether net/http says so or only that the connection failed depends on
// which of its goroutines notices first.
type probeConn struct {
	net.Conn
	mu      sync.Mutex
	readErr error
	head    []byte // the first bytes read, at most headBytes
}

// headBytes is how much of the server's first bytes a probeConn keeps:
// enough for an HTTP/1 status line's start.
const headBytes = 16

func (c *probeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 || err != nil {
		c.mu.Lock()
		if k := min(n, headBytes-len(c.head)); k > 0 {
			c.head = append(c.head, b[:k]...)
		}
		if err != nil && c.readErr == nil {
			c.readErr = err
		}
		c.mu.Unlock()
	}
	return n, err
}

// explain completes an error of net/http's HTTP/2 client with what the
// dialers saw: the error of the server closing the connection, if it did
// (before the client closed it); and, when a TLS 1.3 server that asked
// for a client certificate closed the connection before any response
// (answered says whether one came), that it most likely refused the
// certificate. In TLS 1.3 the server judges the client's certificate
// after the client has finished its handshake: its alert races with the
// request, which may meet the closed connection first. It leaves the
// prober's own errors alone.
func (s *probeState) explain(ctx context.Context, err error, answered bool) error {
	var (
		protoErr   *protocolError
		statusErr  *StatusError
		servingErr *NotServingError
		tlsErr     *tlsError
	)
	if err == nil || errors.As(err, &protoErr) || errors.As(err, &statusErr) || errors.As(err, &servingErr) || errors.As(err, &tlsErr) {
		return err
	}
	s.mu.Lock()
	conn, certRequested, tls13 := s.conn, s.certRequested, s.tls13
	s.mu.Unlock()
	if conn != nil {
		conn.mu.Lock()
		readErr, head := conn.readErr, string(conn.head)
		conn.mu.Unlock()
		if !answered && strings.HasPrefix(head, "HTTP/1.") {
			return protocolErrorf("the server answered in HTTP/1 (%q…), not HTTP/2: no gRPC server listens there", head)
		}
		// A read error the client caused by closing is no explanation.
		if readErr != nil && !errors.Is(err, readErr) && probes.Classify(ctx, readErr) != probes.ReasonError {
			err = fmt.Errorf("%w: the server closed the connection: %w", err, readErr)
		}
	}
	if certRequested && tls13 && !answered && (probes.Classify(ctx, err) == probes.ReasonReset || closedBeforeRequest(err)) {
		return &tlsError{err: err, afterHandshake: true}
	}
	return err
}

// closedBeforeRequest reports whether err is net/http's HTTP/2 client
// saying that the connection closed before the request could be sent.
func closedBeforeRequest(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "http2: client conn could not be established") ||
		strings.Contains(msg, "http2: client conn not usable")
}
