package nodehealth

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Withdrawer is a controller-runtime reconciler of Node names: while a node
// is not Ready, it keeps every endpoint of the agents' slices of that node
// withdrawn.
type Withdrawer struct {
	// Client reads from the manager's cache (nodes, the agents' slices,
	// Services, resources) and writes slices.
	Client client.Client
	// APIReader reads the API server itself: a node the cache says is not
	// Ready is confirmed there before its endpoints are withdrawn. May be
	// nil (the cache is trusted).
	APIReader client.Reader
	// Recorder emits events on the resources.
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *Metrics

	mu       sync.Mutex
	notReady map[string]bool
	// observed holds, per node, the Ready transition whose withdrawal
	// delay was observed: a later write in the same not-Ready period (a
	// late agent write withdrawn again) is not a new delay.
	observed map[string]time.Time
}

// SetupWithManager registers the Withdrawer: a node whose readiness changes,
// or any change of an agent's slice on a node that is not Ready (a late
// write of its agent, say), wakes it up.
func (w *Withdrawer) SetupWithManager(mgr ctrl.Manager) error {
	w.init()
	sliceNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || !endpoints.ManagedBy(s, endpoints.Options{}) {
			return nil
		}
		for _, ep := range s.Endpoints {
			if ep.NodeName != nil && *ep.NodeName != "" {
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: *ep.NodeName}}}
			}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("nodehealth").
		For(&corev1.Node{}, builder.WithPredicates(readiness())).
		Watches(&discoveryv1.EndpointSlice{}, sliceNode).
		Complete(w)
}

func (w *Withdrawer) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.notReady == nil {
		w.notReady, w.observed = map[string]bool{}, map[string]time.Time{}
	}
}

// readiness lets through the node events that may need a withdrawal or end
// one: a node created or updated while not Ready, one that becomes Ready
// again (its state is forgotten), and deletions.
func readiness() predicate.Funcs {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return notReady(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return notReady(e.ObjectNew) || notReady(e.ObjectOld)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func notReady(obj client.Object) bool {
	n, ok := obj.(*corev1.Node)
	return ok && endpoints.NodeNotReady(n)
}

// Reconcile withdraws the endpoints of a node that is not Ready.
func (w *Withdrawer) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := w.Client.Get(ctx, req.NamespacedName, node); err != nil {
		if apierrors.IsNotFound(err) {
			// Its slices go with it (the reconciler collects them).
			w.track(req.Name, false)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", req.Name, err)
	}
	if !endpoints.NodeNotReady(node) {
		w.track(node.Name, false)
		return ctrl.Result{}, nil
	}
	w.track(node.Name, true)
	list := &discoveryv1.EndpointSliceList{}
	if err := w.Client.List(ctx, list, client.MatchingLabels{
		discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
		endpoints.DefaultNodeLabel: endpoints.NodeLabelValue(node.Name),
	}); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the slices of node %s: %w", node.Name, err)
	}
	since := readySince(node)
	withdrawn := map[types.NamespacedName]int{}
	confirmed := false
	var errs []error
	for i := range list.Items {
		s := list.Items[i].DeepCopy()
		resource := types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discoveryv1.LabelServiceName]}
		pnra, err := w.publishesNotReady(ctx, resource)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		serving := countServing(s)
		if !endpoints.Withdraw(s, pnra) {
			continue
		}
		if err := noteNodeNotReady(s, node.Name, since); err != nil {
			errs = append(errs, err)
			continue
		}
		if !since.IsZero() {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[corev1.EndpointsLastChangeTriggerTime] = since.UTC().Format(time.RFC3339)
		}
		if !confirmed {
			// The cache may lag the node (its watch reconnecting after an
			// API server restart): a node Ready again, whose agent has
			// just published its endpoints again, would be withdrawn once
			// more on the cache's word. One read, before the first write.
			ready, err := w.readyNow(ctx, node.Name)
			if err != nil {
				return ctrl.Result{}, err
			}
			if ready {
				return ctrl.Result{}, nil
			}
			confirmed = true
		}
		// An update with the slice's resourceVersion: if the agent wrote
		// in between, this one fails and the slice's event brings the
		// node back here with the agent's version.
		if err := w.Client.Update(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("withdrawing slice %s/%s: %w", s.Namespace, s.Name, err))
			continue
		}
		withdrawn[resource] += serving
		w.Metrics.withdrew(serving)
		if w.firstWithdrawal(node.Name, since) {
			w.Metrics.observeDelay(since)
		}
	}
	w.report(ctx, node, since, withdrawn)
	return ctrl.Result{}, errors.Join(errs...)
}

