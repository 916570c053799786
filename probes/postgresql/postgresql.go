package postgresql

import (
	"bytes"
	"context"
	"crypto/tls"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"

	"github.com/swh-dev/swh/probes"
)

// Config configures a Prober.
type Config struct {
	// DBName is the database to connect to; "postgres" by default.
	DBName string
	// User is the role to log in as; required (the prober never falls back
	// to the name of the OS user, as libpq does).
	User string
	// Password may be empty for trust or certificate authentication (lib/pq
	// then looks for one in ~/.pgpass, as libpq does).
	Password string
	// Query runs once per probe; "SELECT 1" by default. The probe passes
	// when it completes and, if it returns a row, the first column of the
	// first row is not false: false, f, 0, no, off (any case) and NULL are
	// false, and so is any number equal to zero.
	Query string
	// SSLMode is SSLDisable, SSLRequire, SSLVerifyCA or SSLVerifyFull. It
	// is required: the default sslmode differs between libpq and versions
	// of lib/pq.
	SSLMode SSLMode
	// CACert is a PEM bundle of the authorities that verify the server.
	// verify-ca needs it; verify-full uses the system roots without it;
	// with require it turns on verification of the chain, as in libpq.
	CACert []byte
	// ClientCert and ClientKey are a PEM certificate and key for
	// certificate authentication; both or neither.
	ClientCert []byte
	ClientKey  []byte
	// ServerName is the name verify-full checks and the SNI sent; empty
	// means the target host (a pod IP then needs an IP SAN).
	ServerName string
	// AllowCleartextPassword lets the prober answer a server that asks for
	// the password in clear text (password authentication) over a
	// connection whose server is not verified (SSLDisable, or SSLRequire
	// without CACert). Off, such a request fails the probe with
	// probes.ReasonAuth
	// before the password is sent: whoever answers on the target's address
	// would otherwise receive it. MD5 and SCRAM-SHA-256 never send the
	// password itself and are always answered; over verify-ca or
	// verify-full (or require with CACert) cleartext is answered too.
	AllowCleartextPassword bool
	// MaxReplicationLag, when set, fails a probe of a streaming replica
	// that is further behind its primary than it allows, with
	// probes.ReasonReplicationLag, after the query passed. A primary is
	// never judged.
	MaxReplicationLag *ReplicationLag
	// ApplicationName shows in pg_stat_activity and the server log;
	// "swh-probe" by default.
	ApplicationName string
	// Dialer opens the connection; nil means a net.Dialer.
	Dialer probes.Dialer
}

// Prober logs in, runs a query and checks its first column. Each
// probe opens exactly one connection (one server backend) and closes it. The
// context's deadline bounds the whole probe: it becomes connect_timeout for
// the login handshake, statement_timeout for the query on the server, and a
// socket deadline on the client; cancelling the context closes the socket.
type Prober struct {
	dbName, user, password string
	query, appName         string
	tls                    *tls.Config // nil for sslmode disable
	verifyName             bool        // verify-full: check the certificate names the server
	cleartextOK            bool        // answer a request for the password in clear text
	serverName             string
	dialer                 probes.Dialer
	lag                    *lagTracker // nil without MaxReplicationLag
}

var _ probes.Prober = (*Prober)(nil)

