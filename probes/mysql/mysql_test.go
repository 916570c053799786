package mysql

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/swh-dev/swh/probes"
)

func newMy(t testing.TB, cfg Config) *Prober {
	t.Helper()
	if cfg.User == "" {
		cfg.User = "probe"
	}
	if cfg.TLSMode == "" {
		cfg.TLSMode = TLSDisable
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMySQLConfigErrors(t *testing.T) {
	ca := newCA(t, "ca")
	_, certPEM, keyPEM := ca.Issue(t, "client")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no user", Config{TLSMode: TLSDisable}, "User is required"},
		{"no TLS mode", Config{User: "u"}, "TLS mode is required"},
		{"unknown TLS mode", Config{User: "u", TLSMode: "preferred"}, `"preferred"`},
		{"verify-ca without CA", Config{User: "u", TLSMode: TLSVerifyCA}, "verify-ca needs CACert"},
		{"CA garbage", Config{User: "u", TLSMode: TLSVerifyFull, CACert: []byte("garbage")}, "no PEM certificate"},
		{"certificate without key", Config{User: "u", TLSMode: TLSRequire, ClientCert: certPEM}, "client certificate"},
		{"key without certificate", Config{User: "u", TLSMode: TLSRequire, ClientKey: keyPEM}, "client certificate"},
		{"key of another certificate", Config{User: "u", TLSMode: TLSRequire, ClientCert: certPEM, ClientKey: func() []byte { _, _, k := ca.Issue(t, "x"); return k }()}, "client certificate"},
		{"NUL in the user", Config{User: "u\x00", TLSMode: TLSDisable}, "User holds a NUL"},
		{"NUL in the password", Config{User: "u", TLSMode: TLSDisable, Password: "a\x00b"}, "Password holds a NUL"},
		{"NUL in the database", Config{User: "u", TLSMode: TLSDisable, DBName: "a\x00"}, "DBName holds a NUL"},
		{"NUL in the query", Config{User: "u", TLSMode: TLSDisable, Query: "SELECT 1\x00"}, "Query holds a NUL"},
		{"query of 64 KiB", Config{User: "u", TLSMode: TLSDisable, Query: "SELECT '" + strings.Repeat("x", 64<<10) + "'"}, "the limit is 65535"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New says %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// TestTLSModeValidate: the four modes pass; anything else, MySQL's
// PREFERRED included, fails with an error naming the value, cut when long.
func TestTLSModeValidate(t *testing.T) {
	long := strings.Repeat("v", 100)
	for _, tc := range []struct {
		mode TLSMode
		want string // "" for valid
	}{
		{TLSDisable, ""}, {TLSRequire, ""}, {TLSVerifyCA, ""}, {TLSVerifyFull, ""},
		{"", "TLS mode is required"},
		{"preferred", `TLS mode "preferred" is not disable, require, verify-ca or verify-full`},
		{"VERIFY_IDENTITY", `"VERIFY_IDENTITY"`},
		{"verify-full ", `"verify-full "`},
		{TLSMode(long), `"` + long[:40] + `" is not`},
	} {
		err := tc.mode.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.mode, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.50q: got %v, want an error with %q", tc.mode, err, tc.want)
		}
		if _, newErr := New(Config{User: "u", TLSMode: tc.mode}); newErr == nil || newErr.Error() != err.Error() {
			t.Errorf("%.50q: New says %v, Validate %v", tc.mode, newErr, err)
		}
	}
}

// TestMySQLOptions checks the driver's configuration: nothing process-wide
// (TLS registry, logger), no extra round trip, and the password itself only
// where the server is verified or it is allowed.
func TestMySQLOptions(t *testing.T) {
	ca := newCA(t, "ca")
	p := newMy(t, Config{User: "probe", Password: "secret", DBName: "app"})
	d := p.driver
	if d.User != "probe" || d.Passwd != "secret" || d.DBName != "app" || d.Net != "tcp" {
		t.Errorf("connection fields %+v", d)
	}
	if d.TLS != nil || d.TLSConfig != "" || d.AllowAllFiles || d.AllowOldPasswords || d.CheckConnLiveness || d.MultiStatements || d.InterpolateParams {
		t.Errorf("options %+v", d)
	}
	if d.MaxAllowedPacket != maxPacketBytes {
		t.Errorf("MaxAllowedPacket %d", d.MaxAllowedPacket)
	}
	if _, ok := d.Logger.(*gomysql.NopLogger); !ok {
		t.Errorf("logger %T", d.Logger)
	}
	if p.query != "SELECT 1" {
		t.Errorf("default query %q", p.query)
	}
	for _, tc := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Password: "x", TLSMode: TLSDisable}, false},
		{Config{Password: "x", TLSMode: TLSDisable, AllowCleartextPassword: true}, true},
		{Config{Password: "x", TLSMode: TLSRequire}, false},
		{Config{Password: "x", TLSMode: TLSRequire, CACert: ca.PEM}, true},
		{Config{Password: "x", TLSMode: TLSVerifyCA, CACert: ca.PEM}, true},
		{Config{Password: "x", TLSMode: TLSVerifyFull}, true},
		{Config{TLSMode: TLSDisable}, true}, // no password to give away
	} {
		p := newMy(t, tc.cfg)
		if p.passwordOK != tc.want || p.driver.AllowCleartextPasswords != tc.want {
			t.Errorf("%+v: password sent: %v (driver: %v), want %v", tc.cfg, p.passwordOK, p.driver.AllowCleartextPasswords, tc.want)
		}
	}
}

