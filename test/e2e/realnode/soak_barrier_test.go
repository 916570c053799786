package realnode_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// proxyBarrier proves that every kube-proxy's watch on the slices is live:
// it moves the one endpoint of a Service of its own to a new address and
// waits until every running node forwards to it. A node cut from the API
// server by dropped packets keeps its connections, and they resume after
// the heal at TCP's retransmission back-off, seconds later: until then its
// kube-proxy still forwards to pods that have gone, and rules that look
// converged (nothing changed during the cut) prove nothing. A kube-proxy
// that programs the barrier's write has applied every slice write before
// it.
type proxyBarrier struct {
	ns, clusterIP string
	moves         int
}

const barrierName = "soak-barrier"

// barrierAddress is the endpoint's address at the n-th move: inside the
// pod network (10.246.0.0/16), where no node's pod range (10.246.N.0/24,
// one per node) reaches. Nothing is ever sent to it; kube-proxy only
// writes rules for it.
func barrierAddress(n int) string { return fmt.Sprintf("10.246.250.%d", n%250+1) }

func newProxyBarrier(ctx context.Context, ns string) (*proxyBarrier, error) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: barrierName},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP,
		}}},
	}
	if err := cluster.CP.Client.Create(ctx, svc); err != nil {
		return nil, fmt.Errorf("creating the barrier's Service: %w", err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: barrierName, Labels: map[string]string{
			discoveryv1.LabelServiceName: barrierName,
			discoveryv1.LabelManagedBy:   "soak.realnode.swh.dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{barrierAddress(0)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
	}
	if err := cluster.CP.Client.Create(ctx, slice); err != nil {
		return nil, fmt.Errorf("creating the barrier's slice: %w", err)
	}
	return &proxyBarrier{ns: ns, clusterIP: svc.Spec.ClusterIP}, nil
}

// pass moves the endpoint and waits, up to timeout, until every running
// node's kube-proxy forwards to its new address.
func (b *proxyBarrier) pass(ctx context.Context, timeout time.Duration) error {
	b.moves++
	addr := barrierAddress(b.moves)
	if err := waitFor(ctx, 30*time.Second, func() error {
		var slice discoveryv1.EndpointSlice
		if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: b.ns, Name: barrierName}, &slice); err != nil {
			return err
		}
		slice.Endpoints[0].Addresses = []string{addr}
		return cluster.CP.Client.Update(ctx, &slice)
	}); err != nil {
		return fmt.Errorf("moving the barrier's endpoint: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitFor(wctx, timeout, func() error {
		return cluster.WaitProgrammed(wctx, b.clusterIP, addr)
	}); err != nil {
		return fmt.Errorf("barrier: a kube-proxy's watch on the slices is not live %s after a write: %w", timeout, err)
	}
	return nil
}

// objects are what cleanUp deletes.
func (b *proxyBarrier) objects() []client.Object {
	svc, slice := &corev1.Service{}, &discoveryv1.EndpointSlice{}
	svc.Namespace, svc.Name = b.ns, barrierName
	slice.Namespace, slice.Name = b.ns, barrierName
	return []client.Object{svc, slice}
}
