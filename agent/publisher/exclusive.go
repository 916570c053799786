package publisher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// An exclusive port (spec.exclusive) is published ready by one node at
// most: the one whose agent holds the port's Lease, which the controller
// creates. The agent takes a free Lease when one of its pods passes the
// port, renews it every third of its duration, publishes one pod (the one
// it names in the Lease), and frees it only once its slices no longer
// publish that pod. A Lease it takes is published from only after every
// other node's endpoint on the port reads withdrawn from the API server;
// a holder that stops renewing (its node died, or it lost the API server)
// is withdrawn by the controller once the Lease expires, which then frees
// it. Since every kube-proxy sees slice changes in the order the API
// server made them, none sees two ready endpoints on the port.

// Renewal and validity, as parts of the Lease's duration: the holder
// renews after a third, and stops publishing three quarters after the
// start of its last successful renewal, before the controller (which
// counts the whole duration from when it saw that renewal) may free it.
const (
	renewFraction    = 3
	validityFraction = 0.75
	// handoverRetry is how soon a new holder looks again for the previous
	// holder's endpoint to be withdrawn.
	handoverRetry = 250 * time.Millisecond
)

// exclusivePort is one exclusive port of a resource, as a reconcile reads
// it.
type exclusivePort struct {
	// index is the port's in the service's ports and the verdicts.
	index int
	name  string
	lease *coordinationv1.Lease // nil until the controller creates it
}

// holding is what the agent knows of a Lease it holds beyond the cache:
// when it last renewed, and whether it saw the other nodes withdrawn.
type holding struct {
	uid types.UID
	// lease is the object its last write returned: the cache may be
	// behind it.
	lease *coordinationv1.Lease
	pod   string
	// renewAt is when to renew, validUntil when to stop publishing
	// unless renewed.
	renewAt, validUntil time.Time
	// handedOver: no other node's endpoint on the port was ready or
	// serving since the agent took the Lease.
	handedOver bool
}

// leaseHolds keeps the holdings by Lease.
type leaseHolds struct {
	mu sync.Mutex
	by map[types.NamespacedName]holding
}

func (h *leaseHolds) get(key types.NamespacedName) holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[key]
}

func (h *leaseHolds) set(key types.NamespacedName, v holding) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[types.NamespacedName]holding{}
	}
	h.by[key] = v
}

func (h *leaseHolds) forget(namespace, resource string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prefix := "swh." + resource + "."
	for key := range h.by {
		if key.Namespace == namespace && strings.HasPrefix(key.Name, prefix) {
			delete(h.by, key)
		}
	}
}

// exclusiveOutcome is what the exclusive stage leaves for after the write.
type exclusiveOutcome struct {
	// release are the Leases to free once the slices no longer publish
	// the node's pod on their port.
	release []*coordinationv1.Lease
	// requeue is when to reconcile again (a renewal, a handover to check);
	// zero for no time.
	requeue time.Duration
	// validUntil bounds the slice writes: past it, a write that
	// publishes a held port must not land.
	validUntil time.Time
	events     []event
}

func (o *exclusiveOutcome) after(d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	if o.requeue == 0 || d < o.requeue {
		o.requeue = d
	}
}

// readExclusive finds the resource's exclusive ports and their Leases.
func (p *Publisher) readExclusive(ctx context.Context, view *resourceView) error {
	ports := view.swh.Spec.ExclusivePorts()
	if len(ports) == 0 {
		return nil
	}
	list := &coordinationv1.LeaseList{}
	if err := p.client.List(ctx, list, client.InNamespace(view.key.Namespace),
		client.MatchingLabels{swhv1alpha1.LabelExclusiveLease: view.key.Name}); err != nil {
		return fmt.Errorf("listing the Leases of %s: %w", view.key, err)
	}
	for _, sp := range ports {
		ep := exclusivePort{index: -1, name: sp.Name}
		for i, port := range view.service.Ports {
			if port.Name == sp.Name {
				ep.index = i
			}
		}
		if ep.index < 0 {
			continue // the Service does not have it yet
		}
		name := swhv1alpha1.ExclusiveLeaseName(view.key.Name, sp)
		for i := range list.Items {
			if list.Items[i].Name == name && metav1.IsControlledBy(&list.Items[i], view.swh) {
				ep.lease = &list.Items[i]
			}
		}
		view.exclusive = append(view.exclusive, ep)
	}
	return nil
}

