package probes_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/mysql"
	"github.com/swh-dev/swh/test/harness"
)

// writableQuery passes on a writable server and fails with query-false on a
// replica with read_only set.
const writableQuery = "SELECT @@read_only = 0"

func newMySQL(t testing.TB, cfg mysql.Config) *mysql.Prober {
	t.Helper()
	if cfg.TLSMode == "" {
		cfg.TLSMode = mysql.TLSDisable
	}
	p, err := mysql.New(cfg)
	if err != nil {
		t.Fatalf("mysql.New: %v", err)
	}
	return p
}

// mariadbAdmin returns the configuration logging in as the harness's
// account (every privilege).
func mariadbAdmin(m *harness.MariaDB) mysql.Config {
	o := m.Options()
	return mysql.Config{User: o.User, Password: o.Password, TLSMode: mysql.TLSDisable}
}

func withMySQL(cfg mysql.Config, change func(*mysql.Config)) mysql.Config {
	change(&cfg)
	return cfg
}

// serverStatus reads a counter of SHOW GLOBAL STATUS.
func serverStatus(t testing.TB, m *harness.MariaDB, name string) int {
	t.Helper()
	var (
		key   string
		value int
	)
	if err := m.QueryRow(testContext(t), "SHOW GLOBAL STATUS LIKE '"+name+"'", &key, &value); err != nil {
		t.Fatal(err)
	}
	return value
}

// TestMySQLPrimaryAndReplica tells a MariaDB primary from its replica with
// SELECT @@read_only = 0, and follows a failover: the primary stops
// (refused), the replica is promoted (it passes), the old primary returns.
func TestMySQLPrimaryAndReplica(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	ips := harness.PodIPs(t, 2)
	primary := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: ips[0]})
	replica := primary.StartTestReplica(t, ips[1], 3306)
	primaryTarget, replicaTarget := target(t, primary.Addr()), target(t, replica.Addr())
	p := newMySQL(t, withMySQL(mariadbAdmin(primary), func(c *mysql.Config) { c.Query = writableQuery }))

	res := expect(t, p, primaryTarget, probes.Success, probes.ReasonOK)
	if res.Message != "query returned 1" {
		t.Errorf("message %q, want %q", res.Message, "query returned 1")
	}
	res = expect(t, p, replicaTarget, probes.Failure, probes.ReasonQueryFalse)
	if res.Message != "mysql: query returned 0" {
		t.Errorf("message %q, want %q", res.Message, "mysql: query returned 0")
	}
	// Any query passes on both: the replica is up, only not writable.
	plain := newMySQL(t, mariadbAdmin(primary))
	expect(t, plain, replicaTarget, probes.Success, probes.ReasonOK)

	// The replica follows: a database made on the primary appears there.
	if err := primary.Exec(ctx, "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := replica.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	inApp := newMySQL(t, withMySQL(mariadbAdmin(primary), func(c *mysql.Config) { c.DBName = "app" }))
	expect(t, inApp, replicaTarget, probes.Success, probes.ReasonOK)

	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	expect(t, p, primaryTarget, probes.Failure, probes.ReasonRefused)
	expect(t, p, replicaTarget, probes.Failure, probes.ReasonQueryFalse)
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, p, replicaTarget, probes.Success, probes.ReasonOK)

	// The old primary comes back, writable: a split brain the probe
	// cannot see, only a fencing controller can.
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, p, primaryTarget, probes.Success, probes.ReasonOK)
}

