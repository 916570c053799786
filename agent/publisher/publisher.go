package publisher

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// planOptions make the reasons annotation part of what Plan compares.
func planOptions() endpoints.Options {
	return endpoints.Options{OwnedAnnotations: []string{swhv1alpha1.AnnotationEndpointReasons}}
}

// Publisher probes the pods of one node and publishes their EndpointSlices.
// It is a controller-runtime reconciler of ServiceWithHealthchecks keys.
type Publisher struct {
	// Client reads from the manager's cache (pods and slices of this node
	// only) and writes slices.
	Client client.Client
	// NodeName is the exact name of this node's Node object.
	NodeName string
	// Recorder emits events on the resources.
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *Metrics

	// reader reads from the API server, for slices the cache does not hold.
	reader    client.Reader
	taken     *takenNames
	scheduler *probes.Scheduler[targetKey]
	state     *state
	factory   *proberFactory
	// book remembers what events told.
	book eventBook
	// notify asks for a reconcile of a resource after a verdict flipped.
	notify func(types.NamespacedName)
}

// Reconcile brings the targets of one resource in line with its spec and
// the pods of the node, then writes the slices that changed.
func (p *Publisher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := p.Client.Get(ctx, req.NamespacedName, swh); err != nil {
		if apierrors.IsNotFound(err) {
			// The garbage collector removes the slices with the Service.
			p.taken.forget(req.NamespacedName)
			p.factory.conflicts.forget(req.NamespacedName)
			p.removeTargets(req.NamespacedName, nil)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading %s: %w", req.NamespacedName, err)
	}
	svc := &corev1.Service{}
	if err := p.Client.Get(ctx, req.NamespacedName, svc); err != nil && !apierrors.IsNotFound(err) {
		// A failed read says nothing about the Service: keep probing.
		return ctrl.Result{}, fmt.Errorf("reading the Service of %s: %w", req.NamespacedName, err)
	} else if err != nil || !controlledBy(svc, swh) {
		// No child Service yet (or not ours): slices need it as owner.
		// Its creation brings the resource back.
		p.removeTargets(req.NamespacedName, nil)
		return ctrl.Result{}, nil
	}
	node := &corev1.Node{}
	if err := p.Client.Get(ctx, types.NamespacedName{Name: p.NodeName}, node); err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node %s: %w", p.NodeName, err)
	}
	pods, err := p.selectedPods(ctx, swh)
	if err != nil {
		return ctrl.Result{}, err
	}
	existing, err := p.ownSlices(ctx, swh)
	if err != nil {
		return ctrl.Result{}, err
	}
	if existing, err = p.withHolders(ctx, req.NamespacedName, existing); err != nil {
		return ctrl.Result{}, err
	}
	var probeSpecs []swhv1alpha1.Probe
	if swh.Spec.Healthcheck != nil {
		probeSpecs = swh.Spec.Healthcheck.Probes
	}
	targetPorts := make([]intstr.IntOrString, len(probeSpecs))
	for i := range probeSpecs {
		targetPorts[i] = probeTargetPort(&probeSpecs[i])
	}
	service := endpoints.ServiceFrom(svc)
	grouping, err := endpoints.NewGrouping(service.Ports, targetPorts)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("grouping the probes of %s: %w", req.NamespacedName, err)
	}
	portNames := make([]string, len(service.Ports))
	for i, port := range service.Ports {
		portNames[i] = port.Name
	}
	adopted := func() []discoveryv1.EndpointSlice { return p.adoptedSlices(ctx, swh) }
	p.syncTargets(req.NamespacedName, swh, pods, grouping, portNames, existing, adopted)
	p.reportTLSConflicts(ctx, swh)

	probeLabels := make([]string, len(probeSpecs))
	for i := range probeSpecs {
		probeLabels[i] = fmt.Sprintf("%s probe on %s", probeSpecs[i].Mode, targetPorts[i].String())
	}
	verdicts := make([]endpoints.PodVerdicts, 0, len(pods))
	why := notReadyReasons{}
	// On a node that is not Ready, nothing passes: the controller
	// withdraws the node's endpoints when its agent cannot, and an agent
	// that can must publish the same, or the two would undo each other.
	nodeNotReady := endpoints.NodeNotReady(node)
	for _, pod := range pods {
		passing, last := p.state.passing(req.NamespacedName, pod.UID, len(probeSpecs))
		gates := grouping.Gates(pod)
		ports := make([]endpoints.PortVerdict, len(gates))
		for i, gate := range gates {
			ports[i] = gate.Verdict(passing, endpoints.PodReady(pod))
			switch {
			case nodeNotReady && ports[i].Port != 0:
				ports[i].Passing = false
				why.set(pod.UID, portNames[i], nodeNotReadyCause(p.NodeName))
			case !ports[i].Passing || pod.DeletionTimestamp != nil:
				why.set(pod.UID, portNames[i], explainNotReady(pod, gate, passing, last, probeLabels))
			}
		}
		verdicts = append(verdicts, endpoints.PodVerdicts{Pod: pod, Ports: ports})
	}
	desired, err := endpoints.Build(service, endpoints.NodeFrom(node), verdicts, endpoints.Options{})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("building the slices of %s: %w", req.NamespacedName, err)
	}
	if err := annotateReasons(desired, existing, why, time.Now()); err != nil {
		return ctrl.Result{}, fmt.Errorf("the reasons of %s: %w", req.NamespacedName, err)
	}
	scope := endpoints.Scope{Namespace: swh.Namespace, Service: swh.Name, Node: p.NodeName}
	changes, err := endpoints.Plan(scope, existing, desired, planOptions())
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("planning the slices of %s: %w", req.NamespacedName, err)
	}
	p.reportCollisions(swh, changes.Collisions)
	changedAt, hadChange := p.state.takeChanged(req.NamespacedName)
	if !changes.Empty() {
		trigger := time.Now()
		if hadChange {
			trigger = changedAt
		}
		if err := p.write(ctx, req.NamespacedName, changes, trigger); err != nil {
			if hadChange {
				// The retry's writes carry the same trigger and delay.
				p.state.restoreChanged(req.NamespacedName, changedAt)
			}
			return ctrl.Result{}, err
		}
		if hadChange {
			p.Metrics.observeDelay(time.Since(changedAt))
		}
	}
	// Also without a write: a reason can change while the slices do not.
	p.reportTransitions(ctx, swh, existing, desired, why)
	return ctrl.Result{}, nil
}