// New validates cfg and returns a prober.
func New(cfg Config) (*Prober, error) {
	p := &Prober{
		dbName: cfg.DBName, user: cfg.User, password: cfg.Password,
		query: cfg.Query, appName: cfg.ApplicationName,
		serverName: cfg.ServerName, dialer: cfg.Dialer,
	}
	if p.dbName == "" {
		p.dbName = "postgres"
	}
	if p.query == "" {
		p.query = "SELECT 1"
	}
	if p.appName == "" {
		p.appName = "swh-probe"
	}
	if p.dialer == nil {
		// As the probes package's default: keep-alive is pointless on a
		// connection that lives for one probe.
		p.dialer = &net.Dialer{KeepAlive: -1}
	}
	if p.user == "" {
		return nil, errors.New("postgresql: User is required")
	}
	for name, v := range map[string]string{"DBName": p.dbName, "User": p.user, "Password": p.password, "ApplicationName": p.appName, "Query": p.query} {
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("postgresql: %s holds a NUL byte", name)
		}
	}
	var err error
	if p.tls, err = tlsConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.MaxReplicationLag != nil {
		if p.lag, err = newLagTracker(*cfg.MaxReplicationLag); err != nil {
			return nil, err
		}
	}
	p.verifyName = cfg.SSLMode == SSLVerifyFull
	// Only a verified server may see the password itself: without
	// verification, whoever answers on the target's address would.
	verified := cfg.SSLMode == SSLVerifyFull || cfg.SSLMode == SSLVerifyCA || (cfg.SSLMode == SSLRequire && len(cfg.CACert) > 0)
	p.cleartextOK = verified || cfg.AllowCleartextPassword
	return p, nil
}

// pqConfig returns the lib/pq configuration of one probe. It is built field
// by field rather than parsed from a DSN so that no PG* environment variable
// or service file changes what the probe does. sslmode is "disable" for pq
// because the prober's dialer has already negotiated TLS (see startTLS).
func (p *Prober) pqConfig(target probes.Target, timeout time.Duration) pq.Config {
	return pq.Config{
		Host:               target.Host,
		Port:               uint16(target.Port),
		Database:           p.dbName,
		User:               p.user,
		Password:           p.password,
		ApplicationName:    p.appName,
		SSLMode:            pq.SSLModeDisable,
		ConnectTimeout:     timeout,
		ClientEncoding:     "UTF8",
		Datestyle:          "ISO, MDY",
		MinProtocolVersion: pq.ProtocolVersion30,
		MaxProtocolVersion: pq.ProtocolVersion30,
		TargetSessionAttrs: pq.TargetSessionAttrsAny,
		LoadBalanceHosts:   pq.LoadBalanceHostsDisable,
		Runtime: map[string]string{
			// Sent in the startup packet: the server cancels the
			// query by itself when the probe gives up on it.
			"statement_timeout": strconv.FormatInt(timeoutMillis(timeout), 10),
		},
	}
}

// timeoutMillis rounds up, so that a sub-millisecond budget does not become
// 0, which PostgreSQL reads as "no timeout".
func timeoutMillis(d time.Duration) int64 {
	return max(1, int64(math.Ceil(float64(d)/float64(time.Millisecond))))
}

// Probe logs in to target, runs the query and checks its first column;
// with MaxReplicationLag, it then checks a replica's lag.
func (p *Prober) Probe(ctx context.Context, target probes.Target) probes.Result {
	queries := []query{{text: p.query, cols: 1, phase: "query"}}
	if p.lag != nil {
		queries = append(queries, query{text: lagQuery, cols: 3, phase: "replication lag query"})
	}
	rows, start, failed := p.exec(ctx, target, queries, nil)
	switch {
	case failed != nil:
		return *failed
	case rows[0].seen && !truthy(rows[0].values[0]):
		return fail(start, probes.ReasonQueryFalse, fmt.Errorf("postgresql: query returned %s", describeValue(rows[0].values[0])))
	}
	if p.lag != nil {
		if err := p.lag.check(target, rows[1], time.Now()); err != nil {
			return fail(start, probes.ReasonReplicationLag, err)
		}
	}
	if !rows[0].seen {
		return pass(start, "query returned no row")
	}
	return pass(start, "query returned "+describeValue(rows[0].values[0]))
}

// query is a statement exec runs and how many columns of its first row it
// reads.
type query struct {
	text  string
	cols  int
	phase string // names the query in a failure's message
}

