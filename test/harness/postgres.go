package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/lib/pq" // registers the "postgres" driver for the harness's own queries

	"github.com/swh-dev/swh/test/harness/process"
)

// PostgresOptions configures a throwaway PostgreSQL server.
type PostgresOptions struct {
	// Addr is the IP address to listen on (a pod address in the sandbox).
	Addr string
	// Port defaults to 5432.
	Port int
	// User is the superuser created by initdb; defaults to "swh".
	User string
	// Password of User; defaults to "swh-test-password".
	Password string
	// MaxConnections defaults to 20.
	MaxConnections int
	// TLS enables SSL with this server certificate when set.
	TLS *Issued
	// HBA lines come first in pg_hba.conf (the first match wins), before
	// the defaults: trust on the socket, scram-sha-256 over TCP.
	HBA []string
	// Within, when set, runs the start of every PostgreSQL program (initdb,
	// pg_basebackup, the server), for example inside a pod's network
	// namespace. It must call start and return its error.
	Within func(start func() error) error
}

func (o *PostgresOptions) setDefaults() {
	if o.Port == 0 {
		o.Port = 5432
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
}

// Postgres is a PostgreSQL server running from the system's binaries in a
// temporary folder, as an unprivileged user (PostgreSQL refuses root).
type Postgres struct {
	opts   PostgresOptions
	binDir string
	owner  *syscall.Credential
	dir    string
	// server is the running postmaster; nil when stopped.
	server *process.Proc
}

// StartPostgres initialises a primary in a new temporary folder and starts it.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	opts.setDefaults()
	p, err := newPostgres(opts)
	if err != nil {
		return nil, err
	}
	pwfile := filepath.Join(p.dir, "pwfile")
	if err := p.writeOwned(pwfile, []byte(opts.Password+"\n"), 0o600); err != nil {
		return nil, p.fail(err)
	}
	if err := p.run(ctx, nil, "initdb", "-D", p.dataDir(), "-U", opts.User, "--pwfile="+pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, p.fail(err)
	}
	hba := strings.Join(append(opts.HBA[:len(opts.HBA):len(opts.HBA)],
		"local all all trust",
		"local replication all trust",
		"host all all 0.0.0.0/0 scram-sha-256",
		"host all all ::/0 scram-sha-256",
		"host replication all 0.0.0.0/0 scram-sha-256",
		"host replication all ::/0 scram-sha-256",
		"",
	), "\n")
	if err := p.writeOwned(filepath.Join(p.dataDir(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return nil, p.fail(err)
	}
	if err := p.start(ctx); err != nil {
		return nil, p.fail(err)
	}
	return p, nil
}

// StartReplica makes a streaming replica of p with pg_basebackup -R and
// starts it on addr:port.
func (p *Postgres) StartReplica(ctx context.Context, addr string, port int) (*Postgres, error) {
	return p.StartReplicaWithin(ctx, addr, port, p.opts.Within)
}

// StartReplicaWithin is StartReplica with the replica's programs started
// through within (see PostgresOptions.Within), for example inside another
// pod's network namespace than the primary's.
func (p *Postgres) StartReplicaWithin(ctx context.Context, addr string, port int, within func(start func() error) error) (*Postgres, error) {
	opts := p.opts
	opts.Addr, opts.Port, opts.Within = addr, port, within
	r, err := newPostgres(opts)
	if err != nil {
		return nil, err
	}
	env := []string{"PGPASSWORD=" + p.opts.Password}
	if err := r.run(ctx, env, "pg_basebackup", "-h", p.opts.Addr, "-p", strconv.Itoa(p.opts.Port),
		"-U", p.opts.User, "-D", r.dataDir(), "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return nil, r.fail(err)
	}
	if err := r.start(ctx); err != nil {
		return nil, r.fail(err)
	}
	return r, nil
}

func newPostgres(opts PostgresOptions) (*Postgres, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	owner, err := unprivilegedOwner()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "swh-pg-")
	if err != nil {
		return nil, fmt.Errorf("creating a folder for PostgreSQL: %w", err)
	}
	p := &Postgres{opts: opts, binDir: binDir, owner: owner, dir: dir}
	// The server runs as another user: it must reach and own its folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, p.fail(fmt.Errorf("opening up %s: %w", dir, err))
	}
	if err := p.chown(dir); err != nil {
		return nil, p.fail(err)
	}
	return p, nil
}

