package e2e

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swh-dev/swh/test/harness"
)

// 12. Why the suites' clients hold back a source port whose connection
// failed (netns.Namespace.DialContext): a SYN that a dead pod never
// answered leaves a SYN_SENT conntrack entry on the client's node, and
// kube-proxy removes no TCP entry when the endpoint goes. A new connection
// from the same source port follows that entry to the dead pod long after
// our withdrawal is in every rule; one from another port reaches the live
// pod. Should kube-proxy ever clear such entries, this fails, and the
// hold-back can go.
func TestStaleSYNSentEntry(t *testing.T) {
	f := newFixture(t, "12 stale SYN_SENT entry")
	node := cluster.Nodes[0]
	dead, live := f.pod(node, "ss-dead", "ss", nil), f.pod(node, "ss-live", "ss", nil)
	f.http(dead, 8080, false)
	liveServer := f.http(live, 8080, true) // failing: out until the dead pod is
	start := time.Now()
	svc := f.swh("ss", "ss", nil, webPort, httpProbe(intstr.FromInt32(8080)))
	f.converge(start, ex("only ss-dead", HTTPGet(node.Client.NS, webURL(svc)), 20, "ss-dead"))

	// The pod stops answering, as on a machine that lost power, and a
	// client's dial to it fails.
	if err := dead.NS.Run("nft", "add table inet ss; add chain inet ss in { type filter hook input priority 0; }; add rule inet ss in tcp dport 8080 drop"); err != nil {
		t.Fatal(err)
	}
	vip := hostPort(svc.Spec.ClusterIP, 80)
	if conn, err := node.Client.NS.DialContext(f.ctx, "tcp", vip); err == nil {
		_ = conn.Close()
		t.Fatal("a dial to a pod that drops every packet succeeded")
	}
	stalePort := f.unansweredPort(node, svc.Spec.ClusterIP, dead.IP)
	if !node.Client.NS.SourcePortHeld(stalePort) {
		t.Errorf("the dialer does not hold back port %d, whose dial failed", stalePort)
	}

	liveServer.SetFailed(false)
	f.waitRules(node, func(rules string) bool { return containsIP(rules, live.IP) && !containsIP(rules, dead.IP) })
	err := dialFrom(f.ctx, node, stalePort, vip)
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("from port %d after ss-dead left %s's rules: want a timeout (the stale entry to ss-dead), got %v; if kube-proxy now clears SYN_SENT entries, the dialer's hold-back is no longer needed", stalePort, node.Name, err)
	}
	t.Logf("from port %d, the port of the unanswered dial: %v", stalePort, err)
	const freshPort = 9999 // below the dialer's range: never used
	if err := dialFrom(f.ctx, node, freshPort, vip); err != nil {
		t.Fatalf("from port %d, never used: %v", freshPort, err)
	}
	f.converge(time.Now(), ex("the suite's clients: only ss-live", HTTPGet(node.Client.NS, webURL(svc)), 100, "ss-live"))
}

// unansweredPort finds, in node's conntrack table, the source port of the
// one unanswered connection to the Service ip that kube-proxy sent to pod.
func (f *fixture) unansweredPort(node *Node, ip, pod string) int {
	f.t.Helper()
	out, err := node.NS.Output("conntrack", "-L", "-p", "tcp", "--state", "SYN_SENT", "-d", ip, "--reply-src", pod)
	if err != nil {
		f.t.Fatalf("conntrack: %v: %s", err, out)
	}
	ports := regexp.MustCompile(`SYN_SENT src=\S+ dst=\S+ sport=(\d+)`).FindAllStringSubmatch(out, -1)
	if len(ports) != 1 {
		f.t.Fatalf("want one SYN_SENT entry to %s through %s on %s, got:\n%s", pod, ip, node.Name, out)
	}
	port, _ := strconv.Atoi(ports[0][1])
	return port
}

// dialFrom connects from node's client namespace to addr from the source
// port port, with a 2 s timeout (two SYNs).
func dialFrom(ctx context.Context, node *Node, port int, addr string) error {
	return node.Client.NS.Do(func() error {
		d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{Port: port}}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// waitRules polls node's kube-proxy rules until ok holds for them.
func (f *fixture) waitRules(node *Node, ok func(rules string) bool) {
	f.t.Helper()
	harness.Eventually(f.t, convergeTimeout, node.Name+"'s kube-proxy rules as expected", func() error {
		rules, err := node.Rules()
		if err != nil {
			return err
		}
		if !ok(rules) {
			return errors.New("not yet")
		}
		return nil
	})
}

// containsIP reports whether text names ip, not merely an address that
// starts with it (10.0.0.1 in 10.0.0.12).
func containsIP(text, ip string) bool {
	return regexp.MustCompile(regexp.QuoteMeta(ip) + `($|[^0-9])`).MatchString(text)
}