// readyNow reports whether the API server has the node Ready (or has it
// no more): its endpoints are then left to its agent.
func (w *Withdrawer) readyNow(ctx context.Context, name string) (bool, error) {
	if w.APIReader == nil {
		return false, nil
	}
	live := &corev1.Node{}
	if err := w.APIReader.Get(ctx, types.NamespacedName{Name: name}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("reading node %s from the API server: %w", name, err)
	}
	return !endpoints.NodeNotReady(live), nil
}

// publishesNotReady reports whether a resource's child Service publishes
// not-ready addresses (its endpoints then stay ready, as Build makes them).
func (w *Withdrawer) publishesNotReady(ctx context.Context, resource types.NamespacedName) (bool, error) {
	svc := &corev1.Service{}
	if err := w.Client.Get(ctx, resource, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading Service %s: %w", resource, err)
	}
	return svc.Spec.PublishNotReadyAddresses, nil
}

// report emits one event per resource whose endpoints were withdrawn and
// logs the withdrawal.
func (w *Withdrawer) report(ctx context.Context, node *corev1.Node, since time.Time, withdrawn map[types.NamespacedName]int) {
	if len(withdrawn) == 0 {
		return
	}
	status := "not Ready"
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason)
		}
	}
	names := make([]string, 0, len(withdrawn))
	total := 0
	related := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	for resource, n := range withdrawn {
		names = append(names, resource.String())
		total += n
		swh := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := w.Client.Get(ctx, resource, swh); err != nil {
			continue // gone: nothing to tell
		}
		w.Recorder.Eventf(swh, related, corev1.EventTypeWarning, swhv1alpha1.EventReasonNodeNotReady, "WithdrawEndpoints",
			"node %s is %s since %s: %d endpoints on it withdrawn until it is Ready and its agent publishes",
			node.Name, status, since.UTC().Format(time.RFC3339), n)
	}
	sort.Strings(names)
	log.FromContext(ctx).Info("endpoints of a node that is not Ready withdrawn", "node", node.Name,
		"status", status, "endpoints", total, "resources", strings.Join(names, ","), "afterCondition", time.Since(since).Round(time.Millisecond).String())
}

// track keeps the not-ready gauge, and forgets the withdrawal of a node
// that is Ready again or gone.
func (w *Withdrawer) track(node string, notReady bool) {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	if notReady {
		w.notReady[node] = true
	} else {
		delete(w.notReady, node)
		delete(w.observed, node)
	}
	w.Metrics.setNotReady(len(w.notReady))
}

// firstWithdrawal reports whether a write is the first withdrawal of the
// node since its Ready condition changed at since (zero: unknown, never
// observed), and remembers it.
func (w *Withdrawer) firstWithdrawal(node string, since time.Time) bool {
	if since.IsZero() {
		return false
	}
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	if seen, ok := w.observed[node]; ok && seen.Equal(since) {
		return false
	}
	w.observed[node] = since
	return true
}

// readySince is when the node's Ready condition last changed.
func readySince(node *corev1.Node) time.Time {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// countServing counts the endpoints of a slice that serve.
func countServing(s *discoveryv1.EndpointSlice) int {
	n := 0
	for _, ep := range s.Endpoints {
		if _, serving, _ := endpoints.Conditions(ep.Conditions); serving {
			n++
		}
	}
	return n
}
