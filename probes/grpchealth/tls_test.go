package grpchealth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// TestProbeTLS probes fake servers over TLS: verification against a CA,
// the server name sent (checked on the server side), an insecure probe,
// mutual TLS, and mismatches of TLS and plaintext.
func TestProbeTLS(t *testing.T) {
	ca := newCA(t, "grpc test CA")
	other := newCA(t, "another CA")
	serverCert, _, _ := ca.Issue(t, "127.0.0.1", "grpc.example.test")
	_, clientCert, clientKey := ca.Issue(t, "probe.example.test")
	_, strangerCert, strangerKey := other.Issue(t, "probe.example.test")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}
	mutualTLS := serverTLS.Clone()
	mutualTLS.ClientAuth = tls.RequireAndVerifyClientCert
	mutualTLS.ClientCAs = x509.NewCertPool()
	mutualTLS.ClientCAs.AddCert(ca.Cert)

	tlsServer := startFake(t, serverTLS, answerServing(Serving))
	mutualServer := startFake(t, mutualTLS, answerServing(Serving))
	plainServer := startFake(t, nil, answerServing(Serving))
	http1Server := startTLSHTTP1(t, serverTLS)
	noALPNServer := startTLSNoALPN(t, serverTLS)
	for _, tc := range []struct {
		name   string
		cfg    Config
		srv    *fakeServer
		reason probes.Reason
		sni    string // the server name the server must see; "-" for no check
	}{
		{"CA, target IP", Config{TLS: true, CACert: ca.PEM}, tlsServer, probes.ReasonOK, ""},
		{"CA, server name", Config{TLS: true, CACert: ca.PEM, ServerName: "grpc.example.test"}, tlsServer, probes.ReasonOK, "grpc.example.test"},
		{"CA, server name with a port", Config{TLS: true, CACert: ca.PEM, ServerName: "grpc.example.test:443"}, tlsServer, probes.ReasonOK, "grpc.example.test"},
		{"CA, server name not in the certificate", Config{TLS: true, CACert: ca.PEM, ServerName: "other.example.test"}, tlsServer, probes.ReasonTLS, "-"},
		{"wrong CA", Config{TLS: true, CACert: other.PEM}, tlsServer, probes.ReasonTLS, "-"},
		{"system roots", Config{TLS: true}, tlsServer, probes.ReasonTLS, "-"},
		{"insecure", Config{TLS: true, InsecureSkipVerify: true, ServerName: "anything.test"}, tlsServer, probes.ReasonOK, "anything.test"},
		{"mutual TLS", Config{TLS: true, CACert: ca.PEM, ClientCert: clientCert, ClientKey: clientKey}, mutualServer, probes.ReasonOK, ""},
		{"mutual TLS, no client certificate", Config{TLS: true, CACert: ca.PEM}, mutualServer, probes.ReasonTLS, "-"},
		{"mutual TLS, certificate of another CA", Config{TLS: true, CACert: ca.PEM, ClientCert: strangerCert, ClientKey: strangerKey}, mutualServer, probes.ReasonTLS, "-"},
		{"TLS to a plaintext server", Config{TLS: true, InsecureSkipVerify: true}, plainServer, probes.ReasonTLS, "-"},
		// A TLS server closes the connection on bytes that are no TLS.
		{"plaintext to a TLS server", Config{}, tlsServer, probes.ReasonReset, "-"},
		{"TLS server without HTTP/2", Config{TLS: true, CACert: ca.PEM}, http1Server, probes.ReasonProtocol, "-"},
		{"TLS server ignoring ALPN", Config{TLS: true, CACert: ca.PEM}, noALPNServer, probes.ReasonProtocol, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tc.srv.requests())
			res := newProber(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), tc.srv.Target)
			t.Log(res)
			status := probes.Failure
			if tc.reason == probes.ReasonOK {
				status = probes.Success
			}
			wantReason(t, res, status, tc.reason)
			seen := tc.srv.requests()[before:]
			switch {
			case tc.sni == "-":
			case len(seen) != 1:
				t.Errorf("the server saw %d requests", len(seen))
			case seen[0].ServerName != tc.sni:
				t.Errorf("the server saw the server name %q, want %q", seen[0].ServerName, tc.sni)
			case tc.cfg.ServerName != "" && seen[0].Host != tc.cfg.ServerName:
				t.Errorf("the server saw :authority %q, want %q", seen[0].Host, tc.cfg.ServerName)
			}
			if status == probes.Failure && len(seen) != 0 {
				t.Errorf("a failed handshake let %d requests through", len(seen))
			}
		})
	}
}

// startTLSHTTP1 starts a TLS server that offers HTTP/1.1 only (no ALPN
// h2) and answers like a gRPC server, were the probe to ask anyway.
func startTLSHTTP1(t *testing.T, cfg *tls.Config) *fakeServer {
	t.Helper()
	fs := &fakeServer{}
	l := listen(t, "tcp4", "127.0.0.1")
	fs.Target = targetOf(t, l)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Protocols: protocols,
		TLSConfig: cfg.Clone(),
		ErrorLog:  log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fs.mu.Lock()
			fs.seen = append(fs.seen, request{Proto: r.Proto})
			fs.mu.Unlock()
			answerServing(Serving)(w, nil)
		}),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return fs
}

// startTLSNoALPN starts a TLS server that ignores ALPN, completes the
// handshake and then reads whatever comes.
func startTLSNoALPN(t *testing.T, cfg *tls.Config) *fakeServer {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			tc := tls.Server(c, cfg.Clone()) // NextProtos nil: no ALPN answer
			defer tc.Close()
			_, _ = io.Copy(io.Discard, tc)
		}()
	})
	return &fakeServer{Target: targetOf(t, l)}
}

// TestProbeTLSPerTarget checks that one TLS Prober without ServerName
// verifies each target against its own address (the certificate's IP SAN),
// and dials through the configured Dialer.
func TestProbeTLSPerTarget(t *testing.T) {
	ca := newCA(t, "grpc test CA")
	cert, _, _ := ca.Issue(t, "127.0.0.1", "10.1.2.3")
	srv := startFake(t, &tls.Config{Certificates: []tls.Certificate{cert}}, answerServing(Serving))
	var dialed []string
	p := newProber(t, Config{TLS: true, CACert: ca.PEM, Dialer: dialerFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Target.Addr()) // every target is the server
	})})
	for _, tc := range []struct {
		host   string
		reason probes.Reason
	}{
		{"127.0.0.1", probes.ReasonOK},
		{"10.1.2.3", probes.ReasonOK},
		{"10.1.2.4", probes.ReasonTLS},
		{"127.0.0.1", probes.ReasonOK},
	} {
		target := probes.Target{Host: tc.host, Port: 50051}
		res := p.Probe(ctxTimeout(t, 5*time.Second), target)
		status := probes.Failure
		if tc.reason == probes.ReasonOK {
			status = probes.Success
		}
		wantReason(t, res, status, tc.reason)
		if !strings.Contains(res.Message, target.Addr()) {
			t.Errorf("message %q does not name %s", res.Message, target)
		}
	}
	if want := "127.0.0.1:50051 10.1.2.3:50051 10.1.2.4:50051 127.0.0.1:50051"; strings.Join(dialed, " ") != want {
		t.Errorf("dialed %q, want %q", dialed, want)
	}
}
