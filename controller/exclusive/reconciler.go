package exclusive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Reconciler is a controller-runtime reconciler of ServiceWithHealthchecks
// keys; see the package documentation.
type Reconciler struct {
	// Client reads from the manager's cache (resources, the exclusive
	// ports' Leases, the agents' slices) and writes.
	Client client.Client
	// APIReader reads a Lease from the API server before a non-holder's
	// endpoint is withdrawn.
	APIReader client.Reader
	// Recorder emits events on the resources.
	Recorder events.EventRecorder
	// SkipNameValidation lets one process run several controllers (tests).
	SkipNameValidation bool

	mu sync.Mutex
	// seen holds, per Lease, the resourceVersion last seen and when the
	// controller first saw it: a Lease expires a duration after that.
	seen map[types.NamespacedName]sighting
}

// takenRetry is how soon a Lease name another owner holds is tried again.
const takenRetry = 10 * time.Second

type sighting struct {
	resourceVersion string
	at              time.Time
	// floor is a duration the Lease had before the controller resized
	// it: its holder counts with it until it writes again.
	floor time.Duration
}

// SetupWithManager registers the Reconciler: a resource, one of its Leases
// or one of the agents' slices of it wakes it up.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	byLeaseOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[swhv1alpha1.LabelExclusiveLease]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	bySliceService := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" || obj.GetLabels()[discoveryv1.LabelManagedBy] != endpoints.DefaultManagedBy {
			return nil
		}
		key := types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}
		swh := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := r.Client.Get(ctx, key, swh); err != nil || swh.Spec.Exclusive == nil {
			return nil
		}
		return []reconcile.Request{{NamespacedName: key}}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("exclusive").
		For(&swhv1alpha1.ServiceWithHealthchecks{}).
		Watches(&coordinationv1.Lease{}, byLeaseOwner).
		Watches(&discoveryv1.EndpointSlice{}, bySliceService)
	if r.SkipNameValidation {
		b = b.WithOptions(controller.Options{SkipNameValidation: &r.SkipNameValidation})
	}
	return b.Complete(r)
}

// Reconcile keeps a resource's Leases, frees an expired one after
// withdrawing its holder, and withdraws a non-holder's endpoint.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := r.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil // its Leases go with it
		}
		return ctrl.Result{}, fmt.Errorf("reading %s: %w", req.NamespacedName, err)
	}
	if !swh.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	leases, taken, err := r.syncLeases(ctx, swh)
	if err != nil {
		return ctrl.Result{}, err
	}
	slices := &discoveryv1.EndpointSliceList{}
	if len(leases) > 0 {
		if err := r.Client.List(ctx, slices, client.InNamespace(swh.Namespace), client.MatchingLabels{
			discoveryv1.LabelServiceName: swh.Name, discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
		}); err != nil {
			return ctrl.Result{}, fmt.Errorf("listing the slices of %s: %w", req.NamespacedName, err)
		}
	}
	var next time.Duration
	if taken {
		next = takenRetry
	}
	var errs []error
	for port, lease := range leases {
		wait, err := r.expire(ctx, swh, port, lease, slices.Items)
		if err != nil {
			errs = append(errs, err)
		}
		if wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
		if err := r.police(ctx, swh, port, lease, slices.Items); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// syncLeases creates the Leases of the resource's exclusive ports, keeps
// their duration, and deletes the Leases of ports no longer exclusive. It
// returns the Leases by port name.
func (r *Reconciler) syncLeases(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) (leases map[string]*coordinationv1.Lease, taken bool, err error) {
	list := &coordinationv1.LeaseList{}
	if err := r.Client.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{swhv1alpha1.LabelExclusiveLease: swh.Name}); err != nil {
		return nil, false, fmt.Errorf("listing the Leases of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	existing := map[string]*coordinationv1.Lease{}
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], swh) {
			existing[list.Items[i].Name] = &list.Items[i]
		}
	}
	duration := swh.Spec.Exclusive.LeaseDuration()
	out := map[string]*coordinationv1.Lease{}
	var errs []error
	for _, port := range swh.Spec.ExclusivePorts() {
		name := swhv1alpha1.ExclusiveLeaseName(swh.Name, port)
		lease, ok := existing[name]
		delete(existing, name)
		switch {
		case !ok:
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
				Namespace: swh.Namespace, Name: name,
				Labels:      map[string]string{swhv1alpha1.LabelExclusiveLease: swh.Name},
				Annotations: map[string]string{swhv1alpha1.AnnotationExclusivePort: swhv1alpha1.ExclusivePortKey(port)},
			}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &duration}}
			if err := controllerutil.SetControllerReference(swh, lease, r.Client.Scheme()); err != nil {
				return nil, false, fmt.Errorf("owning Lease %s: %w", name, err)
			}
			err := r.Client.Create(ctx, lease)
			if apierrors.IsAlreadyExists(err) && r.ownLease(ctx, swh, client.ObjectKeyFromObject(lease)) {
				continue // the resource's own, not in the cache yet: the next pass has it
			}
			if apierrors.IsAlreadyExists(err) {
				// Not in the list of its Leases: another owner's, or
				// one the cache does not show yet. Its deletion is no
				// event here (it has not the label): look again soon,
				// without the backoff of an error.
				r.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, swhv1alpha1.EventReasonExclusiveLeaseTaken, "CreateLease",
					"Lease %s/%s for exclusive port %q exists and is not %s's: the port cannot be held until it is deleted",
					swh.Namespace, name, swhv1alpha1.ExclusivePortKey(port), swh.Name)
				taken = true
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("creating Lease %s/%s: %w", swh.Namespace, name, err))
				continue
			}
		case lease.Spec.LeaseDurationSeconds == nil || *lease.Spec.LeaseDurationSeconds != duration:
			old := swhv1alpha1.ExclusiveLeaseDuration(lease)
			lease = lease.DeepCopy()
			lease.Spec.LeaseDurationSeconds = &duration
			if err := r.Client.Update(ctx, lease); err != nil {
				errs = append(errs, fmt.Errorf("updating the duration of Lease %s/%s: %w", swh.Namespace, name, err))
				continue
			}
			r.resized(client.ObjectKeyFromObject(lease), lease.ResourceVersion, old)
		}
		out[port.Name] = lease
	}
	for _, stale := range existing {
		// A port no longer exclusive: its agents publish it as any port.
		err := r.Client.Delete(ctx, stale, client.Preconditions{UID: &stale.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Lease %s/%s: %w", stale.Namespace, stale.Name, err))
		}
	}
	return out, taken, errors.Join(errs...)
}

