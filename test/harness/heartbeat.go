package harness

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeLeaseNamespace holds the node Leases kubelets renew.
const NodeLeaseNamespace = "kube-node-lease"

// SetNodeReady writes a node's Ready condition (creating it if missing) as
// a kubelet (True) or the node lifecycle controller (Unknown) would, and
// returns the condition's transition time.
func SetNodeReady(ctx context.Context, c client.Client, name string, status corev1.ConditionStatus) (time.Time, error) {
	reason := map[corev1.ConditionStatus]string{
		corev1.ConditionTrue: "KubeletReady", corev1.ConditionFalse: "KubeletNotReady", corev1.ConditionUnknown: "NodeStatusUnknown",
	}[status]
	var at time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
			return err
		}
		now := metav1.Now()
		at = now.Time
		ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, LastHeartbeatTime: now, LastTransitionTime: now}
		found := false
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == corev1.NodeReady {
				node.Status.Conditions[i], found = ready, true
			}
		}
		if !found {
			node.Status.Conditions = append(node.Status.Conditions, ready)
		}
		return c.Status().Update(ctx, node)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("setting node %s Ready=%s: %w", name, status, err)
	}
	return at, nil
}

// Heartbeat renews a node's Lease in kube-node-lease as a kubelet does, so
// that the node lifecycle controller keeps the node Ready; stopping it is
// how a test makes a node go silent.
type Heartbeat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartHeartbeat creates or takes over the node's Lease and renews it every
// period until Stop.
func StartHeartbeat(c client.Client, node string, period time.Duration) (*Heartbeat, error) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Heartbeat{cancel: cancel, done: make(chan struct{})}
	if err := renewLease(ctx, c, node); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(h.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				// A failed renewal is a missed heartbeat, as for a
				// kubelet; the next tick tries again.
				_ = renewLease(ctx, c, node)
			}
		}
	}()
	return h, nil
}

// Stop stops renewing and waits until no renewal is in flight.
func (h *Heartbeat) Stop() {
	h.cancel()
	<-h.done
}

func renewLease(ctx context.Context, c client.Client, node string) error {
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{}
	err := c.Get(ctx, types.NamespacedName{Namespace: NodeLeaseNamespace, Name: node}, lease)
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: NodeLeaseNamespace, Name: node},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &node, LeaseDurationSeconds: new(int32(40)), RenewTime: &now,
			},
		}
		if err := c.Create(ctx, lease); err != nil {
			return fmt.Errorf("creating the Lease of node %s: %w", node, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the Lease of node %s: %w", node, err)
	}
	lease.Spec.RenewTime = &now
	if err := c.Update(ctx, lease); err != nil {
		return fmt.Errorf("renewing the Lease of node %s: %w", node, err)
	}
	return nil
}
