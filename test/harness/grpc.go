package harness

import (
	"crypto/tls"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// GRPCHealthServer is grpc-go's own health service (the one servers
// register, and kubelet's gRPC probe calls) on a fixed address.
type GRPCHealthServer struct {
	addr   string
	server *grpc.Server
	health *health.Server
	done   chan struct{}
}

// GRPCHealthServerOptions configures StartGRPCHealthServer.
type GRPCHealthServerOptions struct {
	// Addr is "ip:port".
	Addr string
	// TLS serves over TLS with this configuration when set.
	TLS *tls.Config
	// WithoutHealth registers no health service: every call ends with
	// UNIMPLEMENTED.
	WithoutHealth bool
}

// StartGRPCHealthServer listens on opts.Addr; the whole server ("") and
// every service set later start SERVING.
func StartGRPCHealthServer(opts GRPCHealthServerOptions) (*GRPCHealthServer, error) {
	l, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", opts.Addr, err)
	}
	var serverOpts []grpc.ServerOption
	if opts.TLS != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	s := &GRPCHealthServer{addr: opts.Addr, server: grpc.NewServer(serverOpts...), done: make(chan struct{})}
	if !opts.WithoutHealth {
		s.health = health.NewServer()
		healthpb.RegisterHealthServer(s.server, s.health)
	}
	go func() {
		defer close(s.done)
		_ = s.server.Serve(l)
	}()
	return s, nil
}

// Addr returns the address the server listens on.
func (s *GRPCHealthServer) Addr() string { return s.addr }

// SetServing sets service's status ("" is the whole server) to SERVING or
// NOT_SERVING.
func (s *GRPCHealthServer) SetServing(service string, serving bool) {
	status := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		status = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(service, status)
}

// Stop closes the listener and every connection at once.
func (s *GRPCHealthServer) Stop() {
	s.server.Stop()
	<-s.done
}
