package publisher

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swh-dev/swh/endpoints"
)

// TestInferPassed: a probe starts passed when a port it gates is published
// serving, and failed otherwise, so that the verdicts rebuild exactly what
// is published.
func TestInferPassed(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525)},
	}
	// Probe 0 checks web only, probe 1 is pod-wide (9999 is no Service
	// port), probe 2 checks web too.
	g, err := endpoints.NewGrouping(ports, []intstr.IntOrString{intstr.FromInt32(8080), intstr.FromInt32(9999), intstr.FromInt32(8080)})
	if err != nil {
		t.Fatal(err)
	}
	gates := g.Gates(&corev1.Pod{})
	names := []string{"web", "smtp"}
	tests := []struct {
		name    string
		serving map[string]bool
		want    []bool // per probe
	}{
		{"nothing published: every probe starts failed", nil, []bool{false, false, false}},
		{"all serving", map[string]bool{"web": true, "smtp": true}, []bool{true, true, true}},
		// web not serving while smtp, gated by the pod-wide probe too,
		// serves: the pod-wide probe passed; web's own probes start failed.
		{"web failing, smtp serving: the pod-wide probe passed", map[string]bool{"web": false, "smtp": true}, []bool{false, true, false}},
		{"web serving implies every probe gating it passed", map[string]bool{"web": true}, []bool{true, true, true}},
		{"published on no port serving", map[string]bool{"web": false, "smtp": false}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make([]bool, g.NumProbes())
			var passing endpoints.ProbeSet
			for i := range got {
				got[i] = inferPassed(gates, names, i, tt.serving)
				if got[i] {
					passing = passing.With(i)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("inferred %v, want %v", got, tt.want)
			}
			// The verdicts rebuilt from the inferred probes are what was
			// published, on every published port.
			for j, gate := range gates {
				if serving, published := tt.serving[names[j]]; published && gate.Verdict(passing, false).Passing != serving {
					t.Errorf("port %s: verdict %t, published serving %t", names[j], !serving, serving)
				}
			}
		})
	}
}

func TestServingPorts(t *testing.T) {
	// Labelled as an agent's slice of node n1 (the built-in controller's
	// slices are read without regard to labels).
	labels := map[string]string{discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: "n1"}
	slice := func(ports []string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Endpoints: eps}
		for _, p := range ports {
			s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: &p})
		}
		return s
	}
	yes, no := true, false
	node := "n1"
	ep := func(uid string, ready, serving, terminating *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{UID: types.UID(uid)}, NodeName: &node,
			Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating}}
	}
	tests := []struct {
		name         string
		own, adopted []discoveryv1.EndpointSlice
		want         string
	}{
		{"serving decides, not ready",
			[]discoveryv1.EndpointSlice{slice([]string{"web"},
				ep("ready", &yes, &yes, &no),
				ep("failing", &no, &no, &no),
				ep("terminating-passing", &no, &yes, &yes), // case (b)
				ep("pnra-failing", &yes, &no, &no),         // case (c)
				ep("nil-conditions", nil, nil, nil))}, nil,
			"map[failing:map[web:false] nil-conditions:map[web:true] pnra-failing:map[web:false] ready:map[web:true] terminating-passing:map[web:true]]"},
		{"an unnamed port", []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Ports: []discoveryv1.EndpointPort{{}}, Endpoints: []discoveryv1.Endpoint{ep("a", &yes, &yes, &no)}}}, nil,
			"map[a:map[:true]]"},
		// endpoints.Read's rule: serving when every family's entry is.
		{"two address families: serving only in both",
			[]discoveryv1.EndpointSlice{slice([]string{"web"}, ep("a", &no, &no, &no)), slice([]string{"web"}, ep("a", &yes, &yes, &no))}, nil,
			"map[a:map[web:false]]"},
		{"two address families, both serving",
			[]discoveryv1.EndpointSlice{slice([]string{"web"}, ep("a", &yes, &yes, &no)), slice([]string{"web"}, ep("a", &yes, &yes, &no))}, nil,
			"map[a:map[web:true]]"},
		{"the built-in controller's slices hold every port",
			nil, []discoveryv1.EndpointSlice{slice([]string{"web", "smtp"}, ep("d", &yes, &yes, &no), ep("e", &no, &no, &no))},
			"map[d:map[smtp:true web:true] e:map[smtp:false web:false]]"},
		{"ours decide where they publish the pod",
			[]discoveryv1.EndpointSlice{slice([]string{"web"}, ep("d", &no, &no, &no))},
			[]discoveryv1.EndpointSlice{slice([]string{"web", "smtp"}, ep("d", &yes, &yes, &no))},
			"map[d:map[smtp:true web:false]]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprint(servingPorts(tt.own, tt.adopted)); got != tt.want {
				t.Errorf("servingPorts = %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestOwnedBy(t *testing.T) {
	res := types.NamespacedName{Namespace: "ns", Name: "a"}
	mk := func(ns, service, manager string) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: service + "-" + manager,
			Labels: map[string]string{discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: manager}}}
	}
	got := ownedBy(res, []discoveryv1.EndpointSlice{
		mk("ns", "a", endpoints.DefaultManagedBy), mk("ns", "a-b", endpoints.DefaultManagedBy), mk("ns", "a", "someone-else"), mk("other", "a", endpoints.DefaultManagedBy),
	})
	if len(got) != 1 || got[0].Name != "a-"+endpoints.DefaultManagedBy {
		t.Errorf("ownedBy kept %d slices: %v", len(got), got)
	}
}
