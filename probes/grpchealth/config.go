package grpchealth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/swh-dev/swh/probes"
)

// Config configures a Prober. The zero value checks the whole server
// (service "") over plaintext HTTP/2.
type Config struct {
	// Service is the service name sent in the HealthCheckRequest; empty
	// asks about the server as a whole, as Kubernetes' gRPC probes do by
	// default. It must be valid UTF-8 of at most MaxServiceBytes.
	Service string
	// TLS makes the probe speak HTTP/2 over TLS (ALPN "h2"); without it,
	// the probe speaks HTTP/2 in clear text with prior knowledge (h2c),
	// as gRPC servers without TLS expect.
	TLS bool
	// ServerName is the TLS server name (SNI and certificate verification)
	// and the :authority of the request. It may carry a port, which only
	// goes into :authority. Empty means the target: its host for TLS, its
	// host and port for :authority.
	ServerName string
	// CACert is a PEM bundle of the authorities that verify the server
	// (TLS only). Empty means the system roots.
	CACert []byte
	// InsecureSkipVerify accepts any server certificate (TLS only; not
	// together with CACert).
	InsecureSkipVerify bool
	// ClientCert and ClientKey are a PEM certificate and key the probe
	// presents to a server that asks for one (mutual TLS); both or
	// neither, TLS only.
	ClientCert []byte
	ClientKey  []byte
	// Metadata is sent as request header fields, e.g. an authorization
	// token. Names are lowercased and must be gRPC metadata keys (digits,
	// a-z, "_", "-", "."); names starting with "grpc-", binary keys (ending
	// in "-bin"), and the fields the prober sets or HTTP/2 forbids
	// (content-type, te, user-agent, host, connection, ...) are refused.
	// Values must be printable ASCII. A name may appear more than once.
	Metadata []probes.Header
	// UserAgent is the user-agent sent; empty means "swh-probe" (a program
	// that knows its version may send "swh-probe/<version>", as the HTTP
	// prober's default does). It must be printable ASCII.
	UserAgent string
	// Dialer opens the connection; nil means a net.Dialer.
	Dialer probes.Dialer
}

// defaultUserAgent is sent when Config.UserAgent is empty.
const defaultUserAgent = "swh-probe"

// reservedKey reports whether a metadata key is one a Config may not set:
// the prober sets it, or HTTP/2 forbids it (RFC 9113, 8.2.2), or it would
// change how the response is encoded.
func reservedKey(key string) bool {
	switch key {
	case "content-type", "te", "user-agent", "host", "connection", "keep-alive", "proxy-connection",
		"transfer-encoding", "upgrade", "content-length", "trailer", "accept-encoding", "content-encoding":
		return true
	}
	return false
}

// buildHeader returns the request header common to every probe (the
// grpc-timeout is added per probe). Keys are canonical, as net/http's
// HTTP/2 transport lowercases them on the wire anyway.
func buildHeader(metadata []probes.Header, userAgent string) (http.Header, error) {
	if userAgent == "" {
		userAgent = defaultUserAgent
	}
	if !printableASCII(userAgent) {
		return nil, errors.New("grpchealth: UserAgent is not printable ASCII")
	}
	h := make(http.Header, len(metadata)+4)
	for _, md := range metadata {
		key := strings.ToLower(md.Name)
		switch {
		case !isMetadataKey(key):
			return nil, fmt.Errorf("grpchealth: metadata key %q is not a gRPC metadata key (digits, a-z, _ - .)", md.Name)
		case strings.HasPrefix(key, "grpc-"):
			return nil, fmt.Errorf("grpchealth: metadata key %q is reserved for gRPC", md.Name)
		case strings.HasSuffix(key, "-bin"):
			// Binary metadata would need base64 and gains a probe nothing.
			return nil, fmt.Errorf("grpchealth: binary metadata key %q is not supported", md.Name)
		case reservedKey(key):
			return nil, fmt.Errorf("grpchealth: metadata key %q is controlled by the prober", md.Name)
		case !printableASCII(md.Value):
			return nil, fmt.Errorf("grpchealth: metadata %s: value is not printable ASCII", key)
		}
		h.Add(key, md.Value)
	}
	h.Set("Content-Type", "application/grpc")
	h.Set("Te", "trailers") // gRPC servers may refuse a request without it
	h.Set("User-Agent", userAgent)
	return h, nil
}

// isMetadataKey reports whether s is a (lowercased) ASCII metadata key of
// gRPC's HTTP/2 protocol spec.
func isMetadataKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// printableASCII reports whether s holds only the bytes 0x20 to 0x7E, the
// ASCII values of gRPC metadata.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// parseServerName checks a ServerName and returns it as the :authority
// (IPv6 literals bracketed) and as the TLS server name (no port, no
// brackets).
func parseServerName(s string) (authority, serverName string, err error) {
	bad := func() (string, string, error) {
		return "", "", fmt.Errorf("grpchealth: invalid ServerName %q", s)
	}
	if strings.ContainsAny(s, "/?#@\\% ") || !printableASCII(s) {
		return bad()
	}
	if ip := net.ParseIP(s); ip != nil && strings.Contains(s, ":") {
		return "[" + s + "]", s, nil // bare IPv6 literal
	}
	if inner, ok := strings.CutPrefix(s, "["); ok && strings.HasSuffix(inner, "]") {
		inner = strings.TrimSuffix(inner, "]")
		if ip := net.ParseIP(inner); ip == nil || !strings.Contains(inner, ":") {
			return bad()
		}
		return s, inner, nil // bracketed IPv6 literal without a port
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if strings.ContainsAny(s, "[]:") {
			return bad()
		}
		return s, s, nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return bad()
	}
	return s, host, nil
}

// tlsConfig builds the TLS configuration shared by every probe of a
// Prober; serverName is empty when each probe uses its target's host.
func tlsConfig(cfg Config, serverName string) (*tls.Config, error) {
	if !cfg.TLS {
		if len(cfg.CACert) > 0 || cfg.InsecureSkipVerify || len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
			return nil, errors.New("grpchealth: CACert, InsecureSkipVerify, ClientCert and ClientKey need TLS")
		}
		return nil, nil
	}
	if cfg.InsecureSkipVerify && len(cfg.CACert) > 0 {
		return nil, errors.New("grpchealth: CACert and InsecureSkipVerify are mutually exclusive")
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12, // HTTP/2 needs 1.2 at least (RFC 9113, 9.2)
		ServerName:         serverName,
		InsecureSkipVerify: cfg.InsecureSkipVerify,
		NextProtos:         []string{"h2"},
	}
	if len(cfg.CACert) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(cfg.CACert) {
			return nil, errors.New("grpchealth: CACert holds no PEM certificate")
		}
	}
	var cert *tls.Certificate
	if len(cfg.ClientCert) > 0 || len(cfg.ClientKey) > 0 {
		pair, err := tls.X509KeyPair(cfg.ClientCert, cfg.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("grpchealth: client certificate: %w", err)
		}
		cert = &pair
	}
	tc.GetClientCertificate = clientCertificate(cert)
	return tc, nil
}

// validService checks Config.Service.
func validService(s string) error {
	switch {
	case len(s) > MaxServiceBytes:
		return fmt.Errorf("grpchealth: Service has %d bytes, more than %d", len(s), MaxServiceBytes)
	case !utf8.ValidString(s):
		// A protobuf string must be UTF-8: servers refuse the request.
		return errors.New("grpchealth: Service is not valid UTF-8")
	}
	return nil
}