// ownLease reports whether the API server holds the Lease key as the
// resource's own (the cache may not show it yet); false on a read error,
// which the next pass repeats.
func (r *Reconciler) ownLease(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, key types.NamespacedName) bool {
	lease := &coordinationv1.Lease{}
	return r.APIReader.Get(ctx, key, lease) == nil && metav1.IsControlledBy(lease, swh)
}

// expire frees a held Lease that has not changed for its whole duration,
// after withdrawing its holder's endpoints on the port; it returns how
// long until the Lease expires when it has not yet.
func (r *Reconciler) expire(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, port string, lease *coordinationv1.Lease, slices []discoveryv1.EndpointSlice) (time.Duration, error) {
	holder := swhv1alpha1.ExclusiveLeaseHolder(lease)
	key := client.ObjectKeyFromObject(lease)
	if holder == "" || lease.ResourceVersion == "" {
		return 0, nil
	}
	seen := r.sight(key, lease.ResourceVersion)
	duration := max(swhv1alpha1.ExclusiveLeaseDuration(lease), seen.floor)
	left := duration - time.Since(seen.at)
	if left > 0 {
		return left + 50*time.Millisecond, nil
	}
	// The cache's watch may be stalled: expire only what the API server
	// still holds unchanged.
	fresh := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, key, fresh); err != nil {
		return time.Second, fmt.Errorf("reading Lease %s: %w", key, err)
	}
	if fresh.ResourceVersion != lease.ResourceVersion {
		return 0, nil // changed: its event brings it back
	}
	withdrawn, err := r.withdraw(ctx, port, slices, func(node string) bool { return node == holder })
	if err != nil {
		return time.Second, fmt.Errorf("withdrawing the expired holder %s of %s/%s port %q: %w", holder, swh.Namespace, swh.Name, port, err)
	}
	pod := lease.Annotations[swhv1alpha1.AnnotationHolderPod]
	free := swhv1alpha1.FreedExclusiveLease(lease)
	if err := r.Client.Update(ctx, free); err != nil {
		if apierrors.IsConflict(err) {
			return 0, nil // renewed meanwhile: the Lease's event brings it back
		}
		return time.Second, fmt.Errorf("freeing the expired Lease %s: %w", key, err)
	}
	r.Recorder.Eventf(swh, &corev1.ObjectReference{Kind: "Lease", APIVersion: "coordination.k8s.io/v1", Namespace: lease.Namespace, Name: lease.Name},
		corev1.EventTypeWarning, swhv1alpha1.EventReasonExclusiveLeaseExpired, "FreeExclusivePort",
		"node %s did not renew exclusive port %q for %s (pod %s): %d endpoints on it withdrawn, the port is free", holder, port, duration, pod, withdrawn)
	log.FromContext(ctx).Info("expired exclusive port freed", "port", port, "holder", holder, "pod", pod, "withdrawn", withdrawn)
	return 0, nil
}