// TestMySQLReasons runs probes that fail for one reason each against one
// server, and checks the reason exactly; and the first column's truth.
func TestMySQLReasons(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	m := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: harness.PodIP(t)})
	for _, stmt := range []string{
		"CREATE DATABASE swhtest",
		"CREATE TABLE swhtest.flags (name VARCHAR(10) PRIMARY KEY, b BIT(8))",
		"INSERT INTO swhtest.flags VALUES ('off', b'0'), ('on', b'101')",
		"CREATE USER 'limited'@'%' IDENTIFIED BY 'limited-password'",
		"INSTALL SONAME 'auth_ed25519'",
		"CREATE USER 'edwards'@'%' IDENTIFIED VIA ed25519 USING PASSWORD('edwards-password')",
		"INSTALL SONAME 'auth_pam'",
		"CREATE USER 'pam'@'%' IDENTIFIED VIA pam USING 'login'",
	} {
		if err := m.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	tgt := target(t, m.Addr())
	admin := mariadbAdmin(m)
	query := func(q string) mysql.Config {
		return withMySQL(admin, func(c *mysql.Config) { c.Query = q })
	}
	tests := []struct {
		name   string
		cfg    mysql.Config
		reason probes.Reason
	}{
		{"default query", admin, probes.ReasonOK},
		{"wrong password", withMySQL(admin, func(c *mysql.Config) { c.Password = "wrong" }), probes.ReasonAuth},
		{"unknown user", withMySQL(admin, func(c *mysql.Config) { c.User = "nobody_here" }), probes.ReasonAuth},
		{"missing database", withMySQL(admin, func(c *mysql.Config) { c.DBName = "no_such_db" }), probes.ReasonDBMissing},
		{"database of no access", mysql.Config{User: "limited", Password: "limited-password", DBName: "swhtest"}, probes.ReasonAuth},
		{"ed25519 account", mysql.Config{User: "edwards", Password: "edwards-password"}, probes.ReasonOK},
		{"ed25519, wrong password", mysql.Config{User: "edwards", Password: "wrong"}, probes.ReasonAuth},
		{"TLS required, server without TLS", withMySQL(admin, func(c *mysql.Config) { c.TLSMode = mysql.TLSRequire }), probes.ReasonTLS},
		{"no such table", query("SELECT * FROM swhtest.no_such_table"), probes.ReasonQueryError},
		{"syntax error", query("SELEC 1"), probes.ReasonQueryError},
		{"error in a later row", query("SELECT IF(seq = 2, (SELECT 1 UNION SELECT 2), 1) FROM swhtest.seq_1_to_3"), probes.ReasonQueryError},
		{"false", query("SELECT FALSE"), probes.ReasonQueryFalse},
		{"true", query("SELECT TRUE"), probes.ReasonOK},
		{"NULL", query("SELECT NULL"), probes.ReasonQueryFalse},
		{"division by zero is NULL", query("SELECT 1/0"), probes.ReasonQueryFalse},
		{"decimal zero", query("SELECT 0.00"), probes.ReasonQueryFalse},
		{"double zero", query("SELECT 0e0"), probes.ReasonQueryFalse},
		{"text off", query("SELECT 'Off'"), probes.ReasonQueryFalse},
		{"text yes", query("SELECT 'yes'"), probes.ReasonOK},
		{"BIT of zeros", query("SELECT b FROM swhtest.flags WHERE name = 'off'"), probes.ReasonQueryFalse},
		{"BIT", query("SELECT b FROM swhtest.flags WHERE name = 'on'"), probes.ReasonOK},
		{"read_only", query("SELECT @@read_only"), probes.ReasonQueryFalse},
		{"no row", query("SELECT 1 FROM DUAL WHERE 0"), probes.ReasonOK},
		{"no result set", query("DO 1"), probes.ReasonOK},
		{"only the first column counts", query("SELECT 1, 0"), probes.ReasonOK},
		{"several rows", query("SELECT seq FROM swhtest.seq_1_to_1000"), probes.ReasonOK},
		{"too many rows", query("SELECT seq FROM swhtest.seq_1_to_100000"), probes.ReasonProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			res := expect(t, newMySQL(t, tt.cfg), tgt, want, tt.reason)
			t.Log(res)
		})
	}

	// PAM asks for the password in clear (MariaDB's dialog method): the
	// prober refuses before the driver sees the request, unless allowed;
	// then the driver, which has no dialog method, gives up.
	t.Run("PAM account", func(t *testing.T) {
		pam := mysql.Config{User: "pam", Password: "pam-password"}
		res := expect(t, newMySQL(t, pam), tgt, probes.Failure, probes.ReasonAuth)
		if !strings.Contains(res.Message, "password in clear text (dialog)") || !strings.Contains(res.Message, "refused to send it") {
			t.Errorf("message %q", res.Message)
		}
		pam.AllowCleartextPassword = true
		res = expect(t, newMySQL(t, pam), tgt, probes.Failure, probes.ReasonAuth)
		if !strings.Contains(res.Message, `method "dialog", which the driver does not support`) {
			t.Errorf("message %q", res.Message)
		}
	})

	// The server's own time limit: a timeout, reported by the server.
	t.Run("max_statement_time", func(t *testing.T) {
		res := expect(t, newMySQL(t, query("SET STATEMENT max_statement_time = 0.01 FOR SELECT COUNT(*) FROM swhtest.seq_1_to_1000000000 WHERE seq % 7 = 3")), tgt, probes.Failure, probes.ReasonTimeout)
		if !strings.Contains(res.Message, "error 1969") {
			t.Errorf("message %q", res.Message)
		}
	})

	// Servers that are not MySQL: one that greets like SMTP, one that
	// accepts and never says anything.
	t.Run("SMTP-like server", func(t *testing.T) {
		addr := startGreeter(t, harness.PodIP(t)+":3306", "220 mail.example.test ESMTP ready\r\n")
		expect(t, newMySQL(t, admin), target(t, addr), probes.Failure, probes.ReasonProtocol)
	})
	t.Run("silent server", func(t *testing.T) {
		srv := startTCPServer(t, harness.PodIP(t)+":3306")
		res := expect(t, newMySQL(t, admin), target(t, srv.Addr()), probes.Failure, probes.ReasonTimeout)
		if res.Latency < probeTimeout/2 {
			t.Errorf("the probe gave up after %v, long before its deadline", res.Latency)
		}
	})

	// One probe, one connection, ended with COM_QUIT (the server counts
	// no aborted client), whether the probe passed or failed.
	t.Run("one connection per probe", func(t *testing.T) {
		const n = 3
		connections, aborted := serverStatus(t, m, "Connections"), serverStatus(t, m, "Aborted_clients")
		for _, cfg := range []mysql.Config{admin, query("SELECT 0")} {
			p := newMySQL(t, cfg)
			for range n {
				probe(p, tgt, probeTimeout)
			}
		}
		// serverStatus itself opens one connection each time.
		if got := serverStatus(t, m, "Connections") - connections - 2; got != 2*n {
			t.Errorf("%d connections for %d probes", got, 2*n)
		}
		if got := serverStatus(t, m, "Aborted_clients") - aborted; got != 0 {
			t.Errorf("%d aborted clients", got)
		}
	})
}

