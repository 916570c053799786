package publisher

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// A port's floor (spec.ports[].floor) says what it publishes while fewer
// pods than its minPassing pass it across the cluster: Closed, the pods
// that pass (nothing to do here); Open, every pod of the port, passing or
// not (Envoy's panic mode); Freeze, the pods published ready when it went
// below, and those that pass. Never on an exclusive port.
//
// Each agent counts the pods that pass the port: its own by their
// verdicts, the other nodes' from the API server's slices, published
// ready and not marked kept by a floor (swhv1alpha1.KeptByFloor). The
// pods a floor keeps are marked with its reason in the reasons
// annotation, so that every agent counts the same pods and reaches the
// same decision.
//
// A pod published ready that starts failing is held, published and
// marked floor-held, for a moment before it may leave, unless the node's
// own passing pods reach the floor: when pods on two nodes start failing
// in the same round, each agent would otherwise count the other's, not
// marked yet, as passing, and both would withdraw theirs. The moment is
// long enough for the other agents to write that round's verdicts (the
// probes' timeout and a second, at most a period), counted from the
// mark's since (to the second, so up to a second shorter); the agent
// counts again every floorRecheck meanwhile, so that a port the other
// agents' marks take below its floor is published by its mode at once,
// not at the hold's end.
//
// Open publishes a pod its probes found failing, never one they have no
// result for yet: a new pod, or every pod of a new resource, is not sent
// traffic before it was probed once.

// floorRecheck is how often an agent that holds a pod counts again.
const floorRecheck = 250 * time.Millisecond

// floorKeep is what a port's floor does with a pod of the node that does
// not pass the port.
type floorKeep uint8

const (
	// floorLeaves: nothing; the pod is published as its verdict says.
	floorLeaves floorKeep = iota
	// floorHolds: the pod stays published ready a moment, marked, while
	// the agents count.
	floorHolds
	// floorEngaged: the port is below its floor, and its mode keeps the
	// pod published ready.
	floorEngaged
)

// floorCandidate is a pod of the node that does not pass a port, and
// that the port's floor may keep: not terminating, not in maintenance on
// the port, its node Ready.
type floorCandidate struct {
	v endpoints.PodVerdicts
	// wasReady: the node's slices publish it ready on the port.
	wasReady bool
	// marked: with a reason that says a floor keeps it
	// (swhv1alpha1.KeptByFloor): the other agents do not count it.
	marked bool
	// unprobed: no probe of the port has a result for it yet (a new pod,
	// a new probe): Open does not publish it.
	unprobed bool
	// holding: marked floor-held less than the hold ago.
	holding bool
}

// decideFloor decides for one candidate: below, the port has fewer
// passing pods than its floor across the cluster; ownShort, the node's
// own passing pods do not reach it, so the decision rests on the other
// nodes' pods.
func decideFloor(mode swhv1alpha1.FloorMode, below, ownShort bool, c floorCandidate) floorKeep {
	switch {
	case mode != swhv1alpha1.FloorOpen && mode != swhv1alpha1.FloorFreeze:
		return floorLeaves
	case below && (c.wasReady || mode == swhv1alpha1.FloorOpen && !c.unprobed):
		return floorEngaged
	case c.wasReady && (!c.marked || c.holding) && ownShort:
		return floorHolds
	}
	return floorLeaves
}

// floorCount is what a port's floor counts: the pods that pass it, and
// those published on it (terminating ones aside).
type floorCount struct {
	passing, total int
}

