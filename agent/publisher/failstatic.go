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
//   - it fails with auth or tls, and so does another pod of the node that
//     the same probe of the resource checks: the credentials or the CA,
//     not one pod's;
//   - it fails with timeout or unreachable, and so does another pod of
//     the node: the node's path to its pods, not the pods.
//
// and, for the last two, no target of the scope passed since it began
// failing, none last passed (however long ago: one failing pod among
// passing ones is never held), none fails otherwise, and the others count
// only if they passed once and began failing with it (sameEverywhere).
// A hold ends when its scope answers: a success ends the probe's and the
// node's, any answer from a pod the node's. Each target it held is then
// decided by its next result whose probe started after the end: a success
// keeps it published (no successThreshold to wait for, it never left), a
// failure withdraws it. A held target that fails otherwise than its hold
// is about is decided at once. Holds keep an endpoint published only while
// kubelet says its pod is Ready, and never on an exclusive port
// (verdicts.go): keeping a primary that may be gone would block the
// failover.

// holdScope is where a hold applies: one probe of one resource on the
// node, or the whole node (nodeScope).
type holdScope struct {
	resource types.NamespacedName
	probe    int
}

// nodeScope is the scope of the network holds.
var nodeScope = holdScope{probe: -1}

// hold is a hold of one scope: standing until ended is set.
type hold struct {
	scope  holdScope
	reason probes.Reason
	// since is when the first held target began failing.
	since time.Time
	// members are the targets the hold keeps.
	members map[targetKey]bool
	// ended is when the hold ended (a target of its scope answered); its
	// members are then decided by their next result that started after.
	ended time.Time
}

