package realnode_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/e2e/realnode"
)

// The invariants, checked all the time by soakChecker:
//
//  1. A target the soak fails is withdrawn (a watch sees it not ready)
//     within soakDetect of the failure, and requests to it fail only until
//     soakDetect + soakPropagate after it.
//  2. A passing pod on a Ready node is never withdrawn. Explained: the pod
//     is being deleted or gone; its node is not Ready, or is powered off or
//     cut from the API server by the fault (the controller withdraws a
//     NotReady node's endpoints); its port fails by the fault. Every other
//     withdrawal is false, listed and a violation.
//  3. Requests fail only within the bound of the fault under way (each
//     fault says which failures it explains, and a port left with no
//     ready endpoint explains the failures to it, until soakPropagate
//     after one is back: invariant 2 judges the withdrawals that emptied
//     it); outside faults, never.
//  4. After each fault everything converges within the fault's bound
//     (soakWorld.converge).
//  5. The agents and the controller do not grow (soak_resources.go).
//  6. Nothing is left behind (soakWorld.cleanUp, then the suite's checks).
//  7. The exclusive port (soakPrimary) never has two ready endpoints,
//     though all six pods pass its probe; after each fault it has one.

// target is one port of one pod.
type target struct{ pod, port string }

func (t target) String() string { return t.pod + ":" + t.port }

// soakFailure is a request that failed: when it was sent, from which
// node, to which port, the pod that answered (if one did) and why.
type soakFailure struct {
	at         time.Time
	node, port string
	pod        string
	err        string
}

func (f soakFailure) String() string {
	return fmt.Sprintf("%s from %s to %s: %s", f.at.Format("15:04:05.000"), f.node, f.port, f.err)
}

// faultRecord is one fault's story: what it did, what the checker saw
// meanwhile, and which of it the fault explains.
type faultRecord struct {
	kind, detail string
	seq          int

	mu                     sync.Mutex
	start, healedAt, endAt time.Time
	sent                   int
	failures               []soakFailure
	allowedFailures        int
	withdrawals            []string
	falseWithdrawals       []string
	detected, converged    time.Duration
	convergeBound          time.Duration
	problems               []string
	failing                map[target]time.Time
	withdrawnAt            map[target]time.Time
	downNodes              map[string]bool
	allow                  func(soakFailure) bool
	// empty are the times a port had no ready endpoint.
	empty []emptyPort
}

// emptyPort is a time a port had no ready endpoint: from when the
// checker saw the last withdrawn until one was back (zero: still none).
type emptyPort struct {
	port     string
	from, to time.Time
}

// explains reports whether the fault explains failed request f. Called
// with r.mu held.
func (r *faultRecord) explains(f soakFailure) bool {
	if r.allow != nil && r.allow(f) {
		return true
	}
	for _, e := range r.empty {
		// kube-proxy rejects connections to a Service without endpoints
		// once it has seen the last one go (its watch may be ahead of
		// the checker's by a moment), until it has seen one back.
		if e.port == f.port && !f.at.Before(e.from.Add(-time.Second)) && (e.to.IsZero() || f.at.Before(e.to.Add(soakPropagate))) {
			return true
		}
	}
	return false
}

// failTarget records that the fault made t fail its probes at.
func (r *faultRecord) failTarget(t target, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing == nil {
		r.failing = map[target]time.Time{}
	}
	r.failing[t] = at
}

// nodeDown records that the fault took node away (powered off, cut):
// its endpoints' withdrawals are explained until the end of the fault.
func (r *faultRecord) nodeDown(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.downNodes == nil {
		r.downNodes = map[string]bool{}
	}
	r.downNodes[node] = true
}

// allowFailures sets which failed requests the fault explains.
func (r *faultRecord) allowFailures(allow func(soakFailure) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.allow = allow
}

func (r *faultRecord) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]string(nil), r.problems...)
	for _, w := range r.falseWithdrawals {
		out = append(out, "false withdrawal: "+w)
	}
	unexplained := 0
	for _, f := range r.failures {
		if !r.explains(f) {
			if unexplained < 5 {
				out = append(out, "failed request the fault does not explain: "+f.String())
			}
			unexplained++
		}
	}
	if unexplained > 5 {
		out = append(out, fmt.Sprintf("... %d failed requests in all that the fault does not explain", unexplained))
	}
	return out
}

