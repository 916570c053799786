package publisher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// floorPod is a pod of the floor tests: on which node, whether it passes
// the port now (for the node's own pods), how it was published and with
// which reason.
type floorPod struct {
	name, node string
	passing    bool // the node's verdict now (own pods)
	ready      bool // published ready before
	reason     string
	// unpublished: not in the slices yet (a new pod).
	unpublished, terminating, maintenance bool
	// pending: no probe result yet.
	pending bool
	// markedAgo is how long ago its reason began; zero for long ago.
	markedAgo time.Duration
}

func (f floorPod) pod() *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: f.name, UID: types.UID("uid-" + f.name), Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: f.node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
	}
	if f.terminating {
		pod.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	if f.maintenance {
		pod.Annotations = map[string]string{swhv1alpha1.AnnotationMaintenance: "web"}
	}
	return pod
}

// floorSlices publishes pods of node as their ready and reason say.
func floorSlices(t *testing.T, node string, pods []floorPod) []discoveryv1.EndpointSlice {
	t.Helper()
	var verdicts []endpoints.PodVerdicts
	reasons := swhv1alpha1.EndpointReasons{}
	for _, f := range pods {
		if f.node != node || f.unpublished {
			continue
		}
		verdicts = append(verdicts, endpoints.PodVerdicts{Pod: f.pod(), Ports: []endpoints.PortVerdict{{Port: 8080, Passing: f.ready}}})
		if f.reason != "" {
			r := swhv1alpha1.EndpointReason{Reason: f.reason, Message: "before"}
			if f.markedAgo > 0 {
				r.Since = metav1.NewTime(time.Now().Add(-f.markedAgo))
			}
			reasons[f.name] = r
		}
	}
	if len(verdicts) == 0 {
		return nil
	}
	out, err := endpoints.Build(endpoints.ServiceFrom(webService("web")), endpoints.NodeFrom(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}), verdicts, endpoints.Options{})
	if err != nil {
		t.Fatal(err)
	}
	value, err := reasons.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if value != "" {
			setAnnotation(&out[i], swhv1alpha1.AnnotationEndpointReasons, value)
		}
	}
	return out
}

// floorWorld runs the floor stage on node-a's pods of pods, with the
// other nodes' slices in the API server; it returns the node's verdicts
// and reasons after, when to look again and how many lists it made.
func floorWorld(t *testing.T, swh *swhv1alpha1.ServiceWithHealthchecks, nodeReady bool, pods []floorPod) ([]endpoints.PodVerdicts, notReadyReasons, time.Duration, int) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	nodes := map[string]bool{}
	for _, f := range pods {
		nodes[f.node] = true
	}
	for node := range nodes {
		for _, s := range floorSlices(t, node, pods) {
			objs = append(objs, &s)
		}
	}
	lists := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists++
			return c.List(ctx, list, opts...)
		},
	}).Build()
	node := testNodeObject()
	if !nodeReady {
		node.Status.Conditions[0].Status = corev1.ConditionFalse
	}
	view := &resourceView{key: testKey, swh: swh, node: node, existing: floorSlices(t, testNode, pods), portNames: []string{"web"}}
	var verdicts []endpoints.PodVerdicts
	why := notReadyReasons{}
	for _, f := range pods {
		if f.node != testNode {
			continue
		}
		pod := f.pod()
		passing := f.passing && !f.maintenance && nodeReady
		verdicts = append(verdicts, endpoints.PodVerdicts{Pod: pod, Ports: []endpoints.PortVerdict{{Port: 8080, Passing: passing}}})
		switch {
		case !nodeReady:
			why.set(pod.UID, "web", nodeNotReadyCause(testNode))
		case f.maintenance:
			why.set(pod.UID, "web", maintenanceCause)
		case f.passing && f.reason == swhv1alpha1.ReasonReplicationLagKept:
			why.set(pod.UID, "web", cause{kind: causeStandby, reason: swhv1alpha1.ReasonReplicationLagKept})
		case f.pending:
			why.set(pod.UID, "web", probeCause(causeStart, swhv1alpha1.ReasonPending, 0, "HTTP probe on 8080 has no result yet"))
		case !f.passing:
			why.set(pod.UID, "web", probeCause(causeFailure, "http-status", 0, "HTTP probe on 8080: http-status: 503"))
		}
	}
	p := &Publisher{reader: c, nodeName: testNode}
	again := p.portFloor(context.Background(), view, verdicts, why)
	return verdicts, why, again, lists
}

