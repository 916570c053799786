package mysql

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
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/swh-dev/swh/probes"
)

// Config configures a Prober.
type Config struct {
	// User is the account to log in as; required (an empty name is the
	// anonymous account).
	User string
	// Password may be empty for an account without one.
	Password string
	// DBName is the default database of the session; empty for none.
	DBName string
	// Query runs once per probe; "SELECT 1" by default. The probe passes
	// when it completes and, if it returns a row, the first column of the
	// first row is not false: NULL, any number equal to zero (0, 0.00,
	// a BIT of zeros) and the text false, f, 0, no and off (any case,
	// surrounding space ignored) are false. "SELECT @@read_only = 0"
	// passes on a writable server only; "SELECT @@read_only" would pass
	// on a read-only one.
	Query string
	// TLSMode is TLSDisable, TLSRequire, TLSVerifyCA or TLSVerifyFull; it
	// is required.
	TLSMode TLSMode
	// ServerName is the name verify-full checks and the SNI sent; empty
	// means the target host (a pod IP then needs an IP SAN).
	ServerName string
	// CACert is a PEM bundle of the authorities that verify the server.
	// verify-ca needs it; verify-full uses the system roots without it;
	// with require it turns on verification of the chain, as
	// probes/postgresql does.
	CACert []byte
	// ClientCert and ClientKey are a PEM certificate and key for X.509
	// authentication (REQUIRE X509); both or neither.
	ClientCert []byte
	ClientKey  []byte
	// AllowCleartextPassword lets the prober send the password itself
	// over a connection whose server is not verified (TLSDisable, or
	// TLSRequire without CACert): in clear text (mysql_clear_password,
	// the PAM and LDAP methods) or encrypted with an RSA key the server
	// supplies (sha256_password, caching_sha2_password's full
	// authentication), which whoever answers on the target's address can
	// supply. Off, such a request fails the probe with probes.ReasonAuth
	// before the password is sent. mysql_native_password, client_ed25519
	// and caching_sha2_password's fast path never send the password and
	// are always answered; over verify-ca or verify-full (or require with
	// CACert) everything is.
	AllowCleartextPassword bool
	// Dialer opens the connection; nil means a net.Dialer.
	Dialer probes.Dialer
}

// Prober logs in, runs a query and checks its first column. Each probe
// opens exactly one connection (one server session) and closes it. The
// context's deadline bounds the whole probe: it is the socket's deadline,
// and the end of the context closes the socket, whichever phase the probe
// is in.
type Prober struct {
	driver     *gomysql.Config // the driver's configuration, without address and dialer
	query      string
	tls        *tls.Config // nil for TLSDisable
	serverName string
	passwordOK bool // send the password itself when the server asks for it
	dialer     probes.Dialer
}

var _ probes.Prober = (*Prober)(nil)

// New validates cfg and returns a prober.
func New(cfg Config) (*Prober, error) {
	p := &Prober{query: cfg.Query, serverName: cfg.ServerName, dialer: cfg.Dialer}
	if p.query == "" {
		p.query = "SELECT 1"
	}
	if p.dialer == nil {
		// As the probes package's default: keep-alive is pointless on a
		// connection that lives for one probe.
		p.dialer = &net.Dialer{KeepAlive: -1}
	}
	if cfg.User == "" {
		return nil, errors.New("mysql: User is required")
	}
	for name, v := range map[string]string{"User": cfg.User, "Password": cfg.Password, "DBName": cfg.DBName, "Query": p.query} {
		// The protocol ends names and the cleartext password with a
		// NUL.
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("mysql: %s holds a NUL byte", name)
		}
	}
	if len(p.query) >= maxPacketBytes {
		return nil, fmt.Errorf("mysql: Query has %d bytes; the limit is %d", len(p.query), maxPacketBytes-1)
	}
	var err error
	if p.tls, err = tlsConfig(cfg); err != nil {
		return nil, err
	}
	// Only a verified server may see the password itself: without
	// verification, whoever answers on the target's address would.
	p.passwordOK = cfg.TLSMode.verified(len(cfg.CACert) > 0) || cfg.AllowCleartextPassword || cfg.Password == ""

	d := gomysql.NewConfig()
	d.User, d.Passwd, d.DBName = cfg.User, cfg.Password, cfg.DBName
	d.Net = "tcp"
	// The prober negotiates TLS itself (see stream), so the driver is
	// told none: it keeps no TLS configuration in its process-wide
	// registry, and dials through DialFunc rather than a registered
	// dialer.
	d.TLS = nil
	d.AllowCleartextPasswords = p.passwordOK
	d.AllowNativePasswords = true
	d.AllowOldPasswords = false
	d.AllowAllFiles = false
	// A set MaxAllowedPacket saves the round trip that asks the server
	// for its own, and bounds what the prober writes.
	d.MaxAllowedPacket = maxPacketBytes
	// A fresh connection needs no liveness check, and the driver's logger
	// writes to the process's standard error.
	d.CheckConnLiveness = false
	d.Logger = &gomysql.NopLogger{}
	// Shows in performance_schema.session_connect_attrs.
	d.ConnectionAttributes = "program_name:swh-probe"
	p.driver = d
	return p, nil
}