// row is the first row of a query's result: the columns asked for, when a
// row came.
type row struct {
	values []driver.Value
	seen   bool
}

// exec logs in to target and runs the queries in turn, on one connection
// closed before it returns, within the context's deadline (which target's
// budget bounds), under the stream guard's bounds. It returns each query's
// first row and when it started, or the failed result.
func (p *Prober) exec(ctx context.Context, target probes.Target, queries []query, settings map[string]string) (rows []row, start time.Time, failed *probes.Result) {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		r := fail(start, probes.ReasonInvalidTarget, err)
		return nil, start, &r
	}
	deadline, _ := ctx.Deadline()

	guard := &connGuard{}
	stop := context.AfterFunc(ctx, guard.abort)
	defer stop()
	defer func() {
		// pq parses what the server sends; a server that finds a bug
		// in it must fail this probe, not crash the process.
		if r := recover(); r != nil {
			guard.abort()
			res := fail(start, probes.ReasonProtocol, fmt.Errorf("postgresql: the client library failed on the server's answer: %v", r))
			rows, failed = nil, &res
		}
	}()
	cfg := p.pqConfig(target, time.Until(deadline))
	for k, v := range settings {
		cfg.Runtime[k] = v
	}
	connector, err := pq.NewConnectorConfig(cfg)
	if err != nil {
		r := fail(start, probes.ReasonError, fmt.Errorf("postgresql: %w", err))
		return nil, start, &r
	}
	connector.Dialer(&pgDialer{prober: p, target: target, guard: guard})
	conn, err := connector.Connect(ctx)
	if err != nil {
		guard.abort() // pq closes on most failures, not all
		r := failPhase(ctx, start, "connect", guard.refusalOr(err))
		return nil, start, &r
	}
	defer conn.Close()
	// pq clears the socket deadline after the handshake; the query phase
	// gets the probe's deadline back.
	guard.setDeadline(deadline)

	for _, q := range queries {
		values, seen, err := runQuery(ctx, conn, q.text, q.cols)
		if err != nil {
			r := failPhase(ctx, start, q.phase, guard.refusalOr(err))
			return nil, start, &r
		}
		rows = append(rows, row{values: values, seen: seen})
	}
	return rows, start, nil
}

// closeSessionsQuery ends every session but the prober's own, those of
// the prober's application name (the other probes: a withdrawal must not
// fail another resource's probe of the pod), superusers' (which only a
// superuser may end) and replication roles' (WAL senders: a replica
// streaming from the pod), and counts them. It reads only what
// pg_stat_activity shows a role without pg_read_all_stats: other
// sessions' pid, role and application name (their backend_type is NULL);
// background processes without a role are left out by the join. It runs
// with search_path pg_catalog: no schema of the database can redefine an
// operator it uses.
const closeSessionsQuery = `SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(a.pid))
FROM pg_catalog.pg_stat_activity a JOIN pg_catalog.pg_roles r ON r.oid = a.usesysid
WHERE a.pid <> pg_catalog.pg_backend_pid() AND NOT r.rolsuper AND NOT r.rolreplication
AND a.application_name IS DISTINCT FROM pg_catalog.current_setting('application_name')`

// CloseSessions logs in to target as a probe does and ends the sessions of
// its clients with pg_terminate_backend: every session but its own, the
// probes' (those of its ApplicationName), superusers' and replication
// roles'. It returns
// how many it ended. The role needs the privileges of pg_signal_backend
// (GRANT pg_signal_backend TO <role>) to end other roles' sessions;
// without them the server refuses and the error says so. It is for a
// database pod that stops receiving traffic (an old primary withdrawn
// from a write Service): kube-proxy leaves established connections open.
func (p *Prober) CloseSessions(ctx context.Context, target probes.Target) (int, error) {
	rows, _, failed := p.exec(ctx, target, []query{{text: closeSessionsQuery, cols: 1, phase: "query"}}, map[string]string{"search_path": "pg_catalog"})
	if failed != nil {
		return 0, fmt.Errorf("closing the sessions on %s: %s", target, failed.Message)
	}
	value := rows[0].values[0]
	n, ok := value.(int64)
	if !ok {
		return 0, fmt.Errorf("closing the sessions on %s: the server counted %s", target, describeValue(value))
	}
	return int(n), nil
}