func (r *faultRecord) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	allowed := 0
	for _, f := range r.failures {
		if r.explains(f) {
			allowed++
		}
	}
	r.allowedFailures = allowed
	s := fmt.Sprintf("%s; %d requests, %d failed (%d explained), %d withdrawals (%d false), converged %s after the heal",
		r.detail, r.sent, len(r.failures), allowed, len(r.withdrawals), len(r.falseWithdrawals), r.converged.Round(100*time.Millisecond))
	if r.detected > 0 {
		s += fmt.Sprintf(", worst detection %s", r.detected.Round(10*time.Millisecond))
	}
	return s
}

// soakChecker follows the resource's slices, the workload's pods and the
// nodes through informers (which relist after a watch expires or the API
// server restarts), and sends requests from every node's client to both
// ports, charging what it sees to the fault under way.
type soakChecker struct {
	w      *soakWorld
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// cur is the fault under way, nil between faults; last the one before.
	cur, last *faultRecord
	quiet     []string
	slices    map[string]*discoveryv1.EndpointSlice
	ready     map[target]bool
	// podNode and deleting describe the workload's pods; nodeReady the
	// nodes.
	podNode   map[string]string
	deleting  map[string]bool
	nodeReady map[string]bool
	// emptySince holds the ports without a ready endpoint, since when.
	emptySince map[string]time.Time
	// pending are withdrawals to judge once the fault ends.
	pending []pendingWithdrawal
	// primarySlices are the exclusive port's slices; suspects the moments
	// it looked ready on two pods, to judge; holder the pod last ready on
	// it alone; handovers how often that changed.
	primarySlices map[string]primaryState
	suspects      []*overlapSuspect
	holder        string
	handovers     int
}

func startSoakChecker(ctx context.Context, t *testing.T, w *soakWorld) *soakChecker {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	c := &soakChecker{w: w, cancel: cancel, slices: map[string]*discoveryv1.EndpointSlice{}, ready: map[target]bool{},
		podNode: map[string]string{}, deleting: map[string]bool{}, nodeReady: map[string]bool{}, primarySlices: map[string]primaryState{},
		emptySince: map[string]time.Time{}}
	informers, err := cache.New(cluster.CP.Config, cache.Options{Scheme: cluster.CP.Scheme, DefaultNamespaces: map[string]cache.Config{w.ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	handlers := []struct {
		obj client.Object
		fn  func(obj any, deleted bool)
	}{
		{&corev1.Node{}, c.onNode},
		{&corev1.Pod{}, c.onPod},
		{&discoveryv1.EndpointSlice{}, c.onSlice},
	}
	for _, h := range handlers {
		inf, err := informers.GetInformer(ctx, h.obj)
		if err != nil {
			t.Fatal(err)
		}
		fn := h.fn
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { fn(obj, false) },
			UpdateFunc: func(_, obj any) { fn(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				fn(obj, true)
			},
		}); err != nil {
			t.Fatal(err)
		}
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = informers.Start(ctx)
	}()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("the soak's informers did not sync")
	}
	for _, n := range cluster.Nodes {
		for _, p := range soakPorts {
			c.wg.Add(1)
			go c.send(ctx, n, p)
		}
	}
	return c
}

func (c *soakChecker) onNode(obj any, deleted bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodeReady[n.Name] = !deleted && nodeReady(n)
}

func (c *soakChecker) onPod(obj any, deleted bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels["app"] != "soak" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.podNode[p.Name] = p.Spec.NodeName
	c.deleting[p.Name] = deleted || p.DeletionTimestamp != nil
}

func (c *soakChecker) onSlice(obj any, deleted bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if ok && s.Labels[discoveryv1.LabelServiceName] == soakPrimary {
		c.onPrimarySlice(s, deleted)
		return
	}
	if !ok || s.Labels[discoveryv1.LabelServiceName] != "soak" {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		delete(c.slices, s.Name)
	} else {
		c.slices[s.Name] = s
	}
	ready := map[target]bool{}
	for _, sl := range c.slices {
		port := ""
		if len(sl.Ports) > 0 && sl.Ports[0].Name != nil {
			port = *sl.Ports[0].Name
		}
		for _, e := range sl.Endpoints {
			if e.TargetRef != nil && e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready[target{e.TargetRef.Name, port}] = true
			}
		}
	}
	for t := range c.ready {
		if !ready[t] {
			c.withdrawn(t, now)
		}
	}
	c.ready = ready
	c.trackEmpty(now)
}

