package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql" // registers the "mysql" driver for the harness's own queries

	"github.com/swh-dev/swh/test/harness/process"
)

// MariaDBOptions configures a throwaway MariaDB server.
type MariaDBOptions struct {
	// Addr is the IP address to listen on (a pod address in the sandbox).
	Addr string
	// Port defaults to 3306.
	Port int
	// User is an account with every privilege (replication included),
	// created with the server, for any host; defaults to "swh".
	User string
	// Password of User; defaults to "swh-test-password".
	Password string
	// MaxConnections defaults to 20; MariaDB raises a value below 10 to
	// 10. It lets one more in for an account with the CONNECTION ADMIN
	// privilege (as User has).
	MaxConnections int
	// TLS enables TLS with this server certificate when set.
	TLS *Issued
	// ServerID is the replication server id; defaults to 1. A replica
	// takes another.
	ServerID int
	// Within, when set, runs the start of every MariaDB program
	// (mariadb-install-db, the server), for example inside a pod's network
	// namespace. It must call start and return its error.
	Within func(start func() error) error
}

func (o *MariaDBOptions) setDefaults() {
	if o.Port == 0 {
		o.Port = 3306
	}
	if o.User == "" {
		o.User = "swh"
	}
	if o.Password == "" {
		o.Password = "swh-test-password"
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = 20
	}
	if o.ServerID == 0 {
		o.ServerID = 1
	}
}

// MariaDB is a MariaDB server running from the system's binaries in a
// temporary folder, as an unprivileged user (mariadbd refuses root).
type MariaDB struct {
	opts    MariaDBOptions
	bins    mariadbBinaries
	owner   *syscall.Credential
	dir     string
	primary *MariaDB // nil unless a replica

	mu       sync.Mutex
	server   *process.Proc // the running mariadbd; nil when stopped
	replicas int           // started from this one, for their server ids
}

