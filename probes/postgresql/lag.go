package postgresql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
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
	// Time bounds how long WAL has been waiting to be replayed: the age
	// of the last transaction replayed (pg_last_xact_replay_timestamp),
	// but never more than the time the prober has seen WAL waiting, probe
	// after probe. A replica of an idle primary has nothing waiting, so
	// however old its last replayed transaction is, it does not lag; the
	// first commit after a long idle period is not read as an hour of lag
	// either: the prober had not seen anything waiting before.
	Time time.Duration
}

// lagQuery reads, on a server in recovery, the WAL received and not
// replayed (bytes) and the age of the last replayed transaction (seconds,
// NULL when none was replayed yet); functions any role may call.
const lagQuery = `SELECT pg_catalog.pg_is_in_recovery(),
CASE WHEN pg_catalog.pg_is_in_recovery() THEN GREATEST(0, COALESCE(pg_catalog.pg_wal_lsn_diff(
  pg_catalog.pg_last_wal_receive_lsn(), pg_catalog.pg_last_wal_replay_lsn()), 0))::bigint ELSE 0 END,
CASE WHEN pg_catalog.pg_is_in_recovery() THEN
  EXTRACT(EPOCH FROM pg_catalog.now() - pg_catalog.pg_last_xact_replay_timestamp())::float8 END`

// maxWaiting bounds the targets a prober remembers WAL waiting on; past
// it, it forgets them all (a lag then counts again from the next probe:
// a withdrawal comes later, never a false one).
const maxWaiting = 4096

// lagTracker checks a replica's lag and remembers, per target, since when
// WAL has been waiting.
type lagTracker struct {
	bounds  ReplicationLag
	mu      sync.Mutex
	waiting map[string]time.Time
}

func newLagTracker(b ReplicationLag) (*lagTracker, error) {
	if b.Bytes < 0 || b.Time < 0 {
		return nil, errors.New("postgresql: MaxReplicationLag bounds must not be negative")
	}
	if b.Bytes == 0 && b.Time == 0 {
		return nil, errors.New("postgresql: MaxReplicationLag sets no bound")
	}
	return &lagTracker{bounds: b, waiting: map[string]time.Time{}}, nil
}

// check reads lagQuery's row for target, observed at now, and returns an
// error saying how far behind a replica is when it is past a bound.
func (l *lagTracker) check(target probes.Target, r row, now time.Time) error {
	key := target.Addr()
	inRecovery, _ := r.values[0].(bool)
	pending, _ := r.values[1].(int64)
	if !r.seen || !inRecovery || pending == 0 {
		l.forget(key)
		return nil
	}
	since := l.waitingSince(key, now)
	if l.bounds.Bytes > 0 && pending > l.bounds.Bytes {
		return fmt.Errorf("postgresql: the replica has %d bytes of WAL received and not replayed (bound %d)", pending, l.bounds.Bytes)
	}
	if l.bounds.Time == 0 {
		return nil
	}
	age, ok := seconds(r.values[2])
	if !ok {
		age = now.Sub(since) // nothing replayed yet: the wait seen
	}
	lag := min(age, now.Sub(since))
	if lag > l.bounds.Time {
		return fmt.Errorf("postgresql: the replica has had WAL waiting to be replayed for %s (bound %s); its last replayed transaction is %s old",
			lag.Round(time.Millisecond), l.bounds.Time, age.Round(time.Millisecond))
	}
	return nil
}

func (l *lagTracker) waitingSince(key string, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	since, ok := l.waiting[key]
	if !ok {
		if len(l.waiting) >= maxWaiting {
			clear(l.waiting)
		}
		since = now
		l.waiting[key] = since
	}
	return since
}

func (l *lagTracker) forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.waiting, key)
}

// seconds reads a float8 number of seconds; false for NULL or junk.
func seconds(v driver.Value) (time.Duration, bool) {
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return time.Duration(max(0, f) * float64(time.Second)), true
}
