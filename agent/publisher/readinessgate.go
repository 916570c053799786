package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// The readiness gate: a pod that lists ReadinessGateConditionType(name) in
// spec.readinessGates gets that condition from the agent of its node, for
// the resource of that name in its namespace that selects it. The verdict
// is the slices' per-port one, taken from the probes, with two differences:
//   - a port no probe gates counts when the pod's ContainersReady condition
//     is True, not Ready: Ready waits for this very condition, so following
//     it would never let the gate open;
//   - publishNotReadyAddresses (slices ready whatever the probes say) and a
//     node that is not Ready (slices withdrawn) do not change it: the gate
//     says whether the pod passes its probes, nothing else. Kubernetes
//     already makes the pods of a node that is not Ready not Ready.
//
// A port whose targetPort resolves to no port of the pod is not published
// for that pod and is left out, unless no port resolves at all.

// gateMessages are the condition's messages: constant per status and mode,
// so that only a change of verdict (or of the failing ports) costs a write.
const (
	gatePassedOnceMessage = "passed the probes of every port; later failures act on their ports only"
	gatePassingMessage    = "passes the probes of every port"
)

// gateMode is the resource's readiness gate mode, Once when unset.
func gateMode(swh *swhv1alpha1.ServiceWithHealthchecks) swhv1alpha1.ReadinessGateMode {
	if swh.Spec.ReadinessGate != nil && swh.Spec.ReadinessGate.Mode == swhv1alpha1.ReadinessGateContinuous {
		return swhv1alpha1.ReadinessGateContinuous
	}
	return swhv1alpha1.ReadinessGateOnce
}

// declaresGate reports whether the pod lists condType among its readiness gates.
func declaresGate(pod *corev1.Pod, condType corev1.PodConditionType) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if g.ConditionType == condType {
			return true
		}
	}
	return false
}

// podCondition returns the pod's condition of type t, or nil.
func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// containersReady reports whether the pod's ContainersReady condition is True.
func containersReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.ContainersReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// gateFailing returns the ports (labels, in the order of spec.ports) on
// which the pod does not pass; none means the gate passes.
func gateFailing(gates []endpoints.PortGate, ports []corev1.ServicePort, passing endpoints.ProbeSet, ready bool) []string {
	var failing, unresolved []string
	for i, gate := range gates {
		switch {
		case gate.Port == 0:
			unresolved = append(unresolved, endpoints.PortLabel(ports[i].Name, ports[i].Port))
		case !gate.Verdict(passing, ready).Passing:
			failing = append(failing, endpoints.PortLabel(ports[i].Name, ports[i].Port))
		}
	}
	if len(unresolved) == len(gates) {
		// Nothing could ever be published: the gate must not open.
		return unresolved
	}
	return failing
}

// desiredGate is the condition the pod should carry, given what it carries
// now (nil when nothing) and the ports that do not pass. In mode Once a
// True condition stays True: the pod keeps it across agent restarts.
func desiredGate(mode swhv1alpha1.ReadinessGateMode, condType corev1.PodConditionType, current *corev1.PodCondition, failing []string) corev1.PodCondition {
	want := corev1.PodCondition{Type: condType, Status: corev1.ConditionTrue, Reason: swhv1alpha1.ReasonProbesPassed, Message: gatePassingMessage}
	switch {
	case mode == swhv1alpha1.ReadinessGateOnce && (len(failing) == 0 || (current != nil && current.Status == corev1.ConditionTrue)):
		want.Reason, want.Message = swhv1alpha1.ReasonProbesPassedOnce, gatePassedOnceMessage
	case len(failing) > 0:
		noun := "port"
		if len(failing) > 1 {
			noun = "ports"
		}
		want.Status, want.Reason = corev1.ConditionFalse, swhv1alpha1.ReasonProbesNotPassed
		want.Message = fmt.Sprintf("probes not passing on %s %s", noun, strings.Join(failing, ", "))
	}
	return want
}

// sameGate compares what the agent decides of a condition.
func sameGate(current *corev1.PodCondition, want corev1.PodCondition) bool {
	return current != nil && current.Status == want.Status && current.Reason == want.Reason && current.Message == want.Message
}

// syncGates writes the readiness gate condition of the resource on the
// pods of the view that declare it and are not terminating, where it
// changed. A failed write is returned after the others are tried.
func (p *Publisher) syncGates(ctx context.Context, view *resourceView) error {
	condType := corev1.PodConditionType(swhv1alpha1.ReadinessGateConditionType(view.key.Name))
	mode := gateMode(view.swh)
	var errs []error
	for _, pod := range view.pods {
		if pod.DeletionTimestamp != nil || !declaresGate(pod, condType) {
			continue
		}
		st := p.targets.passing(view.key, pod.UID, len(view.probes))
		// A hold keeps the gate as it keeps the endpoints (failstatic.go).
		passing := st.passing | st.kept
		failing := gateFailing(view.grouping.Gates(pod), view.service.Ports, passing, containersReady(pod))
		if m := swhv1alpha1.Maintenance(pod); m != nil {
			// Out on purpose, its probes stopped: not a failure of the
			// pod, which would take its other ports out with it.
			failing = slices.DeleteFunc(failing, func(label string) bool { return maintainedLabel(view.service.Ports, label, m) })
		}
		if err := p.writeGate(ctx, pod, condType, mode, failing); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("the readiness gates of %s: %w", view.key, err)
	}
	return nil
}

