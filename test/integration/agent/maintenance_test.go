package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// setMaintenance sets the pod's maintenance annotation to value, or
// removes it when value is nil, and returns when the write returned.
func setMaintenance(t *testing.T, ns, pod string, value *string) time.Time {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{swhv1alpha1.AnnotationMaintenance: value}}})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{}
	p.Namespace, p.Name = ns, pod
	if err := controlPlane.Client.Patch(context.Background(), p, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// waitPublishedSince is waitPublished that returns how long after since
// the slices became want.
func waitPublishedSince(t *testing.T, ns, name string, want map[string]string, since time.Time) time.Duration {
	t.Helper()
	waitPublished(t, ns, name, want)
	return time.Since(since)
}

// TestMaintenanceAnnotation: a pod's maintenance annotation takes it out
// of the ports it names (all of them when empty) at once, not after a
// probe: no Warning event, its probes of those ports stop, the other
// ports and pods are untouched. Removed, the ports come back only after
// successThreshold passes.
func TestMaintenanceAnnotation(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	a := startBackend(t, ns, "mail", "mail-a", nodeA)
	startBackend(t, ns, "mail", "mail-b", nodeA)
	const period = 2 * time.Second
	web := fastProbe(swhv1alpha1.ProbeModeHTTP, intstr.FromInt32(8080))
	smtp := fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(2525))
	web.SuccessThreshold, smtp.SuccessThreshold = 2, 2
	swh := resource(ns, "mail", webAndSMTP, web, smtp)
	swh.Spec.Healthcheck.PeriodSeconds = int32(period / time.Second)
	if err := controlPlane.Client.Create(context.Background(), swh); err != nil {
		t.Fatal(err)
	}
	all := map[string]string{"mail-smtp-node-a": "mail-a:TTF,mail-b:TTF", "mail-web-node-a": "mail-a:TTF,mail-b:TTF"}
	waitPublished(t, ns, "mail", all)

	webOnly := "web"
	out := waitPublishedSince(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:TTF,mail-b:TTF", "mail-web-node-a": "mail-a:FFF,mail-b:TTF"},
		setMaintenance(t, ns, "mail-a", &webOnly))
	if out >= period {
		t.Errorf("mail-a was withdrawn from web %s after its annotation, not within one period (%s)", out, period)
	}
	waitNewestEvent(t, ns, "mail-a", corev1.EventTypeNormal, `port "web"`, swhv1alpha1.AnnotationMaintenance)
	hits := a.http.Hits()
	time.Sleep(2 * period)
	if more := a.http.Hits() - hits; more > 0 {
		t.Errorf("mail-a's web port is in maintenance, yet it was probed %d more times", more)
	}

	everything := ""
	out = waitPublishedSince(t, ns, "mail", map[string]string{"mail-smtp-node-a": "mail-a:FFF,mail-b:TTF", "mail-web-node-a": "mail-a:FFF,mail-b:TTF"},
		setMaintenance(t, ns, "mail-a", &everything))
	if out >= period {
		t.Errorf("mail-a was withdrawn from smtp %s after its annotation, not within one period (%s)", out, period)
	}

	back := waitPublishedSince(t, ns, "mail", all, setMaintenance(t, ns, "mail-a", nil))
	// Two passes a period apart, the first after the annotation went.
	if back < period {
		t.Errorf("mail-a came back %s after its annotation was removed, before successThreshold (2) passes a period (%s) apart", back, period)
	}
	warnings, err := agentEvents(context.Background(), ns, "mail-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range warnings {
		if e.Type == corev1.EventTypeWarning {
			t.Errorf("a Warning event for a pod in maintenance: %s", describe(&e))
		}
	}
	harness.Eventually(t, 10*time.Second, "a probe of mail-a's web port again", func() error {
		if a.http.Hits() == hits {
			return fmt.Errorf("no probe since the annotation went")
		}
		return nil
	})
	t.Logf("maintenance: withdrawn %s after the annotation (period %s); back %s after its removal (successThreshold 2)", out.Round(time.Millisecond), period, back.Round(time.Millisecond))
}
