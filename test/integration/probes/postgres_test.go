package probes_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/postgresql"
	"github.com/swh-dev/swh/test/harness"
)

// primaryQuery passes on a primary and fails with query-false on a replica.
const primaryQuery = "SELECT NOT pg_is_in_recovery()"

func newPostgreSQL(t testing.TB, cfg postgresql.Config) *postgresql.Prober {
	t.Helper()
	if cfg.SSLMode == "" {
		cfg.SSLMode = postgresql.SSLDisable
	}
	p, err := postgresql.New(cfg)
	if err != nil {
		t.Fatalf("postgresql.New: %v", err)
	}
	return p
}

// superuser returns the configuration logging in as the harness's superuser.
func superuser(pg *harness.Postgres) postgresql.Config {
	o := pg.Options()
	return postgresql.Config{User: o.User, Password: o.Password, SSLMode: postgresql.SSLDisable}
}

func with(cfg postgresql.Config, change func(*postgresql.Config)) postgresql.Config {
	change(&cfg)
	return cfg
}

// openDB opens database/sql on pg as user, for the test's own queries.
func openDB(t testing.TB, pg *harness.Postgres, user, password string) *sql.DB {
	t.Helper()
	u := url.URL{
		Scheme: "postgres", User: url.UserPassword(user, password), Host: pg.Addr(), Path: "/postgres",
		RawQuery: "sslmode=disable&connect_timeout=5&application_name=swh-probes-test",
	}
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestPostgreSQLPrimaryAndReplica tells a primary from its streaming replica
// with SELECT NOT pg_is_in_recovery(), follows a failover (the primary stops:
// refused; the replica is promoted: it passes) and the old primary's return.
func TestPostgreSQLPrimaryAndReplica(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 5432)
	primaryTarget, replicaTarget := target(t, primary.Addr()), target(t, replica.Addr())
	p := newPostgreSQL(t, with(superuser(primary), func(c *postgresql.Config) { c.Query = primaryQuery }))

	res := expect(t, p, primaryTarget, probes.Success, probes.ReasonOK)
	if res.Message != "query returned true" {
		t.Errorf("message %q, want %q", res.Message, "query returned true")
	}
	res = expect(t, p, replicaTarget, probes.Failure, probes.ReasonQueryFalse)
	if !strings.Contains(res.Message, "returned false") {
		t.Errorf("message %q does not say the query returned false", res.Message)
	}
	// Any query passes on both: the replica is up, only not a primary.
	plain := newPostgreSQL(t, superuser(primary))
	expect(t, plain, replicaTarget, probes.Success, probes.ReasonOK)

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	expect(t, p, primaryTarget, probes.Failure, probes.ReasonRefused)
	expect(t, p, replicaTarget, probes.Failure, probes.ReasonQueryFalse)
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, p, replicaTarget, probes.Success, probes.ReasonOK)

	// The old primary comes back (as a primary of its own timeline).
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, p, primaryTarget, probes.Success, probes.ReasonOK)
}

