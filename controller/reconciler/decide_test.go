package reconciler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// appliedService is the child Service of swh as the controller's apply
// leaves it: up to date, every field it sets owned by testOwner.
func appliedService(t *testing.T, swh *swhv1alpha1.ServiceWithHealthchecks) *corev1.Service {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithReturnManagedFields().Build()
	ctx := context.Background()
	if err := c.Apply(ctx, desiredService(swh), client.FieldOwner(testOwner), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(swh), svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

// TestDecideService: the step a pass takes next, and the condition it
// reports when nothing is left to write, from what it observed and did.
func TestDecideService(t *testing.T) {
	adopt := map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	withStatus := func(swh *swhv1alpha1.ServiceWithHealthchecks, reason string, gen int64) *swhv1alpha1.ServiceWithHealthchecks {
		swh.Status.Conditions = []metav1.Condition{{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionFalse,
			Reason: reason, Message: "as before", ObservedGeneration: gen}}
		return swh
	}
	upToDate := appliedService(t, webResource(nil))
	// Someone else added a selector, or session affinity, to the owned Service.
	withSelector := upToDate.DeepCopy()
	withSelector.Spec.Selector = map[string]string{"app": "web"}
	withSelector.ManagedFields = append(withSelector.ManagedFields, managed("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:selector":{".":{},"f:app":{}}}}`))
	withAffinity := upToDate.DeepCopy()
	withAffinity.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	withAffinity.ManagedFields = append(withAffinity.ManagedFields, managed("kubectl-edit", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:sessionAffinity":{}}}`))

	tests := []struct {
		name string
		swh  *swhv1alpha1.ServiceWithHealthchecks
		svc  *corev1.Service
		// did sets what the pass already did.
		did      func(*servicePass)
		want     serviceStep
		reason   string // the condition's reason when want is stepDone
		message  string // part of its message
		after    time.Duration
		wantOwns bool // the apply reports owned fields someone changed
	}{
		{name: "no Service: apply", swh: webResource(nil), want: stepApply},
		{name: "a deleted resource's Service: wait for the collector", swh: webResource(adopt), svc: deletedResourcesService(),
			want: stepDone, reason: swhv1alpha1.ReasonAwaitingGarbageCollection, message: "uid-web-before", after: garbageCollectionRecheck},
		{name: "someone's Service, not annotated: refused", swh: webResource(nil), svc: plainService(""),
			want: stepDone, reason: swhv1alpha1.ReasonServiceNotOwned, message: "set the annotation"},
		{name: "another controller's Service, annotated: refused", swh: webResource(adopt), svc: plainService("shop"),
			want: stepDone, reason: swhv1alpha1.ReasonServiceNotOwned, message: "controlled by Deployment shop"},
		{name: "someone's Service, annotated: remove its selector", swh: webResource(adopt), svc: plainService(""), want: stepRemoveSelector},
		{name: "selector removed: apply", swh: webResource(adopt), svc: plainService(""),
			did: func(p *servicePass) { p.adopting = true }, want: stepApply},
		{name: "adopted and applied: adopting", swh: webResource(adopt), svc: upToDate,
			did: func(p *servicePass) { p.adopting, p.applied = true, true }, want: stepDone, reason: swhv1alpha1.ReasonAdopting},
		{name: "owned and current: synced", swh: webResource(nil), svc: upToDate,
			want: stepDone, reason: swhv1alpha1.ReasonSynced},
		{name: "owned, an older spec: apply", swh: webResource(nil), svc: ownedService(), want: stepApply},
		{name: "a selector someone set: put it back first", swh: webResource(nil), svc: withSelector, want: stepRevertSelector},
		{name: "a selector put back, spec refused at this generation: selector removed", swh: withStatus(webResource(nil), swhv1alpha1.ReasonServiceRejected, 1), svc: upToDate,
			did: func(p *servicePass) { p.selectorReverted, p.removedSelector = true, "app=web" }, want: stepDone, reason: swhv1alpha1.ReasonSelectorRemoved},
		{name: "spec refused at this generation: stays refused, not applied", swh: withStatus(webResource(nil), swhv1alpha1.ReasonServiceRejected, 1), svc: ownedService(),
			want: stepDone, reason: swhv1alpha1.ReasonServiceRejected, message: "as before"},
		{name: "spec refused at an older generation: apply", swh: withStatus(webResource(nil), swhv1alpha1.ReasonServiceRejected, 0), svc: ownedService(), want: stepApply},
		{name: "a field the spec leaves unset: put it back", swh: webResource(nil), svc: withAffinity, want: stepRevertForeign},
		{name: "put back but held by an admission: drifted", swh: webResource(nil), svc: withAffinity,
			did: func(p *servicePass) {
				p.foreignReverted = true
				p.putBack.held, _ = foreignDrift(p.swh, p.svc, testOwner, nil).split(func(change) bool { return true })
			}, want: stepDone, reason: swhv1alpha1.ReasonServiceDrifted, message: "mutating admission"},
		{name: "put back too recently: drifted, looked at again later", swh: webResource(nil), svc: withAffinity,
			did: func(p *servicePass) {
				p.foreignReverted = true
				p.putBack.deferred, _ = foreignDrift(p.swh, p.svc, testOwner, nil).split(func(change) bool { return true })
				p.putBack.wait, p.putBack.interval = 3*time.Second, 4*time.Second
			}, want: stepDone, reason: swhv1alpha1.ReasonServiceDrifted, message: "at most once every 4s", after: 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &servicePass{swh: tt.swh, svc: tt.svc, before: tt.svc, fieldOwner: testOwner}
			if tt.did != nil {
				tt.did(p)
			}
			d, err := decideService(p)
			if err != nil {
				t.Fatal(err)
			}
			if d.step != tt.want {
				t.Fatalf("step %s, want %s", d.step, tt.want)
			}
			if (len(d.owned.changes) > 0) != tt.wantOwns {
				t.Errorf("owned changes %v, want some: %v", d.owned, tt.wantOwns)
			}
			if d.after != tt.after {
				t.Errorf("after %v, want %v", d.after, tt.after)
			}
			if tt.want != stepDone {
				return
			}
			if d.cond.Type != swhv1alpha1.ConditionServiceSynced || d.cond.Reason != tt.reason || !strings.Contains(d.cond.Message, tt.message) {
				t.Errorf("condition %+v, want reason %s with %q", d.cond, tt.reason, tt.message)
			}
		})
	}
}

