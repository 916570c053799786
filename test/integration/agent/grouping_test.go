package agent_test

import (
	"context"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// backend is a pod with an HTTP server on 8080 ("http") and a TCP server on
// 2525 ("smtp") at its address.
type backend struct {
	pod  *corev1.Pod
	ip   string
	http *harness.HTTPServer
	smtp *harness.TCPServer
}

// startBackend creates pod name of app on node, on a pod address of its
// own, with an HTTP server on 8080 and a TCP server on 2525 (smtp).
func startBackend(t testing.TB, ns, app, name, node string) *backend {
	t.Helper()
	return startBackendPod(t, harness.PodOptions{Namespace: ns, Name: name, Node: node, Labels: map[string]string{"app": app}})
}

// startBackendPod is startBackend for a pod described by opts (its
// addresses are filled in, its ports follow the backend's).
func startBackendPod(t testing.TB, opts harness.PodOptions) *backend {
	t.Helper()
	ip := harness.PodIP(t)
	b := &backend{ip: ip}
	var err error
	if b.http, err = harness.StartHTTPServer(harness.HTTPServerOptions{Addr: ip + ":8080"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.http.Stop() })
	if b.smtp, err = harness.StartTCPServer(ip + ":2525"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.smtp.Stop() })
	opts.IPs = []string{ip}
	opts.Ports = append([]corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "smtp", ContainerPort: 2525}, {Name: "health", ContainerPort: 8081}}, opts.Ports...)
	if b.pod, err = harness.CreatePod(context.Background(), controlPlane.Client, opts); err != nil {
		t.Fatal(err)
	}
	return b
}

var webAndSMTP = []swhv1alpha1.ServicePort{
	{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
	{Name: "smtp", Port: 25, TargetPort: intstr.FromString("smtp")},
}

// TestPortSpecificProbeGatesItsPortOnly: a pod that fails the probes of one
// port is still published on the others, within one resource and across two nodes.
func TestPortSpecificProbeGatesItsPortOnly(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	a := startBackend(t, ns, "mail", "mail-a", nodeA)
	startBackend(t, ns, "mail", "mail-b", nodeB)
	swh := resource(ns, "mail", webAndSMTP,
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)),
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "mail", map[string]string{
		"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:TTF",
		"mail-smtp-node-b": "mail-b:TTF", "mail-web-node-b": "mail-b:TTF",
	})
	a.http.SetStatus(http.StatusServiceUnavailable)
	waitPublished(t, ns, "mail", map[string]string{
		"mail-smtp-node-a": "mail-a:TTF", "mail-web-node-a": "mail-a:FFF",
		"mail-smtp-node-b": "mail-b:TTF", "mail-web-node-b": "mail-b:TTF",
	})
	if err := a.smtp.Stop(); err != nil {
		t.Fatal(err)
	}
	a.http.SetStatus(http.StatusOK)
	waitPublished(t, ns, "mail", map[string]string{
		"mail-smtp-node-a": "mail-a:FFF", "mail-web-node-a": "mail-a:TTF",
		"mail-smtp-node-b": "mail-b:TTF", "mail-web-node-b": "mail-b:TTF",
	})
	if a.smtp.BytesReceived() != 0 {
		t.Errorf("the TCP probe wrote %d bytes to the SMTP server", a.smtp.BytesReceived())
	}
}

func TestPodWideProbeGatesEveryPort(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	b := startBackend(t, ns, "app", "app-a", nodeA)
	health, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: b.ip + ":8081"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = health.Stop() })
	swh := resource(ns, "app", webAndSMTP, fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromString("health")))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "app", map[string]string{"app-smtp-node-a": "app-a:TTF", "app-web-node-a": "app-a:TTF"})
	health.SetStatus(http.StatusInternalServerError)
	waitPublished(t, ns, "app", map[string]string{"app-smtp-node-a": "app-a:FFF", "app-web-node-a": "app-a:FFF"})
	health.SetStatus(http.StatusOK)
	waitPublished(t, ns, "app", map[string]string{"app-smtp-node-a": "app-a:TTF", "app-web-node-a": "app-a:TTF"})
}

// TestUnprobedPortFollowsReadiness: a port no probe checks follows the pod's
// Ready condition; a probed port ignores it (the probes decide).
func TestUnprobedPortFollowsReadiness(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	startBackend(t, ns, "half", "half-a", nodeA)
	swh := resource(ns, "half", webAndSMTP, fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "half", map[string]string{"half-smtp-node-a": "half-a:TTF", "half-web-node-a": "half-a:TTF"})
	if err := harness.SetPodReady(context.Background(), controlPlane.Client, types.NamespacedName{Namespace: ns, Name: "half-a"}, false); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "half", map[string]string{"half-smtp-node-a": "half-a:FFF", "half-web-node-a": "half-a:TTF"})
}

func TestTwoProbesOnOnePortAreBothRequired(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	b := startBackend(t, ns, "both", "both-a", nodeA)
	swh := resource(ns, "both", webAndSMTP[:1],
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)),
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromString("http")))
	swh.Spec.Ports[0].Name = ""
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	// A single unnamed port: the slice is <resource>-<node>.
	waitPublished(t, ns, "both", map[string]string{"both-node-a": "both-a:TTF"})
	b.http.SetStatus(http.StatusNotFound) // TCP still connects; HTTP fails
	waitPublished(t, ns, "both", map[string]string{"both-node-a": "both-a:FFF"})
}

// TestWebAndSMTPBalancersOnOnePod is the virtual machine example
// (docs/examples/vm-web-smtp.yaml): two resources, web (HTTP probe) and smtp (TCP probe), select the
// same pod and fail independently.
func TestWebAndSMTPBalancersOnOnePod(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	vm := startBackend(t, ns, "vm", "vm-0", nodeA)
	web := resource(ns, "web", []swhv1alpha1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	smtp := resource(ns, "smtp", []swhv1alpha1.ServicePort{{Port: 25, TargetPort: intstr.FromInt32(2525)}},
		fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525)))
	for _, r := range []*swhv1alpha1.ServiceWithHealthchecks{web, smtp} {
		r.Spec.Selector = map[string]string{"app": "vm"}
		if err := controlPlane.Client.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	waitPublished(t, ns, "web", map[string]string{"web-node-a": "vm-0:TTF"})
	waitPublished(t, ns, "smtp", map[string]string{"smtp-node-a": "vm-0:TTF"})
	vm.http.SetStatus(http.StatusBadGateway)
	waitPublished(t, ns, "web", map[string]string{"web-node-a": "vm-0:FFF"})
	waitPublished(t, ns, "smtp", map[string]string{"smtp-node-a": "vm-0:TTF"})
	vm.http.SetStatus(http.StatusOK)
	if err := vm.smtp.Stop(); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "web", map[string]string{"web-node-a": "vm-0:TTF"})
	waitPublished(t, ns, "smtp", map[string]string{"smtp-node-a": "vm-0:FFF"})
}
