package disruption

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// expectedPods is the number of pods a budget is counted over, as kube's
// disruption controller counts it: the replicas the pods' workloads
// declare (a Deployment through its ReplicaSets, a ReplicaSet, a
// StatefulSet), each workload once, plus one per selected pod no such
// workload controls. So a StatefulSet member that is gone, not yet
// recreated, still counts as expected and unavailable. Terminal pods are
// left out. The reads go to the API server (reader): caching every
// workload of the cluster is not worth one eviction's few reads.
func expectedPods(ctx context.Context, reader client.Reader, pods []corev1.Pod) (int32, error) {
	type workload struct {
		uid      types.UID
		replicas int32
	}
	// By the pods' controller: one or two reads per ReplicaSet or
	// StatefulSet, not per pod.
	byController := map[types.UID]workload{}
	seen := map[types.UID]bool{}
	var total int32
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
			uid, replicas, err := workloadOf(ctx, reader, pod.Namespace, ref)
			if err != nil {
				return 0, fmt.Errorf("finding the workload of pod %s/%s: %w", pod.Namespace, pod.Name, err)
			}
			w = workload{uid: uid, replicas: replicas}
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
	return total, nil
}

// workloadOf follows a pod's controller to the workload that declares its
// replicas; "" when there is none this knows (the pod counts as itself).
func workloadOf(ctx context.Context, reader client.Reader, ns string, ref *metav1.OwnerReference) (types.UID, int32, error) {
	if ref == nil {
		return "", 0, nil
	}
	key := client.ObjectKey{Namespace: ns, Name: ref.Name}
	switch {
	case ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet":
		rs := &appsv1.ReplicaSet{}
		if err := reader.Get(ctx, key, rs); err != nil {
			return ignoreGone(err)
		}
		if rs.UID != ref.UID {
			return "", 0, nil
		}
		if owner := metav1.GetControllerOf(rs); owner != nil && owner.APIVersion == "apps/v1" && owner.Kind == "Deployment" {
			d := &appsv1.Deployment{}
			if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: owner.Name}, d); err != nil {
				return ignoreGone(err)
			}
			if d.UID == owner.UID {
				return d.UID, replicas(d.Spec.Replicas), nil
			}
		}
		return rs.UID, replicas(rs.Spec.Replicas), nil
	case ref.APIVersion == "apps/v1" && ref.Kind == "StatefulSet":
		ss := &appsv1.StatefulSet{}
		if err := reader.Get(ctx, key, ss); err != nil {
			return ignoreGone(err)
		}
		if ss.UID == ref.UID {
			return ss.UID, replicas(ss.Spec.Replicas), nil
		}
	}
	return "", 0, nil
}

// ignoreGone makes a workload deleted meanwhile count its pod as itself.
func ignoreGone(err error) (types.UID, int32, error) {
	if apierrors.IsNotFound(err) {
		return "", 0, nil
	}
	return "", 0, err
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
