package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/swh-dev/swh/probes"
)

// TLSMode says whether the prober uses TLS and how it verifies the server.
// The names are libpq's sslmode values, which package
// github.com/swh-dev/swh/probes/postgresql uses too, so that one word means
// one thing across the probers. There is no mode that tries TLS and falls
// back to plain TCP: a probe must check one known configuration.
type TLSMode string

// The TLS modes.
const (
	TLSDisable    TLSMode = "disable"     // plain TCP
	TLSRequire    TLSMode = "require"     // TLS, server not verified
	TLSVerifyCA   TLSMode = "verify-ca"   // TLS, server certificate signed by CACert
	TLSVerifyFull TLSMode = "verify-full" // verify-ca, and the certificate names the server
)

// maxQuotedMode bounds the value an error quotes: a mode comes from user
// input (a Secret, say) and may be long.
const maxQuotedMode = 40

// Validate returns nil for the modes above and otherwise an error naming
// the value (cut to 40 characters). The empty mode is refused too: whether
// a Redis server speaks TLS is a deployment's choice, and a prober that
// guessed would probe the wrong thing without saying so.
func (m TLSMode) Validate() error {
	switch m {
	case TLSDisable, TLSRequire, TLSVerifyCA, TLSVerifyFull:
		return nil
	case "":
		return errors.New("redis: TLS mode is required: disable, require, verify-ca or verify-full")
	}
	return fmt.Errorf("redis: TLS mode %.*q is not disable, require, verify-ca or verify-full", maxQuotedMode, string(m))
}

// verified reports whether the mode proves who the server is, and so
// whether the password may go to it.
func (m TLSMode) verified() bool { return m == TLSVerifyCA || m == TLSVerifyFull }

// tlsConfig returns the TLS configuration of cfg.TLSMode, nil for
// TLSDisable.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if err := cfg.TLSMode.Validate(); err != nil {
		return nil, err
	}
	hasCerts := len(cfg.CACert) > 0 || len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0
	if cfg.TLSMode == TLSDisable {
		if hasCerts {
			// Unlike libpq, which ignores them: certificates with
			// TLS off are a mistake the probe would hide.
			return nil, errors.New("redis: certificates are set with TLS mode disable")
		}
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	var roots *x509.CertPool
	if len(cfg.CACert) > 0 {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(cfg.CACert) {
			return nil, errors.New("redis: CACert holds no PEM certificate")
		}
	}
	if len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
		cert, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("redis: client certificate: %w", err)
		}
		// Sent whatever CAs the server names as acceptable: Go's
		// default would silently send nothing on a mismatch, and the
		// server's refusal would then read as a mystery.
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	switch cfg.TLSMode {
	case TLSVerifyFull:
		tc.RootCAs = roots // nil: the system roots
	case TLSVerifyCA:
		if roots == nil {
			return nil, errors.New("redis: verify-ca needs CACert")
		}
		// The chain, not the name: crypto/tls checks both or neither.
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error { return verifyChain(cs, roots) }
	default: // TLSRequire
		if roots != nil {
			// libpq verifies the chain then; a mode that says it
			// does not verify must not, and a CA that is not used
			// must not look as if it were.
			return nil, errors.New("redis: CACert is set with TLS mode require, which does not verify the server: use verify-ca or verify-full")
		}
		tc.InsecureSkipVerify = true // encryption without verification
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

// handshake performs the TLS handshake on raw, naming the server
// ServerName or, without one, the target's host (SNI is left out for IP
// addresses; verify-full then checks an IP SAN).
func (p *Prober) handshake(ctx context.Context, raw net.Conn, target probes.Target) (net.Conn, error) {
	cfg := p.tls.Clone()
	cfg.ServerName = p.serverName
	if cfg.ServerName == "" {
		cfg.ServerName = target.Host
	}
	conn := tls.Client(raw, cfg)
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, &tlsPhaseError{err}
	}
	return conn, nil
}

// tlsPhaseError marks an error raised during the TLS handshake, so that it
// is classified as ReasonTLS even when its cause reads as another (a plain
// Redis server answering the ClientHello with an error and closing).
// Timeouts keep their reason: classify checks them first.
type tlsPhaseError struct{ err error }

func (e *tlsPhaseError) Error() string { return e.err.Error() }
func (e *tlsPhaseError) Unwrap() error { return e.err }