func TestTruthy(t *testing.T) {
	for _, tc := range []struct {
		v    driver.Value
		want bool
	}{
		{nil, false},
		{true, true}, {false, false},
		{int64(1), true}, {int64(-1), true}, {int64(0), false},
		{uint64(0), false}, {uint64(1 << 63), true},
		{float32(0), false}, {float32(0.5), true},
		{float64(0), false}, {0.5, true},
		{"t", true}, {"true", true}, {"yes", true}, {"on", true}, {"1", true}, {"primary", true}, {"", true},
		{"f", false}, {"F", false}, {"false", false}, {"FALSE", false}, {" false\n", false},
		{"0", false}, {"no", false}, {"No", false}, {"off", false}, {"OFF", false},
		{"0.00", false}, {"-0", false}, {"0e10", false}, {"0.01", true},
		{[]byte("f"), false}, {[]byte("0.000"), false}, {[]byte("1.5"), true}, {[]byte("ON"), true},
		{time.Unix(0, 0), true},
	} {
		if got := truthy(tc.v); got != tc.want {
			t.Errorf("truthy(%#v) = %v", tc.v, got)
		}
	}
}

func TestClassifyMySQL(t *testing.T) {
	ctx := context.Background()
	server := func(n uint16) error { return &gomysql.MySQLError{Number: n, Message: "test"} }
	for _, tc := range []struct {
		err   error
		query bool
		want  probes.Reason
	}{
		{server(1045), false, probes.ReasonAuth},
		{server(1044), false, probes.ReasonAuth},
		{server(1698), false, probes.ReasonAuth},
		{server(1251), false, probes.ReasonAuth},
		{server(1130), false, probes.ReasonAuth},
		{server(1862), false, probes.ReasonAuth},
		{server(4151), false, probes.ReasonAuth},
		{server(1049), false, probes.ReasonDBMissing},
		{server(1040), false, probes.ReasonTooManyConnections},
		{server(1203), false, probes.ReasonTooManyConnections},
		{server(1226), false, probes.ReasonTooManyConnections},
		{server(1053), false, probes.ReasonUnavailable},
		{server(1053), true, probes.ReasonUnavailable},
		{server(1927), true, probes.ReasonUnavailable},
		{server(1047), true, probes.ReasonUnavailable},
		{server(3032), false, probes.ReasonUnavailable},
		{server(1969), true, probes.ReasonTimeout},
		{server(3024), true, probes.ReasonTimeout},
		{server(1043), false, probes.ReasonProtocol},
		{server(1064), true, probes.ReasonQueryError}, // syntax
		{server(1146), true, probes.ReasonQueryError}, // no such table
		{server(1205), true, probes.ReasonQueryError}, // lock wait timeout: this query's
		{server(1290), true, probes.ReasonQueryError}, // --read-only
		{server(1105), false, probes.ReasonError},
		{fmt.Errorf("wrapped: %w", server(1045)), false, probes.ReasonAuth},
		{gomysql.ErrInvalidConn, true, probes.ReasonReset},
		{driver.ErrBadConn, false, probes.ReasonReset},
		{gomysql.ErrMalformPkt, false, probes.ReasonProtocol},
		{gomysql.ErrPktSync, true, probes.ReasonProtocol},
		{gomysql.ErrOldProtocol, false, probes.ReasonProtocol},
		{&strconv.NumError{Func: "ParseInt", Num: "x", Err: strconv.ErrSyntax}, true, probes.ReasonProtocol},
		{gomysql.ErrCleartextPassword, false, probes.ReasonAuth},
		{gomysql.ErrUnknownPlugin, false, probes.ReasonAuth},
		{gomysql.ErrOldPassword, false, probes.ReasonAuth},
		{io.EOF, false, probes.ReasonReset},
		{syscall.ECONNRESET, true, probes.ReasonReset},
		{syscall.ECONNREFUSED, false, probes.ReasonRefused},
		{errors.New("something"), true, probes.ReasonQueryError},
		{errors.New("something"), false, probes.ReasonError},
		{&streamError{probes.ReasonProtocol, "not mysql"}, false, probes.ReasonProtocol},
		{&streamError{probes.ReasonAuth, "cleartext"}, false, probes.ReasonAuth},
		{&tlsPhaseError{errors.New("no TLS")}, false, probes.ReasonTLS},
		{&tlsPhaseError{io.EOF}, false, probes.ReasonTLS},
	} {
		if got := classify(ctx, tc.err, tc.query); got != tc.want {
			t.Errorf("classify(%v, query=%v) = %s, want %s", tc.err, tc.query, got, tc.want)
		}
	}
	// Once the probe's context has ended, whatever the error is, it is a
	// timeout or a cancellation.
	expired, cancel := context.WithTimeout(ctx, 0)
	defer cancel()
	if got := classify(expired, server(1045), false); got != probes.ReasonAuth {
		t.Errorf("a server's error after the deadline: %s", got)
	}
	if got := classify(expired, gomysql.ErrInvalidConn, true); got != probes.ReasonTimeout {
		t.Errorf("a lost connection after the deadline: %s", got)
	}
}

