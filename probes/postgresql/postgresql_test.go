package postgresql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/swh-dev/swh/probes"
)

func newPG(t *testing.T, cfg Config) *Prober {
	t.Helper()
	if cfg.User == "" {
		cfg.User = "probe"
	}
	if cfg.SSLMode == "" {
		cfg.SSLMode = SSLDisable
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPostgreSQLConfigErrors(t *testing.T) {
	ca := newCA(t, "ca")
	_, certPEM, keyPEM := ca.Issue(t, "client")
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no user", Config{SSLMode: SSLDisable}},
		{"no sslmode", Config{User: "u"}},
		{"unknown sslmode", Config{User: "u", SSLMode: "prefer"}},
		{"verify-ca without CA", Config{User: "u", SSLMode: SSLVerifyCA}},
		{"CA garbage", Config{User: "u", SSLMode: SSLVerifyFull, CACert: []byte("garbage")}},
		{"certificate without key", Config{User: "u", SSLMode: SSLRequire, ClientCert: certPEM}},
		{"key without certificate", Config{User: "u", SSLMode: SSLRequire, ClientKey: keyPEM}},
		{"key of another certificate", Config{User: "u", SSLMode: SSLRequire, ClientCert: certPEM, ClientKey: func() []byte { _, _, k := ca.Issue(t, "x"); return k }()}},
		{"NUL in the password", Config{User: "u", SSLMode: SSLDisable, Password: "a\x00b"}},
		{"NUL in the query", Config{User: "u", SSLMode: SSLDisable, Query: "SELECT 1\x00"}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.cfg)
		}
	}
}

// TestSSLModeValidate: the four modes pass; anything else, libpq's allow
// and prefer included, fails with an error naming the value, cut when long.
func TestSSLModeValidate(t *testing.T) {
	long := strings.Repeat("v", 100)
	for _, tc := range []struct {
		mode SSLMode
		want string // "" for valid
	}{
		{SSLDisable, ""}, {SSLRequire, ""}, {SSLVerifyCA, ""}, {SSLVerifyFull, ""},
		{"", "SSL mode is required"},
		{"prefer", `SSL mode "prefer" is not disable, require, verify-ca or verify-full`},
		{"allow", `"allow"`},
		{"VERIFY-FULL", `"VERIFY-FULL"`},
		{"verify-full ", `"verify-full "`},
		{SSLMode(long), `"` + long[:40] + `" is not`},
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
		// New refuses it with the same words.
		if _, newErr := New(Config{User: "u", SSLMode: tc.mode}); newErr == nil || newErr.Error() != err.Error() {
			t.Errorf("%.50q: New says %v, Validate %v", tc.mode, newErr, err)
		}
	}
}

