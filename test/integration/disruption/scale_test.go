package disruption_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/swh-dev/swh/test/harness"
)

// operatorGroup holds the test's stand-ins for an operator's kinds: a
// CloudNativePG-style Cluster, whose /scale is spec.instances, and a kind
// with no /scale subresource.
const operatorGroup = "cnpg.test.swh.dev"

var installOperatorKinds sync.Once

// operatorKinds creates the two CRDs once and waits until they serve.
func operatorKinds(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	crd := func(kind, plural string, scale bool) *unstructured.Unstructured {
		version := map[string]any{
			"name": "v1", "served": true, "storage": true,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
		}
		if scale {
			version["subresources"] = map[string]any{"scale": map[string]any{
				"specReplicasPath": ".spec.instances", "statusReplicasPath": ".status.instances",
			}}
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": plural + "." + operatorGroup},
			"spec": map[string]any{
				"group": operatorGroup, "scope": "Namespaced",
				"names":    map[string]any{"kind": kind, "plural": plural, "singular": strings.ToLower(kind), "listKind": kind + "List"},
				"versions": []any{version},
			},
		}}
		return u
	}
	installOperatorKinds.Do(func() {
		for _, c := range []*unstructured.Unstructured{crd("Cluster", "clusters", true), crd("Opaque", "opaques", false)} {
			if err := controlPlane.Client.Create(ctx, c); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	})
	harness.Eventually(t, 30*time.Second, "the operator's kinds served", func() error {
		for _, kind := range []string{"Cluster", "Opaque"} {
			l := &unstructured.UnstructuredList{}
			l.SetAPIVersion(operatorGroup + "/v1")
			l.SetKind(kind + "List")
			if err := controlPlane.Client.List(ctx, l); err != nil {
				return err
			}
		}
		return nil
	})
}

// operatorController returns a kafkaOptions.controller that creates an
// object of kind with spec.instances.
func operatorController(kind string, instances int64) func(t *testing.T, ns string) metav1.OwnerReference {
	return func(t *testing.T, ns string) metav1.OwnerReference {
		t.Helper()
		operatorKinds(t)
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": operatorGroup + "/v1", "kind": kind,
			"metadata": map[string]any{"namespace": ns, "name": "pg"},
			"spec":     map[string]any{"instances": instances},
		}}
		if err := controlPlane.Client.Create(context.Background(), u); err != nil {
			t.Fatal(err)
		}
		return metav1.OwnerReference{APIVersion: operatorGroup + "/v1", Kind: kind, Name: "pg", UID: u.GetUID(), Controller: ptr.To(true)}
	}
}

// TestOtherControllersScale: three members of a CloudNativePG-style
// Cluster (instances: 3) under maxUnavailable 1. The first eviction goes
// through; once that member is gone (not yet recreated), the Cluster's
// /scale still expects three, and the second eviction is refused. A
// controller without /scale makes the budget allow nothing.
func TestOtherControllersScale(t *testing.T) {
	ctx := context.Background()
	t.Run("a Cluster of three", func(t *testing.T) {
		k := newKafkaWith(t, kafkaOptions{budget: budgetMaxUnavailable(1), controller: operatorController("Cluster", 3)})
		if err := evict(ctx, k.ns, brokerName(0), false); err != nil {
			t.Fatalf("first eviction: %v", err)
		}
		key := types.NamespacedName{Namespace: k.ns, Name: brokerName(0)}
		if err := harness.ForceDeletePod(ctx, controlPlane.Client, key); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 30*time.Second, "kafka-0 gone and its reservation dropped", func() error {
			if st := k.resource(t).Status.Disruption; st == nil || len(st.Reservations) != 0 {
				return fmt.Errorf("status.disruption %+v", st)
			}
			return nil
		})
		err := evict(ctx, k.ns, brokerName(1), false)
		if !apierrors.IsTooManyRequests(err) || !contains(err, "needs 2 of 3") {
			t.Fatalf("second eviction with kafka-0 gone: %v, want the guard's 429 (2 of 3 needed)", err)
		}
		if st := k.resource(t).Status.Disruption; st == nil || st.ExpectedPods != 3 || st.DisruptionsAllowed != 0 {
			t.Errorf("status.disruption %+v, want 3 expected, 0 allowed", st)
		}
	})
	t.Run("a controller without scale", func(t *testing.T) {
		k := newKafkaWith(t, kafkaOptions{budget: budgetMaxUnavailable(1), controller: operatorController("Opaque", 3)})
		err := evict(ctx, k.ns, brokerName(0), true)
		if !apierrors.IsTooManyRequests(err) || !contains(err, "Opaque pg") || !contains(err, "cannot be counted") {
			t.Fatalf("eviction under a controller without /scale: %v, want the guard's 429 naming Opaque pg", err)
		}
	})
}
