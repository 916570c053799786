// Package disruption_test runs the eviction guard against a real
// kube-apiserver: evictions go through the API server's eviction
// subresource, which asks the guard (two controller replicas behind a
// round-robin HTTPS balancer, as behind a Service) through a
// ValidatingWebhookConfiguration, and applies PodDisruptionBudgets kept by
// kube-controller-manager's disruption controller. In-process agents probe
// real HTTP backends on pod addresses, so "passing" is what the probes
// find. No kubelet: the tests delete and recreate pods as a kubelet and a
// StatefulSet controller would.
package disruption_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentapp "github.com/swh-dev/swh/agent/app"
	"github.com/swh-dev/swh/agent/publisher"
	controllerapp "github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/controller/disruption"
	"github.com/swh-dev/swh/test/harness"
)

// nodes are the simulated nodes; each has an in-process agent.
var nodes = []string{"node-1", "node-2", "node-3"}

// reservationTimeout is short here so that a test sees a reservation expire.
const reservationTimeout = 15 * time.Second

var (
	controlPlane *harness.ControlPlane
	// guards are the two controller replicas serving the webhook.
	guards [2]*guardReplica
	// balancer spreads the API server's webhook calls over the replicas.
	balancer *roundRobin
)

type guardReplica struct {
	registry *prometheus.Registry
	// cache is what the replica decides from.
	cache client.Reader
	stop  func() error
}

func TestMain(m *testing.M) {
	os.Exit(harness.RunSuite(m, harness.SuiteOptions{Name: "disruption", NeedsSandbox: true, Setup: setup}))
}

func setup(ctx context.Context, cp *harness.ControlPlane) (func(), error) {
	controlPlane = cp
	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) (func(), error) { cleanup(); return nil, err }
	for _, n := range nodes {
		if _, err := harness.CreateNode(ctx, cp.Client, harness.NodeOptions{Name: n}); err != nil {
			return fail(err)
		}
	}
	stopKCM, err := startDisruptionController(cp)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, stopKCM)
	for _, n := range nodes {
		mgr, err := agentapp.NewManager(cp.Config, agentapp.Options{
			NodeName: n, MetricsAddr: "0", HealthAddr: "0", Registry: prometheus.NewRegistry(),
			Publisher: publisher.Options{SkipNameValidation: true},
		})
		if err != nil {
			return fail(fmt.Errorf("creating the agent of %s: %w", n, err))
		}
		stop := harness.RunManager(context.Background(), mgr)
		stops = append(stops, func() { _ = stop() })
	}
	ca, certDir, err := webhookCertificate()
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { _ = os.RemoveAll(certDir) })
	var backends []string
	for i := range guards {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		g := &guardReplica{registry: prometheus.NewRegistry()}
		// The client rate limits of swh-controller's defaults
		// (--kube-api-qps 50, --kube-api-burst 100), not client-go's 5.
		cfg := rest.CopyConfig(cp.Config)
		cfg.QPS, cfg.Burst = 50, 100
		mgr, err := controllerapp.NewManager(cfg, controllerapp.Options{
			MetricsAddr: "0", HealthAddr: "0", Registry: g.registry, SkipNameValidation: true,
			// Both serve the webhook; one reconciles.
			LeaderElection: true, LeaderElectionNamespace: "default", LeaderElectionID: "swh-disruption-suite",
			WebhookHost: "127.0.0.1", WebhookPort: port, WebhookCertDir: certDir,
			ReservationTimeout: reservationTimeout,
		})
		if err != nil {
			return fail(fmt.Errorf("creating guard replica %d: %w", i, err))
		}
		g.cache = mgr.GetCache()
		g.stop = harness.RunManager(context.Background(), mgr)
		stops = append(stops, func() { _ = g.stop() })
		guards[i] = g
		backends = append(backends, fmt.Sprintf("127.0.0.1:%d", port))
	}
	if err := waitTLS(backends); err != nil {
		return fail(err)
	}
	balancer, err = startRoundRobin(ca, backends)
	if err != nil {
		return fail(err)
	}
	stops = append(stops, balancer.Stop)
	if err := registerWebhook(ctx, cp, ca, balancer.URL()+disruption.Path); err != nil {
		return fail(err)
	}
	return cleanup, nil
}

// startDisruptionController runs kube-controller-manager with only the
// disruption controller, which keeps the PodDisruptionBudgets' status the
// API server's eviction checks.
func startDisruptionController(cp *harness.ControlPlane) (func(), error) {
	m, err := harness.StartControllerManager(cp, harness.ControllerManagerOptions{Controllers: []string{"disruption"}})
	if err != nil {
		return nil, err
	}
	return m.Stop, nil
}

// webhookCertificate writes a serving certificate for 127.0.0.1 where the
// controller's webhook server reads it.
func webhookCertificate() (*harness.CA, string, error) {
	ca, err := harness.NewCA("swh-guard-test-ca")
	if err != nil {
		return nil, "", err
	}
	issued, err := ca.Issue("127.0.0.1")
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "swh-guard-certs-")
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), issued.CertPEM, 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), issued.KeyPEM, 0o600); err != nil {
		return nil, "", err
	}
	return ca, dir, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// roundRobin is an HTTPS reverse proxy sending each request to the next
// replica, as a Service spreads the API server's connections over the
// webhook's pods (per request here, so that both replicas decide at once).
type roundRobin struct {
	server *http.Server
	addr   string
	next   atomic.Uint64
	served [2]atomic.Int64

	mu sync.Mutex
	// latencies are the webhook calls' round trips since the last take.
	latencies []time.Duration
}

// take returns the webhook calls' round trips since the last call.
func (rr *roundRobin) take() []time.Duration {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	out := rr.latencies
	rr.latencies = nil
	return out
}

func startRoundRobin(ca *harness.CA, backends []string) (*roundRobin, error) {
	serverTLS, err := ca.ServerTLS("127.0.0.1")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	rr := &roundRobin{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			i := rr.next.Add(1) % uint64(len(backends))
			rr.served[i].Add(1)
			r.SetURL(&url.URL{Scheme: "https", Host: backends[i]})
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, MaxIdleConnsPerHost: 64},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rr.addr = l.Addr().String()
	timed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		proxy.ServeHTTP(w, r)
		rr.mu.Lock()
		rr.latencies = append(rr.latencies, time.Since(start))
		rr.mu.Unlock()
	})
	rr.server = &http.Server{Handler: timed, TLSConfig: serverTLS, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = rr.server.ServeTLS(l, "", "") }()
	return rr, nil
}

func (rr *roundRobin) URL() string { return "https://" + rr.addr }

func (rr *roundRobin) Stop() { _ = rr.server.Close() }

// registerWebhook installs the guard as the chart does, pointing at url,
// and waits until an eviction reaches it.
func registerWebhook(ctx context.Context, cp *harness.ControlPlane, ca *harness.CA, target string) error {
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "swh-eviction-guard"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "eviction-guard.network.swh.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &target, CABundle: ca.PEM},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
			TimeoutSeconds:          ptr.To[int32](5),
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
			}},
		}},
	}
	if err := cp.Client.Create(ctx, cfg); err != nil {
		return fmt.Errorf("registering the eviction guard: %w", err)
	}
	return nil
}

// waitTLS waits until every address answers a TLS handshake.
func waitTLS(addrs []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, a := range addrs {
		for {
			conn, err := tls.Dial("tcp", a, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a reachability check of our own server
			if err == nil {
				_ = conn.Close()
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the eviction guard at %s does not answer: %w", a, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
