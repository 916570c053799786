package controller_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/test/harness"
)

const endpointsGauge = "swh_controller_resource_endpoints"

// resourceEndpoints returns the series of swh_controller_resource_endpoints
// of one resource, keyed "<port>/<state>".
func (c *controller) resourceEndpoints(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	families, err := c.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != endpointsGauge {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelsMatch(m, map[string]string{"namespace": ns, "name": name}) {
				continue
			}
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["port"]+"/"+l["state"]] = m.GetGauge().GetValue()
		}
	}
	return out
}

// statusEndpoints is what the gauge should hold for a status.
func statusEndpoints(st swhv1alpha1.ServiceWithHealthchecksStatus) map[string]float64 {
	out := map[string]float64{}
	for _, p := range st.Ports {
		out[p.Name+"/ready"] = float64(p.ReadyEndpoints)
		out[p.Name+"/total"] = float64(p.TotalEndpoints)
	}
	return out
}

// TestEndpointsGaugeFollowsStatus: swh_controller_resource_endpoints holds
// the per-port counts of the resource's status as they change, loses the
// series of a port removed from the spec, and every series of a deleted
// resource.
func TestEndpointsGaugeFollowsStatus(t *testing.T) {
	ctrl := startController(t, app.Options{})
	ctx := context.Background()
	ns := namespace(t)
	node := "gauge-" + ns
	if _, err := harness.CreateNode(ctx, controlPlane.Client, harness.NodeOptions{Name: node}); err != nil {
		t.Fatal(err)
	}
	swh := newResource(ns, "shop")
	swh.Spec.Ports = []swhv1alpha1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "admin", Port: 81, TargetPort: intstr.FromInt32(8081)},
	}
	// Another resource, so deleting the first must spare its series.
	other := newResource(ns, "other")
	for _, o := range []client.Object{swh, other} {
		if err := controlPlane.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	web := agentSlice(ns, "shop", "web", node, discoveryv1.AddressTypeIPv4,
		endpoint("p1", "u1", "10.244.7.1", node, true), endpoint("p2", "u2", "10.244.7.2", node, false))
	admin := agentSlice(ns, "shop", "admin", node, discoveryv1.AddressTypeIPv4,
		endpoint("p1", "u1", "10.244.7.1", node, true))
	for _, s := range []*discoveryv1.EndpointSlice{web, admin} {
		if err := controlPlane.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	// follows waits until the gauge and the status both hold want.
	follows := func(what string, want map[string]float64) {
		t.Helper()
		harness.Eventually(t, 20*time.Second, what, func() error {
			st := statusEndpoints(getResource(t, ctx, ns, "shop").Status)
			got := ctrl.resourceEndpoints(t, ns, "shop")
			if !maps.Equal(st, want) || !maps.Equal(got, want) {
				return fmt.Errorf("status %v, gauge %v, want both %v", st, got, want)
			}
			return nil
		})
	}
	follows("the gauge holds the status' counts", map[string]float64{
		"web/ready": 1, "web/total": 2, "admin/ready": 1, "admin/total": 1,
	})

	// p2 becomes ready on web.
	got := &discoveryv1.EndpointSlice{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(web), got); err != nil {
		t.Fatal(err)
	}
	got.Endpoints[1].Conditions.Ready = new(true)
	if err := controlPlane.Client.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	follows("the gauge follows a pod turning ready", map[string]float64{
		"web/ready": 2, "web/total": 2, "admin/ready": 1, "admin/total": 1,
	})

	// The admin port goes: its series go with it.
	updateResource(t, ctx, ns, "shop", func(s *swhv1alpha1.ServiceWithHealthchecks) { s.Spec.Ports = s.Spec.Ports[:1] })
	follows("a removed port leaves no series", map[string]float64{"web/ready": 2, "web/total": 2})

	harness.Eventually(t, 20*time.Second, "the other resource's series", func() error {
		if got := ctrl.resourceEndpoints(t, ns, "other"); len(got) != 2 {
			return fmt.Errorf("series %v, want http/ready and http/total", got)
		}
		return nil
	})
	if err := controlPlane.Client.Delete(ctx, getResource(t, ctx, ns, "shop")); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "a deleted resource leaves no series", func() error {
		if got := ctrl.resourceEndpoints(t, ns, "shop"); len(got) != 0 {
			return fmt.Errorf("series of the deleted resource remain: %v", got)
		}
		return nil
	})
	if got := ctrl.resourceEndpoints(t, ns, "other"); len(got) != 2 {
		t.Errorf("deleting shop took the series of other too: %v", got)
	}
}