// TestPostgreSQLReasons runs probes that fail for one reason each against
// one server, and checks the reason exactly.
func TestPostgreSQLReasons(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: harness.PodIP(t)})
	tgt := target(t, pg.Addr())
	su := superuser(pg)
	query := func(q string) postgresql.Config {
		return with(su, func(c *postgresql.Config) { c.Query = q })
	}
	tests := []struct {
		name   string
		cfg    postgresql.Config
		reason probes.Reason
	}{
		{"default query", su, probes.ReasonOK},
		{"wrong password", with(su, func(c *postgresql.Config) { c.Password = "wrong" }), probes.ReasonAuth},
		{"unknown role", with(su, func(c *postgresql.Config) { c.User = "nobody_here" }), probes.ReasonAuth},
		{"missing database", with(su, func(c *postgresql.Config) { c.DBName = "no_such_db" }), probes.ReasonDBMissing},
		{"TLS required, server without TLS", with(su, func(c *postgresql.Config) { c.SSLMode = postgresql.SSLRequire }), probes.ReasonTLS},
		{"query error", query("SELECT 1/0"), probes.ReasonQueryError},
		{"syntax error", query("SELEC 1"), probes.ReasonQueryError},
		{"error in a later row", query("SELECT 1/(2-g) FROM generate_series(1, 3) g"), probes.ReasonQueryError},
		{"false", query("SELECT false"), probes.ReasonQueryFalse},
		{"NULL", query("SELECT NULL"), probes.ReasonQueryFalse},
		{"zero", query("SELECT 0"), probes.ReasonQueryFalse},
		{"numeric zero", query("SELECT 0.00::numeric"), probes.ReasonQueryFalse},
		{"text off", query("SELECT 'Off'"), probes.ReasonQueryFalse},
		{"text yes", query("SELECT 'yes'"), probes.ReasonOK},
		{"no row", query("SELECT 1 WHERE false"), probes.ReasonOK},
		{"only the first column counts", query("SELECT true, false"), probes.ReasonOK},
		// The session the probe opens: its name and a statement_timeout
		// derived from the probe's deadline (1 s, rounded up to ms).
		{"application_name", query("SELECT current_setting('application_name') = 'swh-probe'"), probes.ReasonOK},
		{"statement_timeout", query("SELECT setting::int BETWEEN 1 AND 1000 FROM pg_settings WHERE name = 'statement_timeout'"), probes.ReasonOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			expect(t, newPostgreSQL(t, tt.cfg), tgt, want, tt.reason)
		})
	}

	// Servers that are not PostgreSQL: one that greets like SMTP, one that
	// reads the startup message and never answers. (An HTTP server is the
	// silent kind: it waits for the end of a request line that never comes.)
	t.Run("SMTP-like server", func(t *testing.T) {
		addr := startGreeter(t, harness.PodIP(t)+":5432", "220 mail.example.test ESMTP ready\r\n")
		expect(t, newPostgreSQL(t, su), target(t, addr), probes.Failure, probes.ReasonProtocol)
	})
	t.Run("silent server", func(t *testing.T) {
		srv := startTCPServer(t, harness.PodIP(t)+":5432")
		res := expect(t, newPostgreSQL(t, su), target(t, srv.Addr()), probes.Failure, probes.ReasonTimeout)
		if res.Latency < probeTimeout/2 {
			t.Errorf("the probe gave up after %v, long before its deadline", res.Latency)
		}
	})

	// One probe, one login: the server logs each connection it authorizes.
	t.Run("one connection per probe", func(t *testing.T) {
		const n = 3
		p := newPostgreSQL(t, with(su, func(c *postgresql.Config) { c.ApplicationName = "swh-probe-counted" }))
		for range n {
			expect(t, p, tgt, probes.Success, probes.ReasonOK)
		}
		harness.Eventually(t, 5*time.Second, "the server logged every login", func() error {
			if got := strings.Count(pg.Log(), "application_name=swh-probe-counted"); got != n {
				return fmt.Errorf("%d logins of swh-probe-counted, want %d", got, n)
			}
			return nil
		})
	})
}

