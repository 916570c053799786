package publisher

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/postgresql"
)

// sessionsRecheck is when the sessions of a withdrawn pod are ended a
// second time: a client whose session ended may have reconnected through a
// kube-proxy that had not yet applied the withdrawal.
const sessionsRecheck = time.Second

// closing is one pod whose sessions a PostgreSQL probe ends.
type closing struct {
	pod   podRef
	probe int
	spec  swhv1alpha1.PostgreSQLProbe
	addr  probes.Target
}

// sessionClosings returns, for the endpoints the write withdrew (ready
// before, not ready now), the pods whose PostgreSQL probes gating the port
// ask to end the clients' sessions (closeSessions), once per pod and probe.
func (p *Publisher) sessionClosings(view *resourceView, before, after map[podPort]endpointState) []closing {
	var out []closing
	seen := map[podPort]bool{} // pod UID and probe index
	for key, was := range before {
		if now, ok := after[key]; !was.ready || ok && now.ready {
			continue
		}
		pod := podOfUID(view.pods, key.uid)
		index := slices.Index(view.portNames, key.port)
		if pod == nil || index < 0 {
			continue // deleted: its sessions went with it, or will
		}
		gates := view.grouping.Gates(pod)
		if index >= len(gates) {
			continue
		}
		exclusive := view.swh.Spec.IsExclusive(key.port)
		for i := range view.probes {
			spec := view.probes[i].PostgreSQL
			id := podPort{uid: pod.UID, port: fmt.Sprint(i)}
			if !gates[index].Probes.Has(i) || !spec.ClosesSessions(exclusive) || seen[id] {
				continue
			}
			addr, _, ok := p.targets.get(targetKey{Resource: view.key, Pod: pod.UID, Probe: i})
			if !ok {
				continue
			}
			seen[id] = true
			out = append(out, closing{pod: podRef{pod.UID, pod.Name}, probe: i, spec: *spec, addr: addr})
		}
	}
	return out
}

// closeSessions ends the sessions of each closing in the background, at
// once and again sessionsRecheck later if the pod is still withdrawn from
// every port the probe gates, with the probe's credentials, within its
// timeout; it tells the outcome in an event on the resource.
func (p *Publisher) closeSessions(swh *swhv1alpha1.ServiceWithHealthchecks, closings []closing) {
	key := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	timeout := time.Second
	for _, c := range closings {
		if t := swh.Spec.Healthcheck; t != nil && c.probe < len(t.Probes) {
			timeout = time.Duration(t.Probes[c.probe].TimeoutSeconds) * time.Second
		}
		go func() {
			total := 0
			for attempt := range 2 {
				if attempt > 0 {
					time.Sleep(sessionsRecheck)
					if p.readyAgain(key, swh.UID, c.pod.uid) {
						return
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				n, err := p.endSessions(ctx, swh, c)
				cancel()
				p.metrics.sessionsClosed(n, err)
				total += n
				logger := log.Log.WithName("sessions").WithValues("resource", key.String(), "pod", c.pod.name)
				related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: c.pod.name, UID: c.pod.uid}
				if err != nil {
					logger.Error(err, "ending the clients' sessions on a withdrawn pod")
					p.emit(context.Background(), swh, []event{{related: related, eventtype: corev1.EventTypeWarning,
						reason: swhv1alpha1.EventReasonSessionsNotClosed, action: "CloseSessions",
						note: fmt.Sprintf("pod %s on node %s is withdrawn; its clients' sessions could not be ended: %v", c.pod.name, p.nodeName, err)}})
					return
				}
				if attempt == 1 {
					p.emit(context.Background(), swh, []event{{related: related, eventtype: corev1.EventTypeNormal,
						reason: swhv1alpha1.EventReasonSessionsClosed, action: p.numbered("CloseSessions"),
						note: fmt.Sprintf("pod %s on node %s is withdrawn: %d client sessions on it ended (%d a second later)", c.pod.name, p.nodeName, total, n)}})
				}
			}
		}()
	}
}

// endSessions logs in to the pod with the probe's credentials and ends
// its clients' sessions.
func (p *Publisher) endSessions(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, c closing) (int, error) {
	cfg, _, failed := p.probers.postgreSQLConfig(ctx, swh.Namespace, swh.UID, &c.spec)
	if failed != nil {
		return 0, fmt.Errorf("%s: %s", failed.Reason, failed.Message)
	}
	pr, err := postgresql.New(cfg)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", ReasonConfig, err)
	}
	return pr.CloseSessions(ctx, c.addr)
}

// readyAgain reports whether the slices publish the pod ready on some port
// again, as news last told them.
func (p *Publisher) readyAgain(resource types.NamespacedName, uid, pod types.UID) bool {
	pub, ok := p.told.get(resource, uid)
	if !ok {
		return true // forgotten: the resource is gone; leave its pods be
	}
	for key, st := range pub.states {
		if key.uid == pod && st.ready {
			return true
		}
	}
	return false
}

func podOfUID(pods []*corev1.Pod, uid types.UID) *corev1.Pod {
	for _, pod := range pods {
		if pod.UID == uid {
			return pod
		}
	}
	return nil
}
