package endpoints

import (
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestGroupingRules walks the grouping rules of docs/concepts.md ("Which
// pods, which ports": probes are grouped by the port they check, and a
// probe's targetPort decides which), each case naming the rule it checks.
func TestGroupingRules(t *testing.T) {
	http := svcPort("http", 80, num(8080))
	smtp := svcPort("smtp", 25, num(2525))
	ready := testPod("p", []string{"10.0.0.1"})
	unready := testPod("p", []string{"10.0.0.1"}, notReady)
	named := testPod("p", []string{"10.0.0.1"}, namedPorts("web", 8080, "mail", 2525, "health", 9000))

	tests := []struct {
		rule    string
		ports   []corev1.ServicePort
		probes  []intstr.IntOrString
		pod     *corev1.Pod
		passing ProbeSet
		want    []PortVerdict
	}{
		{
			rule:    "a failing probe stops traffic on its port only; the other ports keep working",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080), num(2525)),
			pod:     ready,
			passing: ProbeSetOf(1),
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "a failing probe stops traffic on its port only, even when the other port has no probe",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080)),
			pod:     ready,
			passing: 0,
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "several probes on one port must all pass: one fails",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080), num(8080), num(2525)),
			pod:     ready,
			passing: ProbeSetOf(0, 2),
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "several probes on one port must all pass: all pass",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080), num(8080), num(2525)),
			pod:     ready,
			passing: ProbeSetOf(0, 1, 2),
			want:    []PortVerdict{{8080, true}, {2525, true}},
		},
		{
			rule:    "targetPort matching one of spec.ports checks that port only (passing)",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(2525)),
			pod:     unready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "targetPort matching none of the ports (a health port) applies to the whole pod: failure stops every port",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(9000)),
			pod:     ready,
			passing: 0,
			want:    []PortVerdict{{8080, false}, {2525, false}},
		},
		{
			rule:    "a pod-wide probe that passes gates every port, and readiness no longer matters",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(9000)),
			pod:     unready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, true}, {2525, true}},
		},
		{
			rule:    "a pod-wide probe failing stops a port that passes its own probe",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080), num(9000)),
			pod:     ready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, false}, {2525, false}},
		},
		{
			rule:    "a port no probe checks publishes on pod readiness alone: ready",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080)),
			pod:     ready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, true}, {2525, true}},
		},
		{
			rule:    "a port no probe checks publishes on pod readiness alone: not ready",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(num(8080)),
			pod:     unready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, true}, {2525, false}},
		},
		{
			rule:   "no probes at all: every port follows readiness, like a plain Service",
			ports:  []corev1.ServicePort{http, smtp},
			probes: nil,
			pod:    unready,
			want:   []PortVerdict{{8080, false}, {2525, false}},
		},
		{
			rule:    "a probed port does not require the pod's Ready condition",
			ports:   []corev1.ServicePort{http},
			probes:  targets(num(8080)),
			pod:     unready,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, true}},
		},
		{
			rule:    "an unset targetPort means the port number",
			ports:   []corev1.ServicePort{{Name: "http", Port: 8080}},
			probes:  targets(num(8080)),
			pod:     ready,
			passing: 0,
			want:    []PortVerdict{{8080, false}},
		},
		{
			rule:    "a probe compares with the targetPort, not the Service port",
			ports:   []corev1.ServicePort{http},
			probes:  targets(num(80)),
			pod:     ready,
			passing: 0,
			want:    []PortVerdict{{8080, false}}, // 80 matches no targetPort: pod-wide
		},
		{
			rule:    "a named targetPort and a numeric probe port match when the name resolves to that number",
			ports:   []corev1.ServicePort{svcPort("http", 80, name("web")), smtp},
			probes:  targets(num(8080)),
			pod:     named,
			passing: 0,
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "a named probe port matches a numeric targetPort it resolves to",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(name("mail")),
			pod:     named,
			passing: 0,
			want:    []PortVerdict{{8080, true}, {2525, false}},
		},
		{
			rule:    "equal names match",
			ports:   []corev1.ServicePort{svcPort("http", 80, name("web")), smtp},
			probes:  targets(name("web")),
			pod:     named,
			passing: 0,
			want:    []PortVerdict{{8080, false}, {2525, true}},
		},
		{
			rule:    "a named probe resolving to no Service port is a pod-wide health port",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(name("health")),
			pod:     named,
			passing: 0,
			want:    []PortVerdict{{8080, false}, {2525, false}},
		},
		{
			rule:    "a named probe that resolves to nothing on the pod matches no port: pod-wide",
			ports:   []corev1.ServicePort{http, smtp},
			probes:  targets(name("missing")),
			pod:     named,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{8080, true}, {2525, true}},
		},
		{
			rule:    "a named targetPort that does not resolve leaves the pod out of that port",
			ports:   []corev1.ServicePort{svcPort("http", 80, name("missing")), smtp},
			probes:  targets(num(2525)),
			pod:     named,
			passing: ProbeSetOf(0),
			want:    []PortVerdict{{0, false}, {2525, true}},
		},
		{
			rule:   "a named targetPort resolves only to a container port of its protocol",
			ports:  []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: name("web")}},
			probes: nil,
			pod:    named,
			want:   []PortVerdict{{0, false}},
		},
		{
			rule:    "probes compare by number: one probe checks both a TCP and a UDP port on the same number",
			ports:   []corev1.ServicePort{svcPort("dns-tcp", 53, num(53)), {Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP}},
			probes:  targets(num(53)),
			pod:     ready,
			passing: 0,
			want:    []PortVerdict{{53, false}, {53, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			g, err := NewGrouping(tt.ports, tt.probes)
			if err != nil {
				t.Fatal(err)
			}
			got := g.Verdicts(tt.pod, tt.passing)
			if !slices.Equal(got, tt.want) {
				t.Errorf("verdicts = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestGroupingPerPod checks that names resolve per pod: the same probe
// gates a named port on one pod and the whole pod on another.
func TestGroupingPerPod(t *testing.T) {
	ports := []corev1.ServicePort{svcPort("http", 80, name("web")), svcPort("metrics", 9090, num(9090))}
	g, err := NewGrouping(ports, targets(num(8080)))
	if err != nil {
		t.Fatal(err)
	}
	if g.static != nil {
		t.Error("gates precomputed with a named targetPort")
	}
	a := testPod("a", nil, namedPorts("web", 8080))
	b := testPod("b", nil, namedPorts("web", 8081))
	if got, want := g.Gates(a), []PortGate{{8080, ProbeSetOf(0)}, {9090, 0}}; !slices.Equal(got, want) {
		t.Errorf("pod a: gates = %v, want %v", got, want)
	}
	// On b the probe port is no Service port: it gates everything.
	if got, want := g.Gates(b), []PortGate{{8081, ProbeSetOf(0)}, {9090, ProbeSetOf(0)}}; !slices.Equal(got, want) {
		t.Errorf("pod b: gates = %v, want %v", got, want)
	}
}

func TestGroupingSidecarPort(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := testPod("p", nil, func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{
			{Name: "init", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 1}}},
			{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 15001}}},
		}
	})
	if got, ok := ResolvePort(pod, name("web"), corev1.ProtocolTCP); !ok || got != 15001 {
		t.Errorf("ResolvePort = %d, %v; want the sidecar's 15001", got, ok)
	}
}

