package probes_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/test/harness"
)

func newHTTP(t testing.TB, cfg probes.HTTPConfig) *probes.HTTPProber {
	t.Helper()
	p, err := probes.NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP(%+v): %v", cfg, err)
	}
	return p
}

func startHTTPServer(t testing.TB, addr string, tlsConfig *tls.Config) *harness.HTTPServer {
	t.Helper()
	srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: addr, TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// TestHTTPProbeStatusCodes runs the server through statuses and checks each
// against sets of expected codes, the default being 200-399.
func TestHTTPProbeStatusCodes(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	srv := startHTTPServer(t, harness.PodIP(t)+":8080", nil)
	tgt := target(t, srv.Addr())
	tests := []struct {
		status int
		codes  []string
		method string
		reason probes.Reason
	}{
		{200, nil, "", probes.ReasonOK},
		{204, nil, "HEAD", probes.ReasonOK},
		{302, nil, "", probes.ReasonOK}, // not followed: a redirect proves the server is up
		{399, nil, "", probes.ReasonOK},
		{302, []string{"200-299"}, "", probes.ReasonHTTPStatus},
		{400, nil, "", probes.ReasonHTTPStatus},
		{503, nil, "GET", probes.ReasonHTTPStatus},
		{503, []string{"500-599"}, "", probes.ReasonOK},
		{404, []string{"200", "404"}, "", probes.ReasonOK},
		{401, []string{"200-299,404"}, "HEAD", probes.ReasonHTTPStatus},
	}
	for _, tt := range tests {
		srv.SetStatus(tt.status)
		p := newHTTP(t, probes.HTTPConfig{Path: "/healthz", Method: tt.method, ExpectedStatusCodes: tt.codes})
		want := probes.Success
		if tt.reason != probes.ReasonOK {
			want = probes.Failure
		}
		res := probe(p, tgt, probeTimeout)
		if res.Status != want || res.Reason != tt.reason {
			t.Errorf("status %d, expected codes %v, method %q: probe = %v, want %s (%s)", tt.status, tt.codes, tt.method, res, want, tt.reason)
		}
	}
}

// TestHTTPProbeRequest checks what reaches the server: the Host header, the
// extra headers, the default User-Agent, and no keep-alive.
func TestHTTPProbeRequest(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	srv := startHTTPServer(t, harness.PodIP(t)+":8080", nil)
	tgt := target(t, srv.Addr())
	p := newHTTP(t, probes.HTTPConfig{
		Path:    "/ready?full=1",
		Host:    "app.example.test",
		Headers: []probes.Header{{Name: "X-Probe", Value: "swh"}},
	})
	expect(t, p, tgt, probes.Success, probes.ReasonOK)
	host, hdr := srv.LastRequest()
	if host != "app.example.test" {
		t.Errorf("Host = %q, want app.example.test", host)
	}
	if got := hdr.Get("X-Probe"); got != "swh" {
		t.Errorf("X-Probe = %q, want swh", got)
	}
	if ua := hdr.Get("User-Agent"); !strings.HasPrefix(ua, "swh-probe/") {
		t.Errorf("User-Agent = %q, want swh-probe/<version>", ua)
	}
	if c := hdr.Get("Connection"); !strings.EqualFold(c, "close") {
		t.Errorf("Connection = %q, want close (no keep-alive)", c)
	}

	// Without Host, the header is the target address, as kubelet sends it.
	expect(t, newHTTP(t, probes.HTTPConfig{}), tgt, probes.Success, probes.ReasonOK)
	if host, _ := srv.LastRequest(); host != tgt.Addr() {
		t.Errorf("Host = %q, want %s", host, tgt.Addr())
	}
	// A User-Agent of the user's replaces the default.
	expect(t, newHTTP(t, probes.HTTPConfig{Headers: []probes.Header{{Name: "User-Agent", Value: "mine/1"}}}), tgt, probes.Success, probes.ReasonOK)
	if _, hdr := srv.LastRequest(); hdr.Get("User-Agent") != "mine/1" {
		t.Errorf("User-Agent = %q, want mine/1", hdr.Get("User-Agent"))
	}
}

// TestHTTPProbeSlowAndStopped: a server slower than the timeout fails with
// timeout, without the probe waiting for it; a stopped one is refused.
func TestHTTPProbeSlowAndStopped(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	srv := startHTTPServer(t, harness.PodIP(t)+":8080", nil)
	tgt := target(t, srv.Addr())
	p := newHTTP(t, probes.HTTPConfig{})

	const delay = 5 * time.Second
	srv.SetDelay(delay)
	res := expect(t, p, tgt, probes.Failure, probes.ReasonTimeout)
	if res.Latency >= delay {
		t.Errorf("the probe took %v: it waited for the response instead of its deadline", res.Latency)
	}
	srv.SetDelay(0)
	expect(t, p, tgt, probes.Success, probes.ReasonOK)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	expect(t, p, tgt, probes.Failure, probes.ReasonRefused)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	expect(t, p, tgt, probes.Success, probes.ReasonOK)
}

// TestHTTPSProbe checks certificate verification against a server whose
// certificate, from a test CA, names the pod address and app.example.test.
func TestHTTPSProbe(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ca, err := harness.NewCA("swh-probes-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("some-other-ca")
	if err != nil {
		t.Fatal(err)
	}
	ips := harness.PodIPs(t, 2)
	serverTLS, err := ca.ServerTLS(ips[0], "app.example.test")
	if err != nil {
		t.Fatal(err)
	}
	httpsTarget := target(t, startHTTPServer(t, ips[0]+":8443", serverTLS).Addr())
	plainTarget := target(t, startHTTPServer(t, ips[1]+":8080", nil).Addr())

	tests := []struct {
		name   string
		cfg    probes.HTTPConfig
		target probes.Target
		reason probes.Reason
	}{
		{"CA, pod IP in the certificate", probes.HTTPConfig{Scheme: "https", CACert: ca.PEM}, httpsTarget, probes.ReasonOK},
		{"CA, host name in the certificate", probes.HTTPConfig{Scheme: "https", CACert: ca.PEM, Host: "app.example.test"}, httpsTarget, probes.ReasonOK},
		{"CA, host name not in the certificate", probes.HTTPConfig{Scheme: "HTTPS", CACert: ca.PEM, Host: "other.example.test"}, httpsTarget, probes.ReasonTLS},
		{"wrong CA", probes.HTTPConfig{Scheme: "https", CACert: other.PEM}, httpsTarget, probes.ReasonTLS},
		{"system roots", probes.HTTPConfig{Scheme: "https"}, httpsTarget, probes.ReasonTLS},
		{"insecure skip verify", probes.HTTPConfig{Scheme: "https", InsecureSkipVerify: true, Host: "other.example.test"}, httpsTarget, probes.ReasonOK},
		{"https to a plain server", probes.HTTPConfig{Scheme: "https", InsecureSkipVerify: true}, plainTarget, probes.ReasonTLS},
		// Go's HTTPS server answers plain HTTP with 400 Bad Request.
		{"http to an https server", probes.HTTPConfig{}, httpsTarget, probes.ReasonHTTPStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			res := expect(t, newHTTP(t, tt.cfg), tt.target, want, tt.reason)
			if tt.reason == probes.ReasonHTTPStatus && !strings.Contains(res.Message, "400") {
				t.Errorf("message %q does not name the status 400", res.Message)
			}
		})
	}
}
