package mysql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/swh-dev/swh/probes"
)

// dialer is the driver's DialFunc for one probe: it dials through the
// prober's Dialer and hands the driver the probe's stream.
type dialer struct {
	prober *Prober
	target probes.Target
	guard  *connGuard
}

func (d *dialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if !d.guard.claim() {
		return nil, errors.New("a MySQL probe opens one connection only")
	}
	// TCP whatever network the driver names (Probe tells it "unix").
	raw, err := d.prober.dialer.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	if !d.guard.set(raw) {
		return nil, context.Canceled
	}
	// The driver sets no deadline of its own (no read or write timeout
	// is configured): the probe's deadline bounds every read and write.
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	s := &stream{Conn: raw, raw: raw, conn: raw, ctx: ctx, tls: d.prober.tlsFor(d.target)}
	s.parser = parser{passwordOK: d.prober.passwordOK, expectTLS: s.tls != nil}
	d.guard.setStream(s)
	return s, nil
}

// stream is the connection the driver reads and writes: the server's
// packets pass the parser's checks on their way in, and TLS, when the
// prober uses it, is negotiated here rather than by the driver, so that
// the checks see the packets above it.
//
// The driver reads the greeting, writes its handshake response and, with
// TLS configured, would first write the response's first 32 bytes as the
// TLS request and wrap the socket. Here the driver is configured without
// TLS: when its handshake response comes, the stream sends that same TLS
// request, performs the handshake, and sends the response over TLS. The
// server then numbers the login's packets one higher than the driver does
// (the TLS request took a number); the stream adds one to the sequence
// number of each login packet the driver writes and takes one from each the
// server sends, until the login ends. Commands start again from 0.
type stream struct {
	net.Conn          // the TCP connection: addresses and deadlines
	raw      net.Conn // the same; Close closes it
	conn     net.Conn // what is read and written: raw, or TLS over raw once negotiated
	ctx      context.Context
	tls      *tls.Config // nil: no TLS
	parser   parser
	wrote    bool   // the handshake response has gone
	scratch  []byte // a login packet renumbered

	mu    sync.Mutex
	cause error // why the stream failed, first: a refusal, the TLS handshake's error or an I/O error
}

// Read passes on what the server sent once every packet in it is checked.
func (s *stream) Read(b []byte) (int, error) {
	if err := s.refusal(); err != nil {
		return 0, err
	}
	n, err := s.conn.Read(b)
	if serr := s.parser.scan(b[:n]); serr != nil {
		s.fail(serr)
		return 0, serr
	}
	if err != nil {
		s.fail(err)
	}
	return n, err
}

// Write sends one packet of the driver's (the driver writes each in one
// call), starting TLS before the first.
func (s *stream) Write(b []byte) (int, error) {
	if err := s.refusal(); err != nil {
		return 0, err
	}
	if len(b) < 4 || int(b[0])|int(b[1])<<8|int(b[2])<<16 != len(b)-4 {
		return 0, errors.New("mysql: the driver wrote something other than one whole packet")
	}
	first := !s.wrote
	s.wrote = true
	if first && len(b) >= 8 {
		s.parser.clientCapabilities(binary.LittleEndian.Uint32(b[4:8]))
	}
	if first && s.tls != nil {
		if err := s.startTLS(b); err != nil {
			s.fail(err)
			return 0, err
		}
	}
	out := b
	if s.parser.shiftSeq && b[3] != 0 {
		out = append(s.scratch[:0], b...)
		out[3]++
		if first {
			out[5] |= capClientSSL >> 8 // as a TLS client's handshake response says
		}
		s.scratch = out
	}
	n, err := s.conn.Write(out)
	if err != nil {
		s.fail(err)
		return min(n, len(b)), err
	}
	return len(b), nil
}

// startTLS sends the TLS request made of the handshake response hs and
// performs the handshake.
func (s *stream) startTLS(hs []byte) error {
	if len(hs) < 4+32 {
		return &tlsPhaseError{errors.New("the driver's handshake response is too short for a TLS request")}
	}
	if !s.parser.serverTLS() {
		return &tlsPhaseError{errors.New("the server does not accept TLS connections")}
	}
	req := make([]byte, 4+32)
	copy(req, hs[:4+32])
	req[0], req[1], req[2] = 32, 0, 0
	req[5] |= capClientSSL >> 8
	if _, err := s.raw.Write(req); err != nil {
		return &tlsPhaseError{err}
	}
	conn := tls.Client(s.raw, s.tls)
	if err := conn.HandshakeContext(s.ctx); err != nil {
		return &tlsPhaseError{err}
	}
	s.conn = conn
	s.parser.shiftSeq = true
	s.parser.startTLS()
	return nil
}

