package main

import (
	"context"
	"net/netip"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	kubegrpc "k8s.io/kubernetes/pkg/probe/grpc"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
)

// The gRPC comparison calls grpc.health.v1.Health/Check for the server as a
// whole (service ""), as a Kubernetes gRPC probe does by default, against
// grpc-go's health server (google.golang.org/grpc/health) in the child
// process, over plaintext HTTP/2. Every variant opens one connection per
// probe, makes the one call and closes it: kubelet's prober dials a
// grpc.ClientConn per probe (grpc.DialContext with WithBlock), ours a
// net/http HTTP/2 connection per probe.

func grpcVariants() []variant {
	return []variant{
		// grpc-go as a client written today would call it: a ClientConn
		// per probe (grpc.NewClient, which connects on the first call),
		// the generated health client, Close.
		{"raw grpc-go NewClient+Check+Close", "raw", func(addr netip.AddrPort) (func() error, error) {
			a := addr.String()
			return func() error {
				return withTimeout(probeTimeout, func(ctx context.Context) error {
					conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
					if err != nil {
						return err
					}
					defer conn.Close()
					resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
					if err != nil {
						return err
					}
					if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
						return errNotServing(s.String())
					}
					return nil
				})
			}, nil
		}},
		{"swh grpchealth.Prober", "ours", func(addr netip.AddrPort) (func() error, error) {
			p, err := grpchealth.New(grpchealth.Config{})
			if err != nil {
				return nil, err
			}
			t := probes.TargetFrom(addr)
			return func() error {
				return withTimeout(probeTimeout, func(ctx context.Context) error { return resultErr(p.Probe(ctx, t)) })
			}, nil
		}},
		{"kubelet pkg/probe/grpc", "kubelet", func(addr netip.AddrPort) (func() error, error) {
			p := kubegrpc.New()
			host, port := addr.Addr().String(), int(addr.Port())
			return func() error {
				return kubeResultErr(p.Probe(host, "", port, probeTimeout, kubegrpc.ProbeOptions{}))
			}, nil
		}},
	}
}

type errNotServing string

func (e errNotServing) Error() string { return "health status " + string(e) }

// kubeletGRPC adapts kubelet's gRPC prober to probes.Prober, as kubeletTCP
// does its TCP prober: service "", no TLS (kubelet's defaults). Its timeout
// comes from the context's deadline; cancellation is lost.
type kubeletGRPC struct{ p kubegrpc.Prober }

func (k kubeletGRPC) Probe(ctx context.Context, t probes.Target) probes.Result {
	timeout := probeTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	start := time.Now()
	res, out, err := k.p.Probe(t.Host, "", t.Port, timeout, kubegrpc.ProbeOptions{})
	r := probes.Result{Status: probes.Success, Reason: probes.ReasonOK, Message: out, Latency: time.Since(start)}
	if err := kubeResultErr(res, out, err); err != nil {
		r.Status, r.Reason, r.Message, r.Err = probes.Failure, probes.Reason(kubeReason(out)), err.Error(), err
	}
	return r
}

// newGRPCServer returns a grpc-go server with grpc-go's health service, for
// the child: the server as a whole ("") is SERVING from the start.
func newGRPCServer() *grpc.Server {
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv
}
