package publisher

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

func TestExplainNotReady(t *testing.T) {
	labels := []string{"HTTP probe on 8081", "TCP probe on 2525"}
	failed := probes.Result{Status: probes.Failure, Reason: probes.ReasonHTTPStatus, Message: "answered 503"}
	succeeded := probes.Result{Status: probes.Success}
	both := endpoints.ProbeSet(0).With(0).With(1)
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	running := &corev1.Pod{}
	deleting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}}
	deletingReady := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{}}, Status: corev1.PodStatus{Conditions: ready}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		gate    endpoints.PortGate
		passing endpoints.ProbeSet
		last    []probes.Result
		want    cause
	}{
		{"unresolved port", running, endpoints.PortGate{Probes: both}, 0, nil,
			causeOf(causeFailure, "no-target-port", "the port's targetPort names no port of the pod")},
		{"no probe gates the port", running, endpoints.PortGate{Port: 80}, 0, []probes.Result{{}, {}},
			causeOf(causeFailure, "pod-not-ready", "no probe checks this port and the pod is not Ready")},
		{"the failing gating probe", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			causeOf(causeFailure, "http-status@0", "HTTP probe on 8081: http-status: answered 503")},
		{"a failure of a probe not gating the port is not the reason", running, endpoints.PortGate{Port: 80, Probes: endpoints.ProbeSet(0).With(1)}, 0, []probes.Result{failed, {}},
			causeOf(causeStart, "pending@1", "TCP probe on 2525 has no result yet")},
		{"recovering", running, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{succeeded, succeeded},
			causeOf(causeStart, "recovering@0", "HTTP probe on 8081 passes again, not yet successThreshold times")},
		{"terminating but passing", deleting, endpoints.PortGate{Port: 80, Probes: both}, both, []probes.Result{succeeded, succeeded},
			causeOf(causeTerminating, "terminating", "the pod is terminating; it serves while its probes pass")},
		{"terminating and failing", deleting, endpoints.PortGate{Port: 80, Probes: both}, endpoints.ProbeSet(0).With(1), []probes.Result{failed, succeeded},
			causeOf(causeFailure, "http-status@0", "HTTP probe on 8081: http-status: answered 503")},
		// The port passes on pod readiness: the pod is not "not Ready".
		{"terminating and Ready on a port no probe checks", deletingReady, endpoints.PortGate{Port: 80}, 0, nil,
			causeOf(causeTerminating, "terminating", "the pod is terminating; it serves while it is Ready")},
		{"terminating and not Ready on a port no probe checks", deleting, endpoints.PortGate{Port: 80}, 0, nil,
			causeOf(causeFailure, "pod-not-ready", "no probe checks this port and the pod is not Ready")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := explainNotReady(tt.pod, tt.gate, tt.passing, tt.last, labels); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %s %+v, want %s %+v", got.code(), got, tt.want.code(), tt.want)
			}
		})
	}
}

// causeOf builds a cause from its code as actions show it, "<reason>@<probe
// index>" or the reason alone.
func causeOf(kind causeKind, code, text string) cause {
	if reason, probe, ok := strings.Cut(code, "@"); ok {
		i, err := strconv.Atoi(probe)
		if err != nil {
			panic(err)
		}
		return probeCause(kind, reason, i, text)
	}
	return cause{kind: kind, reason: code, text: text}
}

