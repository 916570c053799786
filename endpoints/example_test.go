package endpoints_test

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/swh-dev/swh/endpoints"
)

// examplePod is a running pod of namespace shop on node worker-1.
func examplePod(name, ip string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			NodeName: "worker-1",
			Containers: []corev1.Container{{
				Name:  "vm",
				Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}, {Name: "mail", ContainerPort: 2525}},
			}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIPs:     []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
		},
	}
}

// A virtual machine in a pod (docs/design.md): a web server and an SMTP
// server in one pod, each port gated by its own probe, plus a health port
// that gates both.
func ExampleNewGrouping() {
	ports := []corev1.ServicePort{
		{Name: "http", Port: 80, TargetPort: intstr.FromString("web")}, // resolves to 8080 on the pod
		{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525)},
		{Name: "metrics", Port: 9100}, // no probe checks it
	}
	probes := []intstr.IntOrString{
		intstr.FromInt32(8080),    // 0: checks http (a number matching a named targetPort)
		intstr.FromString("mail"), // 1: checks smtp (a name matching a number)
		intstr.FromInt32(8080),    // 2: also checks http: both must pass
	}
	g, err := endpoints.NewGrouping(ports, probes)
	if err != nil {
		panic(err)
	}
	pod := examplePod("vm-0", "10.244.0.5", false)
	for i, gate := range g.Gates(pod) {
		fmt.Printf("%s: endpoint port %d, gated by %v\n", ports[i].Name, gate.Port, gate.Probes)
	}
	// Probe 2 fails: http stops, smtp goes on, metrics follows readiness
	// (the pod is not Ready, which does not matter to the probed ports).
	fmt.Println(g.Verdicts(pod, endpoints.ProbeSetOf(0, 1)))

	// A probe on a port no Service port uses is a health port: it gates all.
	g, _ = endpoints.NewGrouping(ports, []intstr.IntOrString{intstr.FromInt32(9000)})
	fmt.Println(g.Gates(pod))
	// Output:
	// http: endpoint port 8080, gated by {0,2}
	// smtp: endpoint port 2525, gated by {1}
	// metrics: endpoint port 9100, gated by {}
	// [{8080 false} {2525 true} {9100 false}]
	// [{8080 {0}} {2525 {0}} {9100 {0}}]
}

func ExampleSliceName() {
	for _, p := range []endpoints.NameParts{
		{Service: "web", Port: "http", Node: "worker-1"},
		{Service: "web", Node: "worker-1"}, // a single unnamed port
		{Service: "web", Port: "http", Node: "worker-1", Family: discoveryv1.AddressTypeIPv6},
		{Service: "web", Port: "http", Node: "worker-1", AltPort: 8443},
		{Service: "web", Port: "http", Node: "worker-1", Chunk: 1},
		{Service: "web", Port: "http", Node: strings.Repeat("n", 250)},
	} {
		name, err := endpoints.SliceName(p)
		if err != nil {
			panic(err)
		}
		fmt.Println(name)
	}
	// Output:
	// web-http-worker-1
	// web-worker-1
	// web-http-worker-1-v6
	// web-http-worker-1-p8443
	// web-http-worker-1-c2
	// web-http-213b83271b358ed9
}

func ExampleNodeLabelValue() {
	fmt.Println(endpoints.NodeLabelValue("worker-1"))
	fmt.Println(endpoints.NodeLabelValue(strings.Repeat("n", 70)))
	// Output:
	// worker-1
	// nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn-85069ddf41673897
}