// TestMySQLTooManyConnections fills max_connections with sessions of an
// account without CONNECTION ADMIN: a probe as that account fails with
// too-many-connections, one as the harness's account still gets MariaDB's
// extra connection, and the account's probe passes again once a session
// ends.
func TestMySQLTooManyConnections(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ctx := testContext(t)
	const maxConnections = 10 // MariaDB's least
	m := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: harness.PodIP(t), MaxConnections: maxConnections})
	if err := m.Exec(ctx, "CREATE USER 'app'@'%' IDENTIFIED BY 'app-password'"); err != nil {
		t.Fatal(err)
	}
	tgt := target(t, m.Addr())
	app := newMySQL(t, mysql.Config{User: "app", Password: "app-password"})
	expect(t, app, tgt, probes.Success, probes.ReasonOK)

	db, err := m.Open("app", "app-password")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
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
		if len(held) > maxConnections {
			t.Fatalf("the server accepted %d sessions with max_connections=%d", len(held), maxConnections)
		}
		c, err := db.Conn(ctx)
		if err == nil {
			err = c.PingContext(ctx)
		}
		if err != nil {
			var serverErr *gomysql.MySQLError
			if !errors.As(err, &serverErr) || serverErr.Number != 1040 {
				t.Fatalf("opening session %d: %v, want error 1040", len(held)+1, err)
			}
			// A session ending (of the probe above, say) may free a
			// slot: full only if still refused a moment later.
			if refusals++; refusals == 2 {
				break
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		held = append(held, c)
	}
	t.Logf("the account holds %d sessions", len(held))

	res := expect(t, app, tgt, probes.Failure, probes.ReasonTooManyConnections)
	if want := "mysql: connect: the server has no connection left for this login (error 1040"; !strings.HasPrefix(res.Message, want) {
		t.Errorf("message %q does not start with %q", res.Message, want)
	}
	// The extra connection serves one login at a time, refused ones
	// included: the loop's last refusal may hold it a moment longer.
	admin := newMySQL(t, mariadbAdmin(m))
	harness.Eventually(t, 5*time.Second, "the harness's account gets the extra connection", func() error {
		if res := probe(admin, tgt, probeTimeout); !res.Passed() {
			return fmt.Errorf("%s", res)
		}
		return nil
	})

	if err := held[len(held)-1].Close(); err != nil {
		t.Fatal(err)
	}
	held = held[:len(held)-1]
	harness.Eventually(t, 10*time.Second, "the account's probe passes once a session ends", func() error {
		if res := probe(app, tgt, probeTimeout); !res.Passed() {
			return fmt.Errorf("%s", res)
		}
		return nil
	})
}

