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
// New builds one; SetupWithManager registers it.
type Publisher struct {
	// client reads from the manager's cache (pods and slices of this node
	// only) and writes slices.
	client client.Client
	// reader reads from the API server, for slices the cache does not hold.
	reader client.Reader
	// recorder emits events on the resources.
	recorder events.EventRecorder
	// metrics may be nil.
	metrics *Metrics
	// nodeName is the exact name of this node's Node object.
	nodeName string
	// skipNameValidation is Options.SkipNameValidation, for SetupWithManager.
	skipNameValidation bool

	// takenSliceNames are slice names a create found held by another slice.
	takenSliceNames *takenNames
	scheduler       *probes.Scheduler[targetKey]
	// targets holds every probe target of the node and its verdict.
	targets *targetTable
	// probers builds a target's prober from its probe spec.
	probers *proberFactory
	// told remembers what events told, so that a change is told once.
	told eventMemory
	// verdictFlips carries verdict flips to the controller's queue.
	verdictFlips *flipQueue
	// gateWritten holds readiness gate writes the cache may not show yet.
	gateWritten gateMemory
}

// notify asks for a reconcile of a resource after a verdict flipped.
func (p *Publisher) notify(key types.NamespacedName) { p.verdictFlips.add(key) }

// Reconcile brings the targets of one resource in line with its spec and
// the pods of the node, then writes the slices that changed: read what
// the resource, its Service, the node, the pods and the slices are; sync
// the probe targets; turn the probes' state into verdicts per pod and
// port; plan and write the slices; emit, in one place, the events the
// stages returned; sync the readiness gates.
func (p *Publisher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	view, err := p.read(ctx, req.NamespacedName)
	if err != nil || view == nil {
		return ctrl.Result{}, err
	}
	targetsErr := p.syncTargets(targetSet{
		resource: req.NamespacedName, swh: view.swh, pods: view.pods, grouping: view.grouping,
		portNames: view.portNames, existing: view.existing,
		adopted: func() []discoveryv1.EndpointSlice { return p.adoptedSlices(ctx, view.swh) },
	})
	evs := p.tlsConflictEvents(view.swh)
	verdicts, why := p.verdicts(view)
	published, publishErr := p.publish(ctx, view, verdicts, why)
	p.emit(ctx, view.swh, append(evs, published...))
	// The gates do not wait on the slices: a refused slice write must not
	// hold a rollout's pods back.
	if err := errors.Join(publishErr, p.syncGates(ctx, view)); err != nil {
		return ctrl.Result{}, errors.Join(err, targetsErr)
	}
	// The targets that could start are published; the others are retried.
	return ctrl.Result{}, targetsErr
}

// forget stops a resource's targets and drops everything the publisher
// keeps about it: what its events told, the slice names found taken and
// the tlsMode conflicts reported. Both ways out of a reconcile with nothing
// to publish (the resource gone, its Service not there or not its own) end
// here, so that none keeps what the other drops.
func (p *Publisher) forget(key types.NamespacedName) {
	p.removeTargets(key, nil)
	p.takenSliceNames.forget(key)
	p.probers.conflicts.forget(key)
}

// resourceView is what one reconcile reads of a resource and its world.
type resourceView struct {
	key      types.NamespacedName
	swh      *swhv1alpha1.ServiceWithHealthchecks
	node     *corev1.Node
	pods     []*corev1.Pod
	existing []discoveryv1.EndpointSlice
	// probes are the resource's probes, labels how messages name them.
	probes    []swhv1alpha1.Probe
	labels    []string
	service   endpoints.Service
	grouping  *endpoints.Grouping
	portNames []string
}

// read gathers the view of a resource. It returns nil, and nothing to do,
// when the resource is gone or has no child Service of its own yet (its
// targets are then stopped).
func (p *Publisher) read(ctx context.Context, key types.NamespacedName) (*resourceView, error) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := p.client.Get(ctx, key, swh); err != nil {
		if apierrors.IsNotFound(err) {
			// The garbage collector removes the slices with the Service.
			p.forget(key)
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", key, err)
	}
	svc := &corev1.Service{}
	if err := p.client.Get(ctx, key, svc); err != nil && !apierrors.IsNotFound(err) {
		// A failed read says nothing about the Service: keep probing.
		return nil, fmt.Errorf("reading the Service of %s: %w", key, err)
	} else if err != nil || !controlledBy(svc, swh) {
		// No child Service yet (or not ours): slices need it as owner.
		// Its creation brings the resource back.
		p.forget(key)
		return nil, nil
	}
	view := &resourceView{key: key, swh: swh, node: &corev1.Node{}, service: endpoints.ServiceFrom(svc)}
	if err := p.client.Get(ctx, types.NamespacedName{Name: p.nodeName}, view.node); err != nil {
		return nil, fmt.Errorf("reading node %s: %w", p.nodeName, err)
	}
	var err error
	if view.pods, err = p.selectedPods(ctx, swh); err != nil {
		return nil, err
	}
	if view.existing, err = p.ownSlices(ctx, swh); err != nil {
		return nil, err
	}
	if view.existing, err = p.withHolders(ctx, key, view.existing); err != nil {
		return nil, err
	}
	if swh.Spec.Healthcheck != nil {
		view.probes = swh.Spec.Healthcheck.Probes
	}
	targetPorts := make([]intstr.IntOrString, len(view.probes))
	view.labels = make([]string, len(view.probes))
	for i := range view.probes {
		targetPorts[i] = view.probes[i].TargetPort()
		view.labels[i] = view.probes[i].Describe()
	}
	if view.grouping, err = endpoints.NewGrouping(view.service.Ports, targetPorts); err != nil {
		return nil, fmt.Errorf("grouping the probes of %s: %w", key, err)
	}
	view.portNames = make([]string, len(view.service.Ports))
	for i, port := range view.service.Ports {
		view.portNames[i] = port.Name
	}
	return view, nil
}

