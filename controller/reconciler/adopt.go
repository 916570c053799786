package reconciler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

const (
	// skipMirrorLabel marks Endpoints the built-in Endpoints controller
	// manages (the mirroring controller skips them).
	skipMirrorLabel = "endpointslice.kubernetes.io/skip-mirror"
	// endpointsManagedByLabel and endpointsController also mark them
	// (Kubernetes 1.33 and later); the label is kept when the Service
	// loses its selector, skip-mirror may not be.
	endpointsManagedByLabel = "endpoints.kubernetes.io/managed-by"
	endpointsController     = "endpoint-controller"
	// mirroringManager is the managed-by value of the slices the
	// EndpointSlice mirroring controller copies from the Endpoints of a
	// Service without a selector.
	mirroringManager = "endpointslicemirroring-controller.k8s.io"
)

// removeSelector drops the selector of a Service being adopted. The
// built-in controller then stops updating its slices but leaves them in
// place, so traffic keeps flowing to the old endpoints until the agents
// publish theirs (finishAdoption removes the old ones then).
func (r *Reconciler) removeSelector(ctx context.Context, svc *corev1.Service) error {
	if len(svc.Spec.Selector) == 0 {
		return nil
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"selector":null}}`))
	if err := r.Client.Patch(ctx, svc, patch, client.FieldOwner(r.FieldOwner)); err != nil {
		r.Metrics.serviceWrite("error")
		return fmt.Errorf("removing the selector of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	r.Metrics.serviceWrite("ok")
	log.FromContext(ctx).Info("removed the selector of the adopted Service")
	return nil
}

// finishAdoption deletes the built-in controller's slices (and Endpoints)
// of an adopted Service once agent slices with a ready endpoint exist, or at
// once when the resource selects no pod at all, and then reports the
// Service as synced.
func (r *Reconciler) finishAdoption(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, agentSlices []discoveryv1.EndpointSlice, cond metav1.Condition) (metav1.Condition, error) {
	ready := false
	published, _ := endpoints.Read(agentSlices, endpoints.Options{}) // valid options: no error
	for _, p := range published {
		ready = ready || p.Ready
	}
	if !ready {
		pods := &corev1.PodList{}
		if err := r.APIReader.List(ctx, pods, client.InNamespace(swh.Namespace),
			client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(swh.Spec.Selector)}, client.Limit(1)); err != nil {
			return cond, fmt.Errorf("listing the pods of %s/%s: %w", swh.Namespace, swh.Name, err)
		}
		if len(pods.Items) > 0 {
			return cond, nil // wait: the slices' events bring the resource back
		}
	}
	n, err := r.deleteBuiltin(ctx, swh)
	if err != nil {
		return cond, err
	}
	log.FromContext(ctx).Info("adoption finished: removed the built-in controller's slices", "slices", n)
	cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonSynced
	cond.Message = fmt.Sprintf("Service %s adopted; %d built-in EndpointSlices removed", swh.Name, n)
	return cond, nil
}

// deleteBuiltin deletes what Kubernetes published for the resource's
// Service while it had a selector: the EndpointSlice controller's slices,
// the Endpoints the Endpoints controller left, and the slices the
// mirroring controller copies from those Endpoints once the selector is
// gone. It returns how many slices it deleted.
func (r *Reconciler) deleteBuiltin(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks) (int, error) {
	//lint:ignore SA1019 the deprecated object the built-in controller also left behind
	ep := &corev1.Endpoints{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(swh), ep)
	if client.IgnoreNotFound(err) != nil {
		return 0, fmt.Errorf("reading the Endpoints of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	// The Endpoints first: the mirroring controller would copy them again.
	builtinEndpoints := err == nil && (ep.Labels[skipMirrorLabel] == "true" || ep.Labels[endpointsManagedByLabel] == endpointsController)
	if builtinEndpoints {
		// Preconditions: never an Endpoints object replaced since it was read.
		if err := r.Client.Delete(ctx, ep, client.Preconditions{UID: &ep.UID, ResourceVersion: &ep.ResourceVersion}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("deleting the Endpoints of %s/%s: %w", swh.Namespace, swh.Name, err)
		}
	}
	managers := []string{swhv1alpha1.BuiltinEndpointSliceManager}
	if builtinEndpoints || apierrors.IsNotFound(err) {
		managers = append(managers, mirroringManager)
	}
	deleted := 0
	for _, manager := range managers {
		old := &discoveryv1.EndpointSliceList{}
		if err := r.APIReader.List(ctx, old, client.InNamespace(swh.Namespace), client.MatchingLabels{
			discoveryv1.LabelServiceName: swh.Name,
			discoveryv1.LabelManagedBy:   manager,
		}); err != nil {
			return deleted, fmt.Errorf("listing the built-in slices of %s/%s: %w", swh.Namespace, swh.Name, err)
		}
		for i := range old.Items {
			if err := r.Client.Delete(ctx, &old.Items[i]); client.IgnoreNotFound(err) != nil {
				return deleted, fmt.Errorf("deleting the built-in slice %s: %w", old.Items[i].Name, err)
			}
			r.Metrics.sliceCollected()
			deleted++
		}
	}
	return deleted, nil
}

// finishSelectorRemoval deletes the built-in controller's slices of an owned
// Service whose selector someone added and the controller removed: they
// publish pods by readiness, bypassing the probes, so they go at once, with
// no wait for the agents (whose slices exist: the Service was theirs). The
// built-in controller may still write one from the Service it last saw, so
// the deletion runs again builtinRecheck after the removal; it returns how
// long to wait for that.
func (r *Reconciler) finishSelectorRemoval(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, cond metav1.Condition) (metav1.Condition, time.Duration, error) {
	n, err := r.deleteBuiltin(ctx, swh)
	if err != nil {
		return cond, 0, err
	}
	if n > 0 {
		log.FromContext(ctx).Info("removed the built-in controller's slices of a selector someone added", "slices", n)
	}
	since := time.Duration(0)
	if !cond.LastTransitionTime.IsZero() {
		since = time.Since(cond.LastTransitionTime.Time)
	}
	if since < builtinRecheck {
		if cond.LastTransitionTime.IsZero() { // the pass that removed the selector
			r.later.after(client.ObjectKeyFromObject(swh), builtinRecheck)
		}
		return cond, builtinRecheck - since, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonSynced
	cond.Message = fmt.Sprintf("Service %s matches the spec", swh.Name)
	return cond, 0, nil
}

// wasForbidden reports whether the status says a write was forbidden.
func wasForbidden(swh *swhv1alpha1.ServiceWithHealthchecks) bool {
	prev := meta.FindStatusCondition(swh.Status.Conditions, swhv1alpha1.ConditionServiceSynced)
	return prev != nil && prev.Reason == swhv1alpha1.ReasonForbidden
}

// resumeAfterForbidden looks, once the Service is in line again after a
// forbidden write, for built-in slices an adoption or a selector removal
// was stopped from deleting (the status said Forbidden, not what was left
// to do), and resumes as an adoption: they go once the agents publish.
func (r *Reconciler) resumeAfterForbidden(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, cond metav1.Condition) (metav1.Condition, error) {
	left := &discoveryv1.EndpointSliceList{}
	if err := r.APIReader.List(ctx, left, client.InNamespace(swh.Namespace), client.Limit(1), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name,
		discoveryv1.LabelManagedBy:   swhv1alpha1.BuiltinEndpointSliceManager,
	}); err != nil {
		return cond, fmt.Errorf("listing the built-in slices of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	if len(left.Items) == 0 {
		return cond, nil
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, swhv1alpha1.ReasonAdopting
	cond.Message = "the built-in controller's EndpointSlices, whose deletion was forbidden, stay until the agents publish theirs"
	return cond, nil
}
