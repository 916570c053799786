package grpchealth

import (
	"strings"
	"testing"

	"github.com/swh-dev/swh/probes"
)

// TestNewRefuses checks that New refuses every configuration that cannot
// work, with an error saying why, and accepts the ones next to them.
func TestNewRefuses(t *testing.T) {
	ca := newCA(t, "grpc test CA")
	_, certPEM, keyPEM := ca.Issue(t, "probe.example.test")
	md := func(name, value string) []probes.Header { return []probes.Header{{Name: name, Value: value}} }
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // a part of the error; "" when New must accept cfg
	}{
		{"zero value", Config{}, ""},
		{"service", Config{Service: "pkg.v1.Svc"}, ""},
		{"longest service", Config{Service: strings.Repeat("s", MaxServiceBytes)}, ""},
		{"service too long", Config{Service: strings.Repeat("s", MaxServiceBytes+1)}, "more than 1024"},
		{"service not UTF-8", Config{Service: "a\xffb"}, "not valid UTF-8"},
		{"TLS with everything", Config{TLS: true, CACert: ca.PEM, ClientCert: certPEM, ClientKey: keyPEM, ServerName: "grpc.example.test"}, ""},
		{"CA without TLS", Config{CACert: ca.PEM}, "need TLS"},
		{"insecure without TLS", Config{InsecureSkipVerify: true}, "need TLS"},
		{"client certificate without TLS", Config{ClientCert: certPEM, ClientKey: keyPEM}, "need TLS"},
		{"CA and insecure", Config{TLS: true, CACert: ca.PEM, InsecureSkipVerify: true}, "mutually exclusive"},
		{"CA not PEM", Config{TLS: true, CACert: []byte("not a certificate")}, "no PEM certificate"},
		{"certificate without key", Config{TLS: true, ClientCert: certPEM}, "client certificate"},
		{"key without certificate", Config{TLS: true, ClientKey: keyPEM}, "client certificate"},
		{"key of another certificate", Config{TLS: true, ClientCert: certPEM, ClientKey: otherKey(t, ca)}, "client certificate"},
		{"server name, IPv6", Config{ServerName: "[::1]"}, ""},
		{"server name, IPv6 with port", Config{ServerName: "[::1]:443"}, ""},
		{"server name with path", Config{ServerName: "a.test/x"}, "invalid ServerName"},
		{"server name with space", Config{ServerName: "a .test"}, "invalid ServerName"},
		{"server name, bad port", Config{ServerName: "a.test:0"}, "invalid ServerName"},
		{"server name, bad brackets", Config{ServerName: "[a.test]"}, "invalid ServerName"},
		{"server name, control character", Config{ServerName: "a.test\n"}, "invalid ServerName"},
		{"metadata", Config{Metadata: []probes.Header{{Name: "Authorization", Value: "Bearer x"}, {Name: "x-b3.id_1", Value: ""}}}, ""},
		{"metadata, empty key", Config{Metadata: md("", "v")}, "not a gRPC metadata key"},
		{"metadata, pseudo-header", Config{Metadata: md(":authority", "x")}, "not a gRPC metadata key"},
		{"metadata, space in key", Config{Metadata: md("x y", "v")}, "not a gRPC metadata key"},
		{"metadata, non-ASCII key", Config{Metadata: md("clé", "v")}, "not a gRPC metadata key"},
		{"metadata, grpc- key", Config{Metadata: md("Grpc-Timeout", "1S")}, "reserved for gRPC"},
		{"metadata, binary key", Config{Metadata: md("trace-bin", "AAEC")}, "binary metadata"},
		{"metadata, content-type", Config{Metadata: md("Content-Type", "application/grpc+json")}, "controlled by the prober"},
		{"metadata, te", Config{Metadata: md("TE", "gzip")}, "controlled by the prober"},
		{"metadata, user-agent", Config{Metadata: md("user-agent", "x")}, "controlled by the prober"},
		{"metadata, host", Config{Metadata: md("host", "x")}, "controlled by the prober"},
		{"metadata, connection", Config{Metadata: md("connection", "close")}, "controlled by the prober"},
		{"metadata, CRLF in value", Config{Metadata: md("x-a", "v\r\nx-b: w")}, "not printable ASCII"},
		{"metadata, non-ASCII value", Config{Metadata: md("x-a", "é")}, "not printable ASCII"},
		{"user agent", Config{UserAgent: "swh-probe/1.0 (linux)"}, ""},
		{"user agent with CR", Config{UserAgent: "a\rb"}, "UserAgent"},
	} {
		_, err := New(tc.cfg)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: New: %v", tc.name, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "grpchealth: ")):
			t.Errorf("%s: New = %v, want an error with %q", tc.name, err, tc.err)
		}
	}
}

func otherKey(t *testing.T, ca *ca) []byte {
	_, _, key := ca.Issue(t, "other.example.test")
	return key
}