func TestMySQLConnectionErrors(t *testing.T) {
	for _, mode := range []TLSMode{TLSDisable, TLSRequire} {
		t.Run(string(mode), func(t *testing.T) {
			p := newMy(t, Config{TLSMode: mode})
			wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), refusedTarget(t, "tcp6", "::1")), probes.Failure, probes.ReasonRefused)

			const timeout = 300 * time.Millisecond
			res := p.Probe(ctxTimeout(t, timeout), silentListener(t, "tcp4", "127.0.0.1"))
			wantReason(t, res, probes.Failure, probes.ReasonTimeout)
			if res.Latency < timeout/2 || res.Latency > timeout+5*time.Second {
				t.Errorf("latency %v for a %v deadline", res.Latency, timeout)
			}

			// A server that speaks first, but not MySQL: an SMTP
			// greeting reads as a header claiming 3 MB.
			l := listen(t, "tcp4", "127.0.0.1")
			serve(t, l, func(c net.Conn) {
				_, _ = c.Write([]byte("220 mail.example.test ESMTP\r\n"))
				c.Close()
			})
			res = p.Probe(ctxTimeout(t, 5*time.Second), targetOf(t, l))
			wantReason(t, res, probes.Failure, probes.ReasonProtocol)
			if !strings.Contains(res.Message, "not a MySQL server?") {
				t.Errorf("message %q", res.Message)
			}

			// A server that closes at once.
			l = listen(t, "tcp4", "127.0.0.1")
			serve(t, l, func(c net.Conn) { c.Close() })
			wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), targetOf(t, l)), probes.Failure, probes.ReasonReset)
		})
	}
}