// trackEmpty records, on the fault under way, when a port is left with no
// ready endpoint and when one is back. Called with c.mu held.
func (c *soakChecker) trackEmpty(now time.Time) {
	for _, p := range soakPorts {
		empty := true
		for t := range c.ready {
			if t.port == p.name {
				empty = false
				break
			}
		}
		_, was := c.emptySince[p.name]
		switch {
		case empty && !was:
			c.emptySince[p.name] = now
			if c.cur != nil {
				c.cur.mu.Lock()
				c.cur.empty = append(c.cur.empty, emptyPort{port: p.name, from: now})
				c.cur.mu.Unlock()
			}
		case !empty && was:
			delete(c.emptySince, p.name)
			if c.cur != nil {
				c.cur.mu.Lock()
				for i := range c.cur.empty {
					if e := &c.cur.empty[i]; e.port == p.name && e.to.IsZero() {
						e.to = now
					}
				}
				c.cur.mu.Unlock()
			}
		}
	}
}

// onPrimarySlice checks invariant 7: the exclusive port never has two
// ready endpoints. A watch delivers the slices' writes in etcd's order,
// but a relist hands them over one by one, so the slices held here may
// mix revisions for a moment: an overlap is suspected when seen and
// judged later (judgeOverlaps).
func (c *soakChecker) onPrimarySlice(s *discoveryv1.EndpointSlice, deleted bool) {
	now := time.Now()
	st := primaryState{rv: resourceVersion(s)}
	if !deleted {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.Conditions.Ready != nil && *e.Conditions.Ready {
				st.ready = append(st.ready, e.TargetRef.Name)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if deleted {
		delete(c.primarySlices, s.Name)
	} else {
		c.primarySlices[s.Name] = st
	}
	for _, sus := range c.suspects {
		sus.update(s.Name, st)
	}
	ready := readyInSlices(c.primarySlices)
	if len(ready) == 1 && ready[0] != c.holder {
		if c.holder != "" {
			c.handovers++
		}
		c.holder = ready[0]
	}
	if len(ready) < 2 {
		return
	}
	if n := len(c.suspects); n > 0 && !c.suspects[n-1].cleared && slices.Equal(readyInSlices(c.suspects[n-1].slices), ready) {
		return
	}
	sus := &overlapSuspect{record: c.cur, after: c.lastFault(), slices: map[string]primaryState{},
		line: fmt.Sprintf("%s exclusive port %s ready on %d pods: %s", now.Format("15:04:05.000"), soakPrimaryPort, len(ready), strings.Join(ready, ", "))}
	for name, x := range c.primarySlices {
		if len(x.ready) > 0 {
			sus.slices[name] = x
			sus.newest = max(sus.newest, x.rv)
		}
	}
	c.suspects = append(c.suspects, sus)
}

// primaryState is a slice of the exclusive port as last seen: its
// resourceVersion and the pods ready in it.
type primaryState struct {
	rv    int64
	ready []string
}

// overlapSuspect is a moment the exclusive port looked ready on two pods,
// with the slices that made it so. It was real unless a version of one of
// them older than the newest of the set, seen later, shows that the slice
// had changed by the time the newest was written.
type overlapSuspect struct {
	record      *faultRecord
	line, after string
	slices      map[string]primaryState
	newest      int64
	cleared     bool
}

func (o *overlapSuspect) update(name string, st primaryState) {
	old, ok := o.slices[name]
	if o.cleared || !ok || st.rv <= old.rv || st.rv >= o.newest {
		return
	}
	o.slices[name] = st
	if len(readyInSlices(o.slices)) < 2 {
		o.cleared = true
	}
}

// readyInSlices are the pods ready in any of the slices, sorted, once each.
func readyInSlices(slices map[string]primaryState) []string {
	seen := map[string]bool{}
	var out []string
	for _, st := range slices {
		for _, p := range st.ready {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// resourceVersion is an object's resourceVersion as a number (etcd's
// revision of its last write); 0 when it is not one.
func resourceVersion(o metav1.Object) int64 {
	v, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return v
}

// judgeOverlaps charges the suspected overlaps no later version cleared
// to their faults, or to none. Called once the cluster converged, when the
// watch has caught up.
func (c *soakChecker) judgeOverlaps() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sus := range c.suspects {
		if sus.cleared {
			continue
		}
		if r := sus.record; r != nil {
			r.mu.Lock()
			r.problems = append(r.problems, sus.line)
			r.mu.Unlock()
			continue
		}
		c.quiet = append(c.quiet, sus.line+sus.after)
	}
	c.suspects = nil
}

// withdrawn classifies a withdrawal (invariant 2) and times a failing
// target's (invariant 1). Called with c.mu held.
func (c *soakChecker) withdrawn(t target, at time.Time) {
	node := c.podNode[t.pod]
	why := ""
	r := c.cur
	if r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if failedAt, ok := r.failing[t]; ok {
			if r.withdrawnAt == nil {
				r.withdrawnAt = map[target]time.Time{}
			}
			if _, seen := r.withdrawnAt[t]; !seen {
				r.withdrawnAt[t] = at
				d := at.Sub(failedAt)
				r.detected = max(r.detected, d)
				if d > soakDetect {
					r.problems = append(r.problems, fmt.Sprintf("%s withdrawn %s after its failure, over the bound %s", t, d.Round(10*time.Millisecond), soakDetect))
				}
			}
			why = "its port fails"
		} else if r.downNodes[node] {
			why = "its node is down (" + r.kind + ")"
		}
	}
	switch {
	case why != "":
	case c.deleting[t.pod] || node == "":
		why = "the pod is being deleted"
	case !c.nodeReady[node]:
		why = "its node " + node + " is not Ready"
	}
	line := fmt.Sprintf("%s %s on %s withdrawn", at.Format("15:04:05.000"), t, node)
	if why == "" {
		// The node informer may have missed a short NotReady (its watch
		// reconnecting after an API server outage): judged once the fault
		// ends, from the node's Ready condition then (judgePending).
		c.pending = append(c.pending, pendingWithdrawal{record: r, node: node, at: at, line: line, after: c.lastFault()})
		return
	}
	if r != nil {
		r.withdrawals = append(r.withdrawals, line+" ("+why+")")
	}
}

// pendingWithdrawal is a withdrawal nothing explained when it was seen.
type pendingWithdrawal struct {
	record     *faultRecord
	node, line string
	at         time.Time
	after      string
}

// judgePending decides the withdrawals nothing explained when seen: one
// whose node's Ready condition turned True after it (so the node was not
// Ready then) is explained; any other is false. Called once the cluster
// converged, every node Ready again.
func (c *soakChecker) judgePending(ctx context.Context) {
	c.judgeOverlaps()
	c.mu.Lock()
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	readySince := map[string]time.Time{}
	var nodes corev1.NodeList
	if err := cluster.CP.Client.List(ctx, &nodes); err == nil {
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					readySince[n.Name] = cond.LastTransitionTime.Time
				}
			}
		}
	}
	for _, w := range pending {
		// Transition times are kept to the second.
		explained := readySince[w.node].After(w.at.Add(-time.Second))
		why := fmt.Sprintf("its node %s was not Ready: Ready again at %s", w.node, readySince[w.node].Format("15:04:05"))
		if w.record == nil {
			if !explained {
				c.mu.Lock()
				c.quiet = append(c.quiet, "false withdrawal: "+w.line+w.after)
				c.mu.Unlock()
			}
			continue
		}
		w.record.mu.Lock()
		if explained {
			w.record.withdrawals = append(w.record.withdrawals, w.line+" ("+why+")")
		} else {
			w.record.withdrawals = append(w.record.withdrawals, w.line+" (false)")
			w.record.falseWithdrawals = append(w.record.falseWithdrawals, w.line)
		}
		w.record.mu.Unlock()
	}
}