func TestNotReadyClauses(t *testing.T) {
	why := func(text string) cause { return causeOf(causeFailure, text, text) }
	named := func(name string) portRef { return portRef{name: name, number: 8080} }
	tests := []struct {
		name  string
		ports []portCause
		want  string
	}{
		{"one port", []portCause{{named("web"), why("timeout")}}, `port "web" (timeout)`},
		{"an unnamed port reads by its number", []portCause{{portRef{number: 8080}, why("refused")}}, `port 8080 (refused)`},
		{"same reason grouped", []portCause{{named("grpc"), why("x")}, {named("api"), why("x")}}, `ports "api", "grpc" (x)`},
		{"different reasons", []portCause{{named("c"), why("x")}, {named("a"), why("x")}, {named("b"), why("y")}}, `ports "a", "c" (x); port "b" (y)`},
		{"no reason known", []portCause{{named("a"), cause{}}}, `port "a" (not passing)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := notReadyClauses(tt.ports); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	if got := portClause([]portRef{named("web"), named("api")}, ""); got != `ports "api", "web"` {
		t.Errorf("ready clause %s", got)
	}
	if got := portClause([]portRef{{number: 5432}}, ""); got != `port 5432` {
		t.Errorf("ready clause of an unnamed port %s", got)
	}
}

func TestEventActions(t *testing.T) {
	c := func(code string) cause { return causeOf(causeFailure, code, "message "+code) }
	tests := []struct {
		name, got, want string
	}{
		{"ready", readyAction([]portRef{{name: "web"}, {name: "smtp"}}), "PublishEndpoints:smtp,web"},
		{"ready, unnamed", readyAction([]portRef{{number: 8080}}), "PublishEndpoints:8080"},
		{"not ready", notReadyAction([]portCause{{portRef{name: "web"}, c("http-status@0")}, {portRef{name: "smtp"}, c("refused@1")}}),
			"PublishEndpoints:smtp=refused@1,web=http-status@0"},
		{"not ready, unnamed", notReadyAction([]portCause{{portRef{number: 5432}, c("query-false@0")}}), "PublishEndpoints:5432=query-false@0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, tt.got, tt.want)
		}
	}
	var many, other []portCause
	for i := range 20 {
		many = append(many, portCause{portRef{name: fmt.Sprintf("port-%02d", i)}, c("refused@0")})
		other = append(other, portCause{portRef{name: fmt.Sprintf("port-%02d", i)}, c("timeout@0")})
	}
	long, long2 := notReadyAction(many), notReadyAction(other)
	if len(long) > maxActionBytes || long == long2 || long != notReadyAction(many) {
		t.Errorf("long actions %q and %q: at most %d bytes, distinct, stable", long, long2, maxActionBytes)
	}
}

func TestEventNoteFitsTheAPILimit(t *testing.T) {
	ports := make([]portCause, 12)
	for i := range ports {
		ports[i] = portCause{portRef{name: fmt.Sprintf("port-%02d", i)}, causeOf(causeFailure, "refused@0",
			fmt.Sprintf("TCP probe on %d: refused: dial tcp 10.244.1.5:%d: connect: connection refused — ünïcode", 8000+i, 8000+i))}
	}
	long := "pod p on node n is not ready on " + notReadyClauses(ports)
	tests := []struct {
		name string
		note string
		cut  bool
	}{
		{"short notes stay as they are", "pod p on node n is ready on port \"web\"", false},
		{"exactly the limit", strings.Repeat("x", swhv1alpha1.MaxEventNoteBytes), false},
		{"twelve ports with their own reasons", long, true},
		{"multi-byte runes at the limit", strings.Repeat("é", swhv1alpha1.MaxEventNoteBytes), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eventNote(tt.note)
			if len(got) > swhv1alpha1.MaxEventNoteBytes || !utf8.ValidString(got) {
				t.Fatalf("%d bytes, valid UTF-8 %t", len(got), utf8.ValidString(got))
			}
			if cut := got != tt.note; cut != tt.cut {
				t.Errorf("cut %t, want %t (input %d bytes)", cut, tt.cut, len(tt.note))
			}
			if tt.cut && (!strings.HasSuffix(got, "…") || !strings.HasPrefix(tt.note, strings.TrimSuffix(got, "…"))) {
				t.Errorf("not a marked prefix: %q", got[len(got)-20:])
			}
		})
	}
}

func TestDecide(t *testing.T) {
	yes, no := true, false
	failure := func(code string) endpointView { return endpointView{why: causeOf(causeFailure, code, code)} }
	pending := endpointView{why: causeOf(causeStart, "pending@0", "no result yet")}
	recovering := endpointView{why: causeOf(causeStart, "recovering@0", "passes again")}
	podNotReady := endpointView{why: causeOf(causeFailure, codePodNotReady, "not Ready")}
	terminating := endpointView{why: causeOf(causeTerminating, "terminating", "terminating")}
	ready := endpointView{ready: true}
	notReadyRec := func(code string) *reported { return &reported{code: code} }
	tests := []struct {
		name     string
		was      *bool
		rec      *reported
		now      endpointView
		news     bool
		keepCode string // "-": keep the record
	}{
		{"a new pod waits for its first result: no news", nil, nil, pending, false, "pending@0"},
		{"a new pod not Ready yet on a port no probe checks: no news", nil, nil, podNotReady, false, codePodNotReady},
		{"a new pod fails at once", nil, nil, failure("refused@0"), true, "refused@0"},
		{"a new pod ready", nil, nil, ready, true, ""},
		{"its first result is a failure", &no, notReadyRec("pending@0"), failure("http-status@0"), true, "http-status@0"},
		{"the same failure again", &no, notReadyRec("http-status@0"), failure("http-status@0"), false, "http-status@0"},
		{"another failure", &no, notReadyRec("http-status@0"), failure("refused@0"), true, "refused@0"},
		{"passing again, not yet enough: no news", &no, notReadyRec("refused@0"), recovering, false, "-"},
		{"becomes ready", &no, notReadyRec("refused@0"), ready, true, ""},
		{"becomes not ready", &yes, &reported{ready: true}, failure("timeout@0"), true, "timeout@0"},
		{"a probe added: not ready for want of a result", &yes, &reported{ready: true}, pending, true, "pending@0"},
		{"deleted while passing", &yes, &reported{ready: true}, terminating, true, "terminating"},
		{"terminating, then failing", &no, notReadyRec("terminating"), failure("refused@0"), true, "refused@0"},
		{"after a restart, ready as published", &yes, nil, ready, false, ""},
		{"after a restart, not ready as published", &no, nil, pending, false, "pending@0"},
		{"published ready before the last report", &yes, notReadyRec("refused@0"), ready, true, ""},
		{"published not ready before the last report", &no, &reported{ready: true}, failure("refused@0"), true, "refused@0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			news, keep := decide(tt.was, tt.rec, tt.now)
			if news != tt.news {
				t.Errorf("news %t, want %t", news, tt.news)
			}
			switch {
			case tt.keepCode == "-":
				if keep != nil {
					t.Errorf("records %+v, want the record kept", *keep)
				}
			case keep == nil:
				t.Errorf("keeps the record, want %q", tt.keepCode)
			case keep.code != tt.keepCode || keep.ready != tt.now.ready:
				t.Errorf("records %+v, want ready %t code %q", *keep, tt.now.ready, tt.keepCode)
			}
		})
	}
}

// TestEndpointNews plays a pod's life through the event memory: a new pod, its
// first failure, a new reason, a recovery, and the pod's removal.
func TestEndpointNews(t *testing.T) {
	var b eventMemory
	res := types.NamespacedName{Namespace: "ns", Name: "db"}
	key := podPort{uid: "u1", pod: "db-0", port: ""}
	port := portRef{number: 5432}
	published := func(ready bool) map[podPort]publishedPort { return map[podPort]publishedPort{key: {port, ready}} }
	why := func(c cause) notReadyReasons { r := notReadyReasons{}; r.set("u1", "", c); return r }
	steps := []struct {
		name        string
		before, now map[podPort]publishedPort
		why         notReadyReasons
		want        string
	}{
		{"created", nil, published(false), why(causeOf(causeStart, "pending@0", "no result yet")), "[]"},
		{"first result", published(false), published(false), why(causeOf(causeFailure, "query-false@0", "query false")), "[db-0 ready [] not ready [5432=query-false@0 warning]]"},
		{"same reason", published(false), published(false), why(causeOf(causeFailure, "query-false@0", "query false, again")), "[]"},
		{"new reason", published(false), published(false), why(causeOf(causeFailure, "auth@0", "denied")), "[db-0 ready [] not ready [5432=auth@0 warning]]"},
		{"recovering", published(false), published(false), why(causeOf(causeStart, "recovering@0", "passes again")), "[]"},
		{"ready", published(false), published(true), nil, "[db-0 ready [5432] not ready []]"},
		{"gone", published(true), nil, nil, "[]"},
		{"back: a new pod again", nil, published(false), why(causeOf(causeStart, "pending@0", "no result yet")), "[]"},
	}
	for _, s := range steps {
		news := b.endpointNews(res, s.before, s.now, s.why)
		var got []string
		for _, n := range news {
			var ready, notReady []string
			for _, p := range n.ready {
				ready = append(ready, p.id())
			}
			for _, pc := range n.notReady {
				w := pc.port.id() + "=" + pc.why.code()
				if n.warning() {
					w += " warning"
				}
				notReady = append(notReady, w)
			}
			got = append(got, fmt.Sprintf("%s ready %v not ready %v", n.pod.name, ready, notReady))
		}
		if fmt.Sprint(got) != s.want {
			t.Errorf("%s: news %v, want %s", s.name, got, s.want)
		}
	}
	b.forgetResource(res)
	if len(b.endpoints) != 0 {
		t.Errorf("forgotten resource still in the event memory: %v", b.endpoints)
	}
}

// TestSeriesAction: the recorder writes the first two occurrences of an
// event and only counts the later ones; every third occurrence starts a new
// series.
func TestSeriesAction(t *testing.T) {
	var b eventMemory
	now := time.Unix(1_000_000, 0)
	var got []string
	for i := range 5 {
		got = append(got, b.seriesActionAt("k", "A", now.Add(time.Duration(i)*time.Second)))
	}
	got = append(got, b.seriesActionAt("other", "A", now))
	got = append(got, b.seriesActionAt("k", "B", now))
	// Once the recorder has forgotten the series, it starts again.
	got = append(got, b.seriesActionAt("k", "A", now.Add(seriesWindow+5*time.Second)))
	want := "[A A A#1 A#1 A#2 A B A]"
	if fmt.Sprint(got) != want {
		t.Errorf("actions %v, want %s", got, want)
	}
	// The sweep drops what the recorder has forgotten.
	b.seriesActionAt("k", "A", now.Add(3*seriesWindow))
	if len(b.series) != 1 {
		t.Errorf("%d series kept, want 1", len(b.series))
	}
}

func TestMisconfiguredOncePerProblem(t *testing.T) {
	var b eventMemory
	key := targetKey{Resource: types.NamespacedName{Namespace: "ns", Name: "db"}, Pod: "u1"}
	missing := probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: "Secret ns/creds not found"}
	noKey := probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: "Secret ns/creds has no key user"}
	refused := probes.Result{Status: probes.Failure, Reason: probes.ReasonRefused, Message: "refused"}
	var got []bool
	for _, r := range []probes.Result{missing, missing, noKey, refused, refused, missing} {
		got = append(got, b.misconfigured(key, r))
	}
	if want := "[true false true false false true]"; fmt.Sprint(got) != want {
		t.Errorf("reported %v, want %s", got, want)
	}
}

func TestCollisionsReportedOnce(t *testing.T) {
	var b eventMemory
	res := types.NamespacedName{Namespace: "ns", Name: "a"}
	c1 := endpoints.Collision{Name: "a-b-n", Renamed: "a-b-n-1234abcd", HolderService: "a-b"}
	c2 := endpoints.Collision{Name: "a-c-n", Renamed: "a-c-n-1234abcd", HolderService: "a-c"}
	steps := []struct {
		current []endpoints.Collision
		want    int
	}{{[]endpoints.Collision{c1}, 1}, {[]endpoints.Collision{c1}, 0}, {[]endpoints.Collision{c1, c2}, 1}, {nil, 0}, {[]endpoints.Collision{c2}, 1}}
	for i, s := range steps {
		if got := b.newCollisions(res, s.current); len(got) != s.want {
			t.Errorf("step %d: %d new collisions, want %d", i, len(got), s.want)
		}
	}
}

// TestEventsAsValues: the stages return the events to emit, as values: a
// pod's failure once (not again while it stays), its recovery, and a
// collision once.
func TestEventsAsValues(t *testing.T) {
	p := &Publisher{nodeName: "node-a"}
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	slice := func(ready bool) []discoveryv1.EndpointSlice {
		port, node := "http", "node-a"
		return []discoveryv1.EndpointSlice{{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-http", Labels: map[string]string{discoveryv1.LabelServiceName: "web",
				discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &port}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1", UID: "u1"}}},
		}}
	}
	refused := notReadyReasons{}
	refused.set("u1", "http", causeOf(causeFailure, "refused@0", "TCP probe on 80: refused: connection refused"))
	describe := func(evs []event) string {
		var out []string
		for _, e := range evs {
			out = append(out, e.eventtype+" "+e.reason+" "+e.action+" "+e.related.Name+": "+e.note)
		}
		return strings.Join(out, " | ")
	}
	steps := []struct {
		name          string
		before, after []discoveryv1.EndpointSlice
		why           notReadyReasons
		want          string
	}{
		{"ready", slice(false), slice(true), nil,
			`Normal EndpointReady PublishEndpoints:http web-1: pod web-1 on node node-a is ready on port "http"`},
		{"refused", slice(true), slice(false), refused,
			`Warning EndpointNotReady PublishEndpoints:http=refused@0 web-1: pod web-1 on node node-a is not ready on port "http" (TCP probe on 80: refused: connection refused)`},
		{"still refused: no news", slice(false), slice(false), refused, ""},
	}
	for _, s := range steps {
		if got := describe(p.endpointEvents(swh, s.before, s.after, s.why)); got != s.want {
			t.Errorf("%s: events %q, want %q", s.name, got, s.want)
		}
	}
	collision := []endpoints.Collision{{Name: "web-http", Renamed: "web-http-2", HolderService: "other"}}
	if got := p.collisionEvents(swh, collision); len(got) != 1 || got[0].reason != swhv1alpha1.EventReasonSliceNameTaken || got[0].related.Name != "web-http" {
		t.Errorf("collision events %+v, want one SliceNameTaken about web-http", got)
	}
	if got := p.collisionEvents(swh, collision); len(got) != 0 {
		t.Errorf("the same collision told again: %+v", got)
	}
}
