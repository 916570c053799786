package postgresql

import (
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// TestLagTracker runs the checks a prober makes on one replica, probe
// after probe, and what each must say.
func TestLagTracker(t *testing.T) {
	target := probes.Target{Host: "10.0.0.1", Port: 5432}
	replica := func(pending int64, age any) row {
		return row{seen: true, values: []driver.Value{true, pending, age}}
	}
	hour := (time.Hour).Seconds()
	type step struct {
		at   time.Duration // since the first probe
		row  row
		want string // "" passes; else a part of the error
	}
	tests := []struct {
		name   string
		bounds ReplicationLag
		steps  []step
	}{{
		name:   "idle primary: an old last transaction and nothing waiting never lags",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps:  []step{{0, replica(0, hour), ""}, {10 * time.Minute, replica(0, hour+600), ""}},
	}, {
		name:   "the first commit after an hour idle is not an hour of lag",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps:  []step{{0, replica(0, hour), ""}, {time.Second, replica(120, hour+1), ""}, {2 * time.Second, replica(0, 0.5), ""}},
	}, {
		name:   "replay paused under writes: fails once WAL has waited past the bound",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps: []step{{0, replica(1000, 1.0), ""}, {20 * time.Second, replica(50000, 21.0), ""},
			{31 * time.Second, replica(90000, 32.0), "waiting to be replayed for 31s"}},
	}, {
		name:   "a busy replica always a little behind: the last transaction is recent",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps:  []step{{0, replica(100, 0.01), ""}, {40 * time.Second, replica(200, 0.02), ""}, {80 * time.Second, replica(150, 0.01), ""}},
	}, {
		name:   "bytes past the bound fail at once",
		bounds: ReplicationLag{Bytes: 1 << 20},
		steps:  []step{{0, replica(2<<20, 0.1), "2097152 bytes of WAL received and not replayed (bound 1048576)"}},
	}, {
		name:   "nothing replayed yet: the wait seen counts",
		bounds: ReplicationLag{Time: 10 * time.Second},
		steps:  []step{{0, replica(10, nil), ""}, {11 * time.Second, replica(10, nil), "waiting to be replayed for 11s"}},
	}, {
		name:   "caught up in between: the wait starts again",
		bounds: ReplicationLag{Time: 10 * time.Second},
		steps:  []step{{0, replica(10, 5.0), ""}, {8 * time.Second, replica(0, 13.0), ""}, {12 * time.Second, replica(10, 17.0), ""}},
	}, {
		name:   "a primary is never judged",
		bounds: ReplicationLag{Bytes: 1, Time: time.Second},
		steps:  []step{{0, row{seen: true, values: []driver.Value{false, int64(0), nil}}, ""}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := newLagTracker(tt.bounds)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Unix(1_700_000_000, 0)
			for i, s := range tt.steps {
				err := l.check(target, s.row, start.Add(s.at))
				switch {
				case s.want == "" && err != nil:
					t.Fatalf("step %d: %v, want a pass", i, err)
				case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want)):
					t.Fatalf("step %d: %v, want an error with %q", i, err, s.want)
				}
			}
		})
	}
	if _, err := newLagTracker(ReplicationLag{}); err == nil {
		t.Error("no bound accepted")
	}
}