// floorResource is web with a probe of timeout 1 s every 10 s, and the
// floor on its port web.
func floorResource(floor *swhv1alpha1.PortFloor) *swhv1alpha1.ServiceWithHealthchecks {
	swh := webResource(true, nil)
	swh.Spec.Ports = []swhv1alpha1.ServicePort{{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080), Floor: floor}}
	return swh
}

func floorOf(min intstr.IntOrString, mode swhv1alpha1.FloorMode) *swhv1alpha1.PortFloor {
	return &swhv1alpha1.PortFloor{MinPassing: min, Below: mode}
}

// TestPortFloor: the decisions of the floor stage, on node-a's pods, from
// the other nodes' slices.
func TestPortFloor(t *testing.T) {
	two, half := intstr.FromInt32(2), intstr.FromString("50%")
	open, freeze := swhv1alpha1.FloorOpen, swhv1alpha1.FloorFreeze
	const kept, frozen, held, lagKept = swhv1alpha1.ReasonFloorOpen, swhv1alpha1.ReasonFloorFrozen, swhv1alpha1.ReasonFloorHeld, swhv1alpha1.ReasonReplicationLagKept
	const period = 10 * time.Second
	// Three of four pods fail: a1 and a2 here, b1 on node-b.
	threeFail := []floorPod{
		{name: "a1", node: testNode, ready: true},
		{name: "a2", node: testNode},
		{name: "b1", node: "node-b"},
		{name: "b2", node: "node-b", ready: true},
	}
	tests := []struct {
		name      string
		floor     *swhv1alpha1.PortFloor
		exclusive bool
		nodeDown  bool
		pods      []floorPod
		// want is each pod of the node's verdict after, and its reason:
		// "a1:T/floor-open", "a2:F/http-status".
		want  []string
		again time.Duration
		// text is in the message of every pod kept.
		text string
	}{
		{name: "no floor: nothing changes", pods: threeFail,
			want: []string{"a1:F/http-status", "a2:F/http-status"}},
		{name: "Closed: nothing changes", floor: floorOf(two, swhv1alpha1.FloorClosed), pods: threeFail,
			want: []string{"a1:F/http-status", "a2:F/http-status"}},
		{name: "Open below: every pod is published, the failing ones marked", floor: floorOf(two, open), pods: threeFail,
			want: []string{"a1:T/floor-open", "a2:T/floor-open"}, again: period,
			text: `the port's floor is open: 1 of 4 pods pass port "web" across the cluster, minPassing 2; it does not pass (http-status)`},
		{name: "Open below: a pod with no result yet is not published", floor: floorOf(two, open), pods: append(slices.Clone(threeFail),
			floorPod{name: "a3", node: testNode, pending: true}),
			want: []string{"a1:T/floor-open", "a2:T/floor-open", "a3:F/pending"}, again: period, text: "1 of 5 pods pass"},
		{name: "Open: nothing probed to publish, no count", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, pending: true, unpublished: true}, {name: "b1", node: "node-b", pending: true}},
			want: []string{"a1:F/pending"}},
		{name: "Open below, by a percentage", floor: floorOf(half, open), pods: threeFail,
			want: []string{"a1:T/floor-open", "a2:T/floor-open"}, again: period, text: "1 of 4 pods pass port \"web\" across the cluster, minPassing 50% (2)"},
		{name: "a percentage rounds up: 50% of 5 is 3", floor: floorOf(half, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: kept}, {name: "a2", node: testNode, passing: true, ready: true},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b"}, {name: "b3", node: "node-b"}},
			want: []string{"a1:T/floor-open", "a2:T/"}, again: period, text: "2 of 5 pods pass"},
		{name: "a percentage of four: 50% is 2, reached: the marked pod leaves", floor: floorOf(half, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: kept}, {name: "a2", node: testNode, passing: true, ready: true},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b"}},
			want: []string{"a1:F/http-status", "a2:T/"}, again: period},
		{name: "Open, reached, the node short: a pod that starts failing is held", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true}, {name: "a2", node: testNode},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:T/floor-held", "a2:F/http-status"}, again: floorRecheck, text: "stays published a moment while the agents count: 2 of 4"},
		{name: "Freeze, reached, the node short: held too", floor: floorOf(two, freeze), pods: []floorPod{
			{name: "a1", node: testNode, ready: true}, {name: "a2", node: testNode},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:T/floor-held", "a2:F/http-status"}, again: floorRecheck},
		{name: "held, marked a moment ago: still held", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: held, markedAgo: time.Second},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:T/floor-held"}, again: floorRecheck},
		{name: "held, then below: engaged", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: held, markedAgo: time.Second},
			{name: "b1", node: "node-b", ready: true, reason: held}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:T/floor-open"}, again: period, text: "1 of 3 pods pass"},
		{name: "engaged a moment ago, then reached: leaves at once", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: kept, markedAgo: time.Second},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:F/http-status"}, again: period},
		{name: "held, marked longer than the hold ago: leaves", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: held, markedAgo: 3 * time.Second},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:F/http-status"}, again: period},
		{name: "a lag floor's mark is no hold", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: lagKept, markedAgo: time.Second},
			{name: "b1", node: "node-b", ready: true}, {name: "b2", node: "node-b", ready: true}},
			want: []string{"a1:F/http-status"}, again: period},
		{name: "reached by the node's own pods: no hold", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true}, {name: "a2", node: testNode, passing: true, ready: true},
			{name: "a3", node: testNode, passing: true, ready: true}, {name: "b1", node: "node-b"}},
			want: []string{"a1:F/http-status", "a2:T/", "a3:T/"}, again: period},
		{name: "Freeze below: the pods published ready stay, the others as they are", floor: floorOf(two, freeze), pods: threeFail,
			want: []string{"a1:T/floor-frozen", "a2:F/http-status"}, again: period, text: "the port's floor is frozen: 1 of 4 pods pass"},
		{name: "Freeze below: a new pod that passes is added", floor: floorOf(intstr.FromInt32(3), freeze), pods: append(slices.Clone(threeFail),
			floorPod{name: "a3", node: testNode, passing: true, unpublished: true}),
			want: []string{"a1:T/floor-frozen", "a2:F/http-status", "a3:T/"}, again: period, text: "2 of 5 pods pass"},
		{name: "Freeze with nothing published ready to keep: no count", floor: floorOf(two, freeze), pods: []floorPod{
			{name: "a1", node: testNode}, {name: "b1", node: "node-b"}},
			want: []string{"a1:F/http-status"}},
		{name: "the other nodes' kept pods do not pass", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: kept},
			{name: "b1", node: "node-b", ready: true, reason: kept}, {name: "b2", node: "node-b", ready: true, reason: lagKept},
			{name: "b3", node: "node-b", ready: true, reason: frozen}, {name: "b4", node: "node-b", ready: true, reason: held},
			{name: "b5", node: "node-b", ready: true, reason: swhv1alpha1.ReasonFailStatic}},
			want: []string{"a1:T/floor-open"}, again: period, text: "1 of 6 pods pass"},
		{name: "the node's lag-kept pod does not pass", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, reason: kept}, {name: "a2", node: testNode, passing: true, ready: true, reason: lagKept},
			{name: "b1", node: "node-b", ready: true}},
			want: []string{"a1:T/floor-open", "a2:T/replication-lag-kept"}, again: period, text: "1 of 3 pods pass"},
		{name: "terminating pods are neither kept nor counted", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, terminating: true}, {name: "a2", node: testNode, ready: true},
			{name: "b1", node: "node-b", ready: true, terminating: true}, {name: "b2", node: "node-b"}},
			want: []string{"a1:F/http-status", "a2:T/floor-open"}, again: period, text: "0 of 2 pods pass"},
		{name: "maintenance is never overridden", floor: floorOf(two, open), pods: []floorPod{
			{name: "a1", node: testNode, ready: true, maintenance: true}, {name: "a2", node: testNode, ready: true},
			{name: "b1", node: "node-b", ready: true}},
			want: []string{"a1:F/maintenance", "a2:T/floor-open"}, again: period, text: "1 of 3 pods pass"},
		{name: "a node not Ready keeps nothing", floor: floorOf(two, open), nodeDown: true, pods: threeFail,
			want: []string{"a1:F/node-not-ready", "a2:F/node-not-ready"}},
		{name: "never on an exclusive port", floor: floorOf(two, open), exclusive: true, pods: threeFail,
			want: []string{"a1:F/http-status", "a2:F/http-status"}},
		{name: "never frozen on an exclusive port", floor: floorOf(two, freeze), exclusive: true, pods: threeFail,
			want: []string{"a1:F/http-status", "a2:F/http-status"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			swh := floorResource(tc.floor)
			if tc.exclusive {
				swh.Spec.Exclusive = &swhv1alpha1.Exclusive{}
			}
			verdicts, why, again, lists := floorWorld(t, swh, !tc.nodeDown, tc.pods)
			var got []string
			for _, v := range verdicts {
				c := why[v.Pod.UID]["web"]
				got = append(got, fmt.Sprintf("%s:%s/%s", v.Pod.Name, map[bool]string{true: "T", false: "F"}[v.Ports[0].Passing], c.reason))
				if swhv1alpha1.KeptByFloor(c.reason) && c.reason != swhv1alpha1.ReasonReplicationLagKept && !strings.Contains(c.text, tc.text) {
					t.Errorf("%s: message %q does not say %q", v.Pod.Name, c.text, tc.text)
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
			if again != tc.again {
				t.Errorf("look again after %v, want %v", again, tc.again)
			}
			if !tc.floor.Engages() && lists != 0 {
				t.Errorf("%d lists of the slices without a floor that engages", lists)
			}
		})
	}
}