// ownFloorCount counts the node's pods on port i (port, by name) and
// returns the candidates, those marked floor-held since less than hold
// before now holding. A pod another floor keeps (a lag floor's) does
// not pass; a pod in maintenance on the port counts in the total only.
func ownFloorCount(verdicts []endpoints.PodVerdicts, i int, port string, why notReadyReasons, nodeNotReady bool,
	published []endpoints.Published, reasons swhv1alpha1.EndpointReasons, now time.Time, hold time.Duration) (floorCount, []floorCandidate) {
	var n floorCount
	var candidates []floorCandidate
	for _, v := range verdicts {
		if i >= len(v.Ports) || v.Ports[i].Port == 0 || v.Pod.DeletionTimestamp != nil {
			continue
		}
		n.total++
		if m := swhv1alpha1.Maintenance(v.Pod); m != nil && m(port) {
			continue // out on purpose: never kept
		}
		if v.Ports[i].Passing {
			if !swhv1alpha1.KeptByFloor(why[v.Pod.UID][port].reason) {
				n.passing++
			}
			continue
		}
		if nodeNotReady {
			continue // withdrawn by the controller too: never kept
		}
		r, ok := reasons[v.Pod.Name]
		c := why[v.Pod.UID][port]
		candidates = append(candidates, floorCandidate{
			v:        v,
			wasReady: readyOn(published, port, v.Pod.Name),
			marked:   ok && swhv1alpha1.KeptByFloor(r.Reason),
			// Since is kept to the second: a mark made late in one
			// second holds its whole time all the same.
			holding:  ok && r.Reason == swhv1alpha1.ReasonFloorHeld && now.Sub(r.Since.Time) < hold+time.Second,
			unprobed: c.kind == causeStart && c.reason == swhv1alpha1.ReasonPending,
		})
	}
	return n, candidates
}

// otherNodesCount counts the pods other nodes than node publish on port
// in list (an agent's slices of the resource, every node's): those
// published ready and not kept by a floor pass it.
func otherNodesCount(list []discoveryv1.EndpointSlice, port, node string) floorCount {
	kept := map[string]bool{}
	for pod, r := range reasonsByPort(list)[port] {
		kept[pod] = swhv1alpha1.KeptByFloor(r.Reason)
	}
	published, _ := endpoints.Read(list, endpoints.Options{}) // valid options: no error
	var n floorCount
	for _, e := range published {
		if e.Port != port || e.Node == node || e.Pod == nil || e.Terminating {
			continue
		}
		n.total++
		if e.Serving && !kept[e.Pod.Name] {
			n.passing++
		}
	}
	return n
}

// portFloor keeps published ready, on each port whose floor is Open or
// Freeze, the node's pods its mode keeps while the port is below its
// floor, and holds a moment those published ready that start failing
// (see above). It returns when to look again (zero: no need):
// floorRecheck while it holds a pod; every period while a floor is
// engaged, or while a pod of the node fails a port whose floor is Open
// (the other nodes' pods failing or recovering is not an event this agent
// sees).
func (p *Publisher) portFloor(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) time.Duration {
	var again time.Duration
	var others []discoveryv1.EndpointSlice
	var othersErr error
	read := false
	published, _ := endpoints.Read(view.existing, endpoints.Options{}) // valid options: no error
	ownReasons := reasonsByPort(view.existing)
	period, hold := floorTimes(view.swh)
	for i, port := range view.portNames {
		floor := portFloorOf(view.swh, port)
		if !floor.Engages() || view.swh.Spec.IsExclusive(port) {
			continue // an exclusive port publishes one pod at most, never a floor's
		}
		own, candidates := ownFloorCount(verdicts, i, port, why, endpoints.NodeNotReady(view.node), published, ownReasons[port], time.Now(), hold)
		if !needsCount(floor.Mode(), candidates) {
			continue
		}
		if !read {
			read = true
			list, err := p.countedSlices(ctx, view.key)
			if err != nil {
				othersErr = err
				log.FromContext(ctx).Error(err, "counting the pods that pass the ports with a floor; the pods published ready stay until it can")
			} else {
				others = list.Items
			}
		}
		if othersErr != nil {
			// Unknown: keep what is published rather than decide blind.
			for _, c := range candidates {
				if c.wasReady {
					c.v.Ports[i].Passing = true
					why.set(c.v.Pod.UID, port, cause{kind: causeStandby, reason: swhv1alpha1.ReasonFloorHeld,
						text: fmt.Sprintf("it fails, and stays published while the agent cannot count the pods that pass port %s across the cluster: %v", portRef{name: port}, othersErr)})
					again = sooner(again, period)
				}
			}
			continue
		}
		n := otherNodesCount(others, port, p.nodeName)
		n.passing += own.passing
		n.total += own.total
		least, err := floor.MinPassingOf(n.total)
		if err != nil {
			log.FromContext(ctx).Error(err, "a port's floor; it is left out", "port", port)
			continue
		}
		below := n.passing < least
		if below || floor.Mode() == swhv1alpha1.FloorOpen {
			again = sooner(again, period)
		}
		for _, c := range candidates {
			keep := decideFloor(floor.Mode(), below, own.passing < least, c)
			if keep == floorLeaves {
				continue
			}
			if keep == floorHolds {
				again = sooner(again, floorRecheck)
			}
			c.v.Ports[i].Passing = true
			why.set(c.v.Pod.UID, port, floorCause(keep, floor, port, n, least, why[c.v.Pod.UID][port]))
		}
	}
	return again
}

