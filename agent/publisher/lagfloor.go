package publisher

import (
	"context"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
func (p *Publisher) lagFloor(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) time.Duration {
	var again time.Duration
	for i, port := range view.portNames {
		floor, lagOnly, passing := 0, []endpoints.PodVerdicts{}, 0
		for _, v := range verdicts {
			if i >= len(v.Ports) || v.Ports[i].Port == 0 {
				continue
			}
			if v.Ports[i].Passing {
				passing++
				continue
			}
			if n := p.lagOnly(view, v, i); n > 0 {
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
		if passing+others >= floor {
			continue
		}
		for _, v := range lagOnly {
			v.Ports[i].Passing = true
			why.set(v.Pod.UID, port, cause{kind: causeStandby, reason: swhv1alpha1.ReasonReplicationLagKept,
				text: fmt.Sprintf("it lags, and is kept: %d pods pass port %s across the cluster, fewer than maxReplicationLag.keepAtLeast %d", passing+others, portRef{name: port}, floor)})
		}
	}
	return again
}

// lagOnly returns the floor of the probes that fail pod v on port i when
// each of them fails only for replication lag and sets a floor; 0 when v
// fails the port for anything else, or is terminating.
func (p *Publisher) lagOnly(view *resourceView, v endpoints.PodVerdicts, i int) int {
	if v.Pod.DeletionTimestamp != nil || endpoints.NodeNotReady(view.node) {
		return 0
	}
	gates := view.grouping.Gates(v.Pod)
	if i >= len(gates) || gates[i].Probes.Empty() {
		return 0
	}
	passing, last := p.targets.passing(view.key, v.Pod.UID, len(view.probes))
	floor := 0
	for j := range view.probes {
		if !gates[i].Probes.Has(j) || passing.Has(j) {
			continue
		}
		pg := view.probes[j].PostgreSQL
		if last[j].Reason != probes.ReasonReplicationLag || pg == nil || pg.MaxReplicationLag == nil || pg.MaxReplicationLag.KeepAtLeast == nil {
			return 0
		}
		floor = max(floor, int(*pg.MaxReplicationLag.KeepAtLeast))
	}
	return floor
}

// otherNodesPassing counts the pods other nodes publish ready on port,
// read from the API server, but those they keep despite their lag.
func (p *Publisher) otherNodesPassing(ctx context.Context, view *resourceView, port string) (int, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := p.reader.List(ctx, list, client.InNamespace(view.key.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: view.key.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return 0, fmt.Errorf("listing the slices of %s: %w", view.key, err)
	}
	kept := map[string]bool{}
	for pod, r := range reasonsByPort(list.Items)[port] {
		if r.Reason == swhv1alpha1.ReasonReplicationLagKept {
			kept[pod] = true
		}
	}
	published, _ := endpoints.Read(list.Items, endpoints.Options{}) // valid options: no error
	n := 0
	for _, e := range published {
		if e.Port != port || e.Node == p.nodeName || !e.Ready || e.Pod == nil || kept[e.Pod.Name] {
			continue
		}
		n++
	}
	return n, nil
}
