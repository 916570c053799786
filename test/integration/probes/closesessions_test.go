package probes_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes/postgresql"
	"github.com/swh-dev/swh/test/harness"
)

// alive reports whether a session still answers.
func alive(ctx context.Context, c *sql.Conn) bool {
	var one int
	return c.QueryRowContext(ctx, "SELECT 1").Scan(&one) == nil
}

// TestPostgreSQLCloseSessions: a role granted pg_signal_backend, and no
// more, ends every client session of the server but its own, the other
// probes', superusers' and a streaming replica's; without the grant, the
// server refuses and the error says so.
func TestPostgreSQLCloseSessions(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: harness.PodIP(t)})
	o := pg.Options()
	replica := pg.StartTestReplica(t, harness.PodIP(t), 5432)
	for _, q := range []string{
		"CREATE ROLE swh_probe LOGIN PASSWORD 'probe-password'",
		"GRANT pg_signal_backend TO swh_probe",
		"CREATE ROLE ungranted LOGIN PASSWORD 'probe-password'",
		"CREATE ROLE app LOGIN PASSWORD 'app-password'",
	} {
		if err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var apps []*sql.Conn
	for i := range 3 {
		apps = append(apps, pg.Session(ctx, t, "app", "app-password", fmt.Sprintf("orders-%d", i)))
	}
	admin := pg.Session(ctx, t, o.User, o.Password, "psql")
	probe := pg.Session(ctx, t, "app", "app-password", "swh-probe")

	var walSender int
	if err := pg.QueryRow(ctx, "SELECT pid FROM pg_stat_replication", &walSender); err != nil {
		t.Fatal(err)
	}

	ungranted := newPostgreSQL(t, postgresql.Config{User: "ungranted", Password: "probe-password"})
	if _, err := ungranted.CloseSessions(ctx, target(t, pg.Addr())); err == nil || !strings.Contains(err.Error(), "SQLSTATE 42501") {
		t.Fatalf("a role without pg_signal_backend: %v, want the server's insufficient_privilege (42501)", err)
	}
	for i, c := range apps {
		if !alive(ctx, c) {
			t.Fatalf("session %d ended by a role without pg_signal_backend", i)
		}
	}

	granted := newPostgreSQL(t, postgresql.Config{User: "swh_probe", Password: "probe-password"})
	n, err := granted.CloseSessions(ctx, target(t, pg.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(apps) {
		t.Errorf("closed %d sessions, want %d", n, len(apps))
	}
	for i, c := range apps {
		if alive(ctx, c) {
			t.Errorf("application session %d still answers", i)
		}
	}
	if !alive(ctx, admin) {
		t.Error("the superuser's session was ended")
	}
	if !alive(ctx, probe) {
		t.Error("another probe's session (application_name swh-probe) was ended")
	}
	var after int
	if err := pg.QueryRow(ctx, "SELECT pid FROM pg_stat_replication", &after); err != nil {
		t.Fatalf("no WAL sender after the closing: %v", err)
	}
	if after != walSender {
		t.Errorf("the replica's WAL sender %d was ended (now %d)", walSender, after)
	}
	if err := pg.Exec(ctx, "CREATE TABLE after_close (n int)"); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the replica still streams", func() error {
		return replica.Exec(ctx, "SELECT 1 FROM after_close")
	})
}
