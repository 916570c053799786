package publisher

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

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

// TestNumberedActionsAreUnique: no two news share an action, so the
// recorder folds none into another.
func TestNumberedActionsAreUnique(t *testing.T) {
	p := &Publisher{}
	seen := map[string]bool{}
	for range 100 {
		a := p.numbered("PublishEndpoints")
		if seen[a] || !strings.HasPrefix(a, "PublishEndpoints#") || len(a) > 128 {
			t.Fatalf("action %q: seen before %t, want a new PublishEndpoints#n within the API's 128 bytes", a, seen[a])
		}
		seen[a] = true
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

// TestEventsAsValues: the stages return the events to emit, as values: a
// pod's failure once (not again while it stays), its recovery, each with
// an action of its own; a collision until its slice under another name
// is told published.
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
	refusedCause := causeOf(causeFailure, "refused@0", "TCP probe on 80: refused: connection refused")
	refused := notReadyReasons{}
	refused.set("u1", "http", refusedCause)
	annotated := func(list []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
		if err := annotateReasons(list, nil, refused, time.Now()); err != nil {
			t.Fatal(err)
		}
		return list
	}
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
			`Normal EndpointReady PublishEndpoints#1 web-1: pod web-1 on node node-a is ready on port "http"`},
		{"refused", slice(true), annotated(slice(false)), refused,
			`Warning EndpointNotReady PublishEndpoints#2 web-1: pod web-1 on node node-a is not ready on port "http" (TCP probe on 80: refused: connection refused)`},
		{"still refused: no news", annotated(slice(false)), annotated(slice(false)), refused, ""},
		{"ready again", annotated(slice(false)), slice(true), nil,
			`Normal EndpointReady PublishEndpoints#3 web-1: pod web-1 on node node-a is ready on port "http"`},
	}
	for _, s := range steps {
		if got := describe(p.endpointEvents(swh, publishedStates(s.before), publishedStates(s.after), s.why)); got != s.want {
			t.Errorf("%s: events %q, want %q", s.name, got, s.want)
		}
	}
	collision := []endpoints.Collision{{Name: "web-http", Renamed: "web-http-2", HolderService: "other"}}
	planned := endpoints.Changes{Collisions: collision, Create: []discoveryv1.EndpointSlice{{ObjectMeta: metav1.ObjectMeta{Name: "web-http-2"}}}}
	got := p.collisionEvents(swh, publication{names: map[string]bool{}}, planned)
	if len(got) != 1 || got[0].reason != swhv1alpha1.EventReasonSliceNameTaken || got[0].related.Name != "web-http" || !strings.HasPrefix(got[0].action, "PublishEndpoints#") {
		t.Errorf("collision events %+v, want one SliceNameTaken about web-http, numbered", got)
	}
	// Planned again once the renamed slice was told published: no news.
	if again := p.collisionEvents(swh, publication{names: map[string]bool{"web-http-2": true}}, endpoints.Changes{Collisions: collision}); len(again) != 0 {
		t.Errorf("the collision told again %+v", again)
	}
}

// TestEmit: emit records every event with its type, reason and a note the
// API server takes, on the resource or on what the event regards, also one
// that relates to nothing.
func TestEmit(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	p := &Publisher{recorder: rec}
	swh := &swhv1alpha1.ServiceWithHealthchecks{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	probe := &corev1.ObjectReference{Kind: "ServiceWithHealthchecks", Namespace: "ns", Name: "web", FieldPath: "spec.healthcheck.probes[0]"}
	pod := &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-1"}
	p.emit(context.Background(), swh, []event{
		{related: pod, eventtype: corev1.EventTypeNormal, reason: swhv1alpha1.EventReasonEndpointReady, action: "PublishEndpoints:http", note: "ready"},
		{eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonSliceNameTaken, action: "PublishEndpoints", note: strings.Repeat("x", 2*swhv1alpha1.MaxEventNoteBytes)},
	})
	p.emit(context.Background(), nil, []event{{regarding: probe, related: pod, eventtype: corev1.EventTypeWarning, reason: swhv1alpha1.EventReasonProbeMisconfigured, action: "Probe:secret", note: "no Secret"}})
	want := []string{"Normal EndpointReady ready", "Warning SliceNameTaken x", "Warning ProbeMisconfigured no Secret"}
	for i, w := range want {
		select {
		case got := <-rec.Events:
			if !strings.HasPrefix(got, w) || len(got) > len(w)+swhv1alpha1.MaxEventNoteBytes {
				t.Errorf("event %d: %q, want %q (a note within the API's limit)", i, got, w)
			}
		default:
			t.Fatalf("event %d: none, want %q", i, w)
		}
	}
}
