package publisher

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swh-dev/swh/endpoints"
)

func TestAlignedDelay(t *testing.T) {
	base := time.Unix(1_000_000, 0) // a whole second: offset 0 in a 1 s period
	tests := []struct {
		name                    string
		now                     time.Time
		minDelay, period, phase time.Duration
		want                    time.Duration
	}{
		{"already on the phase", base, 0, time.Second, 0, 0},
		{"wait for the phase", base, 0, time.Second, 300 * time.Millisecond, 300 * time.Millisecond},
		{"phase passed: next period", base.Add(400 * time.Millisecond), 0, time.Second, 300 * time.Millisecond, 900 * time.Millisecond},
		{"initial delay first, then the phase", base, 2500 * time.Millisecond, time.Second, 300 * time.Millisecond, 3300 * time.Millisecond},
		{"no period", base, time.Second, 0, 0, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := alignedDelay(tt.now, tt.minDelay, tt.period, tt.phase); got != tt.want {
				t.Errorf("alignedDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPhaseOfSpreadsResources(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 100 {
		p := phaseOf(types.NamespacedName{Namespace: "ns", Name: string(rune('a'+i%26)) + string(rune('a'+i/26))}, 10*time.Second)
		if p < 0 || p >= 10*time.Second {
			t.Fatalf("phase %v outside the period", p)
		}
		seen[p] = true
	}
	if len(seen) < 95 {
		t.Errorf("100 resources share %d phases: they would fire together", len(seen))
	}
	a := types.NamespacedName{Namespace: "ns", Name: "web"}
	if phaseOf(a, time.Second) != phaseOf(a, time.Second) {
		t.Error("the phase of a resource is not stable: agents on different nodes would disagree")
	}
}

func TestReadyOnGatedPorts(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525)},
	}
	// Probe 0 checks web only, probe 1 is pod-wide (port 9999 is no Service port).
	g, err := endpoints.NewGrouping(ports, []intstr.IntOrString{intstr.FromInt32(8080), intstr.FromInt32(9999)})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{}
	names := []string{"web", "smtp"}
	tests := []struct {
		name  string
		probe int
		ready map[string]bool
		want  bool
	}{
		{"nothing published", 0, nil, false},
		{"its port ready", 0, map[string]bool{"web": true}, true},
		{"its port not ready, another is", 0, map[string]bool{"smtp": true}, false},
		{"pod-wide probe needs every port", 1, map[string]bool{"web": true}, false},
		{"pod-wide probe, every port ready", 1, map[string]bool{"web": true, "smtp": true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := readyOnGatedPorts(g, names, pod, tt.probe, tt.ready); got != tt.want {
				t.Errorf("readyOnGatedPorts = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadyPorts(t *testing.T) {
	slice := func(port string, eps ...discoveryv1.Endpoint) discoveryv1.EndpointSlice {
		return discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: &port}}, Endpoints: eps}
	}
	ep := func(uid string, ready *bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{UID: types.UID(uid)}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	yes, no := true, false
	got := readyPorts([]discoveryv1.EndpointSlice{
		slice("web", ep("a", &yes), ep("b", &no), ep("c", nil)),
		slice("smtp", ep("a", &no)),
	})
	want := map[types.UID]map[string]bool{"a": {"web": true}, "c": {"web": true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("readyPorts = %v, want %v (nil ready means ready)", got, want)
	}

	// The built-in controller's slices hold every port of the Service.
	web, smtp := "web", "smtp"
	builtin := discoveryv1.EndpointSlice{
		Ports:     []discoveryv1.EndpointPort{{Name: &web}, {Name: &smtp}},
		Endpoints: []discoveryv1.Endpoint{ep("d", &yes), ep("e", &no)},
	}
	got = readyPorts([]discoveryv1.EndpointSlice{builtin})
	want = map[types.UID]map[string]bool{"d": {"smtp": true, "web": true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("readyPorts of a multi-port slice = %v, want %v", got, want)
	}
}