// selectedPods lists the pods of the node the resource selects that can be
// published: not finished, with an IP.
func (p *Publisher) selectedPods(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) ([]*corev1.Pod, error) {
	if len(swh.Spec.Selector) == 0 {
		return nil, nil
	}
	list := &corev1.PodList{}
	if err := p.Client.List(ctx, list, client.InNamespace(swh.Namespace),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(swh.Spec.Selector)}); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != p.NodeName || pod.Status.PodIP == "" ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, pod)
	}
	return out, nil
}

// ownSlices lists this node's slices of the resource from the cache.
func (p *Publisher) ownSlices(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) ([]discoveryv1.EndpointSlice, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := p.Client.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		endpoints.DefaultNodeLabel:   endpoints.NodeLabelValue(p.NodeName),
	}); err != nil {
		return nil, fmt.Errorf("listing the slices of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	return list.Items, nil
}

// adoptedSlices returns the built-in EndpointSlice controller's slices of a
// resource that adopts an existing Service (the controller deletes them once
// the agents publish), read from the API server since the cache holds only
// the agents' slices. Without the annotation, or on error, it returns none:
// targets then start failed, as usual.
func (p *Publisher) adoptedSlices(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) []discoveryv1.EndpointSlice {
	if swh.Annotations[swhv1alpha1.AnnotationAdopt] != "true" {
		return nil
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := p.reader.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   swhv1alpha1.BuiltinEndpointSliceManager,
	}); err != nil {
		log.FromContext(ctx).Error(err, "listing the built-in slices of an adopted Service; its pods start failed")
		return nil
	}
	return list.Items
}

// write applies the plan: creates, then updates, then deletes, so traffic
// moves to new slices before old ones go. A conflict or a name taken in the
// meantime returns an error: the requeue plans again from fresh data, with
// the holder of a taken name read in (see withHolders).
func (p *Publisher) write(ctx context.Context, resource types.NamespacedName, changes endpoints.Changes, trigger time.Time) error {
	stamp := trigger.UTC().Format(time.RFC3339)
	var errs []error
	for i := range changes.Create {
		s := &changes.Create[i]
		setAnnotation(s, corev1.EndpointsLastChangeTriggerTime, stamp)
		err := retry(ctx, func() error { return p.Client.Create(ctx, s) })
		p.Metrics.sliceWrite("create", err)
		if apierrors.IsAlreadyExists(err) {
			p.taken.add(resource, s.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("creating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	for i := range changes.Update {
		s := &changes.Update[i]
		setAnnotation(s, corev1.EndpointsLastChangeTriggerTime, stamp)
		err := retry(ctx, func() error { return p.Client.Update(ctx, s) })
		p.Metrics.sliceWrite("update", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("updating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	for i := range changes.Delete {
		s := &changes.Delete[i]
		err := retry(ctx, func() error {
			return p.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		p.Metrics.sliceWrite("delete", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.FromContext(ctx).V(1).Info("slice writes failed; planning again", "error", err.Error())
		return err
	}
	return nil
}

// retry runs a write again with exponential backoff while the API server
// fails in a way that may pass (timeouts, throttling, unavailability), for a
// few seconds at most. Answers that will not change by retrying (a
// conflict, a taken name, a refusal) return at once: the reconcile then
// plans again from fresh data. Probing goes on meanwhile: it runs on the
// scheduler's goroutines, not here.
func retry(ctx context.Context, write func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.MaxInterval = time.Second
	b.MaxElapsedTime = 5 * time.Second
	return backoff.Retry(func() error {
		err := write()
		if err == nil || !transient(err) {
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(b, ctx))
}

func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func setAnnotation(obj metav1.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}

func controlledBy(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) bool {
	ref := metav1.GetControllerOf(svc)
	return ref != nil && ref.UID == swh.UID
}

func probeTargetPort(p *swhv1alpha1.Probe) intstr.IntOrString {
	switch {
	case p.TCP != nil:
		return p.TCP.TargetPort
	case p.HTTP != nil:
		return p.HTTP.TargetPort
	case p.PostgreSQL != nil:
		return p.PostgreSQL.TargetPort
	}
	return intstr.IntOrString{}
}
