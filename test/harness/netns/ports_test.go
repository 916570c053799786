package netns

import (
	"testing"
	"time"
)

func TestSourcePorts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		// failed are the ports whose dial failed at t0.
		failed []int
		// at is when the picks happen, after t0.
		at   time.Duration
		want []int
	}{
		{name: "in turn from the first", want: []int{20000, 20001, 20002}},
		{name: "a failed port is skipped", failed: []int{20001}, at: time.Second, want: []int{20000, 20002, 20003}},
		{name: "still skipped just inside the window", failed: []int{20000}, at: staleSYNWindow - time.Millisecond, want: []int{20001}},
		{name: "back in use once the window passed", failed: []int{20000, 20001}, at: staleSYNWindow, want: []int{20000, 20001}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sourcePorts
			for _, p := range tt.failed {
				s.fail(p, t0)
			}
			for i, want := range tt.want {
				if got := s.pick(t0.Add(tt.at)); got != want {
					t.Fatalf("pick %d: got %d, want %d", i, got, want)
				}
			}
		})
	}
}

func TestSourcePortsWrapAround(t *testing.T) {
	var s sourcePorts
	now := time.Unix(1000, 0)
	s.fail(firstSourcePort, now)
	span := lastSourcePort - firstSourcePort + 1
	for range span - 1 {
		if p := s.pick(now); p < firstSourcePort || p > lastSourcePort {
			t.Fatalf("port %d outside [%d, %d]", p, firstSourcePort, lastSourcePort)
		}
	}
	// The turn comes back to the first port, still held back: the next is
	// the second.
	if got := s.pick(now); got != firstSourcePort+1 {
		t.Fatalf("after a full turn: got %d, want %d", got, firstSourcePort+1)
	}
}
