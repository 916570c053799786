package publisher

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

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
	// exclusive are the resource's exclusive ports and their Leases.
	exclusive []exclusivePort
	// closings are the pods whose sessions the write asks to end.
	closings []closing
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
	if err := p.readExclusive(ctx, view); err != nil {
		return nil, err
	}
	return view, nil
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

// ownSlices lists this node's slices of the resource from the cache, or
// from the API server while the cache lags behind the agent's own writes
// (writtenSlices).
func (p *Publisher) ownSlices(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) ([]discoveryv1.EndpointSlice, error) {
	// The live list asks for what the cache holds (app.go selects the
	// agents' slices of this node), or a foreign slice labelled like ours
	// would be expected in the cache for ever.
	mine := []client.ListOption{client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
		endpoints.DefaultNodeLabel:   endpoints.NodeLabelValue(p.nodeName),
	}}
	list := &discoveryv1.EndpointSliceList{}
	if err := p.client.List(ctx, list, mine...); err != nil {
		return nil, fmt.Errorf("listing the slices of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	key := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	if !p.written.lagging(key, list.Items) {
		return list.Items, nil
	}
	live := &discoveryv1.EndpointSliceList{}
	if err := p.reader.List(ctx, live, mine...); err != nil {
		return nil, fmt.Errorf("listing the slices of %s/%s from the API server (the cache lags): %w", swh.Namespace, swh.Name, err)
	}
	p.written.readLive(key, live.Items)
	p.metrics.liveSliceRead()
	return live.Items, nil
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

func controlledBy(svc *corev1.Service, swh *swhv1alpha1.ServiceWithHealthchecks) bool {
	ref := metav1.GetControllerOf(svc)
	return ref != nil && ref.UID == swh.UID
}
