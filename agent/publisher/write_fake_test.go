package publisher

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
)

var slicesGR = schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}

// policyDenied is how a ValidatingAdmissionPolicy refuses a slice: 422.
func policyDenied() error {
	return apierrors.NewInvalid(schema.GroupKind{Group: "discovery.k8s.io", Kind: "EndpointSlice"}, "web-http-node-a", field.ErrorList{field.Invalid(nil, nil,
		"ValidatingAdmissionPolicy 'swh-agent-endpointslice-services' with binding 'swh-agent-endpointslice-services' denied request: no params found")})
}

// TestSliceWriteErrors: a slice write the API server answers with an error
// fails the reconcile (the controller requeues it with backoff) and is
// counted by outcome and logged; what was published stays as it was, and
// the next pass, reading afresh, writes it. An error that may pass at once
// (unavailable) is retried within the pass.
func TestSliceWriteErrors(t *testing.T) {
	tests := []struct {
		name string
		// op is the write that fails: "create" (no slice yet) or
		// "update" (the pod turns ready on a published slice).
		op   string
		err  error
		once bool
		// wantErr checks the reconcile's error; nil: none wanted.
		wantErr func(error) bool
		// wantOutcome is how the failed write is counted.
		wantOutcome string
		// wantLog is part of the error the log line must say.
		wantLog string
	}{
		{name: "update conflicts", op: "update", err: apierrors.NewConflict(slicesGR, "web-http-node-a", errors.New("the object has been modified")),
			wantErr: apierrors.IsConflict, wantOutcome: "conflict", wantLog: "has been modified"},
		{name: "update forbidden by RBAC", op: "update", err: apierrors.NewForbidden(slicesGR, "web-http-node-a", errors.New("denied")),
			wantErr: apierrors.IsForbidden, wantOutcome: "forbidden", wantLog: "is forbidden"},
		{name: "update refused by an admission policy", op: "update", err: policyDenied(),
			wantErr: apierrors.IsInvalid, wantOutcome: "forbidden", wantLog: "denied request"},
		{name: "create forbidden by RBAC", op: "create", err: apierrors.NewForbidden(slicesGR, "web-http-node-a", errors.New("denied")),
			wantErr: apierrors.IsForbidden, wantOutcome: "forbidden", wantLog: "is forbidden"},
		{name: "create refused by an admission policy", op: "create", err: policyDenied(),
			wantErr: apierrors.IsInvalid, wantOutcome: "forbidden", wantLog: "denied request"},
		{name: "update unavailable once: retried in the pass", op: "update", err: apierrors.NewServiceUnavailable("etcd"), once: true,
			wantOutcome: "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := sliceName(t, "http")
			w := newFakeWorld(t, webResource(false, nil), webService("http"), testNodeObject(), webPod(tt.op == "create"))
			before := "absent"
			if tt.op == "update" {
				// Published not ready first; then the pod turns ready.
				if err := w.reconcile(t); err != nil {
					t.Fatal(err)
				}
				if before = w.readiness(t, name); before != "not ready" {
					t.Fatalf("web-1 is %s, want published not ready first", before)
				}
				w.setPodReady(t, true)
			}

			w.faults.set(tt.op, tt.err, tt.once)
			err := w.reconcile(t)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("reconcile: %v", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("reconcile error %v, want the write's", err)
			}
			if n := w.writes(tt.op, tt.wantOutcome); n != 1 {
				t.Errorf("%s counted %v times as %s, want once", tt.op, n, tt.wantOutcome)
			}
			if tt.wantErr == nil {
				if got := w.readiness(t, name); got != "ready" {
					t.Errorf("after a retried write web-1 is %s, want ready", got)
				}
				return
			}
			if got := w.readiness(t, name); got != before {
				t.Errorf("after a failed write web-1 is %s, want it as published: %s", got, before)
			}
			if !w.logged("slice writes failed") || !w.logged(tt.wantLog) {
				t.Errorf("logs %q: want the failed write and its error", w.logs)
			}

			// The requeue reads afresh and writes.
			w.faults.clear()
			if err := w.reconcile(t); err != nil {
				t.Fatalf("the pass after: %v", err)
			}
			if got := w.readiness(t, name); got != "ready" {
				t.Errorf("the pass after: web-1 is %s, want ready", got)
			}
		})
	}
}

// TestSliceNameTaken: a create that finds the name held by a slice the
// publisher does not own (not in its cache) never overwrites it; the next
// pass reads the holder and publishes under another name, and says so.
func TestSliceNameTaken(t *testing.T) {
	name := sliceName(t, "http")
	holder := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: "web-http", discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	w := newFakeWorld(t, webResource(false, nil), webService("http"), testNodeObject(), webPod(true), holder)
	if err := w.reconcile(t); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("first pass: %v, want the create's AlreadyExists", err)
	}
	if err := w.reconcile(t); err != nil {
		t.Fatalf("second pass: %v", err)
	}
	if got := w.slice(t, name); got == nil || got.Labels[discoveryv1.LabelManagedBy] != "someone-else" {
		t.Errorf("the holder is now %s, want it untouched", describe(got))
	}
	list := &discoveryv1.EndpointSliceList{}
	if err := w.c.List(t.Context(), list, client.MatchingLabels{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy}); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || !strings.HasPrefix(list.Items[0].Name, name+"-") {
		t.Fatalf("own slices %d (%v), want one under an alternative name", len(list.Items), list.Items)
	}
	if got := w.readiness(t, list.Items[0].Name); got != "ready" {
		t.Errorf("web-1 is %s in %s, want ready", got, list.Items[0].Name)
	}
	var taken bool
	for len(w.events.Events) > 0 {
		e := <-w.events.Events
		taken = taken || strings.HasPrefix(e, "Warning SliceNameTaken")
	}
	if !taken {
		t.Error("no SliceNameTaken event")
	}
}

