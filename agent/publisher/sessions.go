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

// sessionsRechecks space the attempts to end a withdrawn pod's sessions
// after the first, made right after the slice write: a client whose
// session ended reconnects, and lands on the pod again as long as a
// kube-proxy on its path has not applied the withdrawal (kube-proxy
// applies changes about once a second, slower in large clusters). About
// 30 s in all.
var sessionsRechecks = []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

// closing is one pod whose sessions a PostgreSQL probe ends.
type closing struct {
	pod   podRef
	probe int
	spec  swhv1alpha1.PostgreSQLProbe
	addr  probes.Target
	// ports are the ports the pod was withdrawn from that the probe
	// closes sessions for: the closings stop once it is ready on one.
	ports []string
}

// sessionClosings returns, for the endpoints the write withdrew (ready
// before, not ready now), the pods whose PostgreSQL probes gating the port
// ask to end the clients' sessions (closeSessions), once per pod and probe.
func (p *Publisher) sessionClosings(view *resourceView, before, after map[podPort]endpointState) []closing {
	var out []closing
	seen := map[podPort]int{} // pod UID and probe index -> index in out
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
			if !gates[index].Probes.Has(i) || !spec.ClosesSessions(exclusive) {
				continue
			}
			if j, ok := seen[id]; ok {
				out[j].ports = append(out[j].ports, key.port)
				continue
			}
			addr, _, ok := p.targets.get(targetKey{Resource: view.key, Pod: pod.UID, Probe: i})
			if !ok {
				continue
			}
			seen[id] = len(out)
			out = append(out, closing{pod: podRef{pod.UID, pod.Name}, probe: i, spec: *spec, addr: addr, ports: []string{key.port}})
		}
	}
	return out
}

// closeSessions ends the sessions of each closing in the background: at
// once, then at each of sessionsRechecks while the pod stays withdrawn
// from a port it was closed for (stillWithdrawn), with the probe's
// credentials, each
// attempt within the probe's timeout; it stops with ctx (the agent
// stopping). Events tell what the first attempt ended, what later ones
// ended if any, and a failure of the first (a later one may meet the pod
// shutting down: logged only).
func (p *Publisher) closeSessions(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, closings []closing) {
	key := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	for _, c := range closings {
		timeout := time.Second
		if hc := swh.Spec.Healthcheck; hc != nil && c.probe < len(hc.Probes) {
			timeout = time.Duration(hc.Probes[c.probe].TimeoutSeconds) * time.Second
		}
		go p.endSessionsWhileWithdrawn(ctx, key, swh, c, timeout)
	}
}

// endSessionsWhileWithdrawn makes the attempts of one closing.
func (p *Publisher) endSessionsWhileWithdrawn(ctx context.Context, key types.NamespacedName, swh *swhv1alpha1.ServiceWithHealthchecks, c closing, timeout time.Duration) {
	logger := log.FromContext(ctx).WithName("sessions").WithValues("resource", key.String(), "pod", c.pod.name)
	related := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: swh.Namespace, Name: c.pod.name, UID: c.pod.uid}
	later := 0
	for attempt := 0; attempt <= len(sessionsRechecks); attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(sessionsRechecks[attempt-1]):
			}
			if !p.stillWithdrawn(key, swh.UID, c) {
				break
			}
		}
		attemptCtx, cancel := context.WithTimeout(ctx, timeout)
		n, err := p.endSessions(attemptCtx, swh, c)
		cancel()
		if ctx.Err() != nil {
			return // the agent stops
		}
		p.metrics.sessionsClosed(n, err)
		switch {
		case err != nil && attempt > 0:
			// A later round: the pod may be shutting down (a rollout),
			// which ends its sessions anyway.
			logger.V(1).Info("a later round of ending sessions failed", "error", err.Error())
			continue
		case err != nil:
			logger.Error(err, "ending the clients' sessions on a withdrawn pod")
			p.emit(ctx, swh, []event{{related: related, eventtype: corev1.EventTypeWarning,
				reason: swhv1alpha1.EventReasonSessionsNotClosed, action: "CloseSessions",
				note: fmt.Sprintf("pod %s on node %s is withdrawn; its clients' sessions could not be ended: %v", c.pod.name, p.nodeName, err)}})
			return
		case attempt == 0:
			p.emit(ctx, swh, []event{{related: related, eventtype: corev1.EventTypeNormal,
				reason: swhv1alpha1.EventReasonSessionsClosed, action: p.numbered("CloseSessions"),
				note: fmt.Sprintf("pod %s on node %s is withdrawn: %d client sessions on it ended", c.pod.name, p.nodeName, n)}})
		default:
			later += n
		}
	}
	if later > 0 {
		p.emit(ctx, swh, []event{{related: related, eventtype: corev1.EventTypeNormal,
			reason: swhv1alpha1.EventReasonSessionsClosed, action: p.numbered("CloseSessions"),
			note: fmt.Sprintf("pod %s on node %s is withdrawn: %d more client sessions ended, of clients that reconnected through a kube-proxy not yet updated", c.pod.name, p.nodeName, later)}})
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

// stillWithdrawn reports whether a closing's pod is, as news last told,
// still published on the resource, not ready on any of the closing's
// ports (ready again on some but not all, it may still be withdrawn from
// an exclusive one whose old clients a stale kube-proxy routes there),
// and probed at the same address: a pod gone, or another pod given its
// address, is left alone.
func (p *Publisher) stillWithdrawn(resource types.NamespacedName, uid types.UID, c closing) bool {
	pub, ok := p.told.get(resource, uid)
	if !ok {
		return false // forgotten: the resource is gone
	}
	published, ready := false, 0
	for _, port := range c.ports {
		if st, ok := pub.states[podPort{uid: c.pod.uid, port: port}]; ok {
			published = true
			if st.ready {
				ready++
			}
		}
	}
	if !published || ready == len(c.ports) {
		return false
	}
	addr, _, ok := p.targets.get(targetKey{Resource: resource, Pod: c.pod.uid, Probe: c.probe})
	return ok && addr == c.addr
}

func podOfUID(pods []*corev1.Pod, uid types.UID) *corev1.Pod {
	for _, pod := range pods {
		if pod.UID == uid {
			return pod
		}
	}
	return nil
}