// Addr returns "ip:port" of the server.
func (p *Postgres) Addr() string {
	return net.JoinHostPort(p.opts.Addr, strconv.Itoa(p.opts.Port))
}

// Dir returns the server's temporary folder (data, socket and log).
func (p *Postgres) Dir() string { return p.dir }

// Options returns the options the server runs with, defaults applied.
func (p *Postgres) Options() PostgresOptions { return p.opts }

// DSN returns a lib/pq connection URL for database db as the superuser.
func (p *Postgres) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(p.opts.User, p.opts.Password),
		Host:     p.Addr(),
		Path:     "/" + db,
		RawQuery: "sslmode=disable&connect_timeout=5",
	}
	return u.String()
}

// Session opens one connection to database postgres as user, with
// application name app, and keeps it until the test ends: a client's
// session, for what a test does to sessions.
func (p *Postgres) Session(ctx context.Context, t testing.TB, user, password, app string) *sql.Conn {
	t.Helper()
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: p.Addr(), Path: "/postgres",
		RawQuery: "sslmode=disable&connect_timeout=5&application_name=" + url.QueryEscape(app)}
	db, err := sql.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("a session of %s on %s: %v", user, p.Addr(), err)
	}
	if err := conn.PingContext(ctx); err != nil {
		t.Fatalf("a session of %s on %s: %v", user, p.Addr(), err)
	}
	return conn
}

// QueryRow runs query as the superuser on database postgres and scans its
// one row into dest.
func (p *Postgres) QueryRow(ctx context.Context, query string, dest ...any) error {
	db, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("opening %s: %w", p.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	if err := db.QueryRowContext(ctx, query).Scan(dest...); err != nil {
		return fmt.Errorf("running %q on %s: %w", query, p.Addr(), err)
	}
	return nil
}

// Exec runs a statement as the superuser on database postgres.
func (p *Postgres) Exec(ctx context.Context, query string, args ...any) error {
	db, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("opening %s: %w", p.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("running %q on %s: %w", query, p.Addr(), err)
	}
	return nil
}

// InRecovery returns pg_is_in_recovery(): true on a replica.
func (p *Postgres) InRecovery(ctx context.Context) (bool, error) {
	db, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return false, fmt.Errorf("opening %s: %w", p.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	var in bool
	if err := db.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&in); err != nil {
		return false, fmt.Errorf("asking %s whether it is in recovery: %w", p.Addr(), err)
	}
	return in, nil
}

// Promote turns a replica into a primary and waits until it accepts writes.
func (p *Postgres) Promote(ctx context.Context) error {
	if err := p.Exec(ctx, "SELECT pg_promote(true, 60)"); err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown, then SIGKILL of its whole
// process group after 30 s) and waits for it. The folder is kept, so the
// server can be started again with Restart.
func (p *Postgres) Stop() error {
	if p.server == nil {
		return nil
	}
	p.server.Stop()
	p.server = nil
	return nil
}

// Restart starts a stopped server again on the same folder and address.
func (p *Postgres) Restart(ctx context.Context) error {
	if p.server != nil {
		return nil
	}
	return p.start(ctx)
}

// Close stops the server and removes its folder.
func (p *Postgres) Close() error {
	stopErr := p.Stop()
	if err := os.RemoveAll(p.dir); err != nil {
		return errors.Join(stopErr, fmt.Errorf("removing %s: %w", p.dir, err))
	}
	return stopErr
}

// Log returns what the server has written to its log so far.
func (p *Postgres) Log() string {
	data, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
	return string(data)
}

// StartTestPostgres starts a primary for a test and removes it at the end.
// A machine without PostgreSQL skips the test, except in CI.
func StartTestPostgres(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := StartPostgres(ctx, opts)
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() { closeForTest(t, p) })
	return p
}

// StartTestReplica starts a streaming replica of p for a test.
func (p *Postgres) StartTestReplica(t testing.TB, addr string, port int) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := p.StartReplica(ctx, addr, port)
	if err != nil {
		t.Fatalf("starting a replica of %s on %s:%d: %v", p.Addr(), addr, port, err)
	}
	t.Cleanup(func() { closeForTest(t, r) })
	return r
}

func closeForTest(t testing.TB, p *Postgres) {
	if err := p.Close(); err != nil {
		t.Errorf("%v", err)
	}
}