// needsCount reports whether a port's decision needs the cluster's count:
// a pod of the node that does not pass it and is published ready, or,
// Open, that its probes found failing.
func needsCount(mode swhv1alpha1.FloorMode, candidates []floorCandidate) bool {
	for _, c := range candidates {
		if c.wasReady || mode == swhv1alpha1.FloorOpen && !c.unprobed {
			return true
		}
	}
	return false
}

// portFloorOf is the floor of the resource's port of that name; nil when
// it has none.
func portFloorOf(swh *swhv1alpha1.ServiceWithHealthchecks, port string) *swhv1alpha1.PortFloor {
	for i := range swh.Spec.Ports {
		if swh.Spec.Ports[i].Name == port {
			return swh.Spec.Ports[i].Floor
		}
	}
	return nil
}

// floorTimes are the resource's period, how often an engaged floor is
// looked at again, and the hold of a pod that starts failing: the
// longest probe timeout and a second, for the other agents to write the
// same round's verdicts, at most a period.
func floorTimes(swh *swhv1alpha1.ServiceWithHealthchecks) (period, hold time.Duration) {
	period = 10 * time.Second // the API's default
	var timeout time.Duration
	if hc := swh.Spec.Healthcheck; hc != nil {
		if hc.PeriodSeconds > 0 {
			period = time.Duration(hc.PeriodSeconds) * time.Second
		}
		for _, probe := range hc.Probes {
			timeout = max(timeout, time.Duration(probe.TimeoutSeconds)*time.Second)
		}
	}
	return period, min(period, timeout+time.Second)
}

// floorReason is the endpoint reason of the pods a floor of mode keeps.
func floorReason(mode swhv1alpha1.FloorMode) string {
	if mode == swhv1alpha1.FloorFreeze {
		return swhv1alpha1.ReasonFloorFrozen
	}
	return swhv1alpha1.ReasonFloorOpen
}

// floorCause says why a floor keeps a pod that does not pass port (was
// is why it does not): n counted across the cluster, least the floor.
func floorCause(keep floorKeep, floor *swhv1alpha1.PortFloor, port string, n floorCount, least int, was cause) cause {
	minimum := floor.MinPassing.String()
	if floor.MinPassing.StrVal != "" {
		minimum = fmt.Sprintf("%s (%d)", minimum, least)
	}
	failing := ""
	if was.reason != "" {
		failing = " (" + was.reason + ")"
	}
	count := fmt.Sprintf("%d of %d pods pass port %s across the cluster, minPassing %s", n.passing, n.total, portRef{name: port}, minimum)
	c := cause{kind: causeStandby, reason: floorReason(floor.Mode())}
	switch {
	case keep == floorHolds:
		c.reason = swhv1alpha1.ReasonFloorHeld
		c.text = fmt.Sprintf("it fails%s, and stays published a moment while the agents count: %s; below it, the port's floor is %s", failing, count, floor.Mode())
	case floor.Mode() == swhv1alpha1.FloorFreeze:
		c.text = fmt.Sprintf("the port's floor is frozen: %s; it fails%s and stays published as it was", count, failing)
	default:
		c.text = fmt.Sprintf("the port's floor is open: %s; it does not pass%s and is published anyway", count, failing)
	}
	return c
}

// sooner is the shorter of two waits, zero meaning none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// keptByPortFloor reports whether an endpoint's reasons entry says a
// port's floor keeps it published despite its probes. (A lag floor's
// replication-lag-kept is not: a lagging replica with no result yet is
// not known to lag, and would leave.)
func keptByPortFloor(r swhv1alpha1.EndpointReason) bool {
	return swhv1alpha1.KeptByFloor(r.Reason) && r.Reason != swhv1alpha1.ReasonReplicationLagKept
}