// exclusive lets at most one pod of the node pass each exclusive port, and
// only while the node holds the port's Lease: it takes or renews the Lease
// for the pod it picks, and says why every other pod is not ready there.
func (p *Publisher) exclusive(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) exclusiveOutcome {
	var out exclusiveOutcome
	for _, port := range view.exclusive {
		candidates := passingOn(verdicts, port.index)
		if len(candidates) == 0 {
			if port.lease != nil && swhv1alpha1.ExclusiveLeaseHolder(port.lease) == p.nodeName {
				out.release = append(out.release, port.lease)
			}
			continue
		}
		chosen, standby := p.pick(port, candidates)
		if standby.reason == "" {
			if old := publishedServing(view, port.name, chosen.Pod.Name); old != "" {
				// Two slice writes, not one, when the node's slices are
				// split (dual stack, or two target port numbers): the
				// node's other pod goes first.
				standby = cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveHandover,
					text: fmt.Sprintf("port %q is exclusive: pod %s of this node is withdrawn before pod %s is published", port.name, old, chosen.Pod.Name)}
			}
		}
		if standby.reason == "" {
			var st holding
			st, standby = p.hold(ctx, view, port, chosen)
			if standby.reason == "" {
				out.after(time.Until(st.renewAt))
				if out.validUntil.IsZero() || st.validUntil.Before(out.validUntil) {
					out.validUntil = st.validUntil
				}
				if ev, ok := p.heldEvent(view, port, st); ok {
					out.events = append(out.events, ev)
				}
				standby = cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveStandby,
					text: fmt.Sprintf("port %q is exclusive and pod %s on node %s holds it", port.name, chosen.Pod.Name, p.nodeName)}
				candidates = slices.DeleteFunc(candidates, func(c endpoints.PodVerdicts) bool { return c.Pod == chosen.Pod })
			}
		}
		if standby.reason != swhv1alpha1.ReasonExclusiveStandby {
			out.after(handoverRetry) // a handover, or a Lease to take again
		}
		for _, c := range candidates {
			c.Ports[port.index].Passing = false
			why.set(c.Pod.UID, port.name, standby)
		}
	}
	return out
}

// publishedServing returns a pod of the node other than pod that the
// node's slices publish ready or serving on port, "" when there is none.
func publishedServing(view *resourceView, port, pod string) string {
	published, _ := endpoints.Read(view.existing, endpoints.Options{}) // valid options: no error
	for _, e := range published {
		if e.Port == port && (e.Ready || e.Serving) && e.Pod != nil && e.Pod.Name != pod {
			return e.Pod.Name
		}
	}
	return ""
}

// passingOn returns the verdicts that pass port i (they share their
// Ports with verdicts, so a change there is the verdicts').
func passingOn(verdicts []endpoints.PodVerdicts, i int) []endpoints.PodVerdicts {
	var out []endpoints.PodVerdicts
	for _, v := range verdicts {
		if i < len(v.Ports) && v.Ports[i].Passing && v.Ports[i].Port != 0 {
			out = append(out, v)
		}
	}
	return out
}