func TestPostgreSQLOptions(t *testing.T) {
	p := newPG(t, Config{User: "probe", Password: "secret", SSLMode: SSLVerifyFull})
	cfg := p.pqConfig(probes.Target{Host: "::1", Port: 6432}, 1500*time.Microsecond)
	if cfg.Host != "::1" || cfg.Port != 6432 || cfg.Database != "postgres" || cfg.User != "probe" || cfg.Password != "secret" {
		t.Errorf("connection fields %+v", cfg)
	}
	if cfg.ApplicationName != "swh-probe" {
		t.Errorf("application_name %q", cfg.ApplicationName)
	}
	// TLS is negotiated by the prober's dialer, so pq must not try again.
	if cfg.SSLMode != pq.SSLModeDisable {
		t.Errorf("sslmode %q", cfg.SSLMode)
	}
	if cfg.ConnectTimeout != 1500*time.Microsecond || cfg.Runtime["statement_timeout"] != "2" {
		t.Errorf("connect_timeout %v, statement_timeout %q", cfg.ConnectTimeout, cfg.Runtime["statement_timeout"])
	}
	if p.query != "SELECT 1" {
		t.Errorf("default query %q", p.query)
	}
	for d, want := range map[time.Duration]int64{
		0: 1, time.Nanosecond: 1, time.Millisecond: 1, 1001 * time.Microsecond: 2, 2 * time.Second: 2000,
	} {
		if got := timeoutMillis(d); got != want {
			t.Errorf("timeoutMillis(%v) = %d, want %d", d, got, want)
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
		{float64(0), false}, {0.5, true},
		{"t", true}, {"true", true}, {"yes", true}, {"on", true}, {"1", true}, {"primary", true}, {"", true},
		{"f", false}, {"F", false}, {"false", false}, {"FALSE", false}, {" false\n", false},
		{"0", false}, {"no", false}, {"No", false}, {"off", false}, {"OFF", false},
		{"0.00", false}, {"-0", false}, {"0.01", true},
		{[]byte("f"), false}, {[]byte("0.000"), false}, {[]byte("1.5"), true},
		{time.Unix(0, 0), true},
	} {
		if got := truthy(tc.v); got != tc.want {
			t.Errorf("truthy(%#v) = %v", tc.v, got)
		}
	}
}

func TestClassifyPostgres(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err   error
		query bool
		want  probes.Reason
	}{
		{&pq.Error{Code: "28P01"}, false, probes.ReasonAuth},
		{&pq.Error{Code: "28000"}, false, probes.ReasonAuth},
		{&pq.Error{Code: "3D000"}, false, probes.ReasonDBMissing},
		{&pq.Error{Code: "53300"}, false, probes.ReasonTooManyConnections},
		{&pq.Error{Code: "57P03"}, false, probes.ReasonUnavailable},
		{&pq.Error{Code: "57P01"}, true, probes.ReasonUnavailable},
		{&pq.Error{Code: "57014"}, true, probes.ReasonTimeout},
		{&pq.Error{Code: "42601"}, true, probes.ReasonQueryError},
		{&pq.Error{Code: "22012"}, true, probes.ReasonQueryError},
		{&pq.Error{Code: "0A000"}, false, probes.ReasonError},
		{fmt.Errorf("wrapped: %w", &pq.Error{Code: "28P01"}), false, probes.ReasonAuth},
		{driver.ErrBadConn, true, probes.ReasonReset},
		{errors.New("pq: unexpected message"), true, probes.ReasonQueryError},
		{errors.New("pq: unknown authentication response"), false, probes.ReasonError},
		{&streamError{probes.ReasonProtocol, "not postgres"}, false, probes.ReasonProtocol},
		{&streamError{probes.ReasonAuth, "cleartext"}, false, probes.ReasonAuth},
		{&tlsPhaseError{errors.New("no TLS")}, false, probes.ReasonTLS},
	} {
		if got := classify(ctx, tc.err, tc.query); got != tc.want {
			t.Errorf("classify(%v, query=%v) = %s, want %s", tc.err, tc.query, got, tc.want)
		}
	}
}

func TestPostgreSQLConnectionErrors(t *testing.T) {
	for _, mode := range []SSLMode{SSLDisable, SSLRequire} {
		t.Run(string(mode), func(t *testing.T) {
			p := newPG(t, Config{SSLMode: mode})
			wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), refusedTarget(t, "tcp6", "::1")), probes.Failure, probes.ReasonRefused)

			const timeout = 300 * time.Millisecond
			res := p.Probe(ctxTimeout(t, timeout), silentListener(t, "tcp4", "127.0.0.1"))
			wantReason(t, res, probes.Failure, probes.ReasonTimeout)
			if res.Latency < timeout/2 || res.Latency > timeout+5*time.Second {
				t.Errorf("latency %v for a %v deadline", res.Latency, timeout)
			}

			// An HTTP server on the port: it answers the startup
			// packet (or the TLS request) with a 400. pq alone would
			// read "HTTP/" as a message header and allocate 1.4 GB.
			l := listen(t, "tcp4", "127.0.0.1")
			serve(t, l, func(c net.Conn) {
				_, _ = c.Read(make([]byte, 1024))
				_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
				c.Close()
			})
			res = p.Probe(ctxTimeout(t, 5*time.Second), targetOf(t, l))
			want := probes.ReasonProtocol
			if mode != SSLDisable {
				want = probes.ReasonTLS // an unexpected answer to the TLS request
			}
			wantReason(t, res, probes.Failure, want)
		})
	}
}

