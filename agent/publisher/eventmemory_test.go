package publisher

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

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