// TestNewsOfAWriteThatLanded: an update the API server committed but
// answered with a timeout fails the pass (its retry conflicts); the next
// pass finds the slice already as it wants it, and still tells the news,
// against what was published before the failed write: also when that
// write is the first of a publisher that has told nothing yet (restarted).
func TestNewsOfAWriteThatLanded(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarted=%t", restarted), func(t *testing.T) {
			name := sliceName(t, "http")
			w := newFakeWorld(t, webResource(false, nil), webService("http"), testNodeObject(), webPod(false))
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			if got := w.readiness(t, name); got != "not ready" {
				t.Fatalf("web-1 is %s, want published not ready first", got)
			}
			if restarted {
				w.p.forget(testKey) // as a new agent: nothing told
			}
			w.drainEvents()
			w.setPodReady(t, true)
			w.faults.setLanded("update", apierrors.NewServerTimeout(slicesGR, "update", 1))
			if err := w.reconcile(t); err == nil {
				t.Fatal("the pass whose write timed out succeeded")
			}
			if got := w.readiness(t, name); got != "ready" {
				t.Fatalf("web-1 is %s, want the landed write's ready", got)
			}
			if evs := w.drainEvents(); len(evs) != 0 {
				t.Errorf("events of a failed pass: %q", evs)
			}
			w.faults.clear()
			if err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			evs := w.drainEvents()
			if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal EndpointReady") {
				t.Errorf("events after the landed write %q, want one EndpointReady", evs)
			}
		})
	}
}

// TestNewsOnceWhenTheCacheIsBehind: a pass that reads the slices from
// before the agent's last write (the cache not caught up) fails its write
// on a conflict and tells nothing; the passes after it tell each change
// once, not again, and none is lost.
func TestNewsOnceWhenTheCacheIsBehind(t *testing.T) {
	w := newFakeWorld(t, webResource(false, nil), webService("http"), testNodeObject(), webPod(false))
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	stale := &discoveryv1.EndpointSliceList{}
	if err := w.c.List(t.Context(), stale); err != nil {
		t.Fatal(err)
	}
	w.drainEvents()
	w.setPodReady(t, true)
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if evs := w.drainEvents(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal EndpointReady") {
		t.Fatalf("events %q, want one EndpointReady", evs)
	}

	view, err := w.p.read(t.Context(), testKey)
	if err != nil || view == nil {
		t.Fatalf("read: %v", err)
	}
	view.existing = stale.Items
	verdicts, why := w.p.verdicts(view)
	if evs, err := w.p.publish(t.Context(), view, verdicts, why); !apierrors.IsConflict(err) || len(evs) != 0 {
		t.Fatalf("a pass behind the cache: events %v, error %v; want none and a conflict", evs, err)
	}
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if evs := w.drainEvents(); len(evs) != 0 {
		t.Errorf("the pass after told again: %q", evs)
	}
	w.setPodReady(t, false)
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if evs := w.drainEvents(); len(evs) != 1 || !strings.Contains(evs[0], "EndpointNotReady") {
		t.Errorf("events %q, want one EndpointNotReady", evs)
	}
}

// TestNoDeleteWhenACreateFails: a plan that replaces a slice by another
// (the Service's port renamed) deletes the old one only once the new one
// exists: a create that fails leaves the old slice, and its traffic.
func TestNoDeleteWhenACreateFails(t *testing.T) {
	w := newFakeWorld(t, webResource(false, nil), webService("http"), testNodeObject(), webPod(true))
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	old := sliceName(t, "http")
	if w.slice(t, old) == nil {
		t.Fatalf("no slice %s", old)
	}
	w.setServicePorts(t, "web")
	w.faults.set("create", apierrors.NewAlreadyExists(slicesGR, sliceName(t, "web")), false)
	if err := w.reconcile(t); err == nil {
		t.Fatal("the pass whose create failed succeeded")
	}
	if w.slice(t, old) == nil || w.writes("delete", "ok") != 0 {
		t.Errorf("the slice the failed create replaces was deleted (%v deletes)", w.writes("delete", "ok"))
	}
	w.faults.clear()
	if err := w.reconcile(t); err != nil {
		t.Fatal(err)
	}
	if w.slice(t, old) != nil || w.slice(t, sliceName(t, "web")) == nil {
		t.Errorf("after the create succeeds: old slice kept %v, new one missing %v", w.slice(t, old) != nil, w.slice(t, sliceName(t, "web")) == nil)
	}
}