// Probe logs in to target, runs the query and checks its first column.
func (p *Prober) Probe(ctx context.Context, target probes.Target) (res probes.Result) {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		return fail(start, probes.ReasonInvalidTarget, err)
	}
	// The driver watches the context of each call from a goroutine of the
	// connection's; ending the context when the probe returns ends that
	// goroutine, whatever state the connection was left in.
	ctx, stop := context.WithCancel(ctx)
	defer stop()

	guard := &connGuard{}
	defer guard.abort() // the socket is closed when the probe returns, always
	stopAbort := context.AfterFunc(ctx, guard.abort)
	defer stopAbort()
	connected := false
	defer func() {
		// The driver parses what the server sends; a server that finds
		// a bug in it must fail this probe, not crash the process. (A
		// panic while logging in leaves the driver's watcher goroutine
		// behind, for want of the connection to close: the stream
		// refuses every packet known to cause one.)
		if r := recover(); r != nil {
			guard.abort()
			when := ""
			if !connected {
				when = " while logging in"
			}
			res = fail(start, probes.ReasonProtocol, fmt.Errorf("mysql: the client library failed on the server's answer%s: %v", when, r))
		}
	}()

	cfg := *p.driver
	cfg.Addr = target.Addr()
	if p.tls != nil {
		// The driver, told of no TLS (the prober negotiates it), would
		// answer caching_sha2_password's full authentication by asking
		// for the server's RSA key, which MySQL refuses over TLS; on a
		// "unix" socket it sends the password as it is, which is what
		// MySQL expects over TLS. The dialer dials TCP whatever the
		// driver names.
		cfg.Net = "unix"
	}
	cfg.DialFunc = (&dialer{prober: p, target: target, guard: guard}).dial
	connector, err := gomysql.NewConnector(&cfg)
	if err != nil {
		return fail(start, probes.ReasonError, fmt.Errorf("mysql: %w", err))
	}
	conn, err := connector.Connect(ctx)
	if err != nil {
		guard.abort() // the driver closes on most failures, not all
		return failPhase(ctx, start, "connect", guard.causeOf(err))
	}
	connected = true
	defer conn.Close()

	value, seen, err := runQuery(ctx, conn, p.query)
	switch {
	case err != nil:
		return failPhase(ctx, start, "query", guard.causeOf(err))
	case !seen:
		return pass(start, "query returned no row")
	case !truthy(value):
		return fail(start, probes.ReasonQueryFalse, fmt.Errorf("mysql: query returned %s", describeValue(value)))
	}
	return pass(start, "query returned "+describeValue(value))
}

// runQuery runs q and returns the first column of its first row, whether
// a row came back, and any error up to the end of the query.
func runQuery(ctx context.Context, conn driver.Conn, q string) (driver.Value, bool, error) {
	queryer, ok := conn.(driver.QueryerContext)
	if !ok {
		return nil, false, errors.New("the driver's connection cannot query")
	}
	rows, err := queryer.QueryContext(ctx, q, nil)
	if err != nil {
		return nil, false, err
	}
	var (
		value driver.Value
		seen  bool
	)
	if len(rows.Columns()) > 0 {
		dest := make([]driver.Value, 1) // the driver decodes only as many columns as dest holds
		switch err := rows.Next(dest); err {
		case nil:
			seen, value = true, dest[0]
			if b, ok := value.([]byte); ok {
				value = bytes.Clone(b) // it points into the driver's buffer, reused by the next packet
				if isBit(rows) {
					value = bitValue(b)
				}
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
	return value, seen, nil
}

// isBit reports whether the first column is of type BIT, whose value the
// driver passes on as raw big-endian bytes.
func isBit(rows driver.Rows) bool {
	typed, ok := rows.(driver.RowsColumnTypeDatabaseTypeName)
	return ok && typed.ColumnTypeDatabaseTypeName(0) == "BIT"
}

// bitValue reads a BIT value (at most 64 bits, big-endian) as a number;
// a longer one, which no server sends, reads as nonzero when any of its
// bits is set, rather than losing bits to the shift.
func bitValue(b []byte) uint64 {
	if len(b) > 8 {
		for _, c := range b {
			if c != 0 {
				return math.MaxUint64
			}
		}
		return 0
	}
	var n uint64
	for _, c := range b {
		n = n<<8 | uint64(c)
	}
	return n
}
