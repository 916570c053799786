package publisher

import (
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// Failing static: when the failures point at the checker rather than at
// the pods, the agent keeps what it publishes instead of withdrawing every
// pod at once (a node firewall that drops the agent's probes, a wrong
// Secret, a changed CA). A target is held, published as passing while its
// pod stays Ready, when it turns unhealthy and one of these holds:
//
//   - its probe cannot run at all (config, secret): the agent's own
//     problem, which says nothing about the pod;
//   - it fails with auth or tls, and so does every other target of the
//     same probe of the resource on the node whose latest result is known
//     (none of them passed since this one began failing): the credentials
//     or the CA, not one pod's;
//   - it fails with timeout or unreachable, and so does every other target
//     of the node (at least two pods), none passing since this one began
//     failing: the node's path to its pods, not the pods.
//
// A target that last passed counts as passing until its next result: one
// failing pod among passing ones is never held. A hold ends with the
// first success in its scope (the checker works again), or when no target
// is held by it any more; each target it held is then decided by its own
// next result, a success keeping it published (no successThreshold to
// wait for: it never stopped being published), a failure withdrawing it.
// Holds never apply to exclusive ports (verdicts.go): keeping a primary
// that may be gone would block the failover.

// holdScope is where a hold applies: one probe of one resource on the
// node, or the whole node (nodeScope).
type holdScope struct {
	resource types.NamespacedName
	probe    int
}

// nodeScope is the scope of the network holds.
var nodeScope = holdScope{probe: -1}

// hold is a standing hold of one scope.
type hold struct {
	scope  holdScope
	reason probes.Reason
	// since is when the first held target began failing.
	since time.Time
	// targets counts the targets the hold keeps.
	targets int
}

// suspicion sorts failure reasons by what they say of the checker.
type suspicion uint8

const (
	// notChecker: the pod's own failure (refused, http-status, …).
	notChecker suspicion = iota
	// checkerItself: the probe never reached the pod (config, secret).
	checkerItself
	// checkerCredentials: the server refused what the probe presents
	// (auth, tls); the probe's settings if every pod refuses them.
	checkerCredentials
	// checkerNetwork: no answer at all (timeout, unreachable); the node's
	// path if every pod of the node is silent.
	checkerNetwork
)

func suspicionOf(r probes.Reason) suspicion {
	switch r {
	case ReasonConfig, ReasonSecret:
		return checkerItself
	case probes.ReasonAuth, probes.ReasonTLS:
		return checkerCredentials
	case probes.ReasonTimeout, probes.ReasonUnreachable:
		return checkerNetwork
	}
	return notChecker
}

// scopeOf is the scope a reason's hold applies to.
func scopeOf(key targetKey, s suspicion) holdScope {
	if s == checkerNetwork {
		return nodeScope
	}
	return holdScope{resource: key.Resource, probe: key.Probe}
}

// noteResult records what the hold rules need of a result before the
// tracker sees it: when the target began failing, and the last success of
// each scope, which ends its hold. s.mu is held.
func (s *targetTable) noteResult(key targetKey, t *target, res probes.Result, now time.Time) {
	t.lastAt = now
	switch res.Status {
	case probes.Success:
		t.failingSince = time.Time{}
		probe := holdScope{resource: key.Resource, probe: key.Probe}
		s.lastSuccess[nodeScope], s.lastSuccess[probe] = now, now
		delete(s.holds, nodeScope)
		delete(s.holds, probe)
	case probes.Failure:
		if t.failingSince.IsZero() {
			t.failingSince = now
		}
	}
}

// failStatic applies the hold rules to a result the tracker has seen,
// given whether the target was healthy before it and whether its verdict
// flipped, and returns whether the published verdict flips. s.mu is held.
func (s *targetTable) failStatic(key targetKey, t *target, res probes.Result, wasHealthy, flipped bool, o *observation) bool {
	if t.heldBy != nil {
		if s.holds[t.heldBy.scope] == t.heldBy {
			return false // still held: published as passing
		}
		// The hold ended: this result decides, as the first one after
		// the target was published passing.
		t.heldBy = nil
		o.unheld = true
		if res.Status == probes.Success {
			t.tracker.Reset(true)
			return false
		}
		if t.tracker.Healthy() {
			return false
		}
		if h := s.holdFor(key, t, res.Reason); h != nil {
			t.heldBy = h
			h.targets++
			o.held, o.unheld = true, false
			return false
		}
		return true
	}
	if !flipped || !wasHealthy || res.Status != probes.Failure {
		return flipped
	}
	h := s.holdFor(key, t, res.Reason)
	if h == nil {
		return true
	}
	t.heldBy = h
	h.targets++
	o.held = true
	return false
}

// holdFor returns the hold that keeps a target that just turned unhealthy
// with reason, starting it if the rules allow, or nil. s.mu is held.
func (s *targetTable) holdFor(key targetKey, t *target, reason probes.Reason) *hold {
	kind := suspicionOf(reason)
	if kind == notChecker {
		return nil
	}
	scope := scopeOf(key, kind)
	if h := s.holds[scope]; h != nil {
		if suspicionOf(h.reason) == kind && (kind == checkerNetwork || h.reason == reason) {
			return h
		}
		return nil
	}
	if kind != checkerItself && !s.sameEverywhere(key, scope, t.failingSince, kind, reason) {
		return nil
	}
	h := &hold{scope: scope, reason: reason, since: t.failingSince}
	s.holds[scope] = h
	return h
}

// sameEverywhere reports whether no target of the scope passed since
// since, and every other target of it failed the way the one of key did
// (the same kind for the node, the same reason for a probe); the node
// needs targets of two pods at least. s.mu is held.
func (s *targetTable) sameEverywhere(key targetKey, scope holdScope, since time.Time, kind suspicion, reason probes.Reason) bool {
	if !s.lastSuccess[scope].Before(since) {
		return false
	}
	pods := map[types.UID]bool{key.Pod: true}
	for k, o := range s.targets {
		if k == key || (scope != nodeScope && (k.Resource != scope.resource || k.Probe != scope.probe)) {
			continue
		}
		pods[k.Pod] = true
		switch {
		case o.last.Status != probes.Failure:
			// Passing (its last result, however old), or no result yet:
			// nothing says the checker fails it.
			return false
		case kind == checkerNetwork && suspicionOf(o.last.Reason) != checkerNetwork:
			return false
		case kind != checkerNetwork && o.last.Reason != reason:
			return false
		}
	}
	return scope != nodeScope || len(pods) >= 2
}

// unhold forgets a target's hold when it goes away. s.mu is held.
func (s *targetTable) unhold(t *target) {
	h := t.heldBy
	if h == nil {
		return
	}
	t.heldBy = nil
	if h.targets--; h.targets <= 0 && s.holds[h.scope] == h {
		delete(s.holds, h.scope)
	}
}

// keptCause says why a port that passes only thanks to held probes is
// published ready: the first held probe of its gate, what it fails with,
// and why the checker is suspected.
func keptCause(gate endpoints.PortGate, passing endpoints.ProbeSet, st probeStates, labels []string, node string) cause {
	for i := range st.last {
		if !gate.Probes.Has(i) || passing.Has(i) || !st.kept.Has(i) {
			continue
		}
		r := st.last[i]
		return probeCause(causeKept, swhv1alpha1.ReasonFailStatic, i,
			fmt.Sprintf("%s: %s: %s; kept published: %s", labels[i], r.Reason, r.Message, st.holds[i].describe(node)))
	}
	return cause{kind: causeKept, reason: swhv1alpha1.ReasonFailStatic, text: "kept published"}
}

// describe says why a hold suspects the checker.
func (h *hold) describe(node string) string {
	since := h.since.UTC().Format(time.RFC3339)
	switch suspicionOf(h.reason) {
	case checkerItself:
		return "the probe cannot run, which says nothing of the pod"
	case checkerNetwork:
		return fmt.Sprintf("every probe of node %s fails with no answer since %s: the node's path to its pods, not the pods", node, since)
	}
	return fmt.Sprintf("every pod of node %s fails this probe with %s since %s: its settings, not the pods", node, h.reason, since)
}

// heldCounts counts the held targets by scope ("node" or "probe") and the
// reason of their hold, for the metrics; every scope and reason a hold can
// have is there, at 0 when none holds, so that an alert sees it end.
func (s *targetTable) heldCounts() map[[2]string]int {
	out := map[[2]string]int{}
	for _, r := range []probes.Reason{ReasonConfig, ReasonSecret, probes.ReasonAuth, probes.ReasonTLS} {
		out[[2]string{"probe", string(r)}] = 0
	}
	for _, r := range []probes.Reason{probes.ReasonTimeout, probes.ReasonUnreachable} {
		out[[2]string{"node", string(r)}] = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		if h := t.heldBy; h != nil {
			scope := "probe"
			if h.scope == nodeScope {
				scope = "node"
			}
			out[[2]string{scope, string(h.reason)}]++
		}
	}
	return out
}

// keptNews remembers, per resource, whether its FailingStatic news was
// told: a hold is told when it begins keeping a resource's endpoints and
// when it ends, not at every reconcile.
type keptNews struct {
	mu   sync.Mutex
	told map[types.NamespacedName]bool
}

// events returns the FailingStatic event of a resource whose endpoints on
// the node are now kept, or the FailStaticEnded one of a resource whose
// endpoints no longer are.
func (k *keptNews) events(key types.NamespacedName, why notReadyReasons, node string) []event {
	kept, example := 0, ""
	for _, ports := range why {
		for _, c := range ports {
			if c.kind == causeKept {
				if kept++; example == "" || c.text < example {
					example = c.text
				}
			}
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.told == nil {
		k.told = map[types.NamespacedName]bool{}
	}
	switch {
	case kept > 0 && !k.told[key]:
		k.told[key] = true
		return []event{{eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonFailingStatic, action: "FailStatic",
			note: fmt.Sprintf("%d endpoints on node %s fail their probes and stay published, the failures pointing at the checker: %s", kept, node, example)}}
	case kept == 0 && k.told[key]:
		delete(k.told, key)
		return []event{{eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonFailStaticEnded, action: "FailStatic",
			note: fmt.Sprintf("no endpoint on node %s is kept despite its probes any more: each is published as its probes say", node)}}
	}
	return nil
}

// forget drops what was told of a resource.
func (k *keptNews) forget(key types.NamespacedName) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.told, key)
}

// suspected counts, for the metrics, the scopes whose every target's
// latest result points at the checker, whether or not a hold keeps any of
// them yet: the node (every target fails with no answer, two pods at
// least) and each probe of a resource (every target fails it with one
// reason of the probe's settings). It is known a period after the cause
// begins, before failureThreshold withdraws anything. Every scope and
// reason is there, at 0 when none is suspected.
func (s *targetTable) suspected() map[[2]string]int {
	out := map[[2]string]int{}
	for _, r := range []probes.Reason{ReasonConfig, ReasonSecret, probes.ReasonAuth, probes.ReasonTLS} {
		out[[2]string{"probe", string(r)}] = 0
	}
	for _, r := range []probes.Reason{probes.ReasonTimeout, probes.ReasonUnreachable} {
		out[[2]string{"node", string(r)}] = 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type group struct {
		reason probes.Reason
		same   bool
	}
	groups := map[holdScope]*group{}
	pods := map[types.UID]bool{}
	var nodeReason probes.Reason
	nodeSilent := len(s.targets) > 0
	for k, t := range s.targets {
		pods[k.Pod] = true
		failed := t.last.Status == probes.Failure
		if !failed || suspicionOf(t.last.Reason) != checkerNetwork {
			nodeSilent = false
		} else if nodeReason == "" || t.last.Reason < nodeReason {
			nodeReason = t.last.Reason
		}
		scope := holdScope{resource: k.Resource, probe: k.Probe}
		g := groups[scope]
		if g == nil {
			g = &group{reason: t.last.Reason, same: true}
			groups[scope] = g
		}
		kind := suspicionOf(t.last.Reason)
		g.same = g.same && failed && t.last.Reason == g.reason && (kind == checkerItself || kind == checkerCredentials)
	}
	if nodeSilent && len(pods) >= 2 {
		out[[2]string{"node", string(nodeReason)}] = 1
	}
	for _, g := range groups {
		if g.same {
			out[[2]string{"probe", string(g.reason)}]++
		}
	}
	return out
}