func TestDecideFloor(t *testing.T) {
	open, freeze, closed := swhv1alpha1.FloorOpen, swhv1alpha1.FloorFreeze, swhv1alpha1.FloorClosed
	ready, marked, neither := floorCandidate{wasReady: true}, floorCandidate{wasReady: true, marked: true}, floorCandidate{}
	holding := floorCandidate{wasReady: true, marked: true, holding: true}
	for _, tc := range []struct {
		mode            swhv1alpha1.FloorMode
		below, ownShort bool
		c               floorCandidate
		want            floorKeep
	}{
		{closed, true, true, ready, floorLeaves},
		{open, true, true, neither, floorEngaged},
		{open, true, false, marked, floorEngaged},
		{freeze, true, true, ready, floorEngaged},
		{freeze, true, true, marked, floorEngaged},
		{freeze, true, true, neither, floorLeaves},
		{open, false, true, ready, floorHolds},
		{freeze, false, true, ready, floorHolds},
		{open, false, true, marked, floorLeaves},
		{open, false, true, holding, floorHolds},
		{open, false, false, holding, floorLeaves},
		{open, true, false, holding, floorEngaged},
		{open, false, false, ready, floorLeaves},
		{open, false, true, neither, floorLeaves},
		{open, true, true, floorCandidate{unprobed: true}, floorLeaves},
		{freeze, true, true, floorCandidate{wasReady: true, unprobed: true}, floorEngaged},
	} {
		if got := decideFloor(tc.mode, tc.below, tc.ownShort, tc.c); got != tc.want {
			t.Errorf("decideFloor(%s, below %v, own short %v, %+v) = %d, want %d", tc.mode, tc.below, tc.ownShort, tc.c, got, tc.want)
		}
	}
}

