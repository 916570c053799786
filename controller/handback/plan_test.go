package handback

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

func TestHandedBack(t *testing.T) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "swh-uid"},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{Selector: map[string]string{"app": "web"}}}
	owner := metav1.OwnerReference{APIVersion: "network.swh.dev/v1alpha1", Kind: "ServiceWithHealthchecks", Name: "web", UID: "swh-uid", Controller: ptr.To(true)}
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "keep", UID: "other-uid"}
	service := func(refs ...metav1.OwnerReference) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", OwnerReferences: refs,
			Labels: map[string]string{swhv1alpha1.LabelService: "web", "team": "shop"}}}
	}
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		swh    *swhv1alpha1.ServiceWithHealthchecks
		wantOK bool
		want   *corev1.Service
	}{
		{name: "owned: plain, selecting the pods, other owners and labels kept", svc: service(other, owner), swh: swh, wantOK: true,
			want: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", OwnerReferences: []metav1.OwnerReference{other}, Labels: map[string]string{"team": "shop"}},
				Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}},
		{name: "someone else's Service is not touched", svc: service(other), swh: swh},
		{name: "a resource selecting nothing keeps its Service", svc: service(owner),
			swh: &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "swh-uid"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := handedBack(tc.svc, tc.swh)
			if ok != tc.wantOK || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("handedBack = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
			if tc.svc.Labels[swhv1alpha1.LabelService] != "web" {
				t.Error("the Service read was changed")
			}
		})
	}
}

func TestUncovered(t *testing.T) {
	entry := func(pod string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: ptr.To("node-1"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: pod, UID: k8stypes.UID("uid-" + pod)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(ready)}}
	}
	slice := func(managedBy, port string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: managedBy + "-" + port, Labels: map[string]string{
				discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: managedBy, endpoints.DefaultNodeLabel: "node-1"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps,
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To(port), Port: ptr.To[int32](80)}},
		}
		return s
	}
	agents := []discoveryv1.EndpointSlice{slice(endpoints.DefaultManagedBy, "http", entry("a", true), entry("b", true), entry("c", false))}
	for _, tc := range []struct {
		name    string
		builtin []discoveryv1.EndpointSlice
		// live: the pods that stay; a, b and c when nil.
		live map[string]bool
		want map[string][]string
	}{
		{name: "no built-in slice yet", want: map[string][]string{"http": {"a", "b"}}},
		{name: "one pod listed, not ready yet", builtin: []discoveryv1.EndpointSlice{slice(builtinManagedBy, "http", entry("a", true), entry("b", false))},
			want: map[string][]string{"http": {"b"}}},
		{name: "every ready pod listed ready; the failing one need not be", builtin: []discoveryv1.EndpointSlice{slice(builtinManagedBy, "http", entry("a", true), entry("b", true))},
			want: map[string][]string{}},
		{name: "a pod that is gone or not Ready does not count", builtin: nil, live: map[string]bool{"a": true},
			want: map[string][]string{"http": {"a"}}},
		{name: "another port does not count", builtin: []discoveryv1.EndpointSlice{slice(builtinManagedBy, "smtp", entry("a", true), entry("b", true))},
			want: map[string][]string{"http": {"a", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := tc.live
			if live == nil {
				live = map[string]bool{"a": true, "b": true, "c": true}
			}
			got, err := uncovered(agents, tc.builtin, live)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("uncovered = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWithSelector(t *testing.T) {
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "swh-uid"},
		Spec: swhv1alpha1.ServiceWithHealthchecksSpec{Selector: map[string]string{"app": "web"}}}
	owner := metav1.OwnerReference{APIVersion: "network.swh.dev/v1alpha1", Kind: "ServiceWithHealthchecks", Name: "web", UID: "swh-uid", Controller: ptr.To(true)}
	for _, tc := range []struct {
		name            string
		svc             *corev1.Service
		wantOK, wantNil bool
	}{
		{name: "owned, no selector: given the resource's", svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{owner}}}, wantOK: true},
		{name: "owned, selecting already (a run again)", svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}, wantOK: true, wantNil: true},
		{name: "not the resource's", svc: &corev1.Service{}, wantNil: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := withSelector(tc.svc, swh)
			if ok != tc.wantOK || (got == nil) != tc.wantNil {
				t.Fatalf("withSelector = %+v, %v; want ok %v, nil %v", got, ok, tc.wantOK, tc.wantNil)
			}
			if got != nil && (got.Spec.Selector["app"] != "web" || !metav1.IsControlledBy(got, swh)) {
				t.Errorf("got %+v: want the selector, still the resource's", got)
			}
		})
	}
}

func TestStuck(t *testing.T) {
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deletion *metav1.Time
		want     bool
	}{
		{"running", nil, false},
		{"terminating within its grace period", &metav1.Time{Time: now.Add(10 * time.Second)}, false},
		{"just past it", &metav1.Time{Time: now.Add(-10 * time.Second)}, false},
		{"long past it: on a lost node", &metav1.Time{Time: now.Add(-time.Minute)}, true},
	} {
		if got := stuck(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: tc.deletion}}, now); got != tc.want {
			t.Errorf("%s: stuck = %v, want %v", tc.name, got, tc.want)
		}
	}
}
