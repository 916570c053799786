package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// agentEvents lists the agent's events of reason in ns whose related object
// is pod (any reason when reasons is empty).
func agentEvents(ctx context.Context, ns, pod string, reasons ...string) ([]eventsv1.Event, error) {
	list := &eventsv1.EventList{}
	if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.ReportingController != "swh-agent" || e.Related == nil || e.Related.Name != pod {
			continue
		}
		if len(reasons) == 0 || strings.Contains(" "+strings.Join(reasons, " ")+" ", " "+e.Reason+" ") {
			out = append(out, e)
		}
	}
	return out, nil
}

// lastSeen is when an event was last reported: its series' last
// observation, or its own time.
func lastSeen(e *eventsv1.Event) time.Time {
	t := e.EventTime.Time
	if e.Series != nil && e.Series.LastObservedTime.After(t) {
		t = e.Series.LastObservedTime.Time
	}
	return t
}

func describe(e *eventsv1.Event) string {
	count := int32(1)
	if e.Series != nil {
		count = e.Series.Count
	}
	return fmt.Sprintf("%s %s %s x%d: %s", lastSeen(e).Format("15:04:05.000"), e.Type, e.Reason, count, e.Note)
}

// waitNewestEvent waits until the newest EndpointReady/EndpointNotReady
// event of pod has type and a note containing every part.
func waitNewestEvent(t *testing.T, ns, pod, typ string, parts ...string) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("newest event of %s is %s with %q", pod, typ, parts), func() error {
		list, err := agentEvents(context.Background(), ns, pod, "EndpointReady", "EndpointNotReady")
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return fmt.Errorf("no event")
		}
		newest := &list[0]
		for i := range list {
			if lastSeen(&list[i]).After(lastSeen(newest)) {
				newest = &list[i]
			}
		}
		ok := newest.Type == typ
		for _, p := range parts {
			ok = ok && strings.Contains(newest.Note, p)
		}
		if !ok {
			all := make([]string, len(list))
			for i := range list {
				all[i] = describe(&list[i])
			}
			return fmt.Errorf("newest is %s; all: %s", describe(newest), strings.Join(all, " | "))
		}
		return nil
	})
}

// TestEventsTellTheCurrentReason: the newest event of a pod tells why it is
// not ready now, through changes of reason that change no endpoint and
// through reasons that come back (the recorder folds repeats of an event
// into a series); the start state is no Warning; an unnamed port reads by
// its number.
func TestEventsTellTheCurrentReason(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()
	b := startBackend(t, ns, "why", "why-a", nodeA)
	b.http.SetStatus(http.StatusServiceUnavailable)
	swh := resource(ns, "why", []swhv1alpha1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080)))
	swh.Spec.Healthcheck.InitialDelaySeconds = 3 // a start state that lasts: no event
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "why", map[string]string{"why-node-a": "why-a:FFF"})
	noStartStateEvent := func() {
		t.Helper()
		list, err := agentEvents(ctx, ns, "why-a")
		if err != nil {
			t.Fatal(err)
		}
		for i := range list {
			if strings.Contains(list[i].Note, "no result yet") || strings.Contains(list[i].Note, `port ""`) {
				t.Errorf("event %s", describe(&list[i]))
			}
		}
	}

	const (
		status  = "HTTP probe on 8080: http-status: "
		refused = "HTTP probe on 8080: refused: "
		timeout = "HTTP probe on 8080: timeout: "
	)
	unnamed := "pod why-a on node node-a is not ready on port 8080 ("
	waitNewestEvent(t, ns, "why-a", "Warning", unnamed, status)
	noStartStateEvent()
	steps := []struct {
		name string
		act  func() error
		want string
	}{
		{"server stopped", b.http.Stop, refused},
		{"server slow", func() error { b.http.SetDelay(3 * time.Second); return b.http.Start() }, timeout},
		{"server answers 503 again", func() error { b.http.SetDelay(0); return nil }, status},
		{"server stopped again", b.http.Stop, refused},
		// Third time each: the recorder would only count it, unwritten.
		{"server answers 503 a third time", b.http.Start, status},
		{"server stopped a third time", b.http.Stop, refused},
	}
	for _, s := range steps {
		if err := s.act(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		t.Log(s.name)
		waitNewestEvent(t, ns, "why-a", "Warning", unnamed, s.want)
	}
	if err := b.http.Start(); err != nil {
		t.Fatal(err)
	}
	b.http.SetStatus(http.StatusOK)
	waitNewestEvent(t, ns, "why-a", "Normal", "pod why-a on node node-a is ready on port 8080")
	noStartStateEvent()
}

// TestProbeMisconfiguredPerPod: every pod whose probe cannot run gets its
// own event; the recorder must not fold the second pod's into the first's.
func TestProbeMisconfiguredPerPod(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()
	startBackend(t, ns, "nope", "nope-a", nodeA)
	startBackend(t, ns, "nope", "nope-b", nodeA)
	swh := resource(ns, "nope", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromString("nope")))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}
	waitPublished(t, ns, "nope", map[string]string{"nope-web-node-a": "nope-a:FFF,nope-b:FFF"})
	harness.Eventually(t, 20*time.Second, "a ProbeMisconfigured event per pod", func() error {
		list := &eventsv1.EventList{}
		if err := controlPlane.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		var notes []string
		for _, e := range list.Items {
			if e.Reason == "ProbeMisconfigured" {
				notes = append(notes, e.Note)
			}
		}
		all := strings.Join(notes, " | ")
		for _, pod := range []string{"nope-a", "nope-b"} {
			if !strings.Contains(all, "pod "+pod+" ") {
				return fmt.Errorf("no event names %s: %s", pod, all)
			}
		}
		if !strings.Contains(all, `no container port named "nope"`) {
			return fmt.Errorf("the events do not say why: %s", all)
		}
		return nil
	})
}
