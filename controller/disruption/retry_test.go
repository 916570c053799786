package disruption

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// brokerObjects are n Ready nodes, a broker on each (selected by the
// resource) and the agents' slices publishing each passing as given.
func brokerObjects(passing map[string]bool) []client.Object {
	var objs []client.Object
	for name, ok := range passing {
		node := "n" + name[len(name)-1:]
		objs = append(objs, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: node},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		p := broker(name, node)
		p.Labels = map[string]string{"app": "kafka"}
		objs = append(objs, &p)
		s := agentSlice("client", node, endpointOf(name, node, ok, ok, false))
		s.Namespace, s.AddressType = "kafka", discoveryv1.AddressTypeIPv4
		objs = append(objs, &s)
	}
	return objs
}

func reservationsOf(t *testing.T, c client.Client) []swhv1alpha1.DisruptionReservation {
	t.Helper()
	cur := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "kafka", Name: "brokers"}, cur); err != nil {
		t.Fatal(err)
	}
	if cur.Status.Disruption == nil {
		return nil
	}
	return cur.Status.Disruption.Reservations
}

// TestAnotherReplicasReservationSurvives: another replica reserves a pod
// created after this replica listed the pods, between that list and this
// replica's write. The write must keep the other's reservation.
func TestAnotherReplicasReservationSurvives(t *testing.T) {
	swh := resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(2)), Ports: []string{"client"}})
	objs := append(brokerObjects(map[string]bool{"b-0": true, "b-1": true, "b-2": true}), swh)
	var once sync.Once
	var g *Guard
	other := func(ctx context.Context, c client.WithWatch) {
		// The other replica: a new broker, and its eviction reserved.
		p := broker("b-3", "n3")
		p.Labels = map[string]string{"app": "kafka"}
		if err := c.Create(ctx, &p); err != nil {
			t.Error(err)
			return
		}
		cur := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(swh), cur); err != nil {
			t.Error(err)
			return
		}
		cur.Status.Disruption = &swhv1alpha1.DisruptionStatus{Reservations: []swhv1alpha1.DisruptionReservation{
			{Pod: "b-3", UID: p.UID, Time: metav1.NewTime(now.Add(-time.Second))},
		}}
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Error(err)
		}
	}
	funcs := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		err := c.List(ctx, list, opts...)
		if _, ok := list.(*corev1.PodList); ok {
			once.Do(func() { other(ctx, c) })
		}
		return err
	}}
	g = fakeGuard(t, funcs, objs...)
	g.Now = func() time.Time { return now }
	resp := g.Handle(context.Background(), evictionRequest("b-0", `{"kind":"Eviction"}`))
	if !resp.Allowed {
		t.Fatalf("eviction of b-0 refused: %+v", resp.Result)
	}
	got := map[string]bool{}
	for _, r := range reservationsOf(t, g.Client) {
		got[r.Pod] = true
	}
	if !got["b-3"] || !got["b-0"] {
		t.Errorf("reservations after the write: %v, want b-3's (the other replica's) and b-0's", got)
	}
}

// TestRetryIsJudgedAgain: a pod holding a reservation (its eviction was
// allowed, then refused further on) is judged again on a retry, on the
// current count without its own reservation.
func TestRetryIsJudgedAgain(t *testing.T) {
	young := swhv1alpha1.DisruptionReservation{Pod: "b-1", UID: "uid-b-1", Time: metav1.NewTime(now.Add(-10 * time.Second))}
	old := young
	old.Time = metav1.NewTime(now.Add(-90 * time.Second))
	allPass := map[string]bool{"b-0": true, "b-1": true, "b-2": true}
	tests := []struct {
		name     string
		reserved swhv1alpha1.DisruptionReservation
		passing  map[string]bool
		allowed  bool
		renewed  bool
	}{
		{name: "everything else passes", reserved: young, passing: allPass, allowed: true},
		{name: "everything else passes, the reservation is old", reserved: old, passing: allPass, allowed: true, renewed: true},
		{name: "another broker stopped passing", reserved: young, passing: map[string]bool{"b-0": true, "b-1": true, "b-2": false}},
		{name: "another broker stopped passing, the reservation is old", reserved: old, passing: map[string]bool{"b-0": true, "b-1": true, "b-2": false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reserved := tt.reserved
			swh := resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}}, reserved)
			g := fakeGuard(t, interceptor.Funcs{}, append(brokerObjects(tt.passing), swh)...)
			g.Now = func() time.Time { return now }
			resp := g.Handle(context.Background(), evictionRequest("b-1", `{"kind":"Eviction"}`))
			if resp.Allowed != tt.allowed {
				t.Fatalf("retried eviction of b-1: allowed = %v, want %v (%+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed && resp.Result.Code != http.StatusTooManyRequests {
				t.Errorf("code %d, want 429", resp.Result.Code)
			}
			rs := reservationsOf(t, g.Client)
			if len(rs) != 1 || rs[0].UID != "uid-b-1" {
				t.Fatalf("reservations %+v, want b-1's only", rs)
			}
			if want := map[bool]time.Time{true: now, false: reserved.Time.Time}[tt.renewed]; !rs[0].Time.Time.Equal(want) {
				t.Errorf("reservation time %v, want %v", rs[0].Time, want)
			}
		})
	}
}

// TestSpecChangedBetweenAttemptsReadsPodsAgain: the resource's selector
// changes between this replica's pod list and its reservation write. The
// write conflicts, and the retry judges the pods the new selector selects,
// not the list read for the old one.
func TestSpecChangedBetweenAttemptsReadsPodsAgain(t *testing.T) {
	swh := resource(swhv1alpha1.DisruptionBudget{MaxUnavailable: ptr.To(intstr.FromInt32(1)), Ports: []string{"client"}})
	objs := append(brokerObjects(map[string]bool{"b-0": true, "b-1": true, "b-2": true, "b-3": false}), swh)
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			switch p.Name {
			case "b-0":
				p.Labels = map[string]string{"app": "kafka", "role": "broker"}
			case "b-3": // failing, selected by the new selector only
				p.Labels = map[string]string{"role": "broker"}
			}
		}
	}
	var once sync.Once
	funcs := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		err := c.List(ctx, list, opts...)
		if _, ok := list.(*corev1.PodList); ok {
			once.Do(func() {
				cur := &swhv1alpha1.ServiceWithHealthchecks{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(swh), cur); err != nil {
					t.Error(err)
					return
				}
				cur.Spec.Selector = map[string]string{"role": "broker"}
				cur.Generation++
				if err := c.Update(ctx, cur); err != nil {
					t.Error(err)
				}
			})
		}
		return err
	}}
	g := fakeGuard(t, funcs, objs...)
	g.Now = func() time.Time { return now }
	resp := g.Handle(context.Background(), evictionRequest("b-0", `{"kind":"Eviction"}`))
	if resp.Allowed {
		t.Fatalf("eviction of b-0 allowed on the old selector's pods; under the new one b-3 fails and b-0 is the last passing pod")
	}
	if resp.Result.Code != http.StatusTooManyRequests {
		t.Errorf("answer %d %q, want 429", resp.Result.Code, resp.Result.Message)
	}
}