// police withdraws the endpoints that nodes other than the holder publish
// ready or serving on the port, once the API server confirms the Lease is
// not theirs.
func (r *Reconciler) police(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, port string, lease *coordinationv1.Lease, slices []discoveryv1.EndpointSlice) error {
	holder := swhv1alpha1.ExclusiveLeaseHolder(lease)
	suspects := map[string]bool{}
	for i := range slices {
		if node := serving(&slices[i], port); node != "" && node != holder {
			suspects[node] = true
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	fresh := &coordinationv1.Lease{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(lease), fresh); err != nil {
		return fmt.Errorf("reading Lease %s/%s: %w", lease.Namespace, lease.Name, err)
	}
	holder = swhv1alpha1.ExclusiveLeaseHolder(fresh)
	withdrawn, err := r.withdraw(ctx, port, slices, func(node string) bool { return suspects[node] && node != holder })
	if withdrawn > 0 {
		r.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, swhv1alpha1.EventReasonExclusiveEndpointWithdrawn, "WithdrawEndpoints",
			"exclusive port %q: %d endpoints of nodes that do not hold it (holder: %q) withdrawn", port, withdrawn, holder)
	}
	return err
}

// serving returns the node of a slice of port that publishes an endpoint
// ready or serving, "" when it publishes none.
func serving(s *discoveryv1.EndpointSlice, port string) string {
	if name, _ := endpoints.SlicePort(s); name != port {
		return ""
	}
	for _, ep := range s.Endpoints {
		if ready, serving, _ := endpoints.Conditions(ep.Conditions); ready || serving {
			if ep.NodeName != nil && *ep.NodeName != "" {
				return *ep.NodeName
			}
			return s.Labels[endpoints.DefaultNodeLabel]
		}
	}
	return ""
}

// withdraw marks not ready and not serving every endpoint of the slices of
// port whose node is picked, each with the resourceVersion it was read at,
// and returns how many it withdrew.
func (r *Reconciler) withdraw(ctx context.Context, port string, slices []discoveryv1.EndpointSlice, pick func(node string) bool) (int, error) {
	n := 0
	var errs []error
	for i := range slices {
		node := serving(&slices[i], port)
		if node == "" || !pick(node) {
			continue
		}
		s := slices[i].DeepCopy()
		count := 0
		for _, ep := range s.Endpoints {
			if ready, serving, _ := endpoints.Conditions(ep.Conditions); ready || serving {
				count++
			}
		}
		if !endpoints.Withdraw(s, false) {
			continue
		}
		if err := r.Client.Update(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("withdrawing slice %s/%s: %w", s.Namespace, s.Name, err))
			continue
		}
		n += count
	}
	return n, errors.Join(errs...)
}

// sight returns when the controller first saw the Lease at resourceVersion
// rv.
func (r *Reconciler) sight(key types.NamespacedName, rv string) sighting {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]sighting{}
	}
	s, ok := r.seen[key]
	if !ok || s.resourceVersion != rv {
		s = sighting{resourceVersion: rv, at: time.Now()}
		r.seen[key] = s
	}
	return s
}

// resized remembers that the controller changed a Lease's duration from
// old: until its holder writes again, it keeps counting with the longer.
func (r *Reconciler) resized(key types.NamespacedName, rv string, old time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[types.NamespacedName]sighting{}
	}
	prev := r.seen[key]
	at := prev.at
	if at.IsZero() {
		at = time.Now()
	}
	r.seen[key] = sighting{resourceVersion: rv, at: at, floor: max(old, prev.floor)}
}

// forget drops what the controller saw of a deleted resource's Leases.
func (r *Reconciler) forget(resource types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prefix := "swh." + resource.Name + "."
	for key := range r.seen {
		if key.Namespace == resource.Namespace && strings.HasPrefix(key.Name, prefix) {
			delete(r.seen, key)
		}
	}
}
