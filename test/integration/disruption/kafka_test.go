package disruption_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/swh-dev/swh/test/harness"
)

// TestKafkaDrain is the seed's scenario: a drain evicts broker 0; it comes
// back Ready but still catching up (its probe fails). A PodDisruptionBudget
// maxUnavailable 1 counts three Ready brokers and lets the next eviction
// through, taking a second broker away. With the resource's budget the
// guard refuses it with 429 until broker 0 passes again, then allows it.
func TestKafkaDrain(t *testing.T) {
	ctx := context.Background()

	t.Run("the PDB alone lets the second eviction through", func(t *testing.T) {
		k := newKafka(t, nil)
		k.createPDB(t, 1, 1)
		if err := evict(ctx, k.ns, brokerName(0), false); err != nil {
			t.Fatalf("first eviction: %v", err)
		}
		k.replaceBroker(t, 0, false)
		k.waitPassing(t, map[string]bool{brokerName(0): false, brokerName(1): true, brokerName(2): true})
		k.waitPDB(t, 1) // three Ready pods: one more disruption allowed
		if err := evict(ctx, k.ns, brokerName(1), false); err != nil {
			t.Fatalf("the PDB refused the second eviction, expected it to allow it: %v", err)
		}
		t.Logf("with a PDB only, kafka-1 was evicted while kafka-0 was Ready and not in sync: two brokers out")
	})

	t.Run("the guard refuses it until the first broker passes", func(t *testing.T) {
		k := newKafka(t, budgetMaxUnavailable(1))
		k.createPDB(t, 1, 1)
		if err := evict(ctx, k.ns, brokerName(0), false); err != nil {
			t.Fatalf("first eviction: %v", err)
		}
		k.replaceBroker(t, 0, false)
		k.waitPassing(t, map[string]bool{brokerName(0): false, brokerName(1): true, brokerName(2): true})
		k.waitPDB(t, 1)
		// The new kafka-0 is published not ready: its endpoint carries no
		// reservation, so the budget counts 2 of 3 and allows nothing.
		var denial error
		harness.Eventually(t, 10*time.Second, "a denial of kafka-1", func() error {
			denial = evict(ctx, k.ns, brokerName(1), false)
			if denial == nil {
				t.Fatal("the guard let the second eviction through while kafka-0 does not pass")
			}
			if !apierrors.IsTooManyRequests(denial) {
				return denial
			}
			return nil
		})
		msg := denial.Error()
		for _, want := range []string{"ServiceWithHealthchecks " + k.ns + "/kafka", "maxUnavailable 1 on port client", "kafka-0 (not ready on port client)", "needs 2 of 3"} {
			if !strings.Contains(msg, want) {
				t.Errorf("denial %q does not say %q", msg, want)
			}
		}
		t.Logf("denial: %s", msg)
		st := k.resource(t).Status.Disruption
		if st == nil || st.DisruptionsAllowed != 0 || st.CurrentHealthy != 2 || st.DesiredHealthy != 2 || st.ExpectedPods != 3 {
			t.Errorf("status.disruption = %+v, want 2 healthy of 3, 2 desired, 0 allowed", st)
		}
		// Still refused a few retries later (kubectl drain retries every 5 s).
		time.Sleep(2 * time.Second)
		if err := evict(ctx, k.ns, brokerName(1), false); !apierrors.IsTooManyRequests(err) {
			t.Fatalf("a retry while kafka-0 still fails: %v, want 429", err)
		}
		k.setInSync(0, true)
		start := time.Now()
		harness.Eventually(t, 30*time.Second, "the eviction of kafka-1 once kafka-0 passes", func() error {
			return evict(ctx, k.ns, brokerName(1), false)
		})
		t.Logf("FIGURE guard-allowed-after-pass=%v (probe period 1 s, retry every 0.5 s)", time.Since(start).Round(time.Millisecond))
	})
}