// TestPostgreSQLTooManyConnections fills max_connections with sessions of a
// non-superuser role: a probe as that role fails with too-many-connections,
// one as the superuser still gets the reserved slot, and the role's probe
// passes again once a slot is free.
func TestPostgreSQLTooManyConnections(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: harness.PodIP(t), MaxConnections: 4})
	if err := pg.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD 'app-password'"); err != nil {
		t.Fatal(err)
	}
	tgt := target(t, pg.Addr())
	app := newPostgreSQL(t, postgresql.Config{User: "app", Password: "app-password", SSLMode: postgresql.SSLDisable})
	expect(t, app, tgt, probes.Success, probes.ReasonOK)

	// Hold the role's sessions until the server refuses one.
	db := openDB(t, pg, "app", "app-password")
	db.SetMaxIdleConns(0) // a released session ends at once
	var (
		held     []*sql.Conn
		refusals int
	)
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	for {
		if len(held) == 4 {
			t.Fatalf("the server accepted %d sessions with max_connections=4", len(held))
		}
		c, err := db.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			if e := pq.As(err); e == nil || string(e.Code) != "53300" {
				t.Fatalf("opening session %d: %v, want SQLSTATE 53300", len(held)+1, err)
			}
			// A backend exiting (of the probe above, say) may have
			// taken the slot: full only if still refused a moment later.
			if refusals++; refusals == 2 {
				break
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		held = append(held, c)
	}
	t.Logf("the role holds %d sessions", len(held))

	// The server words SQLSTATE 53300 after the limit it hit ("sorry, too
	// many clients already", "remaining connection slots are reserved…");
	// the prober's own words come first and do not change.
	res := expect(t, app, tgt, probes.Failure, probes.ReasonTooManyConnections)
	if want := "postgresql: connect: the server has no connection slot left for this login (SQLSTATE 53300): "; !strings.HasPrefix(res.Message, want) {
		t.Errorf("message %q does not start with %q", res.Message, want)
	}
	// The superuser's reserved slot: free once the backends of the refused
	// logins above have exited (each holds a slot for a moment).
	su := newPostgreSQL(t, superuser(pg))
	harness.Eventually(t, 5*time.Second, "the superuser gets the reserved slot", func() error {
		if res := probe(su, tgt, probeTimeout); !res.Passed() {
			return fmt.Errorf("%s", res)
		}
		return nil
	})

	if err := held[len(held)-1].Close(); err != nil {
		t.Fatal(err)
	}
	held = held[:len(held)-1]
	// The backend of the released session exits asynchronously.
	harness.Eventually(t, 10*time.Second, "the role's probe passes once a slot is free", func() error {
		if res := probe(app, tgt, probeTimeout); !res.Passed() {
			return fmt.Errorf("%s", res)
		}
		return nil
	})
}

// TestPostgreSQLQueryTimeout runs a query longer than the probe's timeout:
// the probe fails with timeout at its deadline, and the server does not keep
// running the query (statement_timeout ends it) after the probe gave up.
func TestPostgreSQLQueryTimeout(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: harness.PodIP(t)})
	tgt := target(t, pg.Addr())
	const (
		sleep   = 5 * time.Second
		appName = "swh-probe-sleeper"
	)
	p := newPostgreSQL(t, with(superuser(pg), func(c *postgresql.Config) {
		c.Query = fmt.Sprintf("SELECT pg_sleep(%d)", int(sleep.Seconds()))
		c.ApplicationName = appName
	}))
	db := openDB(t, pg, pg.Options().User, pg.Options().Password)
	backends := func() int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	start := time.Now()
	res := expect(t, p, tgt, probes.Failure, probes.ReasonTimeout)
	if res.Latency >= sleep {
		t.Fatalf("the probe took %v: it waited for the query instead of its 1 s deadline", res.Latency)
	}
	// Without statement_timeout the backend would sleep on, unaware that the
	// client has gone, until the pg_sleep ends; give the server until well
	// before that to end it.
	harness.Eventually(t, time.Until(start.Add(sleep-time.Second)), "the server ended the query", func() error {
		if n := backends(); n != 0 {
			return fmt.Errorf("%d backends of %s in pg_stat_activity", n, appName)
		}
		return nil
	})
	if !strings.Contains(pg.Log(), "canceling statement due to statement timeout") {
		t.Errorf("the server log does not show the statement timeout")
	}
}

