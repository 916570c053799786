package endpoints

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var node1 = Node{Name: "node1", Zone: "zone-a"}

func verdicts(v ...PortVerdict) []PortVerdict { return v }
func pass(port int32) PortVerdict             { return PortVerdict{Port: port, Passing: true} }
func fail(port int32) PortVerdict             { return PortVerdict{Port: port} }

func briefs(ss []discoveryv1.EndpointSlice) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = brief(s)
	}
	return out
}

// TestBuild walks the cases of docs/concepts.md, "EndpointSlices: names and
// contents": names, suffixes, ports, labels, conditions and families.
func TestBuild(t *testing.T) {
	http := svcPort("http", 80, num(8080))
	smtp := svcPort("smtp", 25, num(2525))
	unnamed := svcPort("", 80, num(8080))
	dual := []string{"10.0.0.1", "fd00::1"}
	tests := []struct {
		name string
		svc  Service
		opts Options
		pods []PodVerdicts
		want []string // brief of each slice
	}{
		{
			name: "one slice per port per node, each with the pods that passed that port",
			svc:  testService(http, smtp),
			pods: []PodVerdicts{
				{testPod("a", []string{"10.0.0.1"}), verdicts(pass(8080), fail(2525))},
				{testPod("b", []string{"10.0.0.2"}), verdicts(fail(8080), pass(2525))},
			},
			want: []string{
				"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(RS-) b@10.0.0.2(---)",
				"web-smtp-node1 IPv4 smtp/TCP:2525 a@10.0.0.1(---) b@10.0.0.2(RS-)",
			},
		},
		{
			name: "a single unnamed port is named <resource>-<node>",
			svc:  testService(unnamed),
			pods: []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), verdicts(pass(8080))}},
			want: []string{"web-node1 IPv4 /TCP:8080 a@10.0.0.1(RS-)"},
		},
		{
			name: "the endpoint port is the Service's targetPort, resolved",
			svc:  testService(svcPort("http", 80, name("web"))),
			pods: []PodVerdicts{{testPod("a", []string{"10.0.0.1"}, namedPorts("web", 8443)), verdicts(pass(8443))}},
			want: []string{"web-http-node1 IPv4 http/TCP:8443 a@10.0.0.1(RS-)"},
		},
		{
			name: "a terminating pod: ready false, serving = passing, terminating true",
			svc:  testService(http),
			pods: []PodVerdicts{
				{testPod("a", []string{"10.0.0.1"}, terminating), verdicts(pass(8080))},
				{testPod("b", []string{"10.0.0.2"}, terminating), verdicts(fail(8080))},
			},
			want: []string{"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(-ST) b@10.0.0.2(--T)"},
		},
		{
			name: "publishNotReadyAddresses publishes every running pod with an IP as ready",
			svc:  func() Service { s := testService(http); s.PublishNotReadyAddresses = true; return s }(),
			pods: []PodVerdicts{
				{testPod("a", []string{"10.0.0.1"}, notReady), verdicts(fail(8080))},
				{testPod("b", []string{"10.0.0.2"}, terminating), verdicts(fail(8080))},
				{testPod("c", nil), verdicts(pass(8080))},
			},
			want: []string{"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(R--) b@10.0.0.2(R-T)"},
		},
		{
			name: "pods without an IP and finished pods are left out",
			svc:  testService(http),
			pods: []PodVerdicts{
				{testPod("none", nil), verdicts(pass(8080))},
				{testPod("done", []string{"10.0.0.2"}, phase(corev1.PodSucceeded)), verdicts(pass(8080))},
				{testPod("dead", []string{"10.0.0.3"}, phase(corev1.PodFailed)), verdicts(pass(8080))},
				{testPod("pending", []string{"10.0.0.4"}, phase(corev1.PodPending)), verdicts(fail(8080))},
			},
			want: []string{"web-http-node1 IPv4 http/TCP:8080 pending@10.0.0.4(---)"},
		},
		{
			name: "a pod whose port does not resolve is left out of that port only",
			svc:  testService(http, smtp),
			pods: []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), verdicts(PortVerdict{}, pass(2525))}},
			want: []string{"web-smtp-node1 IPv4 smtp/TCP:2525 a@10.0.0.1(RS-)"},
		},
		{
			name: "no pods, no slices",
			svc:  testService(http),
			want: []string{},
		},
		{
			name: "a Service without ports publishes nothing",
			svc:  testService(),
			pods: []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), nil}},
			want: []string{},
		},
		{
			name: "dual-stack pods split into IPv4 and IPv6 slices",
			svc:  func() Service { s := testService(http); s.IPFamilies = []corev1.IPFamily{"IPv4", "IPv6"}; return s }(),
			pods: []PodVerdicts{{testPod("a", dual), verdicts(pass(8080))}},
			want: []string{
				"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(RS-)",
				"web-http-node1-v6 IPv6 http/TCP:8080 a@fd00::1(RS-)",
			},
		},
		{
			name: "an IPv6-first Service names its IPv6 slices plainly",
			svc:  func() Service { s := testService(http); s.IPFamilies = []corev1.IPFamily{"IPv6", "IPv4"}; return s }(),
			pods: []PodVerdicts{{testPod("a", dual), verdicts(pass(8080))}},
			want: []string{
				"web-http-node1 IPv6 http/TCP:8080 a@fd00::1(RS-)",
				"web-http-node1-v4 IPv4 http/TCP:8080 a@10.0.0.1(RS-)",
			},
		},
		{
			name: "a single-stack Service publishes only its family",
			svc:  func() Service { s := testService(http); s.IPFamilies = []corev1.IPFamily{"IPv4"}; return s }(),
			pods: []PodVerdicts{{testPod("a", dual), verdicts(pass(8080))}, {testPod("b", []string{"fd00::2"}), verdicts(pass(8080))}},
			want: []string{"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(RS-)"},
		},
		{
			name: "a Service without families publishes every family the pods have",
			svc:  testService(http),
			pods: []PodVerdicts{{testPod("a", []string{"fd00::1"}), verdicts(pass(8080))}},
			want: []string{"web-http-node1-v6 IPv6 http/TCP:8080 a@fd00::1(RS-)"},
		},
		{
			name: "a named targetPort resolving to different numbers: one slice per number, the smallest plain",
			svc:  testService(svcPort("http", 80, name("web")), smtp),
			pods: []PodVerdicts{
				{testPod("new", []string{"10.0.0.1"}), verdicts(pass(9090), pass(2525))},
				{testPod("old", []string{"10.0.0.2"}), verdicts(pass(8080), pass(2525))},
				{testPod("older", []string{"10.0.0.3"}), verdicts(fail(7070), pass(2525))},
			},
			want: []string{
				"web-http-node1 IPv4 http/TCP:7070 older@10.0.0.3(---)",
				"web-http-node1-p8080 IPv4 http/TCP:8080 old@10.0.0.2(RS-)",
				"web-http-node1-p9090 IPv4 http/TCP:9090 new@10.0.0.1(RS-)",
				"web-smtp-node1 IPv4 smtp/TCP:2525 new@10.0.0.1(RS-) old@10.0.0.2(RS-) older@10.0.0.3(RS-)",
			},
		},
		{
			name: "more endpoints than fit in one slice are split",
			svc:  testService(http),
			opts: Options{MaxEndpointsPerSlice: 2},
			pods: []PodVerdicts{
				{testPod("e", []string{"10.0.0.5"}), verdicts(pass(8080))},
				{testPod("d", []string{"10.0.0.4"}), verdicts(pass(8080))},
				{testPod("c", []string{"10.0.0.3"}), verdicts(pass(8080))},
				{testPod("b", []string{"10.0.0.2"}), verdicts(pass(8080))},
				{testPod("a", []string{"10.0.0.10"}), verdicts(pass(8080))},
			},
			want: []string{
				"web-http-node1 IPv4 http/TCP:8080 b@10.0.0.2(RS-) c@10.0.0.3(RS-)",
				"web-http-node1-c2 IPv4 http/TCP:8080 d@10.0.0.4(RS-) e@10.0.0.5(RS-)",
				"web-http-node1-c3 IPv4 http/TCP:8080 a@10.0.0.10(RS-)",
			},
		},
		{
			name: "pod IPs are published in canonical form; unusable ones are skipped",
			svc:  testService(http),
			pods: []PodVerdicts{
				{testPod("mapped", []string{"::ffff:10.0.0.1"}), verdicts(pass(8080))},
				{testPod("zeros", []string{"010.000.000.002"}), verdicts(pass(8080))},
				{testPod("upper", []string{"FD00:0:0::0A"}), verdicts(pass(8080))},
				{testPod("loop", []string{"127.0.0.1"}), verdicts(pass(8080))},
				{testPod("linklocal", []string{"169.254.1.1", "fe80::1"}), verdicts(pass(8080))},
				{testPod("junk", []string{"not-an-ip"}), verdicts(pass(8080))},
			},
			want: []string{
				"web-http-node1 IPv4 http/TCP:8080 mapped@10.0.0.1(RS-) zeros@10.0.0.2(RS-)",
				"web-http-node1-v6 IPv6 http/TCP:8080 upper@fd00::a(RS-)",
			},
		},
		{
			name: "status.podIP alone is enough",
			svc:  testService(http),
			pods: []PodVerdicts{{func() *corev1.Pod {
				p := testPod("a", nil)
				p.Status.PodIP = "10.0.0.1"
				return p
			}(), verdicts(pass(8080))}},
			want: []string{"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(RS-)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build(tt.svc, node1, tt.pods, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if b := briefs(got); !slices.Equal(b, tt.want) {
				t.Errorf("slices:\n  %s\nwant:\n  %s", strings.Join(b, "\n  "), strings.Join(tt.want, "\n  "))
			}
			for i := range got {
				checkSlice(t, &got[i])
			}
		})
	}
}