func ExampleBuild() {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mail", Namespace: "shop", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.96.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("web"), Protocol: corev1.ProtocolTCP},
				{Name: "smtp", Port: 25, TargetPort: intstr.FromInt32(2525), Protocol: corev1.ProtocolTCP},
			},
		},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "worker-1", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"},
	}}
	g, err := endpoints.NewGrouping(svc.Spec.Ports, []intstr.IntOrString{intstr.FromInt32(8080), intstr.FromInt32(2525)})
	if err != nil {
		panic(err)
	}
	passing := map[string]endpoints.ProbeSet{
		"vm-0": endpoints.ProbeSetOf(0, 1), // both servers answer
		"vm-1": endpoints.ProbeSetOf(1),    // the web server does not
	}
	var pods []endpoints.PodVerdicts
	for _, pod := range []*corev1.Pod{examplePod("vm-0", "10.244.0.5", true), examplePod("vm-1", "10.244.0.6", true)} {
		pods = append(pods, endpoints.PodVerdicts{Pod: pod, Ports: g.Verdicts(pod, passing[pod.Name])})
	}
	slices, err := endpoints.Build(endpoints.ServiceFrom(svc), endpoints.NodeFrom(node), pods, endpoints.Options{})
	if err != nil {
		panic(err)
	}
	for _, s := range slices {
		fmt.Printf("%s %s port %s=%d, labels %v\n", s.Name, s.AddressType, *s.Ports[0].Name, *s.Ports[0].Port, s.Labels)
		for _, ep := range s.Endpoints {
			fmt.Printf("  %s %s node=%s zone=%s ready=%v serving=%v terminating=%v\n", ep.TargetRef.Name, ep.Addresses[0],
				*ep.NodeName, *ep.Zone, *ep.Conditions.Ready, *ep.Conditions.Serving, *ep.Conditions.Terminating)
		}
	}
	// Output:
	// mail-http-worker-1 IPv4 port http=8080, labels map[endpointslice.kubernetes.io/managed-by:agent.network.swh.dev kubernetes.io/service-name:mail network.swh.dev/node:worker-1]
	//   vm-0 10.244.0.5 node=worker-1 zone=zone-a ready=true serving=true terminating=false
	//   vm-1 10.244.0.6 node=worker-1 zone=zone-a ready=false serving=false terminating=false
	// mail-smtp-worker-1 IPv4 port smtp=2525, labels map[endpointslice.kubernetes.io/managed-by:agent.network.swh.dev kubernetes.io/service-name:mail network.swh.dev/node:worker-1]
	//   vm-0 10.244.0.5 node=worker-1 zone=zone-a ready=true serving=true terminating=false
	//   vm-1 10.244.0.6 node=worker-1 zone=zone-a ready=true serving=true terminating=false
}

// ExampleRead reads back what an agent's slices publish, pod by pod and
// port by port: the readers of a status, a budget or a CLI get the same
// answer from the same slices.
func ExampleRead() {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "mail", Namespace: "shop", UID: "svc-uid"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		}},
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
	pods := []endpoints.PodVerdicts{
		{Pod: examplePod("vm-0", "10.244.0.5", true), Ports: []endpoints.PortVerdict{{Port: 8080, Passing: true}}},
		{Pod: examplePod("vm-1", "10.244.0.6", true), Ports: []endpoints.PortVerdict{{Port: 8080, Passing: false}}},
	}
	slices, err := endpoints.Build(endpoints.ServiceFrom(svc), endpoints.NodeFrom(node), pods, endpoints.Options{})
	if err != nil {
		panic(err)
	}
	published, err := endpoints.Read(slices, endpoints.Options{})
	if err != nil {
		panic(err)
	}
	for _, p := range published {
		fmt.Printf("%s on %s (node %s): ready=%v available=%v\n", p.Pod.Name, p.Port, p.Node, p.Ready, p.Available())
	}
	// Output:
	// vm-0 on http (node worker-1): ready=true available=true
	// vm-1 on http (node worker-1): ready=false available=false
}

func ExamplePlan() {
	svc := endpoints.Service{
		Name: "a", Namespace: "shop", UID: "svc-uid",
		Ports: []corev1.ServicePort{{Name: "b-c", Port: 80, Protocol: corev1.ProtocolTCP}},
	}
	pod := examplePod("vm-0", "10.244.0.5", true)
	desired, err := endpoints.Build(svc, endpoints.Node{Name: "worker-1"},
		[]endpoints.PodVerdicts{{Pod: pod, Ports: []endpoints.PortVerdict{{Port: 80, Passing: true}}}}, endpoints.Options{})
	if err != nil {
		panic(err)
	}
	// Service "a-b" with port "c" got there first: same name, not ours.
	holder := desired[0].DeepCopy()
	holder.Labels[discoveryv1.LabelServiceName] = "a-b"
	scope := endpoints.Scope{Namespace: "shop", Service: "a", Node: "worker-1"}

	changes, err := endpoints.Plan(scope, []discoveryv1.EndpointSlice{*holder}, desired, endpoints.Options{})
	if err != nil {
		panic(err)
	}
	for _, s := range changes.Create {
		fmt.Println("create", s.Name)
	}
	fmt.Println(len(changes.Update), "updates,", len(changes.Delete), "deletes")
	for _, c := range changes.Collisions {
		fmt.Println(c)
	}
	// Once created, the next plan has nothing to do.
	created := changes.Create[0]
	again, _ := endpoints.Plan(scope, []discoveryv1.EndpointSlice{*holder, created}, desired, endpoints.Options{})
	fmt.Println("next plan empty:", again.Empty())
	// Output:
	// create a-b-c-worker-1-a472b0ae
	// 0 updates, 0 deletes
	// slice name "a-b-c-worker-1" is held by the IPv4 slice of service "a-b" managed by "agent.network.swh.dev" for node "worker-1"; using "a-b-c-worker-1-a472b0ae"
	// next plan empty: true
}
