package publisher

import (
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// targetSet is what syncTargets needs of a resource.
type targetSet struct {
	resource  types.NamespacedName
	swh       *swhv1alpha1.ServiceWithHealthchecks
	pods      []*corev1.Pod
	grouping  *endpoints.Grouping
	portNames []string
	// existing are the resource's slices as read.
	existing []discoveryv1.EndpointSlice
	// adopted returns the built-in EndpointSlice controller's slices of
	// a Service being adopted; it is called only when a target starts.
	adopted func() []discoveryv1.EndpointSlice
}

// syncTargets makes the scheduler run exactly one job per probe and pod of
// the resource: new pods and probes are added, changed ones restarted,
// others left running undisturbed, gone ones removed. A target that cannot
// start is left out, and the error says which: the next reconcile tries
// again.
func (p *Publisher) syncTargets(set targetSet) error {
	resource, swh, pods, g, portNames := set.resource, set.swh, set.pods, set.grouping, set.portNames
	var errs []error
	want := map[targetKey]bool{}
	var serving map[types.UID]map[string]bool // computed only when a target starts
	for _, pod := range pods {
		maintained := swhv1alpha1.Maintenance(pod)
		for i := range g.NumProbes() {
			if maintained != nil && !gatesPortNotMaintained(g.Gates(pod), portNames, i, maintained) {
				// Only ports taken out on purpose: no probe, so no
				// failure to warn about, and a fresh start (from the
				// not-ready endpoint published) when they come back.
				continue
			}
			probe := &swh.Spec.Healthcheck.Probes[i]
			key := targetKey{Resource: resource, Pod: pod.UID, Probe: i}
			want[key] = true
			addr, ok := probeAddress(pod, probe.TargetPort())
			spec := specOf(swh.Spec.Healthcheck, probe)
			oldAddr, oldSpec, running := p.targets.get(key)
			if running && oldAddr == addr && oldSpec == spec {
				// Flap damping is not part of the spec: a change of it
				// keeps the target's run of flaps.
				p.targets.setDamping(key, dampingOf(swh.Spec.Healthcheck))
				continue
			}
			// A new target keeps what is published until a result says
			// otherwise: restarting the agent, or editing a probe, must not
			// flap endpoints (see startstate.go). Nor must adopting a Service:
			// kube-proxy de-duplicates an address listed by two slices in no
			// defined order, so our not-ready copy of a pod could hide the
			// built-in controller's ready one until the first probe passes
			// (every endpoint of the Service gone at once, the e2e suite saw
			// it). An edited probe that checks the same address goes on from
			// its running verdict, which may be newer than what is published
			// (a flip not written yet).
			var initial bool
			if running && oldAddr == addr {
				initial = p.targets.healthy(key)
			} else {
				if serving == nil {
					serving = servingPorts(ownedBy(resource, set.existing), set.adopted())
				}
				initial = inferPassed(g.Gates(pod), portNames, i, serving[pod.UID])
			}
			tracker, err := probes.NewTracker(probes.TrackerConfig{
				SuccessThreshold: int(probe.SuccessThreshold),
				FailureThreshold: int(probe.FailureThreshold),
				InitialHealthy:   initial,
			})
			if err != nil {
				// The CRD's bounds make this unreachable; an old object
				// stored before them is left unprobed, and said so.
				errs = append(errs, fmt.Errorf("probe %d of pod %s: %w", i, pod.Name, err))
				p.stopTarget(key)
				continue
			}
			period := time.Duration(swh.Spec.Healthcheck.PeriodSeconds) * time.Second
			t := &target{tracker: tracker, addr: addr, spec: spec, owner: swh.UID, pod: pod.Name, mode: string(probe.Mode),
				passedOnce: initial, window: time.Duration(max(probe.FailureThreshold, 1))*period + time.Duration(probe.TimeoutSeconds)*time.Second,
				damping: dampingOf(swh.Spec.Healthcheck)}
			if initial {
				t.flaps.passingSince = time.Now()
			}
			p.targets.put(key, t)
			var prober probes.Prober
			if ok {
				prober = p.probers.build(resource.Namespace, swh.UID, probe)
			} else {
				port := probe.TargetPort()
				prober = failing(ReasonNoPort, fmt.Sprintf("pod %s has no container port named %q", pod.Name, port.String()))
				// The scheduler refuses port 0; this prober dials nothing.
				addr.Port = 1
			}
			job := probes.Job{
				Prober:       prober,
				Target:       addr,
				Period:       period,
				Timeout:      time.Duration(probe.TimeoutSeconds) * time.Second,
				InitialDelay: alignedDelay(time.Now(), initialDelay(pod, swh.Spec.Healthcheck.InitialDelaySeconds), period, phaseOf(resource, period)),
				FastPeriod:   seconds(swh.Spec.Healthcheck.FastPeriodSeconds),
				DownPeriod:   seconds(swh.Spec.Healthcheck.DownPeriodSeconds),
				// A namespace's probes share its slots: one tenant's
				// hanging probes cannot take every other tenant's.
				Group: resource.Namespace,
			}
			if running {
				// The entry keeps its pace through Update; the new
				// tracker starts steady (see target.pace).
				err = p.scheduler.Update(key, job)
				p.scheduler.SetPace(key, probes.PaceSteady)
			} else {
				err = p.scheduler.Add(key, job)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("scheduling probe %d of pod %s: %w", i, pod.Name, err))
				p.stopTarget(key)
			}
		}
	}
	p.removeTargets(resource, want)
	p.metrics.setTargets(p.targets.len())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the probe targets of %s: %w", resource, err)
	}
	return nil
}

// stopTarget forgets a target that could not (re)start, so that the next
// reconcile starts it afresh.
func (p *Publisher) stopTarget(key targetKey) {
	p.scheduler.Remove(key)
	p.targets.remove(key)
}

// removeTargets stops the targets of a resource that are not in keep.
func (p *Publisher) removeTargets(resource types.NamespacedName, keep map[targetKey]bool) {
	for _, key := range p.targets.keysOf(resource) {
		if keep[key] {
			continue
		}
		p.scheduler.Remove(key)
		p.targets.remove(key)
	}
	p.metrics.setTargets(p.targets.len())
}

// probeAddress is the pod's primary address and the probe's port resolved
// on the pod; ok is false when a named port resolves to nothing.
func probeAddress(pod *corev1.Pod, port intstr.IntOrString) (probes.Target, bool) {
	n, ok := endpoints.ResolvePort(pod, port, "")
	return probes.Target{Host: pod.Status.PodIP, Port: int(n)}, ok && n > 0
}

// initialDelay counts initialDelaySeconds from the pod's start.
func initialDelay(pod *corev1.Pod, seconds int32) time.Duration {
	delay := time.Duration(seconds) * time.Second
	if pod.Status.StartTime != nil {
		delay -= time.Since(pod.Status.StartTime.Time)
	}
	return max(delay, 0)
}

// gatesPortNotMaintained reports whether probe i gates a port of the pod that its
// maintenance annotation does not take out.
func gatesPortNotMaintained(gates []endpoints.PortGate, portNames []string, i int, maintained func(port string) bool) bool {
	for j, gate := range gates {
		if gate.Probes.Has(i) && !maintained(portNames[j]) {
			return true
		}
	}
	return false
}

// seconds is an optional number of seconds as a duration, 0 when unset.
func seconds(n *int32) time.Duration {
	if n == nil {
		return 0
	}
	return time.Duration(*n) * time.Second
}
