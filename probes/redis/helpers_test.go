package redis

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testca"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// Every test talks to 127.0.0.1 only, and must leave no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// dialerFunc is a probes.Dialer made of a function.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

func newCA(t testing.TB, name string) *testca.CA { return testca.New(t, name) }

func newProber(t testing.TB, cfg Config) *Prober {
	t.Helper()
	if cfg.TLSMode == "" {
		cfg.TLSMode = TLSDisable
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

func wantReason(t testing.TB, got probes.Result, status probes.Status, reason probes.Reason) {
	t.Helper()
	if got.Status != status || got.Reason != reason {
		t.Fatalf("got %v, want %s (%s)", got, status, reason)
	}
	if got.Message == "" {
		t.Errorf("result has no message: %#v", got)
	}
	if (got.Err == nil) != (status == probes.Success) {
		t.Errorf("Err = %v for a %s", got.Err, status)
	}
}

// wantResult checks a result's reason (its status follows) and that its
// message holds every one of parts.
func wantResult(t testing.TB, got probes.Result, reason probes.Reason, parts ...string) {
	t.Helper()
	status := probes.Failure
	if reason == probes.ReasonOK {
		status = probes.Success
	}
	wantReason(t, got, status, reason)
	for _, part := range parts {
		if !strings.Contains(got.Message, part) {
			t.Errorf("message %q does not hold %q", got.Message, part)
		}
	}
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context { return testnet.Context(t, d) }

// fakeRedis is a minimal Redis server: enough of RESP2 to exercise the
// prober (AUTH, PING, ROLE, INFO, error answers, TLS) on loopback. Tests
// against a real redis-server live in the test module.
type fakeRedis struct {
	tls      *tls.Config       // nil: plain TCP
	user     string            // an ACL user besides the default one
	password string            // "": no AUTH needed
	role     []byte            // ROLE's answer; nil: a master without replicas
	info     string            // INFO replication's text
	errors   map[string]string // error answers, by command
	greeting string            // sent on accepting, before any command

	mu       sync.Mutex
	conns    int
	commands [][]string // every command received, in order
	sni      string
	peer     int // client certificates of the last TLS session
}

// start serves on loopback until the test ends.
func (s *fakeRedis) start(t testing.TB) probes.Target {
	t.Helper()
	l := testnet.Listen(t, "tcp4", "127.0.0.1")
	var wg sync.WaitGroup
	// Registered first, run last: once the accept loop has ended.
	t.Cleanup(wg.Wait)
	testnet.Serve(t, l, func(c net.Conn) {
		s.mu.Lock()
		s.conns++
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			s.session(c)
		}()
	})
	return probes.TargetFrom(testnet.AddrPort(t, l))
}

func (s *fakeRedis) session(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var conn net.Conn = c
	if s.tls != nil {
		tc := tls.Server(c, s.tls)
		if err := tc.Handshake(); err != nil {
			return
		}
		state := tc.ConnectionState()
		s.mu.Lock()
		s.sni, s.peer = state.ServerName, len(state.PeerCertificates)
		s.mu.Unlock()
		conn = tc
	}
	if s.greeting != "" {
		_, _ = conn.Write([]byte(s.greeting))
		return
	}
	r := newRESPReader(conn)
	authed := s.password == ""
	for {
		v, err := r.readValue()
		if err != nil || v.typ != typeArray || len(v.elems) == 0 {
			return
		}
		args := make([]string, len(v.elems))
		for i, e := range v.elems {
			args[i] = e.str
		}
		s.mu.Lock()
		s.commands = append(s.commands, args)
		s.mu.Unlock()
		name := strings.ToUpper(args[0])
		var answer string
		switch {
		case s.errors[name] != "":
			answer = "-" + s.errors[name] + "\r\n"
		case name == "AUTH":
			answer, authed = s.auth(args[1:])
		case !authed:
			answer = "-NOAUTH Authentication required.\r\n"
		case name == "PING":
			answer = "+PONG\r\n"
		case name == "ROLE" && s.role == nil:
			answer = masterRole()
		case name == "ROLE":
			answer = string(s.role)
		case name == "INFO":
			answer = bulk(s.info)
		default:
			answer = "-ERR unknown command '" + args[0] + "'\r\n"
		}
		if _, err := conn.Write([]byte(answer)); err != nil {
			return
		}
	}
}

func (s *fakeRedis) auth(args []string) (string, bool) {
	if s.password == "" {
		return "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n", true
	}
	ok := len(args) == 1 && args[0] == s.password ||
		len(args) == 2 && (args[0] == "default" || args[0] == s.user) && args[1] == s.password
	if !ok {
		return "-WRONGPASS invalid username-password pair or user is disabled.\r\n", false
	}
	return "+OK\r\n", true
}

// snapshot returns the connections and commands the server saw.
func (s *fakeRedis) snapshot() (int, [][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns, slices.Clone(s.commands)
}

func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// masterRole is ROLE's answer on a master with replicas (ip:port).
func masterRole(replicas ...string) string {
	out := "*3\r\n" + bulk("master") + ":3129659\r\n*" + strconv.Itoa(len(replicas)) + "\r\n"
	for _, r := range replicas {
		host, port, _ := strings.Cut(r, ":")
		out += "*3\r\n" + bulk(host) + bulk(port) + bulk("3129543")
	}
	return out
}

// replicaRole is ROLE's answer on a replica of host:port in state.
func replicaRole(host string, port int, state string) string {
	return "*5\r\n" + bulk("slave") + bulk(host) + ":" + strconv.Itoa(port) + "\r\n" + bulk(state) + ":3167038\r\n"
}

// replicaInfo is INFO replication on a replica, as Redis 7.0 writes it.
func infoText(link string, syncing, lastIO, read, processed int) string {
	return "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n" +
		"master_link_status:" + link + "\r\n" +
		"master_last_io_seconds_ago:" + strconv.Itoa(lastIO) + "\r\n" +
		"master_sync_in_progress:" + strconv.Itoa(syncing) + "\r\n" +
		"slave_read_repl_offset:" + strconv.Itoa(read) + "\r\n" +
		"slave_repl_offset:" + strconv.Itoa(processed) + "\r\n" +
		"slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\n" +
		"master_failover_state:no-failover\r\nmaster_replid:8f2b4c9ed6b7c1d0a3f1e2d3c4b5a69788796a5b\r\n" +
		"master_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:3167038\r\n" +
		"second_repl_offset:-1\r\nrepl_backlog_active:1\r\nrepl_backlog_size:1048576\r\n" +
		"repl_backlog_first_byte_offset:1\r\nrepl_backlog_histlen:3167038\r\n"
}