// TestBuildObject checks every field of one slice against the table of
// docs/concepts.md, "EndpointSlices: names and contents".
func TestBuildObject(t *testing.T) {
	svc := testService(svcPort("http", 80, num(8080)))
	svc.Ports[0].AppProtocol = new("kubernetes.io/h2c")
	pod := testPod("a", []string{"10.0.0.1"}, func(p *corev1.Pod) {
		p.Spec.Hostname = "a-host"
		p.Spec.Subdomain = "web"
	})
	got, err := Build(svc, node1, []PodVerdicts{{pod, verdicts(pass(8080))}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "web-http-node1",
			Namespace: "ns",
			Labels: map[string]string{
				"kubernetes.io/service-name":             "web",
				"endpointslice.kubernetes.io/managed-by": "agent.network.swh.dev",
				"network.swh.dev/node":                   "node1",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "svc-uid", Controller: new(true)}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(8080)), AppProtocol: new("kubernetes.io/h2c")}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.0.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true), Serving: new(true), Terminating: new(false)},
			Hostname:   new("a-host"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "a", UID: "uid-a"},
			NodeName:   new("node1"),
			Zone:       new("zone-a"),
		}},
	}
	if len(got) != 1 {
		t.Fatalf("%d slices", len(got))
	}
	if gs, ws := fmt.Sprintf("%+v", got[0]), fmt.Sprintf("%+v", want); !UpToDate(&got[0], &want) || len(got[0].Labels) != len(want.Labels) {
		t.Errorf("slice:\n%s\nwant:\n%s", gs, ws)
	}
	// Pointers must not alias the caller's objects or each other.
	*got[0].Endpoints[0].Hostname = "changed"
	*got[0].Endpoints[0].NodeName = "changed"
	if pod.Spec.Hostname != "a-host" {
		t.Error("the slice aliases the pod")
	}
}