// failPhase returns the failure of a phase ("connect" or "query"). When
// the probe's context has ended, the message starts with that: the error
// itself then often only says that the socket was closed under pq. An error
// the server reported reads as the prober's words for its reason, then the
// server's: the wording of one SQLSTATE varies between servers and limits.
func failPhase(ctx context.Context, start time.Time, phase string, err error) probes.Result {
	reason := classify(ctx, err, phase == "query")
	if pqErr := pq.As(err); pqErr != nil {
		err = &serverError{words: serverWords(reason), err: err, code: string(pqErr.Code), text: pqErr.Message}
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("postgresql: %s: %w (%w)", phase, ctxErr, err)
	} else {
		err = fmt.Errorf("postgresql: %s: %w", phase, err)
	}
	return fail(start, reason, err)
}

// runQuery runs q and returns the first cols columns of its first row,
// whether a row came back, and any error up to the end of the query.
func runQuery(ctx context.Context, conn driver.Conn, q string, cols int) ([]driver.Value, bool, error) {
	queryer, ok := conn.(driver.QueryerContext)
	if !ok {
		return nil, false, errors.New("lib/pq connection cannot query")
	}
	// A context without cancellation keeps pq from sending a CancelRequest,
	// which would open a second connection from a goroutine outliving the
	// probe. The probe's own context still bounds the query: the guard
	// closes the socket when it ends, and statement_timeout stops the
	// query on the server.
	rows, err := queryer.QueryContext(context.WithoutCancel(ctx), q, nil)
	if err != nil {
		return nil, false, err
	}
	values := make([]driver.Value, cols)
	seen := false
	if n := min(cols, len(rows.Columns())); n > 0 {
		dest := make([]driver.Value, n) // pq decodes only as many columns as dest holds
		switch err := rows.Next(dest); err {
		case nil:
			seen = true
			for i, v := range dest {
				if b, ok := v.([]byte); ok {
					v = bytes.Clone(b) // it points into pq's buffer, reused by the next message
				}
				values[i] = v
			}
		case io.EOF:
		default:
			_ = rows.Close()
			return nil, false, err
		}
	}
	// Close reads the rest of the result, up to the end of the query: an
	// error in a later row still fails the probe.
	if err := rows.Close(); err != nil {
		return nil, false, err
	}
	return values, seen, nil
}

// connGuard holds the probe's one socket so that the end of the context can
// close it, whichever phase pq is in.
type connGuard struct {
	mu      sync.Mutex
	conn    net.Conn
	claimed bool // a dial started: pq gets one connection per probe
	aborted bool // the probe's context ended
	stream  *pgStream
}

func (g *connGuard) setStream(s *pgStream) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stream = s
}

// refusalOr returns the message the stream refused, which caused err, or
// err: what pq makes of a refused read says little.
func (g *connGuard) refusalOr(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stream != nil {
		if r := g.stream.refusal(); r != nil {
			return r
		}
	}
	return err
}

// claim reports whether this is the probe's first dial.
func (g *connGuard) claim() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first := !g.claimed && !g.aborted
	g.claimed = true
	return first
}

// set records the dialed socket; it reports false, and closes the socket,
// if the probe has already ended.
func (g *connGuard) set(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aborted {
		_ = c.Close()
		return false
	}
	g.conn = c
	return true
}

func (g *connGuard) abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.aborted = true
	if g.conn != nil {
		_ = g.conn.Close()
	}
}

func (g *connGuard) setDeadline(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		_ = g.conn.SetDeadline(t)
	}
}
