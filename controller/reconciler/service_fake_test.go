package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

var (
	servicesGR = schema.GroupResource{Resource: "services"}
	swhGR      = schema.GroupResource{Group: swhv1alpha1.GroupVersion.Group, Resource: "servicewithhealthchecks"}
)

// API server answers the tests inject.
func conflictErr(gr schema.GroupResource) error {
	return apierrors.NewConflict(gr, "web", errors.New("the object has been modified"))
}

func forbiddenErr(gr schema.GroupResource) error {
	return apierrors.NewForbidden(gr, "web", errors.New("denied by RBAC"))
}

func invalidService() error {
	return apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "web",
		field.ErrorList{field.Invalid(field.NewPath("spec", "ports").Index(0).Child("nodePort"), 30080, "provided port is already allocated")})
}

// failApply makes every apply of a Service fail with err.
func failApply(err error) interceptor.Funcs {
	return interceptor.Funcs{Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
		return err
	}}
}

// failPatchService makes every patch of a Service fail with err.
func failPatchService(err error) interceptor.Funcs {
	return interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		if _, ok := obj.(*corev1.Service); ok {
			return err
		}
		return c.Patch(ctx, obj, patch, opts...)
	}}
}

// failStatus makes every status write fail with err.
func failStatus(err error) interceptor.Funcs {
	return interceptor.Funcs{SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		return err
	}}
}