func TestMySQLBackend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend *myBackend
		cfg     Config
		want    probes.Reason
		message string
	}{
		{"true", &myBackend{column: &myColumn{0x08, text("1")}}, Config{}, probes.ReasonOK, "query returned 1"},
		{"false", &myBackend{column: &myColumn{0x08, text("0")}}, Config{}, probes.ReasonQueryFalse, "mysql: query returned 0"},
		{"NULL", &myBackend{column: &myColumn{0xfd, nil}}, Config{}, probes.ReasonQueryFalse, "mysql: query returned NULL"},
		{"text", &myBackend{column: &myColumn{0xfd, text("primary")}}, Config{}, probes.ReasonOK, `query returned "primary"`},
		{"text OFF", &myBackend{column: &myColumn{0xfd, text("OFF")}}, Config{}, probes.ReasonQueryFalse, `mysql: query returned "OFF"`},
		{"decimal zero", &myBackend{column: &myColumn{0xf6, text("0.00")}}, Config{}, probes.ReasonQueryFalse, `mysql: query returned "0.00"`},
		{"double", &myBackend{column: &myColumn{0x05, text("0.5")}}, Config{}, probes.ReasonOK, "query returned 0.5"},
		{"BIT zero", &myBackend{column: &myColumn{0x10, text("\x00")}}, Config{}, probes.ReasonQueryFalse, "mysql: query returned 0"},
		{"BIT one", &myBackend{column: &myColumn{0x10, text("\x01")}}, Config{}, probes.ReasonOK, "query returned 1"},
		{"integer that is not one", &myBackend{column: &myColumn{0x08, text("x")}}, Config{}, probes.ReasonProtocol, ""},
		{"three rows", &myBackend{column: &myColumn{0x01, text("1")}, rows: 3}, Config{}, probes.ReasonOK, "query returned 1"},
		{"EOF packets", &myBackend{column: &myColumn{0x01, text("0")}, rows: 2, oldEOF: true}, Config{}, probes.ReasonQueryFalse, ""},
		{"no result set", &myBackend{}, Config{Query: "DO 1"}, probes.ReasonOK, "query returned no row"},
		{"native password", &myBackend{password: "right", column: &myColumn{0x08, text("1")}}, Config{Password: "right"}, probes.ReasonOK, "query returned 1"},
		{"wrong native password", &myBackend{password: "right"}, Config{Password: "wrong"}, probes.ReasonAuth,
			"mysql: connect: authentication failed (error 1045, SQLSTATE 28000): Access denied for user (using password: YES)"},
		{"cleartext password allowed", &myBackend{password: "right", switchTo: "mysql_clear_password", column: &myColumn{0x08, text("1")}}, Config{Password: "right", AllowCleartextPassword: true}, probes.ReasonOK, "query returned 1"},
		{"cleartext password refused", &myBackend{password: "right", switchTo: "mysql_clear_password"}, Config{Password: "right"}, probes.ReasonAuth, ""},
		{"unknown method", &myBackend{switchTo: "auth_gssapi_client"}, Config{Password: "x"}, probes.ReasonAuth, ""},
		{"missing database", &myBackend{loginErr: 1049}, Config{}, probes.ReasonDBMissing,
			"mysql: connect: the database does not exist (error 1049, SQLSTATE 42000): refused by the test server"},
		{"too many connections", &myBackend{greetingErr: 1040}, Config{}, probes.ReasonTooManyConnections, ""},
		{"shutting down", &myBackend{greetingErr: 1053}, Config{}, probes.ReasonUnavailable, ""},
		{"query error", &myBackend{queryErr: 1146}, Config{}, probes.ReasonQueryError,
			"mysql: query: the query failed (error 1146, SQLSTATE HY000): query failed in the test server"},
		{"statement timeout", &myBackend{queryErr: 1969}, Config{}, probes.ReasonTimeout, ""},
		{"killed", &myBackend{queryErr: 1927}, Config{}, probes.ReasonUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.backend.start(t)
			tc.cfg.DBName, tc.cfg.User = "app", "prober"
			res := newMy(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			t.Log(res)
			if res.Reason != tc.want || (tc.message != "" && res.Message != tc.message) {
				t.Fatalf("got %v, want %s: %s", res, tc.want, tc.message)
			}
			wantReason(t, res, res.Status, tc.want)
			conns, user, db, query, _, _ := tc.backend.snapshot()
			if conns != 1 {
				t.Errorf("%d connections, want 1", conns)
			}
			if tc.backend.greetingErr == 0 && (user != "prober" || db != "app") {
				t.Errorf("user %q, database %q", user, db)
			}
			if want := tc.cfg.Query; res.Passed() && want != "" && query != want {
				t.Errorf("query %q, want %q", query, want)
			}
			if res.Passed() {
				tc.backend.mu.Lock()
				name := tc.backend.attrs["program_name"]
				tc.backend.mu.Unlock()
				if name != "swh-probe" {
					t.Errorf("program_name %q", name)
				}
			}
		})
	}
}