func TestBuildLabels(t *testing.T) {
	pods := []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), verdicts(pass(8080))}}
	tests := []struct {
		name   string
		svc    func(*Service)
		node   string
		opts   Options
		want   map[string]string
		absent []string
	}{
		{
			name:   "plain: no headless, no service-proxy-name",
			absent: []string{corev1.IsHeadlessService, LabelServiceProxyName},
		},
		{
			name:   "headless copies service.kubernetes.io/headless",
			svc:    func(s *Service) { s.Headless = true },
			want:   map[string]string{corev1.IsHeadlessService: ""},
			absent: []string{LabelServiceProxyName},
		},
		{
			name: "service-proxy-name copied only when the Service has it",
			svc:  func(s *Service) { s.ProxyName = "my-proxy" },
			want: map[string]string{LabelServiceProxyName: "my-proxy"},
		},
		{
			name: "a node name too long for a label value is digested",
			node: strings.Repeat("n", 70),
			want: map[string]string{DefaultNodeLabel: NodeLabelValue(strings.Repeat("n", 70))},
		},
		{
			name: "another manager and node label key",
			opts: Options{ManagedBy: "other-controller", NodeLabel: "example.com/node"},
			want: map[string]string{discoveryv1.LabelManagedBy: "other-controller", "example.com/node": "node1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(svcPort("http", 80, num(8080)))
			if tt.svc != nil {
				tt.svc(&svc)
			}
			node := node1
			ps := pods
			if tt.node != "" {
				node.Name = tt.node
				p := testPod("a", []string{"10.0.0.1"})
				p.Spec.NodeName = tt.node
				ps = []PodVerdicts{{p, verdicts(pass(8080))}}
			}
			got, err := Build(svc, node, ps, tt.opts)
			if err != nil || len(got) != 1 {
				t.Fatalf("%d slices, %v", len(got), err)
			}
			l := got[0].Labels
			if l[discoveryv1.LabelServiceName] != "web" {
				t.Errorf("service-name = %q", l[discoveryv1.LabelServiceName])
			}
			for k, v := range tt.want {
				if got, ok := l[k]; !ok || got != v {
					t.Errorf("label %s = %q (%v), want %q", k, got, ok, v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := l[k]; ok {
					t.Errorf("label %s is set", k)
				}
			}
			checkSlice(t, &got[0])
		})
	}
}

func TestServiceFromAndNodeFrom(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u", Labels: map[string]string{LabelServiceProxyName: "p"}},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true,
			Ports:      []corev1.ServicePort{svcPort("http", 80, num(8080))},
			IPFamilies: []corev1.IPFamily{corev1.IPv6Protocol},
		},
	}
	got := ServiceFrom(svc)
	if got.Name != "web" || got.Namespace != "ns" || got.UID != "u" || !got.Headless || !got.PublishNotReadyAddresses ||
		got.ProxyName != "p" || len(got.Ports) != 1 || got.IPFamilies[0] != corev1.IPv6Protocol {
		t.Errorf("ServiceFrom = %+v", got)
	}
	svc.Spec.ClusterIP = ""
	if ServiceFrom(svc).Headless {
		t.Error("an unallocated clusterIP is not headless")
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{corev1.LabelTopologyZone: "z"}}}
	if got := NodeFrom(node); got != (Node{Name: "n", Zone: "z"}) {
		t.Errorf("NodeFrom = %+v", got)
	}
}

