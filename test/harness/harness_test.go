package harness_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

func TestServerOnPodAddressAnswers(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	tests := []struct {
		name string
		ip   func(testing.TB) string
	}{
		{"IPv4 pod address", harness.PodIP},
		{"IPv6 pod address", harness.PodIPv6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := net.JoinHostPort(tt.ip(t), "8080")
			srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: addr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Stop() })
			if code := get(t, "http://"+addr+"/"); code != http.StatusOK {
				t.Fatalf("GET = %d, want 200", code)
			}
			srv.SetStatus(http.StatusServiceUnavailable)
			if code := get(t, "http://"+addr+"/"); code != http.StatusServiceUnavailable {
				t.Fatalf("GET after SetStatus(503) = %d", code)
			}
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				t.Fatal("a stopped server still accepts connections")
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			if code := get(t, "http://"+addr+"/"); code != http.StatusServiceUnavailable {
				t.Fatalf("GET after restart = %d", code)
			}
		})
	}
}

func TestTCPServerCountsWithoutWriting(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	srv, err := harness.StartTCPServer(harness.PodIP(t) + ":2525")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	conn, err := net.DialTimeout("tcp", srv.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("EHLO x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	harness.Eventually(t, 5*time.Second, "the server counts the 8 bytes sent", func() error {
		if got := srv.BytesReceived(); got != 8 {
			return fmt.Errorf("%d bytes", got)
		}
		return nil
	})
	if srv.Accepted() != 1 || srv.BytesReceived() != 8 {
		t.Fatalf("accepted %d connections and %d bytes, want 1 and 8", srv.Accepted(), srv.BytesReceived())
	}
}

func TestHTTPSServerWithTestCA(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ca, err := harness.NewCA("swh-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	ip := harness.PodIP(t)
	cfg, err := ca.ServerTLS("api.example.test", ip)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: ip + ":8443", TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "api.example.test"}}}
	resp, err := c.Get("https://" + ip + ":8443/")
	if err != nil {
		t.Fatalf("GET with the test CA: %v", err)
	}
	_ = resp.Body.Close()
	untrusted := &http.Client{Timeout: 5 * time.Second}
	if _, err := untrusted.Get("https://" + ip + ":8443/"); err == nil {
		t.Fatal("a client without the test CA trusted the server")
	}
}

func TestAPIServerAcceptsSliceWithPodAddress(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	cp := harness.StartTestControlPlane(t)
	ctx := context.Background()
	ns := cp.TestNamespace(t)
	if _, err := harness.CreateNode(ctx, cp.Client, harness.NodeOptions{Name: "node-a", Zone: "zone-1"}); err != nil {
		t.Fatal(err)
	}
	ip, ip6 := harness.PodIP(t), harness.PodIPv6(t)
	pod, err := harness.CreatePod(ctx, cp.Client, harness.PodOptions{
		Namespace: ns, Name: "web-0", Node: "node-a", Labels: map[string]string{"app": "web"},
		IPs:   []string{ip, ip6},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != corev1.PodRunning || got.Status.PodIP != ip || len(got.Status.PodIPs) != 2 {
		t.Fatalf("pod status not written as a kubelet would: %+v", got.Status)
	}
	srv, err := harness.StartHTTPServer(harness.HTTPServerOptions{Addr: ip + ":8080"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	if code := get(t, "http://"+ip+":8080/"); code != http.StatusOK {
		t.Fatalf("the pod's server answered %d", code)
	}
	for _, family := range []struct {
		typ  discoveryv1.AddressType
		addr string
	}{{discoveryv1.AddressTypeIPv4, ip}, {discoveryv1.AddressTypeIPv6, ip6}} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "web-" + strings.ToLower(string(family.typ)),
				Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "harness.network.swh.dev"},
			},
			AddressType: family.typ,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses: []string{family.addr}, NodeName: new("node-a"), Zone: new("zone-1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0", UID: got.UID},
			}},
			Ports: []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
		}
		if err := cp.Client.Create(ctx, slice); err != nil {
			t.Fatalf("the API server rejected a %s slice with a pod address: %v", family.typ, err)
		}
	}
	// The server rejects loopback addresses: the reason pods live in 10.244.0.0/16.
	bad := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: "loopback"},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
	}
	if err := cp.Client.Create(ctx, bad); err == nil {
		t.Fatal("the API server accepted a loopback endpoint; the harness's premise is wrong")
	}
	if err := harness.SetPodReady(ctx, cp.Client, types.NamespacedName{Namespace: ns, Name: "web-0"}, false); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionFalse {
			t.Fatalf("Ready = %s after SetPodReady(false)", c.Status)
		}
	}
}

func TestKubeconfigWorks(t *testing.T) {
	cp := harness.StartTestControlPlane(t)
	data, err := os.ReadFile(cp.Kubeconfig)
	if err != nil {
		t.Fatalf("reading the kubeconfig: %v", err)
	}
	if !strings.Contains(string(data), "server: https://") {
		t.Fatalf("kubeconfig has no server:\n%s", data)
	}
	// What kubectl would do: load the file and talk to the server with it.
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatalf("loading the kubeconfig: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := c.List(context.Background(), list); err != nil {
		t.Fatalf("listing ServiceWithHealthchecks with the kubeconfig: %v", err)
	}
}

func TestPostgresPrimaryReplicaAndPromotion(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 5432)

	expectRecovery := func(p *harness.Postgres, want bool) {
		t.Helper()
		got, err := p.InRecovery(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: pg_is_in_recovery() = %v, want %v", p.Addr(), got, want)
		}
	}
	expectRecovery(primary, false)
	expectRecovery(replica, true)

	// Replication really streams: a row written on the primary shows up.
	if err := primary.Exec(ctx, "CREATE TABLE marks (v text); INSERT INTO marks VALUES ('streamed')"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the row reaches the replica", func() error {
		return replica.Exec(ctx, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM marks WHERE v = 'streamed') THEN RAISE EXCEPTION 'not yet'; END IF; END $$")
	})

	// A wrong password is refused: the server really authenticates.
	db, err := sql.Open("postgres", "postgres://swh:wrong@"+ips[0]+":5432/postgres?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	err = db.PingContext(ctx)
	_ = db.Close()
	if err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("login with a wrong password: %v, want an authentication failure", err)
	}
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	expectRecovery(replica, false)
	if err := replica.Exec(ctx, "INSERT INTO marks VALUES ('after promotion')"); err != nil {
		t.Fatalf("the promoted replica refuses writes: %v", err)
	}

	// Cleanup leaves no server process and no folder behind.
	for _, p := range []*harness.Postgres{primary, replica} {
		dir := p.Dir()
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if pids := processesMentioning(t, dir); len(pids) > 0 {
			t.Errorf("processes %v still run from %s after Close", pids, dir)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Close (%v)", dir, err)
		}
	}
}

// processesMentioning lists the PIDs whose command line mentions s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // not a process, or gone
		}
		if strings.Contains(string(cmdline), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func get(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
