package disruption_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestMaintenanceCountsUnavailable: a broker taken out by its maintenance
// annotation (still Ready, its probes still passing) counts as unavailable:
// with maxUnavailable 1 the guard refuses a second broker's eviction until
// the annotation goes and the broker passes again.
func TestMaintenanceCountsUnavailable(t *testing.T) {
	ctx := context.Background()
	k := newKafka(t, budgetMaxUnavailable(1))
	k.waitPassing(t, map[string]bool{brokerName(0): true, brokerName(1): true, brokerName(2): true})
	annotate := func(value *string) {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{swhv1alpha1.AnnotationMaintenance: value}}})
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{}
		pod.Namespace, pod.Name = k.ns, brokerName(0)
		if err := controlPlane.Client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatal(err)
		}
	}
	all := ""
	annotate(&all)
	k.waitPassing(t, map[string]bool{brokerName(0): false, brokerName(1): true, brokerName(2): true})
	harness.Eventually(t, 10*time.Second, "a denial of kafka-1 while kafka-0 is in maintenance", func() error {
		err := evict(ctx, k.ns, brokerName(1), true)
		if err == nil {
			t.Fatal("the guard let kafka-1's eviction through while kafka-0 is in maintenance")
		}
		if !apierrors.IsTooManyRequests(err) {
			return err
		}
		return nil
	})
	annotate(nil)
	k.waitPassing(t, map[string]bool{brokerName(0): true})
	harness.Eventually(t, 30*time.Second, "kafka-1's eviction once kafka-0 is back", func() error {
		return evict(ctx, k.ns, brokerName(1), true)
	})
}