// ownedService is the child Service of webResource as an earlier spec left
// it: port 81, which the current spec (80) changes.
func ownedService() *corev1.Service {
	yes := true
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "uid-svc",
			Labels: map[string]string{swhv1alpha1.LabelService: "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: swhv1alpha1.GroupVersion.String(), Kind: "ServiceWithHealthchecks",
				Name: "web", UID: "uid-web", Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 81, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// syncedEarlier is webResource at generation 2 whose status says the
// Service was synced at generation 1.
func syncedEarlier() *swhv1alpha1.ServiceWithHealthchecks {
	swh := webResource(nil)
	swh.Generation = 2
	swh.Status.ObservedGeneration = 1
	swh.Status.Conditions = []metav1.Condition{{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionTrue,
		Reason: swhv1alpha1.ReasonSynced, Message: "Service web matches the spec", ObservedGeneration: 1, LastTransitionTime: metav1.Now()}}
	return swh
}

// TestServiceWriteErrors: what a refused, conflicting or failed write of the
// child Service or of the status leaves. An answer that may pass (a
// conflict, a timeout) is retried and writes no status: the status must
// not say the Service was refused when it was not. An answer that will not
// pass by retrying (403, 422) is a condition with its reason and an event,
// not an error.
func TestServiceWriteErrors(t *testing.T) {
	tests := []struct {
		name  string
		objs  []client.Object
		funcs interceptor.Funcs
		// wantErr checks Reconcile's error; nil: no error wanted.
		wantErr func(error) bool
		// wantReason is the ServiceSynced reason after the pass, and
		// wantGen its observed generation; "" with wantGen 0: no
		// condition, else the status as it was.
		wantReason string
		wantGen    int64
		wantEvent  string // a prefix of an event; "" for none
		wantAfter  time.Duration
		// wantPort is the port of the Service after the pass; 0: none.
		wantPort int32
	}{
		{name: "create conflicts: retried, no status",
			objs: []client.Object{webResource(nil)}, funcs: failApply(conflictErr(servicesGR)),
			wantErr: apierrors.IsConflict},
		{name: "update conflicts: retried, the status stays that of the last sync",
			objs: []client.Object{syncedEarlier(), ownedService()}, funcs: failApply(conflictErr(servicesGR)),
			wantErr: apierrors.IsConflict, wantReason: swhv1alpha1.ReasonSynced, wantGen: 1, wantPort: 81},
		{name: "create times out: retried, no status",
			objs: []client.Object{webResource(nil)}, funcs: failApply(apierrors.NewTimeoutError("etcd", 1)),
			wantErr: apierrors.IsTimeout},
		{name: "create forbidden: condition, event, retried in a minute",
			objs: []client.Object{webResource(nil)}, funcs: failApply(forbiddenErr(servicesGR)),
			wantReason: swhv1alpha1.ReasonForbidden, wantGen: 1, wantEvent: "Warning Forbidden the API server forbade", wantAfter: forbiddenRetry},
		{name: "create invalid: rejected until the resource changes",
			objs: []client.Object{webResource(nil)}, funcs: failApply(invalidService()),
			wantReason: swhv1alpha1.ReasonServiceRejected, wantGen: 1, wantEvent: "Warning ServiceRejected the API server refused the Service"},
		{name: "update invalid: rejected, the Service stays as last applied",
			objs: []client.Object{syncedEarlier(), ownedService()}, funcs: failApply(invalidService()),
			wantReason: swhv1alpha1.ReasonServiceRejected, wantGen: 2, wantEvent: "Warning ServiceRejected", wantPort: 81},
		{name: "update applied",
			objs:       []client.Object{syncedEarlier(), ownedService()},
			wantReason: swhv1alpha1.ReasonSynced, wantGen: 2, wantPort: 80},
		{name: "status conflicts: another pass soon",
			objs: []client.Object{webResource(nil)}, funcs: failStatus(conflictErr(swhGR)),
			wantAfter: 100 * time.Millisecond, wantPort: 80},
		{name: "status forbidden: an event says it",
			objs: []client.Object{webResource(nil)}, funcs: failStatus(forbiddenErr(swhGR)),
			wantErr: apierrors.IsForbidden, wantEvent: "Warning Forbidden the API server forbade writing the status", wantPort: 80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorld(t, tt.funcs, tt.objs...)
			res, err := w.reconcile(t)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Reconcile: %v", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("Reconcile error %v, want one the check accepts", err)
			}
			if res.RequeueAfter != tt.wantAfter {
				t.Errorf("RequeueAfter %v, want %v", res.RequeueAfter, tt.wantAfter)
			}
			c := w.synced(t)
			switch {
			case tt.wantReason == "" && c != nil:
				t.Errorf("ServiceSynced %s (%s) written, want no condition", c.Reason, c.Message)
			case tt.wantReason != "" && (c == nil || c.Reason != tt.wantReason || c.ObservedGeneration != tt.wantGen):
				t.Errorf("ServiceSynced %+v, want reason %s at generation %d", c, tt.wantReason, tt.wantGen)
			}
			evs := w.drainEvents()
			if tt.wantEvent != "" && !hasEvent(evs, tt.wantEvent) {
				t.Errorf("events %q, want one starting %q", evs, tt.wantEvent)
			}
			if tt.wantEvent == "" && tt.wantErr != nil && len(evs) > 0 {
				t.Errorf("events %q for a write that is retried", evs)
			}
			svc := w.service(t)
			switch {
			case tt.wantPort == 0 && svc != nil:
				t.Errorf("Service %s exists, want none", svc.Name)
			case tt.wantPort != 0 && (svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != tt.wantPort):
				t.Errorf("Service %+v, want port %d", svc, tt.wantPort)
			}
		})
	}
}