// writeGate patches the pod's condition when it differs from what it
// should be. The patch carries the pod's resourceVersion, so that it is
// decided on the condition as it is: on a conflict (kubelet wrote the pod
// in the meantime, or the cache lags) the pod is read again from the API
// server and the decision made once more. Without that, mode Once could
// set back to False a condition a stale cache did not show True yet.
func (p *Publisher) writeGate(ctx context.Context, pod *corev1.Pod, condType corev1.PodConditionType, mode swhv1alpha1.ReadinessGateMode, failing []string) error {
	current := p.gateWritten.current(pod, condType)
	for attempt := 0; ; attempt++ {
		want := desiredGate(mode, condType, current, failing)
		if sameGate(current, want) {
			return nil
		}
		if current != nil && current.Status == want.Status {
			want.LastTransitionTime = current.LastTransitionTime
		} else {
			want.LastTransitionTime = metav1.NewTime(time.Now())
		}
		patch, err := gatePatch(pod.ResourceVersion, want)
		if err != nil {
			return err
		}
		before := pod.ResourceVersion
		target := pod.DeepCopy()
		err = retry(ctx, func() error {
			return p.client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, patch))
		})
		p.metrics.gateWrite(string(want.Status), err)
		if err == nil {
			p.gateWritten.record(pod.UID, condType, before, want)
			log.FromContext(ctx).V(1).Info("readiness gate written", "pod", pod.Name, "status", want.Status, "message", want.Message)
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			return fmt.Errorf("writing condition %s of pod %s/%s: %w", condType, pod.Namespace, pod.Name, err)
		}
		fresh := &corev1.Pod{}
		if err := p.reader.Get(ctx, client.ObjectKeyFromObject(pod), fresh); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("reading pod %s/%s again: %w", pod.Namespace, pod.Name, err)
		}
		if fresh.UID != pod.UID || fresh.DeletionTimestamp != nil {
			// Gone, or terminating: not ours to write any more.
			return nil
		}
		pod, current = fresh, podCondition(fresh, condType)
	}
}

// gatePatch is a strategic merge patch of pods/status that sets one
// condition (conditions merge by type, so kubelet's stay as they are),
// with the pod's resourceVersion as a precondition.
func gatePatch(resourceVersion string, c corev1.PodCondition) ([]byte, error) {
	cond := map[string]any{
		"type": c.Type, "status": c.Status, "reason": c.Reason, "message": c.Message,
		"lastTransitionTime": c.LastTransitionTime.UTC().Format(time.RFC3339),
	}
	data, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"status":   map[string]any{"conditions": []any{cond}},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the condition patch: %w", err)
	}
	return data, nil
}

// gateMemory remembers the conditions the agent wrote until the cache
// shows the pod written: a reconcile that runs in between (another flip)
// would otherwise decide on the condition as it was before, and write
// again or, with its stale resourceVersion, conflict.
type gateMemory struct {
	mu      sync.Mutex
	written map[gateKey]gateWrite
}

type gateKey struct {
	pod      types.UID
	condType corev1.PodConditionType
}

type gateWrite struct {
	// before is the pod's resourceVersion the write was made on.
	before string
	cond   corev1.PodCondition
	at     time.Time
}

// gateMemoryTTL bounds how long a write is remembered, for pods that go
// before the cache shows them written.
const gateMemoryTTL = time.Minute

// current is the pod's condition of type t: the one the agent wrote when
// the cached pod is still the one that write was made on.
func (m *gateMemory) current(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := gateKey{pod.UID, t}
	if w, ok := m.written[key]; ok {
		if w.before == pod.ResourceVersion {
			c := w.cond
			return &c
		}
		delete(m.written, key)
	}
	return podCondition(pod, t)
}

func (m *gateMemory) record(pod types.UID, t corev1.PodConditionType, before string, c corev1.PodCondition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.written == nil {
		m.written = map[gateKey]gateWrite{}
	}
	for k, w := range m.written {
		if now.Sub(w.at) > gateMemoryTTL {
			delete(m.written, k)
		}
	}
	m.written[gateKey{pod, t}] = gateWrite{before: before, cond: c, at: now}
}

// maintainedLabel reports whether the port a gate label names is one the
// pod's maintenance annotation takes out.
func maintainedLabel(ports []corev1.ServicePort, label string, maintained func(string) bool) bool {
	for _, p := range ports {
		if endpoints.PortLabel(p.Name, p.Port) == label {
			return maintained(p.Name)
		}
	}
	return false
}
