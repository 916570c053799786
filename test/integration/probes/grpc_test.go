package probes_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
	"github.com/swh-dev/swh/test/harness"
)

// The gRPC tests run grpc-go's own health server (google.golang.org/grpc/
// health) on 127.0.0.1, so that the prober, which speaks the protocol with
// the standard library only, is checked against the implementation most
// gRPC servers use. They need loopback only, no network sandbox.

// grpcServer is a grpc-go server on a loopback port.
type grpcServer struct {
	*grpc.Server
	Health *health.Server // nil without the health service
	Target probes.Target
}

// startGRPC starts a grpc-go server on 127.0.0.1 with the health service
// (unless withHealth is false), stopped when the test ends.
func startGRPC(t testing.TB, withHealth bool, opts ...grpc.ServerOption) *grpcServer {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &grpcServer{Server: grpc.NewServer(opts...), Target: target(t, l.Addr().String())}
	if withHealth {
		s.Health = health.NewServer() // "" is SERVING
		healthpb.RegisterHealthServer(s.Server, s.Health)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return s
}

func newGRPC(t testing.TB, cfg grpchealth.Config) *grpchealth.Prober {
	t.Helper()
	p, err := grpchealth.New(cfg)
	if err != nil {
		t.Fatalf("grpchealth.New(%+v): %v", cfg, err)
	}
	return p
}

// TestGRPCHealthStatuses runs grpc-go's health server through the statuses
// of services, known and not, and checks the probe of each.
func TestGRPCHealthStatuses(t *testing.T) {
	srv := startGRPC(t, true)
	srv.Health.SetServingStatus("app", healthpb.HealthCheckResponse_SERVING)
	srv.Health.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	srv.Health.SetServingStatus("cache", healthpb.HealthCheckResponse_UNKNOWN)
	for _, tc := range []struct {
		service string
		reason  probes.Reason
		message string
	}{
		{"", probes.ReasonOK, "gRPC health of the server on " + srv.Target.Addr() + ": SERVING"},
		{"app", probes.ReasonOK, `gRPC health of service "app" on ` + srv.Target.Addr() + ": SERVING"},
		{"db", probes.ReasonGRPCNotServing, `gRPC health of service "db" on ` + srv.Target.Addr() + ": NOT_SERVING"},
		{"cache", probes.ReasonGRPCNotServing, ": UNKNOWN"},
		{"nope", probes.ReasonGRPCServiceUnknown, ": status NOT_FOUND (5): unknown service"},
		{"unicode ✓ " + strings.Repeat("x", 1000), probes.ReasonGRPCServiceUnknown, "NOT_FOUND"},
	} {
		status := probes.Success
		if tc.reason != probes.ReasonOK {
			status = probes.Failure
		}
		res := expect(t, newGRPC(t, grpchealth.Config{Service: tc.service}), srv.Target, status, tc.reason)
		if !strings.Contains(res.Message, tc.message) {
			t.Errorf("service %.20q: message %q, want it to hold %q", tc.service, res.Message, tc.message)
		}
	}
}

// TestGRPCHealthFlips flips a service between SERVING and NOT_SERVING and
// probes it after each change, with one Prober, as a scheduler would; then
// the health server's Shutdown (every service NOT_SERVING) and Resume.
func TestGRPCHealthFlips(t *testing.T) {
	srv := startGRPC(t, true)
	p := newGRPC(t, grpchealth.Config{Service: "app"})
	whole := newGRPC(t, grpchealth.Config{})
	for i := range 20 {
		if i%2 == 0 {
			srv.Health.SetServingStatus("app", healthpb.HealthCheckResponse_SERVING)
			expect(t, p, srv.Target, probes.Success, probes.ReasonOK)
		} else {
			srv.Health.SetServingStatus("app", healthpb.HealthCheckResponse_NOT_SERVING)
			expect(t, p, srv.Target, probes.Failure, probes.ReasonGRPCNotServing)
		}
	}
	srv.Health.Shutdown()
	expect(t, p, srv.Target, probes.Failure, probes.ReasonGRPCNotServing)
	expect(t, whole, srv.Target, probes.Failure, probes.ReasonGRPCNotServing)
	srv.Health.Resume()
	expect(t, p, srv.Target, probes.Success, probes.ReasonOK)
	expect(t, whole, srv.Target, probes.Success, probes.ReasonOK)
}

// TestGRPCHealthServerStates: a server without the health service answers
// UNIMPLEMENTED; a stopped one is refused.
func TestGRPCHealthServerStates(t *testing.T) {
	bare := startGRPC(t, false)
	res := expect(t, newGRPC(t, grpchealth.Config{}), bare.Target, probes.Failure, probes.ReasonGRPCUnimplemented)
	if !strings.Contains(res.Message, "UNIMPLEMENTED (12)") {
		t.Errorf("message %q", res.Message)
	}

	srv := startGRPC(t, true)
	p := newGRPC(t, grpchealth.Config{})
	expect(t, p, srv.Target, probes.Success, probes.ReasonOK)
	srv.Stop()
	expect(t, p, srv.Target, probes.Failure, probes.ReasonRefused)
}

// TestGRPCHealthMetadata checks that metadata reaches grpc-go's
// interceptors: a token is required, and UNAUTHENTICATED is ReasonAuth.
func TestGRPCHealthMetadata(t *testing.T) {
	requireToken := grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer s3cr3t" {
			return nil, status.Errorf(codes.Unauthenticated, "bad token %q", got)
		}
		if _, ok := ctx.Deadline(); !ok {
			return nil, status.Error(codes.InvalidArgument, "no deadline: grpc-timeout missing")
		}
		return handler(ctx, req)
	})
	srv := startGRPC(t, true, requireToken)
	withToken := newGRPC(t, grpchealth.Config{Metadata: []probes.Header{{Name: "Authorization", Value: "Bearer s3cr3t"}}})
	expect(t, withToken, srv.Target, probes.Success, probes.ReasonOK)
	res := expect(t, newGRPC(t, grpchealth.Config{}), srv.Target, probes.Failure, probes.ReasonAuth)
	if !strings.Contains(res.Message, "UNAUTHENTICATED (16): bad token []") {
		t.Errorf("message %q", res.Message)
	}
}