// TestAdoption: an existing Service is taken over only with the adopt
// annotation and when no other controller owns it; a Service that is not
// the resource's is otherwise left exactly as it is. A transient failure
// to remove its selector is retried, not reported as a refusal.
func TestAdoption(t *testing.T) {
	adopt := map[string]string{swhv1alpha1.AnnotationAdopt: "true"}
	tests := []struct {
		name      string
		objs      []client.Object
		funcs     interceptor.Funcs
		wantErr   func(error) bool
		wantRetry bool // a pass soon, no status
		// wantReason is the ServiceSynced reason; "" for none written.
		wantReason  string
		wantMessage string
		wantEvent   string
		// wantAdopted: the Service is the resource's, without selector;
		// else it is untouched.
		wantAdopted bool
		// wantBuiltin: the built-in controller's slice is still there.
		wantBuiltin bool
	}{
		{name: "not annotated: refused, untouched",
			objs:       []client.Object{webResource(nil), plainService(""), builtinSlice(), webPod()},
			wantReason: swhv1alpha1.ReasonServiceNotOwned, wantMessage: "set the annotation " + swhv1alpha1.AnnotationAdopt,
			wantEvent: "Warning ServiceNotOwned", wantBuiltin: true},
		{name: "another controller's: refused even annotated",
			objs:       []client.Object{webResource(adopt), plainService("shop"), builtinSlice(), webPod()},
			wantReason: swhv1alpha1.ReasonServiceNotOwned, wantMessage: "controlled by Deployment shop",
			wantEvent: "Warning ServiceNotOwned", wantBuiltin: true},
		{name: "a deleted resource's of the same name: waits for the garbage collector, untouched, no Warning",
			objs:       []client.Object{webResource(nil), deletedResourcesService(), builtinSlice(), webPod()},
			wantReason: swhv1alpha1.ReasonAwaitingGarbageCollection, wantMessage: "waiting for the garbage collector",
			wantEvent: "Normal AwaitingGarbageCollection", wantBuiltin: true},
		{name: "a deleted resource's, annotated: waits too, not adopted",
			objs:       []client.Object{webResource(adopt), deletedResourcesService(), builtinSlice(), webPod()},
			wantReason: swhv1alpha1.ReasonAwaitingGarbageCollection, wantMessage: "uid-web-before",
			wantEvent: "Normal AwaitingGarbageCollection", wantBuiltin: true},
		{name: "annotated, pods selected: adopting, the built-in slices stay",
			objs:       []client.Object{webResource(adopt), plainService(""), builtinSlice(), webPod()},
			wantReason: swhv1alpha1.ReasonAdopting, wantEvent: "Normal Adopting", wantAdopted: true, wantBuiltin: true},
		{name: "annotated, no pod selected: adopted at once",
			objs:       []client.Object{webResource(adopt), plainService(""), builtinSlice()},
			wantReason: swhv1alpha1.ReasonSynced, wantMessage: "1 built-in EndpointSlices removed", wantEvent: "Normal Synced", wantAdopted: true},
		{name: "annotated, removing the selector forbidden",
			objs:  []client.Object{webResource(adopt), plainService(""), builtinSlice(), webPod()},
			funcs: failPatchService(forbiddenErr(servicesGR)), wantReason: swhv1alpha1.ReasonForbidden,
			wantEvent: "Warning Forbidden", wantBuiltin: true},
		{name: "annotated, removing the selector invalid: rejected",
			objs:  []client.Object{webResource(adopt), plainService(""), builtinSlice(), webPod()},
			funcs: failPatchService(invalidService()), wantReason: swhv1alpha1.ReasonServiceRejected,
			wantEvent: "Warning ServiceRejected", wantBuiltin: true},
		{name: "annotated, removing the selector fails on the server: retried, no status",
			objs:  []client.Object{webResource(adopt), plainService(""), builtinSlice(), webPod()},
			funcs: failPatchService(apierrors.NewInternalError(errors.New("etcd leader changed"))), wantErr: apierrors.IsInternalError,
			wantBuiltin: true},
		{name: "annotated, removing the selector conflicts: another pass soon, no status",
			objs:  []client.Object{webResource(adopt), plainService(""), builtinSlice(), webPod()},
			funcs: failPatchService(conflictErr(servicesGR)), wantRetry: true, wantBuiltin: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newFakeWorld(t, tt.funcs, tt.objs...)
			res, err := w.reconcile(t)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Reconcile: %v", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("Reconcile error %v, want one the check accepts", err)
			}
			if tt.wantRetry != (res.RequeueAfter == 100*time.Millisecond) {
				t.Errorf("RequeueAfter %v, want a pass soon: %v", res.RequeueAfter, tt.wantRetry)
			}
			c := w.synced(t)
			switch {
			case tt.wantReason == "" && c != nil:
				t.Errorf("ServiceSynced %s (%s) written, want no condition", c.Reason, c.Message)
			case tt.wantReason != "" && (c == nil || c.Reason != tt.wantReason || !strings.Contains(c.Message, tt.wantMessage)):
				t.Errorf("ServiceSynced %+v, want reason %s with %q", c, tt.wantReason, tt.wantMessage)
			}
			if evs := w.drainEvents(); (tt.wantEvent == "" && len(evs) > 0) || (tt.wantEvent != "" && !hasEvent(evs, tt.wantEvent)) {
				t.Errorf("events %q, want one starting %q", evs, tt.wantEvent)
			}
			svc := w.service(t)
			owned := ownedBy(svc, webResource(nil))
			if tt.wantAdopted && (!owned || len(svc.Spec.Selector) > 0 || svc.Labels[swhv1alpha1.LabelService] != "web") {
				t.Errorf("Service %+v, want it the resource's, with no selector", svc)
			}
			if !tt.wantAdopted && (owned || svc.Spec.Selector["app"] != "web" || svc.Labels[swhv1alpha1.LabelService] != "") {
				t.Errorf("Service %+v changed, want it untouched", svc)
			}
			err = w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: builtinSlice().Name}, &discoveryv1.EndpointSlice{})
			if tt.wantBuiltin != (err == nil) {
				t.Errorf("built-in slice: %v, want it kept: %v", err, tt.wantBuiltin)
			}
		})
	}
}