// TestPostgreSQLTLS probes a server whose certificate, from a test CA, names
// its pod address and db.example.test, in every TLS mode. The query asks the
// server whether the probe's own session is encrypted.
func TestPostgreSQLTLS(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ca, err := harness.NewCA("swh-probes-pg-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("some-other-ca")
	if err != nil {
		t.Fatal(err)
	}
	addr := harness.PodIP(t)
	cert, err := ca.Issue(addr, "db.example.test")
	if err != nil {
		t.Fatal(err)
	}
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: addr, TLS: cert})
	tgt := target(t, pg.Addr())
	base := with(superuser(pg), func(c *postgresql.Config) {
		c.Query = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
	})
	mode := func(m postgresql.SSLMode, caPEM []byte, serverName string) postgresql.Config {
		return with(base, func(c *postgresql.Config) { c.SSLMode, c.CACert, c.ServerName = m, caPEM, serverName })
	}
	tests := []struct {
		name   string
		cfg    postgresql.Config
		reason probes.Reason
	}{
		{"disable: the session is not encrypted", mode(postgresql.SSLDisable, nil, ""), probes.ReasonQueryFalse},
		{"require", mode(postgresql.SSLRequire, nil, ""), probes.ReasonOK},
		{"require with the CA", mode(postgresql.SSLRequire, ca.PEM, ""), probes.ReasonOK},
		{"require with another CA", mode(postgresql.SSLRequire, other.PEM, ""), probes.ReasonTLS},
		{"verify-ca", mode(postgresql.SSLVerifyCA, ca.PEM, ""), probes.ReasonOK},
		{"verify-ca ignores names", mode(postgresql.SSLVerifyCA, ca.PEM, "other.example.test"), probes.ReasonOK},
		{"verify-ca with another CA", mode(postgresql.SSLVerifyCA, other.PEM, ""), probes.ReasonTLS},
		{"verify-full, pod IP in the certificate", mode(postgresql.SSLVerifyFull, ca.PEM, ""), probes.ReasonOK},
		{"verify-full, name in the certificate", mode(postgresql.SSLVerifyFull, ca.PEM, "db.example.test"), probes.ReasonOK},
		{"verify-full, name not in the certificate", mode(postgresql.SSLVerifyFull, ca.PEM, "other.example.test"), probes.ReasonTLS},
		{"verify-full with another CA", mode(postgresql.SSLVerifyFull, other.PEM, ""), probes.ReasonTLS},
		{"verify-full with the system roots", mode(postgresql.SSLVerifyFull, nil, ""), probes.ReasonTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			expect(t, newPostgreSQL(t, tt.cfg), tgt, want, tt.reason)
		})
	}
}

// TestPostgreSQLCleartextPassword points probes at a server that asks the
// role "clear" for its password in clear text (pg_hba method password): the
// prober refuses to send it unless the server is verified or cleartext is
// allowed explicitly; scram-sha-256 roles are unaffected.
func TestPostgreSQLCleartextPassword(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	ca, err := harness.NewCA("swh-probes-cleartext-ca")
	if err != nil {
		t.Fatal(err)
	}
	addr := harness.PodIP(t)
	cert, err := ca.Issue(addr)
	if err != nil {
		t.Fatal(err)
	}
	pg := harness.StartTestPostgres(t, harness.PostgresOptions{Addr: addr, TLS: cert, HBA: []string{
		"host all clear 0.0.0.0/0 password",
	}})
	if err := pg.Exec(ctx, "CREATE ROLE clear LOGIN PASSWORD 'clear-password'"); err != nil {
		t.Fatal(err)
	}
	tgt := target(t, pg.Addr())
	clear := postgresql.Config{User: "clear", Password: "clear-password"}
	mode := func(cfg postgresql.Config, m postgresql.SSLMode, caPEM []byte, allow bool) postgresql.Config {
		return with(cfg, func(c *postgresql.Config) { c.SSLMode, c.CACert, c.AllowCleartextPassword = m, caPEM, allow })
	}
	tests := []struct {
		name   string
		cfg    postgresql.Config
		reason probes.Reason
	}{
		{"disable: refused", mode(clear, postgresql.SSLDisable, nil, false), probes.ReasonAuth},
		{"require without a CA: refused", mode(clear, postgresql.SSLRequire, nil, false), probes.ReasonAuth},
		{"disable, allowed explicitly", mode(clear, postgresql.SSLDisable, nil, true), probes.ReasonOK},
		{"verify-ca", mode(clear, postgresql.SSLVerifyCA, ca.PEM, false), probes.ReasonOK},
		{"verify-full", mode(clear, postgresql.SSLVerifyFull, ca.PEM, false), probes.ReasonOK},
		{"scram-sha-256 without TLS", mode(superuser(pg), postgresql.SSLDisable, nil, false), probes.ReasonOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			res := expect(t, newPostgreSQL(t, tt.cfg), tgt, want, tt.reason)
			if want == probes.Failure && !strings.Contains(res.Message, "password in clear text") {
				t.Errorf("message %q does not say why", res.Message)
			}
		})
	}
	if strings.Contains(pg.Log(), "password authentication failed") {
		t.Errorf("the server saw a wrong password")
	}
}