func TestPostgreSQLBackend(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend *pgBackend
		cfg     Config
		want    probes.Reason
		message string
	}{
		{"true", &pgBackend{column: &pgColumn{16, text("t")}}, Config{}, probes.ReasonOK, "query returned true"},
		{"false", &pgBackend{column: &pgColumn{16, text("f")}}, Config{}, probes.ReasonQueryFalse, "postgresql: query returned false"},
		{"NULL", &pgBackend{column: &pgColumn{25, nil}}, Config{}, probes.ReasonQueryFalse, "postgresql: query returned NULL"},
		{"zero", &pgBackend{column: &pgColumn{23, text("0")}}, Config{}, probes.ReasonQueryFalse, "postgresql: query returned 0"},
		{"text", &pgBackend{column: &pgColumn{25, text("primary")}}, Config{}, probes.ReasonOK, `query returned "primary"`},
		{"numeric zero", &pgBackend{column: &pgColumn{1700, text("0.00")}}, Config{}, probes.ReasonQueryFalse, `postgresql: query returned "0.00"`},
		{"no columns", &pgBackend{}, Config{Query: "SET x = 1"}, probes.ReasonOK, "query returned no row"},
		{"MD5 password", &pgBackend{password: "right", md5: true, column: &pgColumn{23, text("1")}}, Config{Password: "right"}, probes.ReasonOK, "query returned 1"},
		{"wrong MD5 password", &pgBackend{password: "right", md5: true}, Config{Password: "wrong"}, probes.ReasonAuth, ""},
		{"cleartext password allowed", &pgBackend{password: "right", column: &pgColumn{23, text("1")}}, Config{Password: "right", AllowCleartextPassword: true}, probes.ReasonOK, "query returned 1"},
		{"wrong cleartext password", &pgBackend{password: "right"}, Config{Password: "wrong", AllowCleartextPassword: true}, probes.ReasonAuth,
			"postgresql: connect: authentication failed (SQLSTATE 28P01): password authentication failed"},
		{"cleartext password refused", &pgBackend{password: "right"}, Config{Password: "right"}, probes.ReasonAuth, ""},
		{"missing database", &pgBackend{fatal: "3D000"}, Config{}, probes.ReasonDBMissing, ""},
		{"too many connections", &pgBackend{fatal: "53300"}, Config{}, probes.ReasonTooManyConnections, ""},
		{"starting up", &pgBackend{fatal: "57P03"}, Config{}, probes.ReasonUnavailable, ""},
		{"query error", &pgBackend{queryError: "42P01"}, Config{}, probes.ReasonQueryError, ""},
		{"statement timeout", &pgBackend{queryError: "57014"}, Config{}, probes.ReasonTimeout, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.backend.start(t)
			tc.cfg.DBName, tc.cfg.User, tc.cfg.ApplicationName = "app", "prober", "my-probe"
			res := newPG(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			if res.Reason != tc.want || (tc.message != "" && res.Message != tc.message) {
				t.Fatalf("got %v, want %s: %s", res, tc.want, tc.message)
			}
			conns, startup, query, _ := tc.backend.snapshot()
			if conns != 1 {
				t.Errorf("%d connections, want 1", conns)
			}
			if startup["user"] != "prober" || startup["database"] != "app" || startup["application_name"] != "my-probe" {
				t.Errorf("startup parameters %v", startup)
			}
			if st := startup["statement_timeout"]; st == "" || st == "0" || len(st) > 4 {
				t.Errorf("statement_timeout %q for a 5s deadline", st)
			}
			if want := tc.cfg.Query; want != "" && query != want {
				t.Errorf("query %q, want %q", query, want)
			}
		})
	}
}

func TestPostgreSQLQueryTimeout(t *testing.T) {
	backend := &pgBackend{stall: true}
	target := backend.start(t)
	const timeout = 300 * time.Millisecond
	res := newPG(t, Config{}).Probe(ctxTimeout(t, timeout), target)
	wantReason(t, res, probes.Failure, probes.ReasonTimeout)
	if res.Latency < timeout/2 || res.Latency > timeout+5*time.Second {
		t.Errorf("latency %v for a %v deadline", res.Latency, timeout)
	}
	// The probe closed its connection, and opened no other to cancel.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conns, _, _, ended := backend.snapshot()
		if ended != "" {
			if conns != 1 || ended != "eof" {
				t.Errorf("%d connections, the session ended with %q", conns, ended)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session is still open")
		}
	}
}