// TestGRPCHealthTLS probes grpc-go servers over TLS, mutual TLS included,
// with certificates from the harness's test CA.
func TestGRPCHealthTLS(t *testing.T) {
	ca, err := harness.NewCA("swh-grpc-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("some-other-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.ServerTLS("127.0.0.1", "grpc.example.test")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue("probe.example.test")
	if err != nil {
		t.Fatal(err)
	}
	mutual := serverTLS.Clone()
	mutual.ClientAuth = tls.RequireAndVerifyClientCert
	mutual.ClientCAs = x509.NewCertPool()
	mutual.ClientCAs.AppendCertsFromPEM(ca.PEM)

	tlsSrv := startGRPC(t, true, grpc.Creds(credentials.NewTLS(serverTLS)))
	mutualSrv := startGRPC(t, true, grpc.Creds(credentials.NewTLS(mutual)))
	plainSrv := startGRPC(t, true)
	for _, tc := range []struct {
		name   string
		cfg    grpchealth.Config
		srv    *grpcServer
		reason probes.Reason
	}{
		{"CA, target IP", grpchealth.Config{TLS: true, CACert: ca.PEM}, tlsSrv, probes.ReasonOK},
		{"CA, server name", grpchealth.Config{TLS: true, CACert: ca.PEM, ServerName: "grpc.example.test"}, tlsSrv, probes.ReasonOK},
		{"CA, server name not in the certificate", grpchealth.Config{TLS: true, CACert: ca.PEM, ServerName: "other.example.test"}, tlsSrv, probes.ReasonTLS},
		{"wrong CA", grpchealth.Config{TLS: true, CACert: other.PEM}, tlsSrv, probes.ReasonTLS},
		{"insecure", grpchealth.Config{TLS: true, InsecureSkipVerify: true}, tlsSrv, probes.ReasonOK},
		{"mutual TLS", grpchealth.Config{TLS: true, CACert: ca.PEM, ClientCert: client.CertPEM, ClientKey: client.KeyPEM}, mutualSrv, probes.ReasonOK},
		{"mutual TLS without a certificate", grpchealth.Config{TLS: true, CACert: ca.PEM}, mutualSrv, probes.ReasonTLS},
		{"TLS to a plaintext server", grpchealth.Config{TLS: true, InsecureSkipVerify: true}, plainSrv, probes.ReasonTLS},
		{"plaintext to a TLS server", grpchealth.Config{}, tlsSrv, probes.ReasonReset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status := probes.Success
			if tc.reason != probes.ReasonOK {
				status = probes.Failure
			}
			res := expect(t, newGRPC(t, tc.cfg), tc.srv.Target, status, tc.reason)
			t.Log(res)
		})
	}
}
