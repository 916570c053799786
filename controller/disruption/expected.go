package disruption

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// errNoScale says a pod's controller declares no number of replicas this
// can read: kube's disruption controller then allows no disruption, and
// so does the guard.
var errNoScale = errors.New("no scale")

// expectedPods is the number of pods a budget is counted over, as kube's
// disruption controller counts it (getExpectedScale): the replicas that
// the pods' controllers declare, each controller once. A selected pod no
// controller controls counts as one while it exists, where kube counts
// none and warns: nothing says how many such pods there should be, and
// counting none would let a percentage budget lose every one of them. A Deployment counts through its
// ReplicaSets; a ReplicaSet, a StatefulSet, and any other controller with
// a /scale subresource (a CloudNativePG Cluster, a custom operator's kind)
// count the replicas of their /scale. So a member that is gone, not yet
// recreated, still counts as expected and unavailable. Terminal pods are
// left out. The reads go to the API server: caching every workload of the
// cluster is not worth one eviction's few reads.
//
// A controller whose replicas cannot be read (gone, replaced, no /scale,
// not allowed) makes problem say so: the budget then allows nothing, as
// kube's disruption controller does. Only an integer minAvailable, which
// kube counts over the selected pods, does without: the pod counts as
// itself.
func expectedPods(ctx context.Context, s *Sources, budget *swhv1alpha1.DisruptionBudget, pods []corev1.Pod) (total int32, problem string, err error) {
	needScale := budget == nil || budget.MinAvailable == nil || budget.MinAvailable.Type != intstr.Int
	byController := map[types.UID]workload{}
	seen := map[types.UID]bool{}
	for i := range pods {
		pod := &pods[i]
		if terminal(pod) {
			continue
		}
		ref := metav1.GetControllerOf(pod)
		if ref == nil {
			total++
			continue
		}
		w, known := byController[ref.UID]
		if !known {
			w, err = s.workloadOf(ctx, pod.Namespace, ref)
			switch {
			case errors.Is(err, errNoScale) && needScale:
				return 0, fmt.Sprintf("the replicas of %s %s, the controller of pod %s, cannot be read: %v", ref.Kind, ref.Name, pod.Name, err), nil
			case errors.Is(err, errNoScale):
				w, err = workload{}, nil
			case err != nil:
				return 0, "", fmt.Errorf("finding the workload of pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			byController[ref.UID] = w
		}
		switch {
		case w.uid == "":
			total++
		case !seen[w.uid]:
			seen[w.uid] = true
			total += w.replicas
		}
	}
	return total, "", nil
}

// workload is what declares a pod's replicas; uid "" counts the pod as
// itself.
type workload struct {
	uid      types.UID
	replicas int32
}

// workloadOf follows a pod's controller to the workload that declares its
// replicas, as kube's disruption controller's finders do: a ReplicaSet's
// Deployment, else the controller itself, through its /scale. Only
// metadata and scales are read: a workload's pod template, which its
// owner may fill, is never loaded. It returns an error wrapping errNoScale
// when no scale can be read.
func (s *Sources) workloadOf(ctx context.Context, ns string, ref *metav1.OwnerReference) (workload, error) {
	if ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet" {
		rs := &metav1.PartialObjectMetadata{}
		rs.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
		err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, rs)
		if err != nil && !apierrors.IsNotFound(err) {
			return workload{}, fmt.Errorf("reading ReplicaSet %s: %w", ref.Name, err)
		}
		if owner := metav1.GetControllerOf(rs); err == nil && rs.UID == ref.UID && owner != nil && owner.APIVersion == "apps/v1" && owner.Kind == "Deployment" {
			w, err := s.scaleOf(ctx, ns, owner)
			if !errors.Is(err, errNoScale) {
				return w, err
			}
			// The Deployment is gone or replaced: the ReplicaSet's own.
		}
	}
	return s.scaleOf(ctx, ns, ref)
}

// scaleOf reads the /scale subresource of a pod's controller, of any kind.
func (s *Sources) scaleOf(ctx context.Context, ns string, ref *metav1.OwnerReference) (workload, error) {
	if s.Scales == nil {
		return workload{}, fmt.Errorf("%w: scales are not read here (%s %s)", errNoScale, ref.Kind, ref.Name)
	}
	scale := &autoscalingv1.Scale{}
	var err error
	if obj := typedWorkload(ref); obj != nil {
		obj.SetNamespace(ns)
		obj.SetName(ref.Name)
		err = s.Scales.SubResource("scale").Get(ctx, obj, scale)
	} else {
		obj := &unstructured.Unstructured{}
		obj.SetAPIVersion(ref.APIVersion)
		obj.SetKind(ref.Kind)
		obj.SetNamespace(ns)
		obj.SetName(ref.Name)
		out := &unstructured.Unstructured{}
		out.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
		err = s.Scales.SubResource("scale").Get(ctx, obj, out)
		if err == nil {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, scale); err != nil {
				return workload{}, fmt.Errorf("%w: decoding the scale of %s %s: %w", errNoScale, ref.Kind, ref.Name, err)
			}
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		// Gone, or a kind without a /scale subresource: the API server does
		// not tell them apart, nor does kube's disruption controller.
		return workload{}, fmt.Errorf("%w: %s %s (%s) has no /scale subresource, or is gone", errNoScale, ref.Kind, ref.Name, ref.APIVersion)
	case meta.IsNoMatchError(err), apierrors.IsForbidden(err), apierrors.IsMethodNotSupported(err):
		return workload{}, fmt.Errorf("%w: %w", errNoScale, err)
	case err != nil:
		return workload{}, fmt.Errorf("reading the scale of %s %s: %w", ref.Kind, ref.Name, err)
	}
	if scale.UID != ref.UID {
		return workload{}, fmt.Errorf("%w: %s %s is not the pod's controller any more (UID %s, the pod names %s)", errNoScale, ref.Kind, ref.Name, scale.UID, ref.UID)
	}
	return workload{uid: scale.UID, replicas: scale.Spec.Replicas}, nil
}

// typedWorkload is an empty object of the built-in kind ref names, nil for
// another kind (read as unstructured).
func typedWorkload(ref *metav1.OwnerReference) client.Object {
	if ref.APIVersion != "apps/v1" {
		return nil
	}
	switch ref.Kind {
	case "Deployment":
		return &appsv1.Deployment{}
	case "ReplicaSet":
		return &appsv1.ReplicaSet{}
	case "StatefulSet":
		return &appsv1.StatefulSet{}
	}
	return nil
}
