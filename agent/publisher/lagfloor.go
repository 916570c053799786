package publisher

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// A replica that lags leaves the ports its lag-bounded probe gates. When
// every replica lags together (the primary under a load they cannot
// follow), that would leave the read Service with no replica at all:
// maxReplicationLag.keepAtLeast is a floor. While fewer pods than it pass
// a port across the cluster, a pod that fails the port only for its lag
// stays published, marked replication-lag-kept in the reasons annotation,
// so that the other nodes' agents count it as kept, not as passing, and
// all agents reach the same decision.

// lagFloor publishes, on each port, the node's pods that fail it only for
// their replication lag while fewer pods than the floor pass it across
// the cluster, and returns when to look again (zero: no need).
//
// A pod published ready that starts to lag is kept (marked) for one pass
// before it may leave: when replicas on two nodes start to lag together,
// each would otherwise count the other's, not yet marked, as passing, and
// both would leave. Once marked, the other agents count it as kept.
func (p *Publisher) lagFloor(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) time.Duration {
	var again time.Duration
	ownReasons := reasonsByPort(view.existing)
	published, _ := endpoints.Read(view.existing, endpoints.Options{}) // valid options: no error
	for i, port := range view.portNames {
		marked := map[string]bool{}
		for pod, r := range ownReasons[port] {
			marked[pod] = r.Reason == swhv1alpha1.ReasonReplicationLagKept
		}
		floor, lagOnly, passing := 0, []endpoints.PodVerdicts{}, 0
		for _, v := range verdicts {
			if i >= len(v.Ports) || v.Ports[i].Port == 0 {
				continue
			}
			if m := swhv1alpha1.Maintenance(v.Pod); m != nil && m(port) {
				continue // out on purpose: neither passing nor kept
			}
			if v.Ports[i].Passing {
				passing++
				continue
			}
			if n := p.lagOnly(view, v, i, marked[v.Pod.Name]); n > 0 {
				floor = max(floor, n)
				lagOnly = append(lagOnly, v)
			}
		}
		if len(lagOnly) == 0 {
			continue
		}
		others, err := p.otherNodesPassing(ctx, view, port)
		if err != nil {
			log.FromContext(ctx).Error(err, "counting the pods that pass a port with a lag floor; its lagging pods leave")
			continue
		}
		period := time.Second
		if hc := view.swh.Spec.Healthcheck; hc != nil && hc.PeriodSeconds > 0 {
			period = time.Duration(hc.PeriodSeconds) * time.Second
		}
		// Look again each period: another node's pods recovering is not
		// an event this agent sees.
		again = period
		count := passing + others
		for _, v := range lagOnly {
			if count >= floor && (marked[v.Pod.Name] || !readyOn(published, port, v.Pod.Name)) {
				continue // leaves: enough pods pass without it
			}
			v.Ports[i].Passing = true
			why.set(v.Pod.UID, port, cause{kind: causeStandby, reason: swhv1alpha1.ReasonReplicationLagKept,
				text: fmt.Sprintf("it lags, and is kept: %d pods pass port %s across the cluster, and maxReplicationLag.keepAtLeast is %d", count, portRef{name: port}, floor)})
		}
	}
	return again
}

// readyOn reports whether the node's slices publish pod ready on port.
func readyOn(published []endpoints.Published, port, pod string) bool {
	for _, e := range published {
		// Serving, not ready: with publishNotReadyAddresses every
		// endpoint is ready, and serving is what its probes say.
		if e.Port == port && e.Pod != nil && e.Pod.Name == pod && e.Serving {
			return true
		}
	}
	return false
}

// lagOnly returns the floor of the probes that fail pod v on port i when
// each of them fails only for replication lag (or, for a pod kept, passes
// again fewer than successThreshold times) and sets a floor; 0 when v
// fails the port for anything else, or is terminating.
func (p *Publisher) lagOnly(view *resourceView, v endpoints.PodVerdicts, i int, kept bool) int {
	if v.Pod.DeletionTimestamp != nil || endpoints.NodeNotReady(view.node) {
		return 0
	}
	gates := view.grouping.Gates(v.Pod)
	if i >= len(gates) || gates[i].Probes.Empty() {
		return 0
	}
	st := p.targets.passing(view.key, v.Pod.UID, len(view.probes))
	passing, last := st.passing|st.kept, st.last
	floor := 0
	for j := range view.probes {
		if !gates[i].Probes.Has(j) || passing.Has(j) {
			continue
		}
		pg := view.probes[j].PostgreSQL
		lagging := last[j].Reason == probes.ReasonReplicationLag || kept && last[j].Status == probes.Success
		if !lagging || pg == nil || pg.MaxReplicationLag == nil || pg.MaxReplicationLag.KeepAtLeast == nil {
			return 0
		}
		floor = max(floor, int(*pg.MaxReplicationLag.KeepAtLeast))
	}
	return floor
}

// otherNodesPassing counts the pods other nodes publish ready on port,
// read from the API server, but those a floor keeps despite their probes
// (their lag, or a port's floor: swhv1alpha1.KeptByFloor).
func (p *Publisher) otherNodesPassing(ctx context.Context, view *resourceView, port string) (int, error) {
	list, err := p.countedSlices(ctx, view.key)
	if err != nil {
		return 0, err
	}
	return otherNodesCount(list.Items, port, p.nodeName).passing, nil
}