// TestDecideServiceEnds: whatever a pass did, each decision is a step it
// has not taken yet or the end, so syncService never loops.
func TestDecideServiceEnds(t *testing.T) {
	for _, svc := range []*corev1.Service{nil, plainService(""), ownedService(), appliedService(t, webResource(nil))} {
		p := &servicePass{swh: webResource(map[string]string{swhv1alpha1.AnnotationAdopt: "true"}), svc: svc, before: svc, fieldOwner: testOwner}
		taken := map[serviceStep]bool{}
		for range maxServiceSteps {
			d, err := decideService(p)
			if err != nil {
				t.Fatal(err)
			}
			if d.step == stepDone {
				break
			}
			if taken[d.step] {
				t.Fatalf("step %s decided twice", d.step)
			}
			taken[d.step] = true
			switch d.step { // as syncService records each outcome
			case stepRemoveSelector:
				p.adopting = true
			case stepRevertSelector:
				p.selectorReverted = true
			case stepApply:
				p.applied, p.svc = true, appliedService(t, p.swh)
			case stepRevertForeign:
				p.foreignReverted = true
			}
		}
		if d, _ := decideService(p); d.step != stepDone {
			t.Errorf("Service %v: still %s after %d steps", svc, d.step, maxServiceSteps)
		}
	}
}

// TestDecideCleanup: what is left to do about the built-in controller's
// slices, from the condition the status carries from pass to pass.
func TestDecideCleanup(t *testing.T) {
	tests := []struct {
		reason       string
		wasForbidden bool
		want         builtinCleanup
	}{
		{swhv1alpha1.ReasonSynced, false, cleanupNone},
		{swhv1alpha1.ReasonSynced, true, cleanupLookForLeftovers},
		{swhv1alpha1.ReasonAdopting, false, cleanupAfterAdoption},
		{swhv1alpha1.ReasonAdopting, true, cleanupAfterAdoption},
		{swhv1alpha1.ReasonSelectorRemoved, false, cleanupAfterSelector},
		{swhv1alpha1.ReasonServiceDrifted, true, cleanupNone},
		{swhv1alpha1.ReasonForbidden, true, cleanupNone},
		{swhv1alpha1.ReasonServiceRejected, false, cleanupNone},
	}
	for _, tt := range tests {
		if got := decideCleanup(metav1.Condition{Reason: tt.reason}, tt.wasForbidden); got != tt.want {
			t.Errorf("decideCleanup(%s, forbidden earlier %v) = %d, want %d", tt.reason, tt.wasForbidden, got, tt.want)
		}
	}
}
