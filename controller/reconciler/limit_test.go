package reconciler

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

func TestRevertLimiter(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newRevertLimiter()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	check := func(t *testing.T, g gate, field, want string) {
		t.Helper()
		got := "allowed"
		switch {
		case g.held[field]:
			got = "held"
		case g.deferred[field]:
			got = "deferred"
		case !g.allowed[field]:
			got = "nothing"
		}
		if got != want {
			t.Errorf("%s is %s, want %s", field, got, want)
		}
	}

	// A fight: each revert undone at once. Reverts 0 s, 1 s, 3 s, 7 s apart.
	fields := []string{"selector"}
	for i, sec := range []int{0, 1, 3, 7} {
		now := at(time.Duration(sec) * time.Second)
		check(t, l.gate(key, fields, "1", 1, now), "selector", "allowed")
		l.reverted(key, fields, now)
		if i < 3 {
			g := l.gate(key, fields, "1", 1, now.Add(time.Millisecond))
			check(t, g, "selector", "deferred")
			if want := time.Duration(1<<i)*time.Second - time.Millisecond; g.wait != want {
				t.Errorf("after revert %d: wait %v, want %v", i, g.wait, want)
			}
		}
	}
	// Long quiet: back to the first interval.
	later := at(time.Hour)
	l.reverted(key, fields, later)
	check(t, l.gate(key, fields, "1", 1, later.Add(revertInterval)), "selector", "allowed")
	// The cap.
	now := later
	for range 20 {
		now = now.Add(maxRevertInterval)
		l.reverted(key, fields, now)
	}
	if g := l.gate(key, fields, "1", 1, now); g.interval != maxRevertInterval {
		t.Errorf("interval %v, want the cap %v", g.interval, maxRevertInterval)
	}

	// Held: until the Service's version or the resource's generation
	// changes, then by the interval again.
	other := []string{"publishNotReadyAddresses"}
	l.reverted(key, other, t0)
	l.hold(key, other, "7", 2)
	check(t, l.gate(key, other, "7", 2, at(time.Hour)), "publishNotReadyAddresses", "held")
	check(t, l.gate(key, other, "8", 2, at(time.Hour)), "publishNotReadyAddresses", "allowed")
	check(t, l.gate(key, other, "7", 3, at(time.Hour)), "publishNotReadyAddresses", "allowed")
	check(t, l.gate(key, other, "8", 2, t0.Add(time.Millisecond)), "publishNotReadyAddresses", "deferred")
	l.reverted(key, other, at(time.Hour))
	check(t, l.gate(key, other, "7", 2, at(2*time.Hour)), "publishNotReadyAddresses", "allowed")

	// Fields and resources are apart; a forgotten resource starts afresh.
	check(t, l.gate(types.NamespacedName{Namespace: "ns", Name: "other"}, fields, "1", 1, now), "selector", "allowed")
	l.forget(key)
	check(t, l.gate(key, fields, "1", 1, now), "selector", "allowed")

	var none *revertLimiter
	check(t, none.gate(key, fields, "1", 1, now), "selector", "allowed")
	none.reverted(key, fields, now)
	none.hold(key, fields, "1", 1)
	none.forget(key)
}

func TestDrifting(t *testing.T) {
	held := drift{changes: []change{{field: "publishNotReadyAddresses", note: "publishNotReadyAddresses true"}}}
	deferred := drift{changes: []change{{field: "selector", note: "selector app=web (set by kyverno)"}}}
	synced := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionTrue, Reason: swhv1alpha1.ReasonSynced, Message: "Service web matches the spec"}
	proxy := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionFalse, Reason: swhv1alpha1.ReasonServiceDrifted, Message: "the child Service has the label"}
	removed := metav1.Condition{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionFalse, Reason: swhv1alpha1.ReasonSelectorRemoved, Message: "removed"}
	tests := []struct {
		name   string
		cond   metav1.Condition
		pb     putBackResult
		reason string
		parts  []string
	}{
		{"nothing left", synced, putBackResult{}, swhv1alpha1.ReasonSynced, []string{"matches"}},
		{"held", synced, putBackResult{held: held}, swhv1alpha1.ReasonServiceDrifted, []string{"mutating admission", "publishNotReadyAddresses true"}},
		{"deferred", synced, putBackResult{deferred: deferred, interval: 4 * time.Second}, swhv1alpha1.ReasonServiceDrifted, []string{"selector app=web (set by kyverno)", "every 4s"}},
		{"both, with a proxy label", proxy, putBackResult{held: held, deferred: deferred, interval: time.Second},
			swhv1alpha1.ReasonServiceDrifted, []string{"publishNotReadyAddresses", "selector", "the label"}},
		{"a selector removal says more", removed, putBackResult{held: held}, swhv1alpha1.ReasonSelectorRemoved, []string{"removed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := drifting(tt.cond, tt.pb)
			if got.Reason != tt.reason {
				t.Errorf("reason %s, want %s", got.Reason, tt.reason)
			}
			if (got.Status == metav1.ConditionTrue) != (tt.reason == swhv1alpha1.ReasonSynced) {
				t.Errorf("status %s with reason %s", got.Status, got.Reason)
			}
			for _, p := range tt.parts {
				if !strings.Contains(got.Message, p) {
					t.Errorf("message %q lacks %q", got.Message, p)
				}
			}
		})
	}
}

func TestForeignDriftInclude(t *testing.T) {
	swh := driftResource()
	swh.Spec.Type, swh.Spec.SessionAffinity = corev1.ServiceTypeClusterIP, corev1.ServiceAffinityNone
	svc := liveService(swh)
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Spec.PublishNotReadyAddresses = true
	edited(svc, `{"f:spec":{"f:selector":{".":{},"f:app":{}},"f:publishNotReadyAddresses":{}}}`)
	if d := foreignDrift(swh, svc, testOwner, onlySelector); strings.Join(d.fields(), ",") != "selector" || len(d.patch) != 1 || d.selector != "app=web" {
		t.Errorf("only the selector: fields %v, patch %v, selector %q", d.fields(), d.patch, d.selector)
	}
	if d := foreignDrift(swh, svc, testOwner, func(f string) bool { return f != "selector" }); strings.Join(d.fields(), ",") != "publishNotReadyAddresses" || d.selector != "" {
		t.Errorf("all but the selector: fields %v, selector %q", d.fields(), d.selector)
	}
	// Nobody owns it (a mutating admission set it): not the apply's, so drift.
	svc = liveService(swh)
	svc.Spec.PublishNotReadyAddresses = true
	if d := foreignDrift(swh, svc, testOwner, nil); strings.Join(d.fields(), ",") != "publishNotReadyAddresses" {
		t.Errorf("an unowned value: fields %v", d.fields())
	}
}