func TestFloorTimes(t *testing.T) {
	for _, tc := range []struct {
		period, timeout      int32
		wantPeriod, wantHold time.Duration
	}{
		{10, 1, 10 * time.Second, 2 * time.Second},
		{1, 1, time.Second, time.Second},
		{5, 5, 5 * time.Second, 5 * time.Second},
	} {
		swh := webResource(true, nil)
		swh.Spec.Healthcheck.PeriodSeconds, swh.Spec.Healthcheck.Probes[0].TimeoutSeconds = tc.period, tc.timeout
		if p, h := floorTimes(swh); p != tc.wantPeriod || h != tc.wantHold {
			t.Errorf("period %d timeout %d: %v, %v; want %v, %v", tc.period, tc.timeout, p, h, tc.wantPeriod, tc.wantHold)
		}
	}
}

// TestServingPortsFloorKept: an endpoint a port's floor keeps starts
// failed after a restart (the floor decides again); a lag floor's does not.
func TestServingPortsFloorKept(t *testing.T) {
	pods := []floorPod{
		{name: "open", node: testNode, ready: true, reason: swhv1alpha1.ReasonFloorOpen},
		{name: "frozen", node: testNode, ready: true, reason: swhv1alpha1.ReasonFloorFrozen},
		{name: "held", node: testNode, ready: true, reason: swhv1alpha1.ReasonFloorHeld},
		{name: "lagging", node: testNode, ready: true, reason: swhv1alpha1.ReasonReplicationLagKept},
		{name: "passing", node: testNode, ready: true},
	}
	got := servingPorts(floorSlices(t, testNode, pods), nil)
	want := "map[uid-frozen:map[web:false] uid-held:map[web:false] uid-lagging:map[web:true] uid-open:map[web:false] uid-passing:map[web:true]]"
	if fmt.Sprint(got) != want {
		t.Errorf("servingPorts = %v\nwant %s", got, want)
	}
}
