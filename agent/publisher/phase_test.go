package publisher

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestAlignedDelay(t *testing.T) {
	base := time.Unix(1_000_000, 0) // a whole second: offset 0 in a 1 s period
	tests := []struct {
		name                    string
		now                     time.Time
		minDelay, period, phase time.Duration
		want                    time.Duration
	}{
		{"already on the phase", base, 0, time.Second, 0, 0},
		{"wait for the phase", base, 0, time.Second, 300 * time.Millisecond, 300 * time.Millisecond},
		{"phase passed: next period", base.Add(400 * time.Millisecond), 0, time.Second, 300 * time.Millisecond, 900 * time.Millisecond},
		{"initial delay first, then the phase", base, 2500 * time.Millisecond, time.Second, 300 * time.Millisecond, 3300 * time.Millisecond},
		{"no period", base, time.Second, 0, 0, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := alignedDelay(tt.now, tt.minDelay, tt.period, tt.phase); got != tt.want {
				t.Errorf("alignedDelay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPhaseOfSpreadsResources(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 100 {
		p := phaseOf(types.NamespacedName{Namespace: "ns", Name: string(rune('a'+i%26)) + string(rune('a'+i/26))}, 10*time.Second)
		if p < 0 || p >= 10*time.Second {
			t.Fatalf("phase %v outside the period", p)
		}
		seen[p] = true
	}
	if len(seen) < 95 {
		t.Errorf("100 resources share %d phases: they would fire together", len(seen))
	}
	a := types.NamespacedName{Namespace: "ns", Name: "web"}
	if first, again := phaseOf(a, time.Second), phaseOf(a, time.Second); first != again {
		t.Error("the phase of a resource is not stable: agents on different nodes would disagree")
	}
}