func TestGroupingStatic(t *testing.T) {
	g, err := NewGrouping([]corev1.ServicePort{svcPort("a", 1, num(10)), svcPort("b", 2, num(20))}, targets(num(20), num(30), num(20)))
	if err != nil {
		t.Fatal(err)
	}
	if g.static == nil || g.NumProbes() != 3 {
		t.Fatalf("gates precomputed: %v, %d probes", g.static != nil, g.NumProbes())
	}
	want := []PortGate{{10, ProbeSetOf(1)}, {20, ProbeSetOf(0, 1, 2)}}
	buf := make([]PortGate, 0, 4)
	for range 3 {
		buf = g.appendGates(buf[:0], nil)
		if !slices.Equal(buf, want) {
			t.Fatalf("gates = %v, want %v", buf, want)
		}
	}
	// The shared precomputed gates must not leak: mutate a result.
	got := g.Gates(nil)
	got[0].Port = 1
	if again := g.Gates(nil); !slices.Equal(again, want) {
		t.Errorf("gates changed after a caller's write: %v", again)
	}
	if n := testing.AllocsPerRun(100, func() { buf = g.appendGates(buf[:0], nil) }); n != 0 {
		t.Errorf("appendGates allocates %v times per call", n)
	}
}

func TestNewGroupingErrors(t *testing.T) {
	tooMany := make([]intstr.IntOrString, MaxProbes+1)
	for i := range tooMany {
		tooMany[i] = num(i + 1)
	}
	tests := []struct {
		name   string
		ports  []corev1.ServicePort
		probes []intstr.IntOrString
	}{
		{"too many probes", nil, tooMany},
		{"probe port 0", nil, targets(num(0))},
		{"probe port too big", nil, targets(num(70000))},
		{"empty probe name", nil, targets(name(""))},
		{"service port 0", []corev1.ServicePort{{Name: "a"}}, nil},
		{"target too big", []corev1.ServicePort{svcPort("a", 1, num(65536))}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewGrouping(tt.ports, tt.probes); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := NewGrouping(nil, tooMany[:MaxProbes]); err != nil {
		t.Errorf("%d probes: %v", MaxProbes, err)
	}
}

func TestProbeSet(t *testing.T) {
	s := ProbeSetOf(0, 3, 63, 64, -1)
	if s.Len() != 3 || !s.Has(63) || s.Has(64) || s.Has(1) {
		t.Errorf("set %v: Len %d", s, s.Len())
	}
	if got := s.String(); got != "{0,3,63}" {
		t.Errorf("String = %q", got)
	}
	if !s.Contains(ProbeSetOf(0, 63)) || s.Contains(ProbeSetOf(1)) || !s.Contains(0) {
		t.Error("Contains")
	}
	if s.Without(3) != ProbeSetOf(0, 63) || !ProbeSet(0).Empty() {
		t.Error("Without or Empty")
	}
	if got := slices.Collect(s.All()); !slices.Equal(got, []int{0, 3, 63}) {
		t.Errorf("All = %v", got)
	}
}

func TestPortGateVerdict(t *testing.T) {
	gate := PortGate{Port: 80, Probes: ProbeSetOf(1, 2)}
	for _, tt := range []struct {
		passing ProbeSet
		ready   bool
		want    bool
	}{
		{ProbeSetOf(1, 2), false, true},
		{ProbeSetOf(1, 2, 5), false, true},
		{ProbeSetOf(1), true, false},
		{0, true, false},
	} {
		if got := gate.Verdict(tt.passing, tt.ready); got != (PortVerdict{80, tt.want}) {
			t.Errorf("Verdict(%v, %v) = %v", tt.passing, tt.ready, got)
		}
	}
	open := PortGate{Port: 80}
	if !open.Verdict(0, true).Passing || open.Verdict(ProbeSetOf(0), false).Passing {
		t.Error("an ungated port must follow readiness")
	}
}

func BenchmarkGroupingNamed(b *testing.B) {
	g, err := NewGrouping([]corev1.ServicePort{svcPort("http", 80, name("web")), svcPort("smtp", 25, num(2525))},
		targets(num(8080), name("mail"), num(9000)))
	if err != nil {
		b.Fatal(err)
	}
	pod := testPod("p", nil, namedPorts("web", 8080, "mail", 2525))
	buf := make([]PortVerdict, 0, 2)
	for b.Loop() {
		buf = g.appendVerdicts(buf[:0], pod, ProbeSetOf(0, 1))
	}
}
