package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/swh-dev/swh/probes"
)

// pgDialer is the lib/pq dialer of one probe: it dials through the prober's
// Dialer, negotiates TLS itself and checks that the server speaks the
// PostgreSQL protocol.
type pgDialer struct {
	prober *Prober
	target probes.Target
	guard  *connGuard
}

// Dial and DialTimeout complete pq.Dialer; pq calls DialContext instead
// whenever the dialer has it.
func (d *pgDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialTimeout(network, address, probes.DefaultTimeout)
}

func (d *pgDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

func (d *pgDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if !d.guard.claim() {
		return nil, errors.New("a PostgreSQL probe opens one connection only")
	}
	raw, err := d.prober.dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if !d.guard.set(raw) {
		return nil, context.Canceled
	}
	conn := raw
	if d.prober.tls != nil {
		if conn, err = d.prober.startTLS(ctx, raw, d.target); err != nil {
			_ = raw.Close()
			return nil, &tlsPhaseError{err}
		}
	}
	stream := newPGStream(conn, d.prober.cleartextOK)
	d.guard.setStream(stream)
	return stream, nil
}

// sslRequest is PostgreSQL's SSLRequest message: length 8, code 80877103.
var sslRequest = [8]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}

// startTLS asks the server for TLS and performs the handshake. The prober
// does this rather than lib/pq because pq reads certificates from files (its
// in-memory "sslinline" mode insists on a client certificate), falls back to
// files under ~/.postgresql, and keeps custom tls.Configs in a process-wide
// registry; here everything stays in the prober's memory.
func (p *Prober) startTLS(ctx context.Context, raw net.Conn, target probes.Target) (net.Conn, error) {
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	if _, err := raw.Write(sslRequest[:]); err != nil {
		return nil, err
	}
	var answer [1]byte
	if _, err := io.ReadFull(raw, answer[:]); err != nil {
		return nil, err
	}
	switch answer[0] {
	case 'S':
	case 'N':
		return nil, errors.New("the server does not accept TLS connections")
	default:
		return nil, fmt.Errorf("unexpected answer %q to the TLS request: not a PostgreSQL server?", answer[0])
	}
	cfg := p.tls.Clone()
	cfg.ServerName = p.serverName
	if cfg.ServerName == "" {
		cfg.ServerName = target.Host // SNI is left out for IP addresses
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return conn, nil
}

// tlsConfig returns the TLS configuration of cfg.SSLMode, nil for
// SSLDisable.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if err := cfg.SSLMode.Validate(); err != nil {
		return nil, err
	}
	if cfg.SSLMode == SSLDisable {
		return nil, nil // like libpq, certificates are then ignored
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	var roots *x509.CertPool
	if len(cfg.CACert) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(cfg.CACert) {
			return nil, errors.New("postgresql: CACert holds no PEM certificate")
		}
	}
	if len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
		cert, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("postgresql: client certificate: %w", err)
		}
		// Sent whatever CAs the server names as acceptable, as libpq
		// does: Go's default would silently send nothing on a mismatch.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	switch {
	case cfg.SSLMode == SSLVerifyFull:
		tc.RootCAs = roots // nil: the system roots
	case cfg.SSLMode == SSLVerifyCA && roots == nil:
		return nil, errors.New("postgresql: verify-ca needs CACert")
	case roots != nil:
		// verify-ca, or require with a CA (libpq's compatibility rule):
		// check the chain, not the name.
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
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// tlsPhaseError marks an error raised while negotiating TLS, so that it is
// classified as ReasonTLS even when its cause is a plain protocol error (a
// server refusing TLS, or closing the connection on the TLS request).
// Timeouts keep their reason: classify checks them first.
type tlsPhaseError struct{ err error }

func (e *tlsPhaseError) Error() string { return "tls: " + e.err.Error() }
func (e *tlsPhaseError) Unwrap() error { return e.err }