// waitEnded waits for the backend's session to end and returns how.
func waitEnded(t *testing.T, b *myBackend) (password, ended string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, _, _, _, password, ended := b.snapshot()
		if ended != "" {
			return password, ended
		}
		if time.Now().After(deadline) {
			t.Fatal("the session is still open")
		}
	}
}

func TestMySQLQueryTimeout(t *testing.T) {
	backend := &myBackend{stall: true}
	target := backend.start(t)
	const timeout = 300 * time.Millisecond
	res := newMy(t, Config{}).Probe(ctxTimeout(t, timeout), target)
	wantReason(t, res, probes.Failure, probes.ReasonTimeout)
	if res.Latency < timeout/2 || res.Latency > timeout+5*time.Second {
		t.Errorf("latency %v for a %v deadline", res.Latency, timeout)
	}
	// The probe closed its connection, and opened no other.
	if _, ended := waitEnded(t, backend); ended != "eof" && !strings.Contains(ended, "reset") {
		t.Errorf("the session ended with %q", ended)
	}
	if conns, _, _, _, _, _ := backend.snapshot(); conns != 1 {
		t.Errorf("%d connections", conns)
	}
}

func TestMySQLCanceled(t *testing.T) {
	backend := &myBackend{stall: true}
	target := backend.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	res := newMy(t, Config{}).Probe(ctx, target)
	wantReason(t, res, probes.Failure, probes.ReasonCanceled)
	if res.Latency > 30*time.Second {
		t.Errorf("the canceled probe took %v", res.Latency)
	}
}

func TestMySQLTLS(t *testing.T) {
	serverCA := newCA(t, "server CA")
	otherCA := newCA(t, "other CA")
	clientCA := newCA(t, "client CA")
	serverCert, _, _ := serverCA.Issue(t, "db.example.test", "127.0.0.1")
	_, clientPEM, clientKey := clientCA.Issue(t, "prober")
	clientPool := x509.NewCertPool()
	clientPool.AddCert(clientCA.Cert)

	for _, tc := range []struct {
		name       string
		clientAuth tls.ClientAuthType
		cfg        Config
		want       probes.Reason
		sni        string
	}{
		{"require", 0, Config{TLSMode: TLSRequire}, probes.ReasonOK, ""},
		{"require with the CA", 0, Config{TLSMode: TLSRequire, CACert: serverCA.PEM}, probes.ReasonOK, ""},
		{"require with another CA", 0, Config{TLSMode: TLSRequire, CACert: otherCA.PEM}, probes.ReasonTLS, ""},
		{"verify-ca", 0, Config{TLSMode: TLSVerifyCA, CACert: serverCA.PEM, ServerName: "any.example.test"}, probes.ReasonOK, "any.example.test"},
		{"verify-ca with another CA", 0, Config{TLSMode: TLSVerifyCA, CACert: otherCA.PEM}, probes.ReasonTLS, ""},
		{"verify-full by name", 0, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM, ServerName: "db.example.test"}, probes.ReasonOK, "db.example.test"},
		{"verify-full by IP", 0, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM}, probes.ReasonOK, ""},
		{"verify-full wrong name", 0, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM, ServerName: "other.example.test"}, probes.ReasonTLS, "other.example.test"},
		{"verify-full system roots", 0, Config{TLSMode: TLSVerifyFull, ServerName: "db.example.test"}, probes.ReasonTLS, "db.example.test"},
		{"client certificate", tls.RequireAndVerifyClientCert, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM, ClientCert: clientPEM, ClientKey: clientKey}, probes.ReasonOK, ""},
		{"client certificate missing", tls.RequireAndVerifyClientCert, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM}, probes.ReasonTLS, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &myBackend{
				tls:      &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tc.clientAuth, ClientCAs: clientPool},
				password: "secret",
				column:   &myColumn{0x08, text("1")},
			}
			target := backend.start(t)
			tc.cfg.Password = "secret"
			res := newMy(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			t.Log(res)
			if res.Reason != tc.want {
				t.Fatalf("got %v, want %s", res, tc.want)
			}
			_, ended := waitEnded(t, backend)
			backend.mu.Lock()
			defer backend.mu.Unlock()
			if res.Passed() && ended != "quit" {
				t.Errorf("the session ended with %q", ended)
			}
			if res.Passed() && backend.sni != tc.sni {
				t.Errorf("SNI %q, want %q", backend.sni, tc.sni)
			}
			if tc.cfg.ClientCert != nil && res.Passed() && (len(backend.peer) == 0 || backend.peer[0].Subject.CommonName != "prober") {
				t.Errorf("the server did not get the client certificate")
			}
			if !res.Passed() && backend.user != "" {
				t.Errorf("the server got the login of %q", backend.user)
			}
		})
	}

	// A server without TLS: the login is not sent in clear.
	backend := &myBackend{column: &myColumn{0x08, text("1")}}
	res := newMy(t, Config{TLSMode: TLSRequire}).Probe(ctxTimeout(t, 5*time.Second), backend.start(t))
	wantReason(t, res, probes.Failure, probes.ReasonTLS)
	if !strings.Contains(res.Message, "does not accept TLS") {
		t.Errorf("message %q", res.Message)
	}
	if _, ended := waitEnded(t, backend); !strings.HasPrefix(ended, "no handshake response") {
		t.Errorf("the session ended with %q", ended)
	}
}

