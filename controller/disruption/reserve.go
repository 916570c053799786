package disruption

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// conflictBackoff retries a reservation that lost a race: the next attempt
// reads the winner's reservation and decides again. The decision's
// deadline bounds it before its steps do.
func conflictBackoff() wait.Backoff {
	return wait.Backoff{Steps: 50, Duration: 5 * time.Millisecond, Factor: 1.5, Jitter: 0.5, Cap: 200 * time.Millisecond}
}

// onConflict runs fn again while it fails with a write conflict, until
// ctx ends: the backoff between attempts watches it, so a decision that
// keeps conflicting answers within its bound.
func onConflict(ctx context.Context, fn func() error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, conflictBackoff(), func(context.Context) (bool, error) {
		last = fn()
		switch {
		case last == nil:
			return true, nil
		case apierrors.IsConflict(last):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil && last != nil && apierrors.IsConflict(last) {
		return fmt.Errorf("%w (after %w)", err, last)
	}
	return err
}

// reservationKey identifies a reservation this guard wrote, to give it
// back.
type reservationKey struct {
	resource client.ObjectKey
	pod      types.UID
	time     metav1.Time
}

// decided is one resource's answer to an eviction.
type decided struct {
	decision
	swh *swhv1alpha1.ServiceWithHealthchecks
	// key is the reservation written, if any.
	key *reservationKey
}

// decide checks the eviction of pod against swh's budget and, unless it is
// a dry run, records it as a reservation in swh's status. The status is
// written with the resourceVersion just read: when another eviction wrote
// first, the update conflicts and the decision is made again on what it
// wrote. key is the reservation written, if any.
//
// The resource is read first and the pods after: a reservation in the
// resource was written for a pod that existed then, so a pod list read
// later that lacks it proves the pod gone. A list read before could lack a
// pod created meanwhile and reserved by another replica, and the write
// would drop that reservation. So a retry reads the pods again when the
// resource it read names a pod its list lacks, or when its spec changed.
func (g *Guard) decide(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, pod *corev1.Pod, dryRun bool) (decided, error) {
	// Whole seconds: the time read back from the status must equal the
	// key's, to give the reservation back.
	now := metav1.NewTime(g.now()).Rfc3339Copy()
	out := decided{swh: swh}
	var in Inputs
	var readGeneration int64
	err := onConflict(ctx, func() error {
		cur := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := g.APIReader.Get(ctx, client.ObjectKeyFromObject(swh), cur); err != nil {
			if apierrors.IsNotFound(err) {
				out = decided{decision: decision{outcome: outcomeAllowed}, swh: swh}
				return nil // deleted meanwhile: no budget
			}
			return fmt.Errorf("reading %s/%s: %w", swh.Namespace, swh.Name, err)
		}
		out = decided{swh: cur}
		if cur.Spec.DisruptionBudget == nil || cur.UID != swh.UID {
			out.outcome = outcomeAllowed
			return nil
		}
		// A spec changed between attempts (selector, ports, budget) may
		// select other pods: read them again too.
		// (The generation is kept apart: a failed write may fill the
		// object it was given.)
		if in.Resource == nil || readGeneration != cur.Generation || reservesUnlisted(cur, in.Pods) {
			read, err := g.read(ctx, cur, now.Time)
			if err != nil {
				return err
			}
			in, readGeneration = read, cur.Generation
		}
		in.Resource = cur
		// A retried eviction (the pod holds a reservation: its eviction was
		// allowed, then refused further on) is judged again on the current
		// count, leaving out only its own reservation.
		ev := Evaluate(withoutReservation(in, pod.UID))
		verdict := judge(cur, pod, ev)
		switch {
		case verdict == verdictUnhealthy && dryRun:
			out.outcome = outcomeAllowed
			return nil
		case verdict == verdictDeny:
			out.outcome, out.message = outcomeDenied, denialMessage(cur, pod, ev)
			return nil
		case len(ev.Reservations) >= maxReservations:
			out.outcome = outcomeDenied
			out.message = fmt.Sprintf("Cannot evict pod %s: ServiceWithHealthchecks %s/%s has %d evictions allowed and not yet carried out", pod.Name, cur.Namespace, cur.Name, len(ev.Reservations))
			return nil
		case dryRun:
			out.outcome = outcomeAllowed
			return nil
		case g.heldFresh(in, pod.UID, now.Time):
			// A retry allowed again, whose reservation is young: any
			// decision made meanwhile counts it, so renewing it would only
			// make the retries of one drain conflict with each other.
			out.outcome = outcomeAllowed
			return nil
		}
		// A reservation for an unavailable pod too (it takes no disruption:
		// the pod counts as unavailable already): written under the same
		// precondition, it makes another replica that still counted the pod
		// available decide again. A retry's reservation is renewed.
		r := swhv1alpha1.DisruptionReservation{Pod: pod.Name, UID: pod.UID, Time: now}
		cur.Status.Disruption = &swhv1alpha1.DisruptionStatus{Reservations: append(ev.Reservations, r)}
		after := Evaluate(in) // counts the new reservation
		cur.Status.Disruption = after.Status(cur.Generation)
		if err := g.Client.Status().Update(ctx, cur); err != nil {
			g.Metrics.conflict(apierrors.IsConflict(err))
			return err
		}
		out.outcome = outcomeAllowed
		out.key = &reservationKey{resource: client.ObjectKeyFromObject(cur), pod: pod.UID, time: r.Time}
		if verdict == verdictUnhealthy {
			out.message = fmt.Sprintf("ServiceWithHealthchecks %s/%s allows it (%s): the pod does not count (unhealthyPodEvictionPolicy %s); %d of %d pods pass, %d needed",
				cur.Namespace, cur.Name, Describe(cur), unhealthyPolicy(cur), after.Healthy, after.Expected, after.Desired)
		} else {
			out.message = fmt.Sprintf("ServiceWithHealthchecks %s/%s allows it (%s): %d of %d pods pass, %d needed, %d more disruptions allowed",
				cur.Namespace, cur.Name, Describe(cur), after.Healthy, after.Expected, after.Desired, after.Allowed)
		}
		return nil
	})
	if err != nil {
		return decided{}, err
	}
	return out, nil
}

// heldFresh says whether pod holds a reservation that counts for at least
// half the reservation timeout more: a retry allowed again leaves it as it
// is. An older one is renewed, under the precondition, so that it cannot
// expire under a decision made meanwhile that would count the pod as
// available.
func (g *Guard) heldFresh(in Inputs, pod types.UID, now time.Time) bool {
	timeout := g.ReservationTimeout
	if timeout <= 0 {
		timeout = DefaultReservationTimeout
	}
	for _, r := range liveReservations(in) {
		if r.UID == pod && now.Sub(r.Time.Time) < timeout/2 {
			return true
		}
	}
	return false
}

// reservesUnlisted says whether swh holds a reservation for a pod that
// pods (listed before swh was read) lack.
func reservesUnlisted(swh *swhv1alpha1.ServiceWithHealthchecks, pods []corev1.Pod) bool {
	st := swh.Status.Disruption
	if st == nil {
		return false
	}
	listed := make(map[types.UID]bool, len(pods))
	for i := range pods {
		listed[pods[i].UID] = true
	}
	for _, r := range st.Reservations {
		if !listed[r.UID] {
			return true
		}
	}
	return false
}

// withoutReservation returns in with the resource's reservations of pod
// left out (a copy: in.Resource is not changed).
func withoutReservation(in Inputs, pod types.UID) Inputs {
	st := in.Resource.Status.Disruption
	if st == nil {
		return in
	}
	kept := make([]swhv1alpha1.DisruptionReservation, 0, len(st.Reservations))
	for _, r := range st.Reservations {
		if r.UID != pod {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(st.Reservations) {
		return in
	}
	res := in.Resource.DeepCopy()
	res.Status.Disruption.Reservations = kept
	in.Resource = res
	return in
}

func unhealthyPolicy(swh *swhv1alpha1.ServiceWithHealthchecks) policyv1.UnhealthyPodEvictionPolicyType {
	if p := swh.Spec.DisruptionBudget.UnhealthyPodEvictionPolicy; p != nil {
		return *p
	}
	return policyv1.IfHealthyBudget
}

type verdict int

const (
	verdictReserve   verdict = iota // take one of the allowed disruptions
	verdictUnhealthy                // not available itself, and the policy lets it go
	verdictDeny
)

// judge applies the budget to one eviction, as kube-apiserver applies a
// PodDisruptionBudget, with availability in place of Ready. ev is counted
// without the pod's own reservation, if any.
func judge(swh *swhv1alpha1.ServiceWithHealthchecks, pod *corev1.Pod, ev Evaluation) verdict {
	// A pod a floor keeps serves because too few pass: evicting it is a
	// disruption like any, never the free eviction of an unhealthy pod.
	if !ev.Available[pod.UID] && !ev.Kept[pod.UID] {
		policy := swh.Spec.DisruptionBudget.UnhealthyPodEvictionPolicy
		if policy != nil && *policy == policyv1.AlwaysAllow {
			return verdictUnhealthy
		}
		// IfHealthyBudget: evicting a pod that does not count disrupts
		// nothing while the budget is met without it.
		if ev.Problem == "" && ev.Healthy >= ev.Desired && ev.Desired > 0 {
			return verdictUnhealthy
		}
	}
	if ev.Allowed < 1 {
		return verdictDeny
	}
	return verdictReserve
}

// release removes a reservation this guard wrote, when another budget
// refused the same eviction.
func (g *Guard) release(ctx context.Context, k reservationKey) error {
	ctx, cancel := context.WithTimeout(ctx, g.decisionTimeout())
	defer cancel()
	return onConflict(ctx, func() error {
		cur := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := g.APIReader.Get(ctx, k.resource, cur); err != nil {
			return client.IgnoreNotFound(err)
		}
		st := cur.Status.Disruption
		if st == nil {
			return nil
		}
		kept := st.Reservations[:0:0]
		for _, r := range st.Reservations {
			if r.UID == k.pod && r.Time.Equal(&k.time) {
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == len(st.Reservations) {
			return nil
		}
		st.Reservations = kept
		return g.Client.Status().Update(ctx, cur)
	})
}

func (g *Guard) event(d decided, pod *corev1.Pod) {
	if g.Recorder == nil || d.message == "" {
		return
	}
	switch d.outcome {
	case outcomeAllowed:
		g.Recorder.Eventf(d.swh, pod, corev1.EventTypeNormal, swhv1alpha1.ReasonEvictionAllowed, "Evict", "%s", swhv1alpha1.TruncateMessage(fmt.Sprintf("evicting pod %s: %s", pod.Name, d.message), swhv1alpha1.MaxEventNoteBytes))
	case outcomeDenied:
		g.Recorder.Eventf(d.swh, pod, corev1.EventTypeWarning, swhv1alpha1.ReasonEvictionDenied, "Evict", "%s", swhv1alpha1.TruncateMessage(d.message, swhv1alpha1.MaxEventNoteBytes))
	}
}

func (g *Guard) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

func (g *Guard) decisionTimeout() time.Duration {
	return DecisionBound(g.WebhookTimeout)
}