// covers reports whether a failure with reason is the one the hold is
// about: the same kind for the node, the same reason for a probe.
func (h *hold) covers(reason probes.Reason) bool {
	kind := suspicionOf(h.reason)
	return suspicionOf(reason) == kind && (kind == checkerNetwork || h.reason == reason)
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
// tracker sees it: when the target began failing, the last success of each
// scope, and the end of the holds the result disproves: a success ends its
// probe's and the node's, and any answer from a pod (a failure that is not
// the network's, nor the agent's own) ends the node's. s.mu is held.
func (s *targetTable) noteResult(key targetKey, t *target, res probes.Result, now time.Time, o *observation) {
	t.lastAt = now
	probe := holdScope{resource: key.Resource, probe: key.Probe}
	switch res.Status {
	case probes.Success:
		t.failingSince = time.Time{}
		s.lastSuccess[nodeScope], s.lastSuccess[probe] = now, now
		s.endHold(nodeScope, now, o)
		s.endHold(probe, now, o)
	case probes.Failure:
		if t.failingSince.IsZero() {
			t.failingSince = now
		}
		if kind := suspicionOf(res.Reason); kind == notChecker || kind == checkerCredentials {
			s.endHold(nodeScope, now, o)
		}
	}
}

// endHold ends the standing hold of scope, if any, and lists its members
// in o.repace: they are decided by their next result, soon. s.mu is held.
func (s *targetTable) endHold(scope holdScope, now time.Time, o *observation) {
	h := s.holds[scope]
	if h == nil {
		return
	}
	delete(s.holds, scope)
	h.ended = now
	for k := range h.members {
		o.repace = append(o.repace, k)
	}
}

// failStatic applies the hold rules to a result the tracker has seen,
// given when its probe started, whether the target was healthy before it
// and whether its verdict flipped; it returns whether what is published
// may change. s.mu is held.
func (s *targetTable) failStatic(key targetKey, t *target, res probes.Result, started time.Time, wasHealthy, flipped bool, o *observation) bool {
	if h := t.heldBy; h != nil {
		switch {
		case h.ended.IsZero() && (res.Status != probes.Failure || h.covers(res.Reason)):
			return false // still held
		case !h.ended.IsZero() && started.Before(h.ended) && res.Status != probes.Success:
			// Started before the checker answered again (a probe in
			// flight then may still time out): wait for a fresh one.
			return false
		}
		// This result decides: the hold ended, or it fails otherwise
		// than the hold is about (the pod's own failure).
		kept := t.kept
		s.unhold(key, t)
		o.unheld = true
		switch {
		case res.Status == probes.Success && kept:
			// It never stopped being published: no successThreshold
			// to wait for.
			t.tracker.Reset(true)
			return false
		case res.Status == probes.Success:
			return flipped
		case t.tracker.Healthy():
			return false
		}
		if h := s.holdFor(key, t, res.Reason); h != nil {
			s.join(key, t, h)
			o.held, o.unheld = true, false
			return false
		}
		return kept
	}
	if !flipped || !wasHealthy || res.Status != probes.Failure {
		return flipped
	}
	h := s.holdFor(key, t, res.Reason)
	if h == nil {
		return true
	}
	s.join(key, t, h)
	o.held = true
	return false
}

// join makes h keep the target of key. s.mu is held.
func (s *targetTable) join(key targetKey, t *target, h *hold) {
	t.heldBy = h
	h.members[key] = true
}

// holdFor returns the standing hold that keeps a target that just turned
// unhealthy with reason, starting it if the rules allow, or nil. s.mu is
// held.
func (s *targetTable) holdFor(key targetKey, t *target, reason probes.Reason) *hold {
	kind := suspicionOf(reason)
	if kind == notChecker || s.failClosed {
		return nil
	}
	scope := scopeOf(key, kind)
	if h := s.holds[scope]; h != nil {
		if h.covers(reason) {
			return h
		}
		return nil
	}
	if kind != checkerItself && !s.sameEverywhere(key, t, scope, reason) {
		return nil
	}
	h := &hold{scope: scope, reason: reason, since: t.failingSince, members: map[targetKey]bool{}}
	s.holds[scope] = h
	return h
}

// sameEverywhere reports whether the failures of a scope point at the
// checker, as seen from the target of key that just turned unhealthy
// with reason: no target of the scope passed since it began failing, none
// last passed (however long ago), none fails otherwise, and the targets
// that began failing that way with it, within its window, are of two pods
// at least. Targets that never passed, or have failed since long before,
// say nothing either way. s.mu is held.
func (s *targetTable) sameEverywhere(key targetKey, t *target, scope holdScope, reason probes.Reason) bool {
	since := t.failingSince
	if !s.lastSuccess[scope].Before(since) {
		return false
	}
	same := &hold{reason: reason}
	pods := map[types.UID]bool{key.Pod: true}
	for k, o := range s.targets {
		if k == key || (scope != nodeScope && (k.Resource != scope.resource || k.Probe != scope.probe)) {
			continue
		}
		switch {
		case o.last.Status == probes.Success:
			return false
		case o.last.Status != probes.Failure, !o.passedOnce, o.failingSince.Before(since.Add(-t.window)):
			continue
		case !same.covers(o.last.Reason):
			return false
		}
		pods[k.Pod] = true
	}
	return len(pods) >= 2
}

// unhold forgets a target's hold, when it is decided or goes away. s.mu
// is held.
func (s *targetTable) unhold(key targetKey, t *target) {
	h := t.heldBy
	if h == nil {
		return
	}
	t.heldBy, t.kept = nil, false
	delete(h.members, key)
	if len(h.members) == 0 && s.holds[h.scope] == h {
		delete(s.holds, h.scope)
	}
}

// setKept records which held probes of a pod keep a port published (its
// pod Ready, the port not exclusive): only they count as published.
func (s *targetTable) setKept(resource types.NamespacedName, pod types.UID, held, kept endpoints.ProbeSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range held.All() {
		if t, ok := s.targets[targetKey{resource, pod, i}]; ok && t.heldBy != nil {
			t.kept = kept.Has(i)
		}
	}
}

// keptCause says why a port that passes only thanks to held probes is
// published ready: the first held probe of its gate, what it fails with,
// and why the checker is suspected.
func keptCause(gate endpoints.PortGate, passing endpoints.ProbeSet, st probeStates, labels []string, node string) cause {
	for i := range st.last {
		if !gate.Probes.Has(i) || passing.Has(i) || !st.held.Has(i) {
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

// heldCounts counts the targets holds keep published by scope ("node" or
// "probe") and the reason of their hold, for the metrics; every scope and reason a hold can
// have is there, at 0 when none holds, so that an alert sees it end.
func (s *targetTable) heldCounts() map[[2]string]int {
	out := zeroScopes()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		if h := t.heldBy; h != nil && t.kept {
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
// least) and each probe of a resource (every target fails it with config
// or secret, or with one auth or tls on two pods at least). It is known a period after the cause
// begins, before failureThreshold withdraws anything. Every scope and
// reason is there, at 0 when none is suspected.
func (s *targetTable) suspected() map[[2]string]int {
	out := zeroScopes()
	s.mu.Lock()
	defer s.mu.Unlock()
	type group struct {
		reason probes.Reason
		same   bool
		pods   map[types.UID]bool
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
			g = &group{reason: t.last.Reason, same: true, pods: map[types.UID]bool{}}
			groups[scope] = g
		}
		kind := suspicionOf(t.last.Reason)
		g.same = g.same && failed && t.last.Reason == g.reason && (kind == checkerItself || kind == checkerCredentials)
		g.pods[k.Pod] = true
	}
	if nodeSilent && len(pods) >= 2 {
		out[[2]string{"node", string(nodeReason)}] = 1
	}
	for _, g := range groups {
		// As the holds: credentials refused by one pod are its own.
		if g.same && (suspicionOf(g.reason) == checkerItself || len(g.pods) >= 2) {
			out[[2]string{"probe", string(g.reason)}]++
		}
	}
	return out
}

// zeroScopes lists every scope and reason a hold can have, at 0: the
// gauges report them all, so that an alert sees a count end.
func zeroScopes() map[[2]string]int {
	out := map[[2]string]int{}
	for _, r := range []probes.Reason{ReasonConfig, ReasonSecret, probes.ReasonAuth, probes.ReasonTLS} {
		out[[2]string{"probe", string(r)}] = 0
	}
	for _, r := range []probes.Reason{probes.ReasonTimeout, probes.ReasonUnreachable} {
		out[[2]string{"node", string(r)}] = 0
	}
	return out
}