// TestMySQLCleartextPassword checks that the password goes to a server
// asking for it in clear text only when the server is verified, or when
// allowed explicitly; and that it is not sent otherwise.
func TestMySQLCleartextPassword(t *testing.T) {
	serverCA := newCA(t, "server CA")
	serverCert, _, _ := serverCA.Issue(t, "db.example.test", "127.0.0.1")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}}
	for _, tc := range []struct {
		name string
		tls  bool
		cfg  Config
		want probes.Reason
	}{
		{"disable", false, Config{TLSMode: TLSDisable}, probes.ReasonAuth},
		{"disable, allowed", false, Config{TLSMode: TLSDisable, AllowCleartextPassword: true}, probes.ReasonOK},
		{"require without CA", true, Config{TLSMode: TLSRequire}, probes.ReasonAuth},
		{"require with CA", true, Config{TLSMode: TLSRequire, CACert: serverCA.PEM}, probes.ReasonOK},
		{"verify-ca", true, Config{TLSMode: TLSVerifyCA, CACert: serverCA.PEM}, probes.ReasonOK},
		{"verify-full", true, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM}, probes.ReasonOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &myBackend{password: "s3cret", switchTo: "mysql_clear_password", column: &myColumn{0x08, text("1")}}
			if tc.tls {
				backend.tls = serverTLS
			}
			target := backend.start(t)
			tc.cfg.Password = "s3cret"
			res := newMy(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			t.Log(res)
			if res.Reason != tc.want {
				t.Fatalf("got %v, want %s", res, tc.want)
			}
			password, ended := waitEnded(t, backend)
			if refused := tc.want != probes.ReasonOK; refused != (ended == "no password") || refused == (password == "s3cret") {
				t.Errorf("the session ended with %q, the server got the password %q", ended, password)
			}
			if tc.want == probes.ReasonAuth && !strings.Contains(res.Message, "mysql_clear_password") {
				t.Errorf("message %q does not say why", res.Message)
			}
		})
	}
}