// pick chooses the pod to publish among the node's passing pods: the one
// its Lease names if it still passes and is not terminating, else a pod
// not terminating, else the first by name. It returns a cause instead when
// the node cannot hold the port: no Lease yet, or another node holds it.
func (p *Publisher) pick(port exclusivePort, candidates []endpoints.PodVerdicts) (endpoints.PodVerdicts, cause) {
	if port.lease == nil {
		return endpoints.PodVerdicts{}, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveNoLease,
			text: fmt.Sprintf("port %q is exclusive and its Lease is not created yet", port.name)}
	}
	if holder := swhv1alpha1.ExclusiveLeaseHolder(port.lease); holder != "" && holder != p.nodeName {
		return endpoints.PodVerdicts{}, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveStandby,
			text: fmt.Sprintf("port %q is exclusive and pod %s on node %s holds it", port.name, port.lease.Annotations[swhv1alpha1.AnnotationHolderPod], holder)}
	}
	named := ""
	if swhv1alpha1.ExclusiveLeaseHolder(port.lease) == p.nodeName {
		named = port.lease.Annotations[swhv1alpha1.AnnotationHolderPod]
	}
	slices.SortFunc(candidates, func(a, b endpoints.PodVerdicts) int {
		if r := rank(a, named) - rank(b, named); r != 0 {
			return r
		}
		return strings.Compare(a.Pod.Name, b.Pod.Name)
	})
	return candidates[0], cause{}
}

func rank(v endpoints.PodVerdicts, named string) int {
	r := 0
	if v.Pod.DeletionTimestamp != nil {
		r += 2
	}
	if v.Pod.Name != named {
		r++
	}
	return r
}

// hold takes or renews the port's Lease for pod as needed and reports
// whether the node may publish it; when it may not, the cause says why.
func (p *Publisher) hold(ctx context.Context, view *resourceView, port exclusivePort, pod endpoints.PodVerdicts) (holding, cause) {
	key := client.ObjectKeyFromObject(port.lease)
	st := p.holds.get(key)
	if st.uid != port.lease.UID {
		st = holding{}
	}
	now := time.Now()
	// Memory alone never publishes when the cache shows the Lease free, or
	// with another duration (the controller freed it after an expiry, or
	// resized it): a write, which checks the resourceVersion, decides.
	// While the cache is behind the node's own take, that write conflicts
	// and the re-read finds the node holding it.
	trusted := st.lease != nil && swhv1alpha1.ExclusiveLeaseHolder(port.lease) == p.nodeName && swhv1alpha1.ExclusiveLeaseDuration(port.lease) == swhv1alpha1.ExclusiveLeaseDuration(st.lease)
	if !trusted || !now.Before(st.renewAt) || st.pod != pod.Pod.Name {
		base := port.lease
		if trusted {
			base = st.lease // the cache may not show the last renewal yet
		}
		written, took, start, err := p.writeLease(ctx, base, pod.Pod.Name)
		switch {
		case err == nil:
			duration := swhv1alpha1.ExclusiveLeaseDuration(written)
			st = holding{uid: written.UID, lease: written, pod: pod.Pod.Name,
				renewAt: start.Add(duration / renewFraction), validUntil: start.Add(time.Duration(float64(duration) * validityFraction)),
				handedOver: st.handedOver && !took}
			p.holds.set(key, st)
		case errors.Is(err, errHeldElsewhere):
			p.holds.set(key, holding{})
			return holding{}, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveStandby, text: err.Error()}
		default:
			if st.lease == nil || !now.Before(st.validUntil) {
				p.holds.set(key, holding{})
				return holding{}, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveNoLease,
					text: fmt.Sprintf("port %q is exclusive and its Lease could not be renewed: %v", port.name, err)}
			}
			// Still valid: publish on, and try again soon.
			st.renewAt = now.Add(handoverRetry)
			p.holds.set(key, st)
		}
	}
	if !time.Now().Before(st.validUntil) {
		p.holds.set(key, holding{})
		return holding{}, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveNoLease,
			text: fmt.Sprintf("port %q is exclusive and its Lease was not renewed in time", port.name)}
	}
	if !st.handedOver {
		other, err := p.otherNodeServing(ctx, view, port.name)
		if err != nil || other != "" {
			text := fmt.Sprintf("port %q is exclusive: this node holds its Lease and waits for %s to be withdrawn", port.name, other)
			if err != nil {
				text = fmt.Sprintf("port %q is exclusive: this node holds its Lease and cannot read the other nodes' endpoints: %v", port.name, err)
			}
			return st, cause{kind: causeStandby, reason: swhv1alpha1.ReasonExclusiveHandover, text: text}
		}
		st.handedOver = true
		p.holds.set(key, st)
	}
	return st, cause{}
}