// verdicts decides, per pod and port, whether the pod passes, and why not.
// On a node that is not Ready, nothing passes: the controller withdraws the
// node's endpoints when its agent cannot, and an agent that can must
// publish the same, or the two would undo each other.
func (p *Publisher) verdicts(view *resourceView) ([]endpoints.PodVerdicts, notReadyReasons) {
	verdicts := make([]endpoints.PodVerdicts, 0, len(view.pods))
	why := notReadyReasons{}
	nodeNotReady := endpoints.NodeNotReady(view.node)
	for _, pod := range view.pods {
		passing, last := p.targets.passing(view.key, pod.UID, len(view.probes))
		gates := view.grouping.Gates(pod)
		ports := make([]endpoints.PortVerdict, len(gates))
		for i, gate := range gates {
			ports[i] = gate.Verdict(passing, endpoints.PodReady(pod))
			switch {
			case nodeNotReady && ports[i].Port != 0:
				ports[i].Passing = false
				why.set(pod.UID, view.portNames[i], nodeNotReadyCause(p.nodeName))
			case !ports[i].Passing || pod.DeletionTimestamp != nil:
				why.set(pod.UID, view.portNames[i], explainNotReady(pod, gate, passing, last, view.labels))
			}
		}
		verdicts = append(verdicts, endpoints.PodVerdicts{Pod: pod, Ports: ports})
	}
	return verdicts, why
}

// publish builds the desired slices, with their reasons, plans the writes
// against the existing ones and makes them; it returns the events that
// tell the collisions and the transitions, also without a write (a reason
// can change while the slices do not).
func (p *Publisher) publish(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) ([]event, error) {
	desired, err := endpoints.Build(view.service, endpoints.NodeFrom(view.node), verdicts, endpoints.Options{})
	if err != nil {
		return nil, fmt.Errorf("building the slices of %s: %w", view.key, err)
	}
	if err := annotateReasons(desired, view.existing, why, time.Now()); err != nil {
		return nil, fmt.Errorf("the reasons of %s: %w", view.key, err)
	}
	scope := endpoints.Scope{Namespace: view.key.Namespace, Service: view.key.Name, Node: p.nodeName}
	changes, err := endpoints.Plan(scope, view.existing, desired, planOptions())
	if err != nil {
		return nil, fmt.Errorf("planning the slices of %s: %w", view.key, err)
	}
	evs := p.collisionEvents(view.swh, changes.Collisions)
	changedAt, hadChange := p.targets.takeChanged(view.key)
	if !changes.Empty() {
		trigger := time.Now()
		if hadChange {
			trigger = changedAt
		}
		if err := p.write(ctx, view.key, changes, trigger); err != nil {
			if hadChange {
				// The retry's writes carry the same trigger and delay.
				p.targets.restoreChanged(view.key, changedAt)
			}
			return evs, err
		}
		if hadChange {
			p.metrics.observeDelay(time.Since(changedAt))
		}
	}
	return append(evs, p.endpointEvents(view.swh, view.existing, desired, why)...), nil
}

// selectedPods lists the pods of the node the resource selects that can be
// published: not finished, with an IP.
func (p *Publisher) selectedPods(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) ([]*corev1.Pod, error) {
	if len(swh.Spec.Selector) == 0 {
		return nil, nil
	}
	list := &corev1.PodList{}
	if err := p.client.List(ctx, list, client.InNamespace(swh.Namespace),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(swh.Spec.Selector)}); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.Spec.NodeName != p.nodeName || pod.Status.PodIP == "" ||
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
	if err := p.client.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		endpoints.DefaultNodeLabel:   endpoints.NodeLabelValue(p.nodeName),
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
		err := retry(ctx, func() error { return p.client.Create(ctx, s) })
		p.metrics.sliceWrite("create", err)
		if apierrors.IsAlreadyExists(err) {
			p.takenSliceNames.add(resource, s.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("creating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	for i := range changes.Update {
		s := &changes.Update[i]
		setAnnotation(s, corev1.EndpointsLastChangeTriggerTime, stamp)
		err := retry(ctx, func() error { return p.client.Update(ctx, s) })
		p.metrics.sliceWrite("update", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("updating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	for i := range changes.Delete {
		s := &changes.Delete[i]
		err := retry(ctx, func() error {
			return p.client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		p.metrics.sliceWrite("delete", err)
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
