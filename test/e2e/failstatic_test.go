package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// agentGauge reads a sample of the node's agent's metrics whose name and
// labels (rendered as in the exposition, `scope="node",reason="timeout"`)
// match; 0 when absent.
func agentGauge(ctx context.Context, node *Node, name, labels string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+node.IP+":9080/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	prefix := name + "{" + labels + "} "
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, sc.Err()
}

// 0. Fail static: an nftables rule in node-1 drops every packet its agent
// sends to its pods (a node firewall gone wrong). Every probe of the node
// times out while the pods serve; the agent suspects itself within two
// periods and withdraws nothing, so clients elsewhere keep reaching every
// pod. When the rule goes, the hold ends with the first success.
func TestChecksDroppedFailStatic(t *testing.T) {
	f := newFixture(t, "0 fail static")
	n := cluster.Nodes
	node := n[0]
	pods := []*Pod{f.pod(node, "fs-a", "fsweb", nil), f.pod(node, "fs-b", "fsweb", nil), f.pod(n[1], "fs-c", "fsweb", nil), f.pod(node, "fs-d", "fsapi", nil)}
	for _, p := range pods {
		f.http(p, 8080, false)
	}
	const period = 2 * time.Second
	slow := func(r *swhv1alpha1.ServiceWithHealthchecks) {
		r.Spec.Healthcheck.PeriodSeconds = int32(period / time.Second)
	}
	start := time.Now()
	web := f.swh("fsweb", "fsweb", slow, webPort, httpProbe(intstr.FromInt32(8080)))
	api := f.swh("fsapi", "fsapi", slow, webPort, httpProbe(intstr.FromInt32(8080)))
	client := n[2].Client.NS
	webReq, apiReq := HTTPGet(client, webURL(web)), HTTPGet(client, webURL(api))
	f.converge(start, ex("every pod serves", webReq, 100, "fs-a", "fs-b", "fs-c"), ex("fs-d serves", apiReq, 30, "fs-d"))

	withdrawn := watchWithdrawn(t, f, "fsweb", "fsapi")
	loop := StartLoop(f.ctx, webReq)
	rule := "table inet swh-fail-static { chain out { type filter hook output priority 0; policy accept; ip daddr " + podCIDR(node.Index) + " drop; }\n}"
	ruleFile := filepath.Join(t.TempDir(), "drop.nft")
	if err := os.WriteFile(ruleFile, []byte(rule+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := node.NS.Run("nft", "-f", ruleFile); err != nil {
		t.Fatal(err)
	}
	dropped := time.Now()
	t.Cleanup(func() { _ = node.NS.Run("nft", "delete", "table", "inet", "swh-fail-static") })

	var suspected time.Duration
	harness.Eventually(t, 5*period, "the agent of "+node.Name+" suspects its probes", func() error {
		v, err := agentGauge(f.ctx, node, "swh_agent_checker_suspected", `reason="timeout",scope="node"`)
		if err != nil || v != 1 {
			return fmt.Errorf("%v, %v", v, err)
		}
		suspected = time.Since(dropped)
		return nil
	})
	if suspected > 2*period {
		t.Errorf("suspected %s after the drop, over two periods (%s)", suspected, 2*period)
	}
	harness.Eventually(t, 5*period, "the node's three targets held", func() error {
		v, err := agentGauge(f.ctx, node, "swh_agent_held_targets", `reason="timeout",scope="node"`)
		if err != nil || v != 3 {
			return fmt.Errorf("%v held, %v", v, err)
		}
		return nil
	})
	time.Sleep(3 * period)
	during := loop.Stop()
	report.Add(Row{Scenario: f.scenario, Step: "node-1's probes dropped: every endpoint kept, clients served", Measured: during, Converge: suspected})
	t.Logf("probes dropped on %s: suspected after %s (period %s); requests meanwhile: %s", node.Name, suspected.Round(10*time.Millisecond), period, during)
	if w := withdrawn(); len(w) > 0 {
		t.Errorf("endpoints withdrawn while only the checker failed: %v", w)
	}
	if !during.LandsOnly("fs-a", "fs-b", "fs-c") {
		t.Errorf("requests while the probes were dropped: %s, want none failed, on fs-a, fs-b and fs-c", during)
	}

	if err := node.NS.Run("nft", "delete", "table", "inet", "swh-fail-static"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 5*period, "no target held once the probes pass", func() error {
		v, err := agentGauge(f.ctx, node, "swh_agent_held_targets", `reason="timeout",scope="node"`)
		if err != nil || v != 0 {
			return fmt.Errorf("%v held, %v", v, err)
		}
		return nil
	})
	if w := withdrawn(); len(w) > 0 {
		t.Errorf("endpoints withdrawn as the checker recovered: %v", w)
	}
}

// watchWithdrawn watches the slices of services and returns a function
// listing the endpoints that were ready or serving, then neither.
func watchWithdrawn(t *testing.T, f *fixture, services ...string) func() []string {
	t.Helper()
	wc, err := client.NewWithWatch(cluster.CP.Config, client.Options{Scheme: cluster.CP.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen, out := map[string]bool{}, []string(nil)
	for _, name := range services {
		w, err := wc.Watch(f.ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(f.ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		go func() {
			for ev := range w.ResultChan() {
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok || ev.Type == watch.Deleted {
					continue
				}
				port, _ := endpoints.SlicePort(s)
				mu.Lock()
				for _, ep := range s.Endpoints {
					if ep.TargetRef == nil {
						continue
					}
					key := name + "/" + ep.TargetRef.Name + "/" + port
					ready, serving, _ := endpoints.Conditions(ep.Conditions)
					switch {
					case ready || serving:
						seen[key] = true
					case seen[key]:
						seen[key] = false
						out = append(out, key)
					}
				}
				mu.Unlock()
			}
		}()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), out...)
	}
}