func TestPostgreSQLCanceled(t *testing.T) {
	backend := &pgBackend{stall: true}
	target := backend.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	res := newPG(t, Config{}).Probe(ctx, target)
	wantReason(t, res, probes.Failure, probes.ReasonCanceled)
	if res.Latency > 30*time.Second {
		t.Errorf("the canceled probe took %v", res.Latency)
	}
}

func TestPostgreSQLTLS(t *testing.T) {
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
		{"require", 0, Config{SSLMode: SSLRequire}, probes.ReasonOK, ""},
		{"require with the CA", 0, Config{SSLMode: SSLRequire, CACert: serverCA.PEM}, probes.ReasonOK, ""},
		{"require with another CA", 0, Config{SSLMode: SSLRequire, CACert: otherCA.PEM}, probes.ReasonTLS, ""},
		{"verify-ca", 0, Config{SSLMode: SSLVerifyCA, CACert: serverCA.PEM, ServerName: "any.example.test"}, probes.ReasonOK, "any.example.test"},
		{"verify-ca with another CA", 0, Config{SSLMode: SSLVerifyCA, CACert: otherCA.PEM}, probes.ReasonTLS, ""},
		{"verify-full by name", 0, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM, ServerName: "db.example.test"}, probes.ReasonOK, "db.example.test"},
		{"verify-full by IP", 0, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM}, probes.ReasonOK, ""},
		{"verify-full wrong name", 0, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM, ServerName: "other.example.test"}, probes.ReasonTLS, "other.example.test"},
		{"verify-full system roots", 0, Config{SSLMode: SSLVerifyFull, ServerName: "db.example.test"}, probes.ReasonTLS, "db.example.test"},
		{"client certificate", tls.RequireAndVerifyClientCert, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM, ClientCert: clientPEM, ClientKey: clientKey}, probes.ReasonOK, ""},
		{"client certificate missing", tls.RequireAndVerifyClientCert, Config{SSLMode: SSLVerifyFull, CACert: serverCA.PEM}, probes.ReasonTLS, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend := &pgBackend{
				tls:    &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tc.clientAuth, ClientCAs: clientPool},
				column: &pgColumn{16, text("t")},
			}
			target := backend.start(t)
			res := newPG(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), target)
			if res.Reason != tc.want {
				t.Fatalf("got %v, want %s", res, tc.want)
			}
			backend.mu.Lock()
			defer backend.mu.Unlock()
			if res.Passed() && backend.sni != tc.sni {
				t.Errorf("SNI %q, want %q", backend.sni, tc.sni)
			}
			if tc.cfg.ClientCert != nil && res.Passed() && (len(backend.peer) == 0 || backend.peer[0].Subject.CommonName != "prober") {
				t.Errorf("the server did not get the client certificate")
			}
		})
	}

	// A server without TLS.
	backend := &pgBackend{column: &pgColumn{16, text("t")}}
	res := newPG(t, Config{SSLMode: SSLRequire}).Probe(ctxTimeout(t, 5*time.Second), backend.start(t))
	wantReason(t, res, probes.Failure, probes.ReasonTLS)
	if !strings.Contains(res.Message, "does not accept TLS") {
		t.Errorf("message %q", res.Message)
	}
}

// TestPostgreSQLDialer checks that the injected dialer opens the one
// connection, to the bracketed IPv6 address.
func TestPostgreSQLDialer(t *testing.T) {
	var addresses []string
	d := dialerFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
		addresses = append(addresses, network+" "+address)
		return nil, errors.New("no network here")
	})
	res := newPG(t, Config{Dialer: d}).Probe(context.Background(), probes.Target{Host: "::1", Port: 5432})
	wantReason(t, res, probes.Failure, probes.ReasonError)
	if len(addresses) != 1 || addresses[0] != "tcp [::1]:5432" {
		t.Errorf("dialed %q", addresses)
	}
}