// StartMariaDB initialises a server in a new temporary folder and starts
// it, with binary logging on: a primary that replicas can follow.
func StartMariaDB(ctx context.Context, opts MariaDBOptions) (*MariaDB, error) {
	opts.setDefaults()
	if strings.ContainsAny(opts.User+opts.Password, `'\`) {
		return nil, errors.New("the MariaDB user and password may not hold quotes or backslashes")
	}
	m, err := newMariaDB(opts)
	if err != nil {
		return nil, err
	}
	// Run by mariadb-install-db once the system tables exist. The
	// bootstrap server runs without grant tables, so the account
	// statements need them loaded first.
	initSQL := fmt.Sprintf("FLUSH PRIVILEGES;\nCREATE USER '%[1]s'@'%%' IDENTIFIED BY '%[2]s';\nGRANT ALL PRIVILEGES ON *.* TO '%[1]s'@'%%' WITH GRANT OPTION;\n",
		opts.User, opts.Password)
	initFile := filepath.Join(m.dir, "init.sql")
	if err := m.writeOwned(initFile, []byte(initSQL), 0o600); err != nil {
		return nil, m.fail(err)
	}
	if err := m.install(ctx, initFile); err != nil {
		return nil, m.fail(err)
	}
	if err := m.start(ctx); err != nil {
		return nil, m.fail(err)
	}
	return m, nil
}

// StartReplica makes a replica of m on addr:port: a new server, of the same
// options, that replicates m's binary log from its current position, with
// read_only set.
func (m *MariaDB) StartReplica(ctx context.Context, addr string, port int) (*MariaDB, error) {
	m.mu.Lock()
	m.replicas++
	opts := m.opts
	opts.Addr, opts.Port, opts.ServerID = addr, port, m.opts.ServerID*100+m.replicas
	m.mu.Unlock()
	r, err := StartMariaDB(ctx, opts)
	if err != nil {
		return nil, err
	}
	r.primary = m
	file, pos, err := m.binlogPosition(ctx)
	if err == nil {
		err = r.Exec(ctx, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%d, MASTER_USER='%s', MASTER_PASSWORD='%s', "+
			"MASTER_LOG_FILE='%s', MASTER_LOG_POS=%d, MASTER_CONNECT_RETRY=1",
			m.opts.Addr, m.opts.Port, m.opts.User, m.opts.Password, file, pos))
	}
	if err == nil {
		err = r.Exec(ctx, "START SLAVE")
	}
	if err == nil {
		err = r.SetReadOnly(ctx, true)
	}
	if err == nil {
		err = r.waitReplicating(ctx)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("making %s a replica of %s: %w", r.Addr(), m.Addr(), err), r.Close())
	}
	return r, nil
}

// binlogPosition returns SHOW MASTER STATUS's file and position.
func (m *MariaDB) binlogPosition(ctx context.Context) (string, int64, error) {
	row, err := m.queryMap(ctx, "SHOW MASTER STATUS")
	if err != nil {
		return "", 0, err
	}
	pos, err := strconv.ParseInt(row["Position"], 10, 64)
	if err != nil || row["File"] == "" {
		return "", 0, fmt.Errorf("SHOW MASTER STATUS on %s: %v (is the binary log on?)", m.Addr(), row)
	}
	return row["File"], pos, nil
}

// ReplicaStatus returns the columns of SHOW SLAVE STATUS by name (empty on
// a server that is no replica).
func (m *MariaDB) ReplicaStatus(ctx context.Context) (map[string]string, error) {
	return m.queryMap(ctx, "SHOW SLAVE STATUS")
}

// waitReplicating waits until both replication threads run.
func (m *MariaDB) waitReplicating(ctx context.Context) error {
	var last map[string]string
	for {
		status, err := m.ReplicaStatus(ctx)
		if err != nil {
			return err
		}
		if status["Slave_IO_Running"] == "Yes" && status["Slave_SQL_Running"] == "Yes" {
			return nil
		}
		last = status
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication on %s not running: %w (IO %q, SQL %q, last error %q %q)", m.Addr(), ctx.Err(),
				last["Slave_IO_Running"], last["Slave_SQL_Running"], last["Last_IO_Error"], last["Last_SQL_Error"])
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitCaughtUp waits until a replica has applied everything its primary
// had written when called.
func (m *MariaDB) WaitCaughtUp(ctx context.Context) error {
	if m.primary == nil {
		return fmt.Errorf("%s is no replica", m.Addr())
	}
	file, pos, err := m.primary.binlogPosition(ctx)
	if err != nil {
		return err
	}
	var n sql.NullInt64
	// -1 on a timeout, NULL when the replica's SQL thread is not running.
	if err := m.QueryRow(ctx, fmt.Sprintf("SELECT MASTER_POS_WAIT('%s', %d, 60)", file, pos), &n); err != nil {
		return err
	}
	if !n.Valid || n.Int64 < 0 {
		return fmt.Errorf("%s did not catch up with %s:%d (%v)", m.Addr(), file, pos, n)
	}
	return nil
}

// SetReadOnly sets the global read_only.
func (m *MariaDB) SetReadOnly(ctx context.Context, on bool) error {
	return m.Exec(ctx, fmt.Sprintf("SET GLOBAL read_only = %t", on))
}

// Promote turns a replica into a primary: replication stops and is
// forgotten, and read_only is cleared.
func (m *MariaDB) Promote(ctx context.Context) error {
	for _, stmt := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if err := m.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("promoting %s: %w", m.Addr(), err)
		}
	}
	return nil
}

// Addr returns "ip:port" of the server.
func (m *MariaDB) Addr() string {
	return net.JoinHostPort(m.opts.Addr, strconv.Itoa(m.opts.Port))
}

// Dir returns the server's temporary folder (data, socket and log).
func (m *MariaDB) Dir() string { return m.dir }

// Options returns the options the server runs with, defaults applied.
func (m *MariaDB) Options() MariaDBOptions { return m.opts }

// DSN returns a go-sql-driver/mysql data source name for database db ("" for
// none) as the options' User, over TCP without TLS.
func (m *MariaDB) DSN(db string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = m.opts.User, m.opts.Password, "tcp", m.Addr(), db
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 30*time.Second, 30*time.Second
	return cfg.FormatDSN()
}

// Open opens database/sql on the server as user, for a test's own sessions.
func (m *MariaDB) Open(user, password string) (*sql.DB, error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = user, password, "tcp", m.Addr()
	cfg.Timeout = 5 * time.Second
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// Exec runs a statement as the options' User.
func (m *MariaDB) Exec(ctx context.Context, query string, args ...any) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("running %q on %s: %w", redactPassword(query), m.Addr(), err)
	}
	return nil
}

// QueryRow runs query as the options' User and scans its one row into dest.
func (m *MariaDB) QueryRow(ctx context.Context, query string, dest ...any) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	if err := db.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return fmt.Errorf("running %q on %s: %w", query, m.Addr(), err)
	}
	return nil
}

// queryMap runs query and returns its first row by column name, empty
// without rows.
func (m *MariaDB) queryMap(ctx context.Context, query string) (map[string]string, error) {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", m.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("running %q on %s: %w", query, m.Addr(), err)
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	if !rows.Next() {
		return out, rows.Err()
	}
	values := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range values {
		ptrs[i] = &values[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, fmt.Errorf("reading %q on %s: %w", query, m.Addr(), err)
	}
	for i, c := range cols {
		out[c] = values[i].String
	}
	return out, nil
}

// redactPassword hides a MASTER_PASSWORD in a statement quoted in an error.
func redactPassword(query string) string {
	if i := strings.Index(query, "MASTER_PASSWORD='"); i >= 0 {
		if j := strings.IndexByte(query[i+len("MASTER_PASSWORD='"):], '\''); j >= 0 {
			return query[:i] + "MASTER_PASSWORD='…'" + query[i+len("MASTER_PASSWORD='")+j+1:]
		}
	}
	return query
}

// Stop shuts the server down (SIGTERM, then SIGKILL of its process group
// after 30 s) and waits for it. The folder is kept, so the server can be
// started again with Restart.
func (m *MariaDB) Stop() error {
	m.mu.Lock()
	server := m.server
	m.server = nil
	m.mu.Unlock()
	if server != nil {
		server.Stop()
	}
	return nil
}

// Restart starts a stopped server again on the same folder and address.
func (m *MariaDB) Restart(ctx context.Context) error {
	m.mu.Lock()
	running := m.server != nil
	m.mu.Unlock()
	if running {
		return nil
	}
	return m.start(ctx)
}

// Close stops the server and removes its folder.
func (m *MariaDB) Close() error {
	stopErr := m.Stop()
	if err := os.RemoveAll(m.dir); err != nil {
		return errors.Join(stopErr, fmt.Errorf("removing %s: %w", m.dir, err))
	}
	return stopErr
}

// Log returns what the server has written to its log so far.
func (m *MariaDB) Log() string {
	data, _ := os.ReadFile(filepath.Join(m.dir, "mariadb.log"))
	return string(data)
}

// StartTestMariaDB starts a server for a test and removes it at the end.
// Starting takes a few seconds (mariadb-install-db): start one per test
// function and share it between subtests. A machine without MariaDB skips
// the test, except in CI.
func StartTestMariaDB(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := StartMariaDB(ctx, opts)
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() { closeMariaDBForTest(t, m) })
	return m
}

// StartTestReplica starts a replica of m for a test.
func (m *MariaDB) StartTestReplica(t testing.TB, addr string, port int) *MariaDB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := m.StartReplica(ctx, addr, port)
	if err != nil {
		t.Fatalf("starting a replica of %s on %s:%d: %v", m.Addr(), addr, port, err)
	}
	t.Cleanup(func() { closeMariaDBForTest(t, r) })
	return r
}

func closeMariaDBForTest(t testing.TB, m *MariaDB) {
	if err := m.Close(); err != nil {
		t.Errorf("%v", err)
	}
}
