package postgresql

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/swh-dev/swh/probes"
)

// ReplicationLag bounds how far a streaming replica may be behind its
// primary and still pass. A server not in recovery (a primary) is never
// judged. Zero fields set no bound.
type ReplicationLag struct {
	// Bytes bounds the WAL the replica has received and not replayed yet
	// (pg_last_wal_receive_lsn minus pg_last_wal_replay_lsn).
	Bytes int64
	// Time bounds how long the replica has had WAL waiting to be
	// replayed: the time since the prober first saw received the oldest
	// WAL it has not replayed yet. It is measured from the WAL positions
	// the prober sees probe after probe, not from transaction times: a
	// replica of an idle primary, with nothing waiting, does not lag
	// however old its last transaction; one replaying a long transaction
	// as fast as it receives it (a COPY, CREATE INDEX) does not either;
	// one whose replay stops lags from the first probe that saw the WAL
	// it has not replayed. The prober sees WAL arrive at most one probe
	// late, so the lag reads up to one period short.
	Time time.Duration
}

// lagQuery reads, on a server in recovery, the positions (bytes from 0/0)
// of the WAL received and of the WAL replayed. Functions any role may
// call, schema-qualified, and no operator a search_path could redefine.
const lagQuery = `SELECT pg_catalog.pg_is_in_recovery(),
CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_receive_lsn(), '0/0')::bigint END,
CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_last_wal_replay_lsn(), '0/0')::bigint END`

// Bounds of what a prober remembers: the targets, and the samples of one.
// Past maxTargets it forgets them all (a lag then reads shorter, never
// longer); past maxSamples it keeps the oldest sample and every other
// one after it, and samples half as often, so that the lag reads short by
// a few percent of its span at most.
const (
	maxTargets = 4096
	maxSamples = 64
)

// sample is a receive position and when the prober saw it.
type sample struct {
	at       time.Time
	received int64
}

// targetLag is what the prober remembers of one replica.
type targetLag struct {
	samples  []sample
	replayed int64
	// spacing is the least time between two samples: it doubles each time
	// the samples are thinned.
	spacing time.Duration
}

// lagTracker checks a replica's lag and remembers, per target, the
// receive positions it saw that the replica has not replayed yet.
type lagTracker struct {
	bounds  ReplicationLag
	mu      sync.Mutex
	targets map[string]*targetLag
}

func newLagTracker(b ReplicationLag) (*lagTracker, error) {
	if b.Bytes < 0 || b.Time < 0 {
		return nil, errors.New("postgresql: MaxReplicationLag bounds must not be negative")
	}
	if b.Bytes == 0 && b.Time == 0 {
		return nil, errors.New("postgresql: MaxReplicationLag sets no bound")
	}
	return &lagTracker{bounds: b, targets: map[string]*targetLag{}}, nil
}

// check reads lagQuery's row for target, observed at now, and returns an
// error saying how far behind a replica is when it is past a bound.
func (l *lagTracker) check(target probes.Target, r row, now time.Time) error {
	key := target.Addr()
	inRecovery, _ := r.values[0].(bool)
	received, okReceived := r.values[1].(int64)
	replayed, okReplayed := r.values[2].(int64)
	if !r.seen || !inRecovery || !okReplayed {
		l.forget(key)
		return nil
	}
	if !okReceived || received < replayed {
		received = replayed // no WAL receiver (archive recovery): nothing seen waiting
	}
	// Observed first, whatever fails: the samples must not miss a probe.
	waited := l.observe(key, now, received, replayed)
	if pending := received - replayed; l.bounds.Bytes > 0 && pending > l.bounds.Bytes {
		return fmt.Errorf("postgresql: the replica has %d bytes of WAL received and not replayed (bound %d)", pending, l.bounds.Bytes)
	}
	if l.bounds.Time > 0 && waited > l.bounds.Time {
		return fmt.Errorf("postgresql: the replica has had WAL waiting to be replayed for %s (bound %s); %d bytes wait",
			waited.Round(time.Millisecond), l.bounds.Time, received-replayed)
	}
	return nil
}

// observe records a probe's positions and returns how long the oldest WAL
// not replayed yet has been seen waiting.
func (l *lagTracker) observe(key string, now time.Time, received, replayed int64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.targets[key]
	// A replica that replays from further back (it restarted from a
	// checkpoint, or another server took the address) starts afresh.
	if t == nil || replayed < t.replayed {
		if t == nil && len(l.targets) >= maxTargets {
			clear(l.targets)
		}
		t = &targetLag{}
		l.targets[key] = t
	}
	t.replayed = replayed
	// Drop what has been replayed: the oldest sample left is the oldest
	// WAL still waiting.
	kept := t.samples[:0]
	for _, s := range t.samples {
		if s.received > replayed {
			kept = append(kept, s)
		}
	}
	t.samples = kept
	if len(t.samples) == 0 {
		t.spacing = 0
	}
	if received > replayed && (len(t.samples) == 0 ||
		received > t.samples[len(t.samples)-1].received && now.Sub(t.samples[len(t.samples)-1].at) >= t.spacing) {
		if len(t.samples) == maxSamples {
			// Keep the oldest and every other one, and take new ones
			// half as often: the samples stay evenly spread over the
			// wait, so a lag reads short by a sample's spacing at most.
			thinned := t.samples[:1]
			for i := 2; i < len(t.samples); i += 2 {
				thinned = append(thinned, t.samples[i])
			}
			t.samples = thinned
			t.spacing = 2 * max(t.spacing, now.Sub(t.samples[len(t.samples)-1].at)/time.Duration(len(t.samples)))
		}
		t.samples = append(t.samples, sample{at: now, received: received})
	}
	if len(t.samples) == 0 {
		return 0
	}
	return now.Sub(t.samples[0].at)
}

func (l *lagTracker) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.targets, key)
}