// TestMySQLTLS probes a server whose certificate, from a test CA, names its
// pod address and db.example.test, in every TLS mode. The query asks the
// server whether the probe's own session is encrypted.
func TestMySQLTLS(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	ca, err := harness.NewCA("swh-probes-mariadb-ca")
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
	m := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: addr, TLS: cert})
	tgt := target(t, m.Addr())
	base := withMySQL(mariadbAdmin(m), func(c *mysql.Config) {
		c.Query = "SELECT VARIABLE_VALUE <> '' FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_cipher'"
	})
	mode := func(tm mysql.TLSMode, caPEM []byte, serverName string) mysql.Config {
		return withMySQL(base, func(c *mysql.Config) { c.TLSMode, c.CACert, c.ServerName = tm, caPEM, serverName })
	}
	tests := []struct {
		name   string
		cfg    mysql.Config
		reason probes.Reason
	}{
		{"disable: the session is not encrypted", mode(mysql.TLSDisable, nil, ""), probes.ReasonQueryFalse},
		{"require", mode(mysql.TLSRequire, nil, ""), probes.ReasonOK},
		{"require with the CA", mode(mysql.TLSRequire, ca.PEM, ""), probes.ReasonOK},
		{"require with another CA", mode(mysql.TLSRequire, other.PEM, ""), probes.ReasonTLS},
		{"verify-ca", mode(mysql.TLSVerifyCA, ca.PEM, ""), probes.ReasonOK},
		{"verify-ca ignores names", mode(mysql.TLSVerifyCA, ca.PEM, "other.example.test"), probes.ReasonOK},
		{"verify-ca with another CA", mode(mysql.TLSVerifyCA, other.PEM, ""), probes.ReasonTLS},
		{"verify-full, pod IP in the certificate", mode(mysql.TLSVerifyFull, ca.PEM, ""), probes.ReasonOK},
		{"verify-full, name in the certificate", mode(mysql.TLSVerifyFull, ca.PEM, "db.example.test"), probes.ReasonOK},
		{"verify-full, name not in the certificate", mode(mysql.TLSVerifyFull, ca.PEM, "other.example.test"), probes.ReasonTLS},
		{"verify-full with another CA", mode(mysql.TLSVerifyFull, other.PEM, ""), probes.ReasonTLS},
		{"verify-full with the system roots", mode(mysql.TLSVerifyFull, nil, ""), probes.ReasonTLS},
		{"verify-full, wrong password", withMySQL(mode(mysql.TLSVerifyFull, ca.PEM, ""), func(c *mysql.Config) { c.Password = "wrong" }), probes.ReasonAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			expect(t, newMySQL(t, tt.cfg), tgt, want, tt.reason)
		})
	}
}

// TestMySQLHarness checks the harness's own MariaDB: the options it runs
// with.
func TestMySQLHarness(t *testing.T) {
	harness.RequireNetworkSandbox(t)
	m := harness.StartTestMariaDB(t, harness.MariaDBOptions{Addr: harness.PodIP(t), MaxConnections: 12, ServerID: 42})
	var maxConns, serverID int
	var logBin string
	if err := m.QueryRow(testContext(t), "SELECT @@max_connections, @@server_id, @@log_bin", &maxConns, &serverID, &logBin); err != nil {
		t.Fatal(err)
	}
	if maxConns != 12 || serverID != 42 || logBin != "1" {
		t.Errorf("max_connections %d, server_id %d, log_bin %s", maxConns, serverID, logBin)
	}
	if !strings.Contains(m.DSN("x"), strconv.Itoa(m.Options().Port)) {
		t.Errorf("DSN %q", m.DSN("x"))
	}
}
