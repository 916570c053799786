package reconciler

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

func TestWithFloor(t *testing.T) {
	web := "web"
	// slice publishes pods on node's slice of port web: "a" ready, "-b"
	// not ready, with the reasons given.
	slice := func(node string, pods []string, reasons swhv1alpha1.EndpointReasons) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
				discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &web}},
		}
		for _, p := range pods {
			ready := !strings.HasPrefix(p, "-")
			name := strings.TrimPrefix(p, "-")
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, NodeName: &node,
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: name, UID: k8stypes.UID("uid-" + name)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready}})
		}
		if value, err := reasons.Encode(); err != nil {
			t.Fatal(err)
		} else if value != "" {
			s.Annotations = map[string]string{swhv1alpha1.AnnotationEndpointReasons: value}
		}
		return s
	}
	open := swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonFloorOpen}
	frozen := swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonFloorFrozen}
	held := swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonFloorHeld}
	resource := func(floor *swhv1alpha1.PortFloor, exclusive bool) *swhv1alpha1.ServiceWithHealthchecks {
		swh := &swhv1alpha1.ServiceWithHealthchecks{Spec: swhv1alpha1.ServiceWithHealthchecksSpec{
			Ports: []swhv1alpha1.ServicePort{{Name: web, Port: 80, Floor: floor}}}}
		if exclusive {
			swh.Spec.Exclusive = &swhv1alpha1.Exclusive{}
		}
		return swh
	}
	two := intstr.FromInt32(2)
	belowOpen := []discoveryv1.EndpointSlice{
		slice("n1", []string{"a1", "a2"}, swhv1alpha1.EndpointReasons{"a1": open, "a2": open}),
		slice("n2", []string{"b1", "b2"}, swhv1alpha1.EndpointReasons{"b1": open}),
	}
	for _, tc := range []struct {
		name      string
		floor     *swhv1alpha1.PortFloor
		exclusive bool
		slices    []discoveryv1.EndpointSlice
		// want is in the condition's message; "" for no condition.
		want string
	}{
		{name: "no floor", slices: belowOpen},
		{name: "Closed", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorClosed}, slices: belowOpen},
		{name: "Open below, pods kept", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorOpen}, slices: belowOpen,
			want: `below the floor: port "web" is open: 3 pods kept published despite their probes; 1 of 4 pods pass it, minPassing 2`},
		{name: "a percentage", floor: &swhv1alpha1.PortFloor{MinPassing: intstr.FromString("75%"), Below: swhv1alpha1.FloorOpen}, slices: belowOpen,
			want: "minPassing 75% (3)"},
		{name: "Freeze below", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorFreeze},
			slices: []discoveryv1.EndpointSlice{slice("n1", []string{"a1", "-a2"}, swhv1alpha1.EndpointReasons{"a1": frozen}), slice("n2", []string{"b1"}, nil)},
			want:   `port "web" is frozen: 1 pods kept published despite their probes; 1 of 3 pods pass it`},
		{name: "below, nothing kept yet", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorOpen},
			slices: []discoveryv1.EndpointSlice{slice("n1", []string{"-a1", "a2"}, nil)}},
		{name: "pods held a moment while the agents count", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorOpen},
			slices: []discoveryv1.EndpointSlice{slice("n1", []string{"a1", "a2"}, swhv1alpha1.EndpointReasons{"a1": held, "a2": held})}},
		{name: "held pods do not pass", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorOpen},
			slices: []discoveryv1.EndpointSlice{slice("n1", []string{"a1", "a2", "a3"}, swhv1alpha1.EndpointReasons{"a1": open, "a2": held})},
			want:   "1 pods kept published despite their probes; 1 of 3 pods pass it"},
		{name: "an exclusive port", floor: &swhv1alpha1.PortFloor{MinPassing: two, Below: swhv1alpha1.FloorOpen}, exclusive: true, slices: belowOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := swhv1alpha1.ServiceWithHealthchecksStatus{Conditions: []metav1.Condition{{Type: swhv1alpha1.ConditionFloorEngaged, Status: metav1.ConditionTrue}}}
			st = withFloor(st, resource(tc.floor, tc.exclusive), tc.slices)
			c := meta.FindStatusCondition(st.Conditions, swhv1alpha1.ConditionFloorEngaged)
			if (c != nil) != (tc.want != "") {
				t.Fatalf("condition %+v, want one: %v", c, tc.want != "")
			}
			if c != nil && (!strings.Contains(c.Message, tc.want) || c.Reason != swhv1alpha1.ReasonBelowMinPassing) {
				t.Errorf("condition %+v does not say %q", c, tc.want)
			}
		})
	}
}