// errHeldElsewhere: another node holds the Lease.
var errHeldElsewhere = errors.New("held by another node")

// writeLease makes the node the Lease's holder for pod, renewed now; on a
// conflict it reads the Lease again from the API server and tries once
// more if it is still free or the node's. It returns the Lease written,
// whether the write took it (the Lease it was based on was not the
// node's), and when the write started, which the Lease's validity counts
// from.
func (p *Publisher) writeLease(ctx context.Context, base *coordinationv1.Lease, pod string) (*coordinationv1.Lease, bool, time.Time, error) {
	for attempt := 0; ; attempt++ {
		if h := swhv1alpha1.ExclusiveLeaseHolder(base); h != "" && h != p.nodeName {
			return nil, false, time.Time{}, fmt.Errorf("port %q is exclusive and pod %s on node %s holds it: %w",
				base.Annotations[swhv1alpha1.AnnotationExclusivePort], base.Annotations[swhv1alpha1.AnnotationHolderPod], h, errHeldElsewhere)
		}
		took := swhv1alpha1.ExclusiveLeaseHolder(base) != p.nodeName
		l := base.DeepCopy()
		start := time.Now()
		now := metav1.NewMicroTime(start)
		if swhv1alpha1.ExclusiveLeaseHolder(l) != p.nodeName {
			node := p.nodeName
			l.Spec.HolderIdentity = &node
			l.Spec.AcquireTime = &now
			transitions := int32(1)
			if l.Spec.LeaseTransitions != nil {
				transitions = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &transitions
		}
		l.Spec.RenewTime = &now
		setAnnotation(l, swhv1alpha1.AnnotationHolderPod, pod)
		writeCtx, cancel := context.WithTimeout(ctx, leaseWriteTimeout(l))
		err := p.client.Update(writeCtx, l)
		cancel()
		if err == nil {
			return l, took, start, nil
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			return nil, false, time.Time{}, fmt.Errorf("writing Lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		fresh, err := p.readLease(ctx, l)
		if err != nil {
			return nil, false, time.Time{}, err
		}
		base = fresh
	}
}

// readLease reads a Lease from the API server, within a Lease write's
// time.
func (p *Publisher) readLease(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	readCtx, cancel := context.WithTimeout(ctx, leaseWriteTimeout(l))
	defer cancel()
	fresh := &coordinationv1.Lease{}
	if err := p.reader.Get(readCtx, client.ObjectKeyFromObject(l), fresh); err != nil {
		return nil, fmt.Errorf("reading Lease %s/%s again: %w", l.Namespace, l.Name, err)
	}
	return fresh, nil
}

// leaseWriteTimeout bounds a Lease write to a third of its duration: an
// answer later than that is worth nothing to a holder.
func leaseWriteTimeout(l *coordinationv1.Lease) time.Duration {
	return swhv1alpha1.ExclusiveLeaseDuration(l) / renewFraction
}

// otherNodeServing reads the resource's slices from the API server and
// returns an endpoint of another node that is ready or serving on port,
// "" when there is none. Every agent's slice counts, whatever node it
// names, so that no entry a kube-proxy would route to is overlooked.
func (p *Publisher) otherNodeServing(ctx context.Context, view *resourceView, port string) (string, error) {
	list, err := p.allSlices(ctx, view.key)
	if err != nil {
		return "", err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if name, _ := endpoints.SlicePort(s); name != port {
			continue
		}
		for _, ep := range s.Endpoints {
			node := ""
			if ep.NodeName != nil {
				node = *ep.NodeName
			}
			if node == p.nodeName && s.Labels[endpoints.DefaultNodeLabel] == endpoints.NodeLabelValue(p.nodeName) {
				continue
			}
			if ready, serving, _ := endpoints.Conditions(ep.Conditions); ready || serving {
				who := strings.Join(ep.Addresses, ",")
				if ep.TargetRef != nil {
					who = "pod " + ep.TargetRef.Name
				}
				return fmt.Sprintf("%s on node %s", who, node), nil
			}
		}
	}
	return "", nil
}

// heldEvent tells that the node took the port or moved it to another of
// its pods, once per change.
func (p *Publisher) heldEvent(view *resourceView, port exclusivePort, st holding) (event, bool) {
	if swhv1alpha1.ExclusiveLeaseHolder(port.lease) == p.nodeName && port.lease.Annotations[swhv1alpha1.AnnotationHolderPod] == st.pod {
		return event{}, false
	}
	related := &corev1.ObjectReference{Kind: "Lease", APIVersion: "coordination.k8s.io/v1", Namespace: view.key.Namespace, Name: port.lease.Name}
	return event{related: related, eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonExclusivePortHeld,
		action: p.numbered("HoldExclusivePort"),
		note:   fmt.Sprintf("pod %s on node %s holds exclusive port %q", st.pod, p.nodeName, port.name)}, true
}

// release frees the Leases of ports the node no longer publishes, once
// its slices say so; a Lease someone else changed meanwhile is left.
func (p *Publisher) release(ctx context.Context, leases []*coordinationv1.Lease) error {
	var errs []error
	for _, l := range leases {
		key := client.ObjectKeyFromObject(l)
		base := l
		if st := p.holds.get(key); st.lease != nil && st.uid == l.UID {
			base = st.lease
		}
		err := p.free(ctx, base)
		if apierrors.IsConflict(err) {
			// Changed since (resized, say): free it again if still ours.
			var fresh *coordinationv1.Lease
			if fresh, err = p.readLease(ctx, base); err == nil && swhv1alpha1.ExclusiveLeaseHolder(fresh) == p.nodeName {
				err = p.free(ctx, fresh)
			}
		}
		if err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("freeing Lease %s: %w", key, err))
			continue
		}
		p.holds.set(key, holding{})
	}
	return errors.Join(errs...)
}

// free writes the Lease with no holder.
func (p *Publisher) free(ctx context.Context, l *coordinationv1.Lease) error {
	free := swhv1alpha1.FreedExclusiveLease(l)
	writeCtx, cancel := context.WithTimeout(ctx, leaseWriteTimeout(free))
	defer cancel()
	return p.client.Update(writeCtx, free)
}

// allSlices reads every node's agent slices of a resource from the API
// server: the cache holds only the node's own, and a decision about the
// other nodes' endpoints must not rest on a stale copy.
// countedSlices is allSlices as the API server's watch cache has them
// (resourceVersion "0"): for the floors' counts, which tolerate a few
// milliseconds of lag (the marks settle races) and run every period while
// a floor is engaged, on every node, where a quorum read each would cost
// etcd as much.
func (p *Publisher) countedSlices(ctx context.Context, resource types.NamespacedName) (*discoveryv1.EndpointSliceList, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := p.reader.List(ctx, list, client.InNamespace(resource.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: resource.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}); err != nil {
		return nil, fmt.Errorf("listing the slices of %s: %w", resource, err)
	}
	return list, nil
}

func (p *Publisher) allSlices(ctx context.Context, resource types.NamespacedName) (*discoveryv1.EndpointSliceList, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := p.reader.List(ctx, list, client.InNamespace(resource.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: resource.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
	}); err != nil {
		return nil, fmt.Errorf("listing the slices of %s: %w", resource, err)
	}
	return list, nil
}