// TestMySQLFullAuthentication: caching_sha2_password's full
// authentication sends the password encrypted with a key the server
// supplies, or over TLS as it is; the prober takes part only with a
// verified server (or when allowed), as for a password in clear.
func TestMySQLFullAuthentication(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	serverCA := newCA(t, "server CA")
	serverCert, _, _ := serverCA.Issue(t, "127.0.0.1")
	for _, tc := range []struct {
		name string
		cfg  Config
		want probes.Reason
	}{
		{"disable", Config{TLSMode: TLSDisable}, probes.ReasonAuth},
		{"require", Config{TLSMode: TLSRequire}, probes.ReasonAuth},
		{"disable, allowed", Config{TLSMode: TLSDisable, AllowCleartextPassword: true}, probes.ReasonOK},
		// Over TLS, the password itself goes, as MySQL expects there.
		{"require, allowed", Config{TLSMode: TLSRequire, AllowCleartextPassword: true}, probes.ReasonOK},
		{"verify-full", Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM}, probes.ReasonOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &myBackend{plugin: "caching_sha2_password", fullAuth: key, password: "s3cret", column: &myColumn{0x08, text("1")}}
			if tc.cfg.TLSMode != TLSDisable {
				backend.tls = &tls.Config{Certificates: []tls.Certificate{serverCert}}
			}
			target := backend.start(t)
			tc.cfg.Password = "s3cret"
			res := newMy(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			t.Log(res)
			if res.Reason != tc.want {
				t.Fatalf("got %v, want %s", res, tc.want)
			}
			password, ended := waitEnded(t, backend)
			if tc.want == probes.ReasonOK && (password != "s3cret" || ended != "quit") {
				t.Errorf("the server got %q and the session ended with %q", password, ended)
			}
			if tc.want != probes.ReasonOK && (password != "" || ended != "no password") {
				t.Errorf("the server got %q and the session ended with %q", password, ended)
			}
		})
	}
}

// TestMySQLDialer checks that the injected dialer opens the one
// connection, to the bracketed IPv6 address.
func TestMySQLDialer(t *testing.T) {
	var addresses []string
	d := dialerFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
		addresses = append(addresses, network+" "+address)
		return nil, errors.New("no network here")
	})
	res := newMy(t, Config{Dialer: d}).Probe(context.Background(), probes.Target{Host: "::1", Port: 3306})
	wantReason(t, res, probes.Failure, probes.ReasonError)
	if len(addresses) != 1 || addresses[0] != "tcp [::1]:3306" {
		t.Errorf("dialed %q", addresses)
	}
	res = newMy(t, Config{Dialer: d}).Probe(context.Background(), probes.Target{Host: "a/b", Port: 3306})
	wantReason(t, res, probes.Failure, probes.ReasonInvalidTarget)
}

// TestMySQLConcurrent runs probes of one Prober at once against several
// servers: it holds no per-probe state.
func TestMySQLConcurrent(t *testing.T) {
	p := newMy(t, Config{Password: "pw"})
	good := (&myBackend{password: "pw", column: &myColumn{0x08, text("1")}}).start(t)
	bad := (&myBackend{password: "other"}).start(t)
	done := make(chan probes.Result, 20)
	for i := range cap(done) {
		target := good
		if i%2 == 1 {
			target = bad
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			res := p.Probe(ctx, target)
			if (target == good) != res.Passed() {
				res.Message = "unexpected: " + res.Message
			}
			done <- res
		}()
	}
	for range cap(done) {
		if res := <-done; strings.HasPrefix(res.Message, "unexpected") {
			t.Error(res)
		}
	}
}

// TestMySQLSHA256OverTLS: sha256_password over TLS is refused before the
// login, with a reason to act upon, not tried and denied.
func TestMySQLSHA256OverTLS(t *testing.T) {
	serverCA := newCA(t, "server CA")
	serverCert, _, _ := serverCA.Issue(t, "127.0.0.1")
	backend := &myBackend{plugin: "sha256_password", password: "s3cret", tls: &tls.Config{Certificates: []tls.Certificate{serverCert}}}
	target := backend.start(t)
	res := newMy(t, Config{TLSMode: TLSVerifyFull, CACert: serverCA.PEM, Password: "s3cret"}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantReason(t, res, probes.Failure, probes.ReasonAuth)
	if !strings.Contains(res.Message, "sha256_password over TLS") {
		t.Errorf("message %q does not say why", res.Message)
	}
}