// TestBuildThousands checks the 1000-endpoint limit for real and that the
// output does not depend on the order of the pods.
func TestBuildThousands(t *testing.T) {
	svc := testService(svcPort("http", 80, num(8080)))
	svc.IPFamilies = []corev1.IPFamily{"IPv4", "IPv6"}
	var pods []PodVerdicts
	for i := range 2500 {
		ips := []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), fmt.Sprintf("fd00::%x", i+1)}
		pods = append(pods, PodVerdicts{testPod(fmt.Sprintf("p%d", i), ips), verdicts(PortVerdict{8080, i%3 == 0})})
	}
	got, err := Build(svc, node1, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range got {
		names = append(names, fmt.Sprintf("%s:%d", got[i].Name, len(got[i].Endpoints)))
		checkSlice(t, &got[i])
	}
	want := []string{"web-http-node1:1000", "web-http-node1-c2:1000", "web-http-node1-c3:500",
		"web-http-node1-v6:1000", "web-http-node1-v6-c2:1000", "web-http-node1-v6-c3:500"}
	if !slices.Equal(names, want) {
		t.Errorf("slices %v, want %v", names, want)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	again, err := Build(svc, node1, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, again, func(a, b discoveryv1.EndpointSlice) bool { return UpToDate(&b, &a) }) {
		t.Error("output depends on the order of the pods")
	}
}

func TestBuildErrors(t *testing.T) {
	http := svcPort("http", 80, num(8080))
	good := []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), verdicts(pass(8080))}}
	tests := []struct {
		name string
		svc  func(*Service)
		node string
		pods []PodVerdicts
		opts Options
	}{
		{name: "invalid service name", svc: func(s *Service) { s.Name = "Web" }},
		{name: "no namespace", svc: func(s *Service) { s.Namespace = "" }},
		{name: "no UID", svc: func(s *Service) { s.UID = "" }},
		{name: "unnamed port among several", svc: func(s *Service) { s.Ports = []corev1.ServicePort{http, svcPort("", 81, num(1))} }},
		{name: "repeated port name", svc: func(s *Service) { s.Ports = []corev1.ServicePort{http, http} }},
		{name: "invalid port name", svc: func(s *Service) { s.Ports[0].Name = "HTTP" }},
		{name: "bad protocol", svc: func(s *Service) { s.Ports[0].Protocol = "ICMP" }},
		{name: "bad family", svc: func(s *Service) { s.IPFamilies = []corev1.IPFamily{"IPv5"} }},
		{name: "repeated family", svc: func(s *Service) { s.IPFamilies = []corev1.IPFamily{"IPv4", "IPv4"} }},
		{name: "bad proxy name", svc: func(s *Service) { s.ProxyName = "a/b" }},
		{name: "invalid node name", node: "Node_1"},
		{name: "nil pod", pods: []PodVerdicts{{}}},
		{name: "pod of another node", pods: []PodVerdicts{{testPod("a", nil, func(p *corev1.Pod) { p.Spec.NodeName = "node2" }), verdicts(pass(8080))}}},
		{name: "pod of another namespace", pods: []PodVerdicts{{testPod("a", nil, func(p *corev1.Pod) { p.Namespace = "other" }), verdicts(pass(8080))}}},
		{name: "verdict count", pods: []PodVerdicts{{testPod("a", nil), nil}}},
		{name: "verdict port out of range", pods: []PodVerdicts{{testPod("a", []string{"10.0.0.1"}), verdicts(pass(70000))}}},
		{name: "bad managed-by", opts: Options{ManagedBy: "a/b"}},
		{name: "bad node label", opts: Options{NodeLabel: "a b"}},
		{name: "too many endpoints per slice", opts: Options{MaxEndpointsPerSlice: 1001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := testService(http)
			if tt.svc != nil {
				tt.svc(&svc)
			}
			node := node1
			if tt.node != "" {
				node.Name = tt.node
			}
			pods := good
			if tt.pods != nil {
				pods = tt.pods
			}
			if _, err := Build(svc, node, pods, tt.opts); !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

// TestBuildWithGrouping runs the agent's path end to end: grouping, verdicts,
// build.
func TestBuildWithGrouping(t *testing.T) {
	svc := testService(svcPort("http", 80, name("web")), svcPort("smtp", 25, num(2525)))
	g, err := NewGrouping(svc.Ports, []intstr.IntOrString{num(8080), name("mail"), num(9000)})
	if err != nil {
		t.Fatal(err)
	}
	a := testPod("a", []string{"10.0.0.1"}, notReady, namedPorts("web", 8080, "mail", 2525))
	b := testPod("b", []string{"10.0.0.2"}, namedPorts("web", 8080, "mail", 2525))
	passing := map[string]ProbeSet{"a": ProbeSetOf(0, 2), "b": ProbeSetOf(0, 1)}
	var pods []PodVerdicts
	for _, p := range []*corev1.Pod{a, b} {
		pods = append(pods, PodVerdicts{p, g.Verdicts(p, passing[p.Name])})
	}
	got, err := Build(svc, node1, pods, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		// a: http passes though a is not Ready; smtp's probe fails.
		// b: the health probe (9000) fails, so b leaves every port.
		"web-http-node1 IPv4 http/TCP:8080 a@10.0.0.1(RS-) b@10.0.0.2(---)",
		"web-smtp-node1 IPv4 smtp/TCP:2525 a@10.0.0.1(---) b@10.0.0.2(---)",
	}
	if b := briefs(got); !slices.Equal(b, want) {
		t.Errorf("slices:\n  %s\nwant:\n  %s", strings.Join(b, "\n  "), strings.Join(want, "\n  "))
	}
}

func BenchmarkBuild(b *testing.B) {
	svc := testService(svcPort("http", 80, num(8080)), svcPort("smtp", 25, num(2525)))
	var pods []PodVerdicts
	for i := range 200 {
		pods = append(pods, PodVerdicts{testPod(fmt.Sprintf("p%d", i), []string{fmt.Sprintf("10.1.0.%d", i+1)}), verdicts(pass(8080), fail(2525))})
	}
	for b.Loop() {
		if _, err := Build(svc, node1, pods, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBuildNamesUnique: distinct parts can spell the same name (port "x" on
// node "c2" has a second chunk "web-x-c2-c2", port "x-c2" has "web-x-c2-c2");
// Build still returns distinct names, the same ones every time.
func TestBuildNamesUnique(t *testing.T) {
	svc := testService(svcPort("x", 1, num(1)), svcPort("x-c2", 2, num(2)))
	onC2 := func(p *corev1.Pod) { p.Spec.NodeName = "c2" }
	pods := []PodVerdicts{
		{testPod("a", []string{"10.0.0.1"}, onC2), verdicts(pass(1), pass(2))},
		{testPod("b", []string{"10.0.0.2"}, onC2), verdicts(pass(1), PortVerdict{})},
	}
	var first []string
	for range 2 {
		got, err := Build(svc, Node{Name: "c2"}, pods, Options{MaxEndpointsPerSlice: 1})
		if err != nil {
			t.Fatal(err)
		}
		names := names(got)
		if len(names) != 3 || len(slices.Compact(slices.Clone(names))) != 3 {
			t.Fatalf("names %v", names)
		}
		for i := range got {
			checkSlice(t, &got[i])
		}
		if first != nil && !slices.Equal(first, names) {
			t.Errorf("names %v then %v", first, names)
		}
		first = names
	}
	if !slices.Contains(first, "web-x-c2") || !slices.Contains(first, "web-x-c2-c2") {
		t.Errorf("names %v", first)
	}
}

// TestBuildHints: spec.trafficDistribution takes effect only through hints,
// which Build sets as k8s.io/endpointslice/trafficdist does.
func TestBuildHints(t *testing.T) {
	zoneless := Node{Name: "node2"}
	cases := []struct {
		name         string
		distribution string
		node         Node
		passing      bool
		want         string
	}{
		{"no distribution", "", node1, true, "<nil>"},
		{"PreferClose", corev1.ServiceTrafficDistributionPreferClose, node1, true, "zones=[zone-a] nodes=[]"},
		{"PreferSameZone", corev1.ServiceTrafficDistributionPreferSameZone, node1, true, "zones=[zone-a] nodes=[]"},
		{"PreferSameNode", corev1.ServiceTrafficDistributionPreferSameNode, node1, true, "zones=[zone-a] nodes=[node1]"},
		{"PreferSameNode without a zone", corev1.ServiceTrafficDistributionPreferSameNode, zoneless, true, "zones=[] nodes=[node2]"},
		{"PreferSameZone without a zone", corev1.ServiceTrafficDistributionPreferSameZone, zoneless, true, "<nil>"},
		{"not ready gets none", corev1.ServiceTrafficDistributionPreferSameNode, node1, false, "<nil>"},
		{"unknown value", "Elsewhere", node1, true, "<nil>"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := testService(svcPort("http", 80, num(8080)))
			svc.TrafficDistribution = c.distribution
			pod := testPod("a", []string{"10.0.0.1"}, func(p *corev1.Pod) { p.Spec.NodeName = c.node.Name })
			v := pass(8080)
			v.Passing = c.passing
			got, err := Build(svc, c.node, []PodVerdicts{{pod, verdicts(v)}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := got[0].Endpoints[0].Hints
			s := "<nil>"
			if h != nil {
				var zones, nodes []string
				for _, z := range h.ForZones {
					zones = append(zones, z.Name)
				}
				for _, n := range h.ForNodes {
					nodes = append(nodes, n.Name)
				}
				s = fmt.Sprintf("zones=%v nodes=%v", zones, nodes)
			}
			if s != c.want {
				t.Errorf("hints %s, want %s", s, c.want)
			}
		})
	}
}