// deletedResourcesService is the Service web of a resource web that was
// deleted (another UID), before the garbage collector deleted the Service.
func deletedResourcesService() *corev1.Service {
	svc := plainService("")
	svc.OwnerReferences = []metav1.OwnerReference{{APIVersion: swhv1alpha1.GroupVersion.String(), Kind: "ServiceWithHealthchecks",
		Name: "web", UID: "uid-web-before", Controller: new(true), BlockOwnerDeletion: new(true)}}
	return svc
}

// TestAdoptionCountsOnlyLiveSlices: an adoption finishes once the agents
// publish a ready endpoint, and a slice of a node just deleted (not yet
// collected) is not the agents publishing.
func TestAdoptionCountsOnlyLiveSlices(t *testing.T) {
	for _, nodeExists := range []bool{false, true} {
		t.Run(fmt.Sprintf("node exists %v", nodeExists), func(t *testing.T) {
			swh := webResource(map[string]string{swhv1alpha1.AnnotationAdopt: "true"})
			swh.Status.Conditions = []metav1.Condition{{Type: swhv1alpha1.ConditionServiceSynced, Status: metav1.ConditionTrue,
				Reason: swhv1alpha1.ReasonAdopting, Message: "adopted", ObservedGeneration: 1, LastTransitionTime: metav1.Now()}}
			svc := appliedService(t, swh)
			svc.ResourceVersion = ""
			port, node, ready := "http", "n1", true
			agent := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-http-n1", Labels: map[string]string{
					discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy, endpoints.DefaultNodeLabel: node}},
				AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: &port}},
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, NodeName: &node, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
					TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1", UID: "uid-web-1"}}},
			}
			objs := []client.Object{swh, svc, agent, builtinSlice(), webPod()}
			if nodeExists {
				objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
			}
			w := newFakeWorld(t, interceptor.Funcs{}, objs...)
			if _, err := w.reconcile(t); err != nil {
				t.Fatal(err)
			}
			err := w.c.Get(context.Background(), types.NamespacedName{Namespace: "ns", Name: builtinSlice().Name}, &discoveryv1.EndpointSlice{})
			if kept := err == nil; kept == nodeExists {
				t.Errorf("built-in slice kept: %v (%v); want it deleted only when the agent's node exists", kept, err)
			}
			want := swhv1alpha1.ReasonAdopting
			if nodeExists {
				want = swhv1alpha1.ReasonSynced
			}
			if c := w.synced(t); c == nil || c.Reason != want {
				t.Errorf("ServiceSynced %+v, want %s", c, want)
			}
		})
	}
}