// Close closes the socket. A TLS connection ends without close_notify:
// the driver sent COM_QUIT before, and the alert's write could wait.
func (s *stream) Close() error { return s.raw.Close() }

func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cause == nil {
		s.cause = err
	}
}

// refusal returns the packet the stream refused, if any: every later read
// and write fails with it.
func (s *stream) refusal() *streamError {
	s.mu.Lock()
	defer s.mu.Unlock()
	serr, _ := s.cause.(*streamError)
	return serr
}

// failure returns why the stream failed, if it did.
func (s *stream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

// connGuard holds the probe's one socket so that the end of the context can
// close it, whichever phase the driver is in.
type connGuard struct {
	mu      sync.Mutex
	conn    net.Conn
	claimed bool // a dial started: one connection per probe
	aborted bool // the probe's context ended
	stream  *stream
}

func (g *connGuard) setStream(s *stream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stream = s
}

// failure returns why the stream failed (a refused packet, the TLS
// handshake, a read or write), or nil: the driver reports most of these as
// "invalid connection" or "bad connection".
func (g *connGuard) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stream == nil {
		return nil
	}
	return g.stream.failure()
}

// plugin returns the authentication method the server asked for last.
func (g *connGuard) plugin() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stream == nil {
		return ""
	}
	return g.stream.parser.plugin
}

// claim reports whether this is the probe's first dial.
func (g *connGuard) claim() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := !g.claimed && !g.aborted
	g.claimed = true
	return first
}

// set records the dialed socket; it reports false, and closes the socket,
// if the probe has already ended.
func (g *connGuard) set(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted {
		_ = c.Close()
		return false
	}
	g.conn = c
	return true
}

func (g *connGuard) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.aborted = true
	if g.conn != nil {
		_ = g.conn.Close()
	}
}

// tlsFor returns the TLS configuration of one probe of target, nil without
// TLS.
func (p *Prober) tlsFor(target probes.Target) *tls.Config {
	if p.tls == nil {
		return nil
	}
	cfg := p.tls.Clone()
	cfg.ServerName = p.serverName
	if cfg.ServerName == "" {
		cfg.ServerName = target.Host // SNI is left out for IP addresses
	}
	return cfg
}

// tlsConfig returns the TLS configuration of cfg.TLSMode, nil for
// TLSDisable. It is held in memory: the driver's process-wide registry of
// named TLS configurations is not used.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if err := cfg.TLSMode.Validate(); err != nil {
		return nil, err
	}
	if cfg.TLSMode == TLSDisable {
		return nil, nil // certificates are then ignored
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	var roots *x509.CertPool
	if len(cfg.CACert) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(cfg.CACert) {
			return nil, errors.New("mysql: CACert holds no PEM certificate")
		}
	}
	if len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
		cert, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("mysql: client certificate: %w", err)
		}
		// Sent whatever CAs the server names as acceptable: Go's
		// default would silently send nothing on a mismatch.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	switch {
	case cfg.TLSMode == TLSVerifyFull:
		tc.RootCAs = roots // nil: the system roots
	case cfg.TLSMode == TLSVerifyCA && roots == nil:
		return nil, errors.New("mysql: verify-ca needs CACert")
	case roots != nil:
		// verify-ca, or require with a CA: check the chain, not the
		// name.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error { return verifyChain(cs, roots) }
	default:
		tc.InsecureSkipVerify = true // require: encryption without verification
	}
	return tc, nil
}

func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the server sent no certificate")
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), CurrentTime: time.Now()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// tlsPhaseError marks an error raised while negotiating TLS, so that it is
// classified as ReasonTLS even when its cause is a plain protocol error (a
// server without TLS, or closing the connection on the TLS request).
// Timeouts keep their reason: classify checks them first.
type tlsPhaseError struct{ err error }

func (e *tlsPhaseError) Error() string {
	if msg := e.err.Error(); !strings.HasPrefix(msg, "tls: ") {
		return "tls: " + msg
	}
	return e.err.Error()
}
func (e *tlsPhaseError) Unwrap() error { return e.err }
