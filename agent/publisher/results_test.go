package publisher

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/probes"
)

// TestMisconfiguredOncePerProblem: a probe that cannot run is told when
// its problem starts or changes, not at every period, and again when it
// comes back.
func TestMisconfiguredOncePerProblem(t *testing.T) {
	table := newTargetTable(false)
	key := targetKey{Resource: types.NamespacedName{Namespace: "ns", Name: "db"}, Pod: "u1"}
	tracker, err := probes.NewTracker(probes.TrackerConfig{SuccessThreshold: 1, FailureThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	table.put(key, &target{tracker: tracker})
	missing := probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: "Secret ns/creds not found"}
	noKey := probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: "Secret ns/creds has no key user"}
	refused := probes.Result{Status: probes.Failure, Reason: probes.ReasonRefused, Message: "refused"}
	var got []bool
	for _, r := range []probes.Result{missing, missing, noKey, refused, refused, missing} {
		o, known := table.observe(key, r, time.Now(), time.Now(), time.Now())
		if !known {
			t.Fatal("target unknown")
		}
		got = append(got, o.newProblem(r))
	}
	if want := "[true false true false false true]"; fmt.Sprint(got) != want {
		t.Errorf("told %v, want %s", got, want)
	}
}
