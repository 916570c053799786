package probes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/postgresql"
	"github.com/swh-dev/swh/test/harness"
)

// writeLoad inserts rows on the primary every 20 ms until ctx ends.
func writeLoad(ctx context.Context, t *testing.T, pg *harness.Postgres) {
	t.Helper()
	if err := pg.Exec(ctx, "CREATE TABLE IF NOT EXISTS load (at timestamptz DEFAULT now(), pad text)"); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, pg, pg.Options().User, pg.Options().Password)
	go func() {
		for ctx.Err() == nil {
			_, _ = db.ExecContext(ctx, "INSERT INTO load (pad) SELECT repeat('x', 1000) FROM generate_series(1, 20)")
			time.Sleep(20 * time.Millisecond)
		}
	}()
}

// probeFor probes every period for d and returns the failures for lag
// (a probe slower than its timeout on a loaded machine is another story).
func probeFor(ctx context.Context, p *postgresql.Prober, target probes.Target, period, d time.Duration) []probes.Result {
	var failures []probes.Result
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(period) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if r := p.Probe(pctx, target); r.Reason == probes.ReasonReplicationLag {
			failures = append(failures, r)
		}
		cancel()
	}
	return failures
}

// TestPostgreSQLReplicationLag: on a real streaming replica, a lag bound
// passes an idle replica and one that keeps up with a write load, and
// fails one whose replay is paused under writes within one probe period
// of crossing the bound; the replica passes again once it replays.
func TestPostgreSQLReplicationLag(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 5432)
	const bound, period = 2 * time.Second, 250 * time.Millisecond
	p := newPostgreSQL(t, with(superuser(primary), func(c *postgresql.Config) {
		c.MaxReplicationLag = &postgresql.ReplicationLag{Time: bound, Bytes: 64 << 20}
	}))
	tgt := target(t, replica.Addr())

	if f := probeFor(ctx, p, tgt, period, 3*time.Second); len(f) > 0 {
		t.Fatalf("an idle replica failed %d probes: %s", len(f), f[0].Message)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	writeLoad(loadCtx, t, primary)
	if f := probeFor(ctx, p, tgt, period, 5*time.Second); len(f) > 0 {
		t.Fatalf("a replica keeping up with writes failed %d probes: %s", len(f), f[0].Message)
	}

	if err := replica.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	var failed probes.Result
	harness.Eventually(t, 30*time.Second, "the paused replica fails for its lag", func() error {
		failed = p.Probe(ctx, tgt)
		if failed.Reason != probes.ReasonReplicationLag {
			return errString("probe: " + string(failed.Reason) + ": " + failed.Message)
		}
		return nil
	})
	took := time.Since(paused)
	if took > bound+2*period+time.Second {
		t.Errorf("the paused replica failed %s after its replay paused, bound %s", took.Round(time.Millisecond), bound)
	}
	if !strings.Contains(failed.Message, "waiting to be replayed") {
		t.Errorf("message %q does not say how long WAL waited", failed.Message)
	}
	t.Logf("replay paused under writes: failed %s later (bound %s, probes every %s): %s", took.Round(time.Millisecond), bound, period, failed.Message)

	if err := replica.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the replica passes once it replays", func() error {
		if r := p.Probe(ctx, tgt); r.Status != probes.Success {
			return errString(r.Message)
		}
		return nil
	})
}

// BenchmarkPostgreSQLReplicationLagIdle probes an idle replica every
// second for SWH_LAG_IDLE (10m by default: the figure in
// docs/databases.md) with maxReplicationLag, and fails on any false lag;
// beside it, in the same run, the query that bounds the age of the last
// replayed transaction (the usual recipe), whose false failures it
// reports as a ratio of probes. A measurement, not a gate: run it with
// -bench (make integration does not).
func BenchmarkPostgreSQLReplicationLagIdle(b *testing.B) {
	d := 10 * time.Minute
	if v := os.Getenv("SWH_LAG_IDLE"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			b.Fatalf("SWH_LAG_IDLE=%q: %v", v, err)
		}
	}
	harness.RequireNetworkSandbox(b)
	ctx, cancel := context.WithTimeout(context.Background(), d+time.Minute)
	defer cancel()
	ips := harness.PodIPs(b, 2)
	primary := harness.StartTestPostgres(b, harness.PostgresOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(b, ips[1], 5432)
	p := newPostgreSQL(b, with(superuser(primary), func(c *postgresql.Config) {
		c.MaxReplicationLag = &postgresql.ReplicationLag{Time: 30 * time.Second, Bytes: 16 << 20}
	}))
	naive := newPostgreSQL(b, with(superuser(primary), func(c *postgresql.Config) {
		c.Query = "SELECT pg_is_in_recovery() AND now() - pg_last_xact_replay_timestamp() < interval '30 seconds'"
	}))
	tgt := target(b, replica.Addr())
	// A commit now and then, as an idle primary's rare writes.
	writes, stopWrites := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(47 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-writes.Done():
				return
			case <-tick.C:
				_ = primary.Exec(writes, "CREATE TABLE IF NOT EXISTS rare (n int); INSERT INTO rare VALUES (1)")
			}
		}
	}()
	b.ResetTimer()
	var failures []probes.Result
	sent, naiveFailures := 0, 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if r := p.Probe(pctx, tgt); r.Reason == probes.ReasonReplicationLag {
			failures = append(failures, r)
		}
		if r := naive.Probe(pctx, tgt); r.Reason == probes.ReasonQueryFalse {
			naiveFailures++
		}
		cancel()
		sent++
	}
	stopWrites()
	<-done
	b.ReportMetric(float64(len(failures)), "false-failures")
	b.ReportMetric(float64(naiveFailures), "replay-age-query-false-failures")
	b.ReportMetric(float64(naiveFailures)/float64(max(1, sent)), "replay-age-query-failed/probe")
	b.Logf("idle replica, %s, %d probes each: maxReplicationLag %d false failures; the replay-age query %d (%.0f%% of its probes)",
		d, sent, len(failures), naiveFailures, 100*float64(naiveFailures)/float64(max(1, sent)))
	for _, f := range failures {
		b.Errorf("false failure: %s: %s", f.Reason, f.Message)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