// send requests one port's ClusterIP from node's client, one request at a
// time on a new connection each (so each is balanced anew), until the end.
func (c *soakChecker) send(ctx context.Context, n *realnode.Node, p soakPort) {
	defer c.wg.Done()
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DialContext: n.Client.NS.DialContext, DisableKeepAlives: true}}
	url := fmt.Sprintf("http://%s:%d/", c.w.clusterIP, p.port)
	for ctx.Err() == nil {
		sent := time.Now()
		var connected atomic.Bool
		tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
		pod, err := soakGet(tctx, hc, url)
		if ctx.Err() != nil {
			return
		}
		if err != nil && pod == "" {
			err = fmt.Errorf("%w (%s)", err, c.unanswered(n, p, connected.Load()))
		}
		c.mu.Lock()
		r := c.cur
		c.mu.Unlock()
		if r != nil {
			r.mu.Lock()
			r.sent++
			if err != nil {
				r.failures = append(r.failures, soakFailure{at: sent, node: n.Name, port: p.name, pod: pod, err: err.Error()})
			}
			r.mu.Unlock()
		} else if err != nil {
			c.mu.Lock()
			c.quiet = append(c.quiet, "failed request: "+soakFailure{at: sent, node: n.Name, port: p.name, pod: pod, err: err.Error()}.String()+c.lastFault())
			c.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// unanswered says why a request got no answer, as far as the node can
// tell: whether its connection was made, and the node's conntrack entries
// of the port's connections still waiting for the server's SYN-ACK, with
// the pod each was sent to (a stale entry a new connection reuses sends
// it to that pod).
func (c *soakChecker) unanswered(n *realnode.Node, p soakPort, connected bool) string {
	state := "not connected"
	if connected {
		state = "connected, no answer"
	}
	out, err := n.NS.Output("conntrack", "-L", "-p", "tcp", "--state", "SYN_SENT", "-d", c.w.clusterIP, "--dport", strconv.Itoa(int(p.port)))
	if err != nil {
		return state + "; conntrack: " + err.Error()
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "tcp") && len(lines) < 4 {
			lines = append(lines, strings.Join(strings.Fields(l), " "))
		}
	}
	return fmt.Sprintf("%s; %d SYN_SENT to the port: %s", state, len(lines), strings.Join(lines, " | "))
}

// soakGet returns the pod that answered (the body's first word) and an
// error unless it answered 200.
func soakGet(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	pod := ""
	if f := strings.Fields(string(body)); len(f) > 0 {
		pod = f[0]
	}
	if resp.StatusCode != http.StatusOK {
		return pod, fmt.Errorf("status %d from %s", resp.StatusCode, pod)
	}
	return pod, nil
}

// lastFault says which fault ended last, and when. Called with c.mu held.
func (c *soakChecker) lastFault() string {
	if c.last == nil {
		return " (before the first fault)"
	}
	return fmt.Sprintf(" (after fault %d %s, ended %s)", c.last.seq, c.last.kind, c.last.endAt.Format("15:04:05.000"))
}

// begin makes r the fault under way.
func (c *soakChecker) begin(r *faultRecord) {
	r.start = time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cur = r
}

// healed marks the end of the fault's injection: a target it failed and
// the checker never saw withdrawn broke invariant 1.
func (c *soakChecker) healed(r *faultRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healedAt = time.Now()
	var missed []string
	for t, at := range r.failing {
		if _, ok := r.withdrawnAt[t]; !ok && r.healedAt.Sub(at) > soakDetect {
			missed = append(missed, t.String())
		}
	}
	sort.Strings(missed)
	for _, t := range missed {
		r.problems = append(r.problems, fmt.Sprintf("%s failed its probes and was never withdrawn", t))
	}
}

// end closes the fault: what happens after it is charged to none.
func (c *soakChecker) end(r *faultRecord) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.endAt = time.Now()
	if c.cur == r {
		c.cur, c.last = nil, r
	}
}

// stop ends the requests and the informers and returns what broke the
// invariants outside every fault, and how often the exclusive port
// changed hands.
func (c *soakChecker) stop() ([]string, int) {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.quiet...), c.handovers
}
