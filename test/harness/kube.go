package harness

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ZoneLabel is the well-known label that carries a node's zone.
const ZoneLabel = "topology.kubernetes.io/zone"

// NodeOptions describes a simulated node.
type NodeOptions struct {
	Name string
	// Zone becomes the topology.kubernetes.io/zone label when set.
	Zone string
	// InternalIP is written to the node's status addresses when set.
	InternalIP string
	Labels     map[string]string
}

// CreateNode creates a Node object and marks it Ready, as a kubelet would.
func CreateNode(ctx context.Context, c client.Client, opts NodeOptions) (*corev1.Node, error) {
	labels := map[string]string{"kubernetes.io/hostname": opts.Name}
	for k, v := range opts.Labels {
		labels[k] = v
	}
	if opts.Zone != "" {
		labels[ZoneLabel] = opts.Zone
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: opts.Name, Labels: labels}}
	if err := c.Create(ctx, node); err != nil {
		return nil, fmt.Errorf("creating node %s: %w", opts.Name, err)
	}
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if opts.InternalIP != "" {
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: opts.InternalIP}}
	}
	if err := c.Status().Update(ctx, node); err != nil {
		return nil, fmt.Errorf("writing the status of node %s: %w", opts.Name, err)
	}
	return node, nil
}

// PodOptions describes a simulated pod and the status a kubelet would write.
type PodOptions struct {
	Namespace string
	Name      string
	Node      string
	Labels    map[string]string
	// IPs are the pod's addresses, first the primary (status.podIP).
	IPs []string
	// Ports are the container ports of the pod's single container.
	Ports []corev1.ContainerPort
	// NotReady leaves the Ready condition False (a pod that fails its
	// kubelet readiness probe).
	NotReady bool
	// Phase defaults to Running.
	Phase corev1.PodPhase
	// StartTime defaults to now.
	StartTime time.Time
	// ReadinessGates are the condition types of spec.readinessGates.
	ReadinessGates []corev1.PodConditionType
}

// CreatePod creates a pod bound to opts.Node and writes its status as a
// kubelet would: phase, IPs, start time, Ready and ContainersReady.
func CreatePod(ctx context.Context, c client.Client, opts PodOptions) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: opts.Name, Labels: opts.Labels},
		Spec: corev1.PodSpec{
			NodeName: opts.Node,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.invalid/swh/app:test",
				Ports: opts.Ports,
			}},
			AutomountServiceAccountToken: new(false),
		},
	}
	for _, g := range opts.ReadinessGates {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	if err := c.Create(ctx, pod); err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", opts.Namespace, opts.Name, err)
	}
	if err := SetPodStatus(ctx, c, pod, opts); err != nil {
		return nil, err
	}
	return pod, nil
}

// SetPodStatus rewrites the status of pod from opts (IPs, phase, readiness),
// as a kubelet would after a change.
func SetPodStatus(ctx context.Context, c client.Client, pod *corev1.Pod, opts PodOptions) error {
	phase := opts.Phase
	if phase == "" {
		phase = corev1.PodRunning
	}
	start := opts.StartTime
	if start.IsZero() {
		start = time.Now()
	}
	ready := corev1.ConditionTrue
	if opts.NotReady || phase != corev1.PodRunning {
		ready = corev1.ConditionFalse
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     phase,
		StartTime: &metav1.Time{Time: start},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "app", Image: "registry.invalid/swh/app:test", Ready: ready == corev1.ConditionTrue,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: start}}},
		}},
	}
	if len(opts.IPs) > 0 {
		pod.Status.PodIP = opts.IPs[0]
		for _, ip := range opts.IPs {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("writing the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// SetPodReady flips the pod's Ready and ContainersReady conditions.
func SetPodReady(ctx context.Context, c client.Client, key types.NamespacedName, ready bool) error {
	pod := &corev1.Pod{}
	if err := c.Get(ctx, key, pod); err != nil {
		return fmt.Errorf("reading pod %s: %w", key, err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range pod.Status.Conditions {
		switch pod.Status.Conditions[i].Type {
		case corev1.PodReady, corev1.ContainersReady:
			if pod.Status.Conditions[i].Status != status {
				pod.Status.Conditions[i].Status = status
				pod.Status.Conditions[i].LastTransitionTime = metav1.Now()
			}
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
	}
	if err := c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("writing the readiness of pod %s: %w", key, err)
	}
	return nil
}

// ForceDeletePod removes a pod at once, as a kubelet does once its
// containers have stopped. A plain Delete leaves the pod terminating
// forever here, since no kubelet confirms it.
func ForceDeletePod(ctx context.Context, c client.Client, key types.NamespacedName) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting pod %s: %w", key, err)
	}
	return nil
}
