package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// portState says how the slices of resource name publish pod on port: ""
// when no slice of the port holds it, else "ready" or "not ready: <reason>".
func portState(ctx context.Context, ns, name, port, pod string) (string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}); err != nil {
		return "", err
	}
	for _, s := range list.Items {
		if len(s.Ports) == 0 || s.Ports[0].Name == nil || *s.Ports[0].Name != port {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Name != pod {
				continue
			}
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				return "ready", nil
			}
			reasons, err := swhv1alpha1.EndpointReasonsOf(s.Annotations)
			if err != nil {
				return "", err
			}
			return "not ready: " + reasons[pod].Reason, nil
		}
	}
	return "", nil
}

// waitPortState waits until portState is want.
func waitPortState(t *testing.T, ns, name, port, pod, want string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("%s on port %s is %q", pod, port, want), func() error {
		got, err := portState(context.Background(), ns, name, port, pod)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("it is %q", got)
		}
		return nil
	})
}

// TestProbeKindsGatePorts runs a TCP script, an HTTP body match and a gRPC
// health probe through the agent against real servers on pod addresses:
// each gates its own port, so a pod failing one keeps the others.
func TestProbeKindsGatePorts(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()

	type kindsPod struct {
		*backend
		grpc *harness.GRPCHealthServer
	}
	start := func(name string) kindsPod {
		b := startBackendPod(t, harness.PodOptions{Namespace: ns, Name: name, Node: nodeA, Labels: map[string]string{"app": "kinds"},
			Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 50051}}})
		g, err := harness.StartGRPCHealthServer(harness.GRPCHealthServerOptions{Addr: b.ip + ":50051"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		b.smtp.SetGreeting("220 " + name + ".example.test ESMTP\r\n")
		b.http.SetBody(`{"status": "ok"}`)
		return kindsPod{b, g}
	}
	a, b := start("kinds-a"), start("kinds-b")

	tcp := fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromString("smtp"))
	tcp.TCP.Steps = []swhv1alpha1.TCPStep{{Expect: &swhv1alpha1.ProbeExpect{Regexp: `^220 `}}}
	web := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
	web.HTTP.ExpectBody = &swhv1alpha1.HTTPExpectBody{Regexp: `"status":\s*"ok"`, WithinBytes: 1024}
	grpcProbe := swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeGRPC, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
		GRPC: &swhv1alpha1.GRPCProbe{TargetPort: intstr.FromInt32(50051), Metadata: []swhv1alpha1.GRPCMetadata{{Name: "x-probe", Value: "swh"}}}}
	ports := []swhv1alpha1.ServicePort{
		{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")},
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "grpc", Port: 50051, TargetPort: intstr.FromInt32(50051)},
	}
	if err := controlPlane.Client.Create(ctx, resource(ns, "kinds", ports, tcp, web, grpcProbe)); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"kinds-a", "kinds-b"} {
		for _, port := range []string{"smtp", "web", "grpc"} {
			waitPortState(t, ns, "kinds", port, pod, "ready")
		}
	}

	// A mail server refusing mail, a body saying something else, a gRPC
	// server not serving: each withdraws its port only, with its reason.
	b.smtp.SetGreeting("421 kinds-b.example.test too busy\r\n")
	waitPortState(t, ns, "kinds", "smtp", "kinds-b", "not ready: expect-mismatch")
	a.http.SetBody(`{"status": "degraded"}`)
	waitPortState(t, ns, "kinds", "web", "kinds-a", "not ready: body-mismatch")
	b.grpc.SetServing("", false)
	waitPortState(t, ns, "kinds", "grpc", "kinds-b", "not ready: grpc-not-serving")
	for _, still := range []struct{ port, pod string }{{"web", "kinds-b"}, {"smtp", "kinds-a"}, {"grpc", "kinds-a"}} {
		if got, err := portState(ctx, ns, "kinds", still.port, still.pod); err != nil || got != "ready" {
			t.Errorf("%s on %s is %q (%v), want ready: another port's failure withdrew it", still.pod, still.port, got, err)
		}
	}

	// Back: every port of every pod ready again.
	b.smtp.SetGreeting("220 kinds-b.example.test ESMTP\r\n")
	a.http.SetBody(`{"status": "ok"}`)
	b.grpc.SetServing("", true)
	waitPortState(t, ns, "kinds", "smtp", "kinds-b", "ready")
	waitPortState(t, ns, "kinds", "web", "kinds-a", "ready")
	waitPortState(t, ns, "kinds", "grpc", "kinds-b", "ready")

	// A server without the health service, and one stopped.
	a.grpc.Stop()
	waitPortState(t, ns, "kinds", "grpc", "kinds-a", "not ready: refused")
	bare, err := harness.StartGRPCHealthServer(harness.GRPCHealthServerOptions{Addr: a.ip + ":50051", WithoutHealth: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bare.Stop)
	waitPortState(t, ns, "kinds", "grpc", "kinds-a", "not ready: grpc-unimplemented")
}
