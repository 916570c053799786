package postgresql

import (
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// lagRow is a row as lagQuery returns it.
func lagRow(inRecovery bool, received, replayed any) row {
	return row{seen: true, values: []driver.Value{inRecovery, received, replayed}}
}

// TestLagTracker runs the checks a prober makes on one replica, probe
// after probe, and what each must say.
func TestLagTracker(t *testing.T) {
	target := probes.Target{Host: "10.0.0.1", Port: 5432}
	at := func(received, replayed int64) row { return lagRow(true, received, replayed) }
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
		name:   "idle: nothing waiting never lags, however long",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps:  []step{{0, at(1000, 1000), ""}, {10 * time.Minute, at(1000, 1000), ""}, {20 * time.Minute, at(1000, 1000), ""}},
	}, {
		name:   "the first commit after an hour idle is not an hour of lag",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps:  []step{{0, at(1000, 1000), ""}, {time.Hour, at(1200, 1000), ""}, {time.Hour + time.Second, at(1200, 1200), ""}},
	}, {
		name:   "replay paused under writes: fails once the oldest waiting WAL was seen past the bound",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps: []step{{0, at(1000, 1000), ""}, {10 * time.Second, at(2000, 1000), ""}, {30 * time.Second, at(5000, 1000), ""},
			{41 * time.Second, at(9000, 1000), "waiting to be replayed for 31s"}},
	}, {
		name:   "a long transaction replayed as fast as it arrives (no commit for minutes) does not lag",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps: []step{{0, at(1000, 900), ""}, {20 * time.Second, at(5000, 4800), ""}, {40 * time.Second, at(9000, 8700), ""},
			{60 * time.Second, at(13000, 12900), ""}, {80 * time.Second, at(17000, 16000), ""}},
	}, {
		name:   "slow replay: the wait counts from when the oldest WAL not replayed was seen",
		bounds: ReplicationLag{Time: 30 * time.Second},
		steps: []step{{0, at(2000, 1000), ""}, {20 * time.Second, at(4000, 1500), ""}, {25 * time.Second, at(4500, 2100), ""},
			{50 * time.Second, at(5000, 3000), ""}, {56 * time.Second, at(5000, 3900), "waiting to be replayed for 36s"}},
	}, {
		name:   "bytes past the bound fail at once",
		bounds: ReplicationLag{Bytes: 1 << 20},
		steps:  []step{{0, at(3<<20, 1<<20), "2097152 bytes of WAL received and not replayed (bound 1048576)"}},
	}, {
		name:   "no WAL receiver (archive recovery): nothing seen waiting",
		bounds: ReplicationLag{Time: 10 * time.Second},
		steps:  []step{{0, lagRow(true, nil, int64(500)), ""}, {time.Minute, lagRow(true, nil, int64(500)), ""}},
	}, {
		name:   "a replica restarted from a checkpoint starts afresh",
		bounds: ReplicationLag{Time: 10 * time.Second},
		steps:  []step{{0, at(2000, 1000), ""}, {8 * time.Second, at(2000, 1000), ""}, {9 * time.Second, at(2000, 500), ""}, {12 * time.Second, at(2000, 600), ""}},
	}, {
		name:   "probed every 10 minutes: the wait spans the probes",
		bounds: ReplicationLag{Time: 15 * time.Minute},
		steps:  []step{{0, at(2000, 1000), ""}, {10 * time.Minute, at(3000, 1500), ""}, {20 * time.Minute, at(4000, 1900), "waiting to be replayed for 20m0s"}},
	}, {
		name:   "a bytes failure still records the wait",
		bounds: ReplicationLag{Bytes: 5000, Time: 30 * time.Second},
		steps:  []step{{0, at(20000, 1000), "bytes of WAL received"}, {20 * time.Second, at(20000, 15000), ""}, {31 * time.Second, at(20000, 16000), "waiting to be replayed for 31s"}},
	}, {
		name:   "a primary is never judged",
		bounds: ReplicationLag{Bytes: 1, Time: time.Second},
		steps:  []step{{0, lagRow(false, nil, nil), ""}},
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

// TestLagTrackerBounded: the samples of one replica and the targets stay
// within their bounds, and the oldest sample is kept.
func TestLagTrackerBounded(t *testing.T) {
	l, _ := newLagTracker(ReplicationLag{Time: time.Hour})
	start := time.Unix(1_700_000_000, 0)
	target := probes.Target{Host: "10.0.0.1", Port: 5432}
	for i := range 1000 {
		_ = l.check(target, lagRow(true, int64(2000+i), int64(1000)), start.Add(time.Duration(i)*time.Second))
	}
	tl := l.targets[target.Addr()]
	if len(tl.samples) > maxSamples || !tl.samples[0].at.Equal(start) {
		t.Fatalf("%d samples, oldest at %v: want at most %d, the oldest kept", len(tl.samples), tl.samples[0].at, maxSamples)
	}
	// Replay passes the oldest sample: the next oldest left is within a
	// few percent of the true wait (WAL 1001.. was seen at 1 s, 2000+i at
	// i s, 1000 probes in all).
	now := start.Add(1000 * time.Second)
	_ = l.check(target, lagRow(true, int64(3000), int64(2500)), now)
	waited := now.Sub(l.targets[target.Addr()].samples[0].at)
	if trueWait := 499 * time.Second; waited > trueWait || waited < trueWait*95/100 {
		t.Fatalf("after thinning, the oldest WAL waiting reads as waiting for %s, want %s or a few percent less", waited, trueWait)
	}
	for i := range maxTargets + 10 {
		_ = l.check(probes.Target{Host: "10.1.0.1", Port: 1 + i}, lagRow(true, int64(2000), int64(1000)), start)
	}
	if len(l.targets) > maxTargets {
		t.Fatalf("%d targets remembered, want at most %d", len(l.targets), maxTargets)
	}
}
