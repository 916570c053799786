package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// TestRedisConfig: New refuses every configuration that cannot work, with
// an error saying why, and takes the others.
func TestRedisConfig(t *testing.T) {
	ca := newCA(t, "CA")
	_, certPEM, keyPEM := ca.Issue(t, "client")
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string // "" when New takes it
	}{
		{"disable", Config{TLSMode: TLSDisable}, ""},
		{"require", Config{TLSMode: TLSRequire}, ""},
		{"verify-ca", Config{TLSMode: TLSVerifyCA, CACert: ca.PEM}, ""},
		{"verify-full, system roots", Config{TLSMode: TLSVerifyFull}, ""},
		{"verify-full, client certificate", Config{TLSMode: TLSVerifyFull, CACert: ca.PEM, ClientCert: certPEM, ClientKey: keyPEM, ServerName: "redis.test"}, ""},
		{"roles and lag", Config{TLSMode: TLSDisable, Role: RoleReplica, MaxReplicationLag: &ReplicationLag{Bytes: 1, Time: time.Second}}, ""},
		{"password in clear, refused per probe", Config{TLSMode: TLSDisable, Password: "p"}, ""},

		{"no TLS mode", Config{}, "TLS mode is required"},
		{"unknown TLS mode", Config{TLSMode: "prefer"}, `TLS mode "prefer" is not`},
		{"long TLS mode quoted short", Config{TLSMode: TLSMode(strings.Repeat("x", 1000))}, `"` + strings.Repeat("x", 40) + `" is not`},
		{"verify-ca without CA", Config{TLSMode: TLSVerifyCA}, "verify-ca needs CACert"},
		{"CA not PEM", Config{TLSMode: TLSVerifyCA, CACert: []byte("nope")}, "no PEM certificate"},
		{"require with CA", Config{TLSMode: TLSRequire, CACert: ca.PEM}, "does not verify the server"},
		{"disable with CA", Config{TLSMode: TLSDisable, CACert: ca.PEM}, "certificates are set with TLS mode disable"},
		{"disable with server name", Config{TLSMode: TLSDisable, ServerName: "redis.test"}, "ServerName is set with TLS mode disable"},
		{"certificate without key", Config{TLSMode: TLSVerifyFull, ClientCert: certPEM}, "client certificate"},
		{"unknown role", Config{TLSMode: TLSDisable, Role: "primary"}, `role "primary" is not`},
		{"lag without bound", Config{TLSMode: TLSDisable, MaxReplicationLag: &ReplicationLag{}}, "sets no bound"},
		{"negative lag", Config{TLSMode: TLSDisable, MaxReplicationLag: &ReplicationLag{Bytes: -1}}, "must not be negative"},
		{"sub-second lag", Config{TLSMode: TLSDisable, MaxReplicationLag: &ReplicationLag{Time: 500 * time.Millisecond}}, "below a second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("New = %v, %v; want an error holding %q", p, err, tc.err)
			}
		})
	}
}

// TestRedisCommands: the commands each configuration sends, pipelined in
// one write, and the answers it passes on.
func TestRedisCommands(t *testing.T) {
	lag := &ReplicationLag{Time: 20 * time.Second}
	for _, tc := range []struct {
		name string
		cfg  Config
		want [][]string
		msg  string
	}{
		{"PING", Config{}, [][]string{{"PING"}}, "PONG"},
		{"password", Config{Password: "s3cret", AllowCleartextPassword: true}, [][]string{{"AUTH", "s3cret"}, {"PING"}}, "PONG"},
		{"ACL user", Config{User: "probe", Password: "s3cret", AllowCleartextPassword: true}, [][]string{{"AUTH", "probe", "s3cret"}, {"PING"}}, "PONG"},
		{"role", Config{Role: RoleMaster}, [][]string{{"PING"}, {"ROLE"}}, "master with 0 replicas"},
		{"lag", Config{MaxReplicationLag: lag}, [][]string{{"PING"}, {"ROLE"}, {"INFO", "replication"}}, "master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &fakeRedis{password: "s3cret", user: "probe"}
			if tc.cfg.Password == "" {
				srv.password = ""
			}
			res := newProber(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), srv.start(t))
			wantResult(t, res, probes.ReasonOK, tc.msg)
			conns, cmds := srv.snapshot()
			if conns != 1 || !reflect.DeepEqual(cmds, tc.want) {
				t.Errorf("%d connections, commands %q; want 1, %q", conns, cmds, tc.want)
			}
		})
	}
}

// TestRedisCleartextPassword: the password goes only to a verified server,
// or when allowed explicitly; otherwise the probe fails with auth, saying
// why, and does not even connect.
func TestRedisCleartextPassword(t *testing.T) {
	ca := newCA(t, "server CA")
	cert, _, _ := ca.Issue(t, "127.0.0.1")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{cert}}
	for _, tc := range []struct {
		name string
		tls  bool
		cfg  Config
		want probes.Reason
	}{
		{"disable", false, Config{TLSMode: TLSDisable}, probes.ReasonAuth},
		{"disable, allowed", false, Config{TLSMode: TLSDisable, AllowCleartextPassword: true}, probes.ReasonOK},
		{"require", true, Config{TLSMode: TLSRequire}, probes.ReasonAuth},
		{"require, allowed", true, Config{TLSMode: TLSRequire, AllowCleartextPassword: true}, probes.ReasonOK},
		{"verify-ca", true, Config{TLSMode: TLSVerifyCA, CACert: ca.PEM}, probes.ReasonOK},
		{"verify-full", true, Config{TLSMode: TLSVerifyFull, CACert: ca.PEM}, probes.ReasonOK},
		{"ACL user, disable", false, Config{TLSMode: TLSDisable, User: "probe"}, probes.ReasonAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &fakeRedis{password: "s3cret", user: "probe"}
			if tc.tls {
				srv.tls = serverTLS
			}
			tc.cfg.Password = "s3cret"
			res := newProber(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), srv.start(t))
			if tc.want != probes.ReasonOK {
				wantResult(t, res, tc.want, "clear text", "AllowCleartextPassword", "verify-full")
			} else {
				wantResult(t, res, tc.want)
			}
			conns, cmds := srv.snapshot()
			if sent := len(cmds) > 0 && cmds[0][0] == "AUTH"; sent != (tc.want == probes.ReasonOK) || (!sent && conns != 0) {
				t.Errorf("%d connections, commands %q", conns, cmds)
			}
		})
	}
}

// TestRedisAnswers: what each answer of a server makes of a probe.
func TestRedisAnswers(t *testing.T) {
	wrongPass := Config{Password: "wrong", AllowCleartextPassword: true}
	for _, tc := range []struct {
		name string
		srv  *fakeRedis
		cfg  Config
		want probes.Reason
		msg  string
	}{
		{"wrong password", &fakeRedis{password: "s3cret"}, wrongPass, probes.ReasonAuth, "AUTH: authentication failed: WRONGPASS"},
		{"unknown ACL user", &fakeRedis{password: "s3cret"}, Config{User: "nobody", Password: "s3cret", AllowCleartextPassword: true}, probes.ReasonAuth, "WRONGPASS"},
		{"password needed", &fakeRedis{password: "s3cret"}, Config{}, probes.ReasonAuth, "PING: authentication failed: NOAUTH"},
		{"password not configured", &fakeRedis{}, wrongPass, probes.ReasonAuth, "called without any password configured"},
		{"no permission for ROLE", &fakeRedis{errors: map[string]string{"ROLE": "NOPERM this user has no permissions to run the 'role' command"}}, Config{Role: RoleMaster}, probes.ReasonAuth, "NOPERM"},
		{"protected mode", &fakeRedis{errors: map[string]string{"PING": "DENIED Redis is running in protected mode"}}, Config{}, probes.ReasonAuth, "DENIED"},
		{"loading", &fakeRedis{errors: map[string]string{"PING": "LOADING Redis is loading the dataset in memory"}}, Config{Role: RoleMaster}, probes.ReasonUnavailable, "PING: the server is not available"},
		{"stale replica", &fakeRedis{errors: map[string]string{"PING": "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."}}, Config{}, probes.ReasonUnavailable, "MASTERDOWN"},
		{"busy", &fakeRedis{errors: map[string]string{"PING": "BUSY Redis is busy running a script."}}, Config{}, probes.ReasonUnavailable, "BUSY"},
		{"max clients", &fakeRedis{greeting: "-ERR max number of clients reached\r\n"}, wrongPass, probes.ReasonTooManyConnections, "no connection slot left"},
		{"no ROLE command", &fakeRedis{errors: map[string]string{"ROLE": "ERR unknown command 'ROLE', with args beginning with: "}}, Config{Role: RoleReplica}, probes.ReasonQueryError, "ROLE: the command failed: ERR unknown command"},
		{"PING answers OK", &fakeRedis{errors: map[string]string{}, greeting: "+OK\r\n"}, Config{}, probes.ReasonProtocol, "PING answered a simple string, not PONG"},
		{"ROLE answers an integer", &fakeRedis{role: []byte(":1\r\n")}, Config{Role: RoleMaster}, probes.ReasonProtocol, "ROLE answered an integer"},
		{"INFO answers garbage", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected")), info: "nonsense"},
			Config{MaxReplicationLag: &ReplicationLag{Bytes: 10}}, probes.ReasonProtocol, "without a colon"},
		{"closes at once", &fakeRedis{greeting: " "}, Config{}, probes.ReasonReset, "reading the answer to PING"},

		{"master", &fakeRedis{role: []byte(masterRole("10.0.0.2:6379"))}, Config{Role: RoleMaster}, probes.ReasonOK, "master with 1 replica"},
		{"replica wanted, master", &fakeRedis{}, Config{Role: RoleReplica}, probes.ReasonWrongRole, "is a master"},
		{"replica", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected"))}, Config{Role: RoleReplica}, probes.ReasonOK, "replica of 10.0.0.1:6379, link up"},
		{"replica, master wanted", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected"))}, Config{Role: RoleMaster}, probes.ReasonWrongRole, "replica of 10.0.0.1:6379"},
		{"replica link down", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connect"))}, Config{Role: RoleReplica}, probes.ReasonReplicaLinkDown, "down"},
		{"replica in lag", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected")), info: infoText("up", 0, 30, 0, 0)},
			Config{MaxReplicationLag: &ReplicationLag{Time: 20 * time.Second}}, probes.ReasonReplicationLag, "30s ago (bound 20s)"},
		{"replica behind in bytes", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected")), info: infoText("up", 0, 0, 5000, 0)},
			Config{Role: RoleReplica, MaxReplicationLag: &ReplicationLag{Bytes: 4096}}, probes.ReasonReplicationLag, "5000 bytes"},
		{"replica within lag", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected")), info: infoText("up", 0, 1, 10, 0)},
			Config{Role: RoleReplica, MaxReplicationLag: &ReplicationLag{Bytes: 4096, Time: 20 * time.Second}}, probes.ReasonOK, "10 bytes not processed"},
		{"replica syncing", &fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected")), info: infoText("up", 1, 0, 0, 0)},
			Config{MaxReplicationLag: &ReplicationLag{Bytes: 4096}}, probes.ReasonReplicaLinkDown, "syncing"},
		{"sentinel", &fakeRedis{role: []byte("*2\r\n$8\r\nsentinel\r\n*0\r\n")}, Config{Role: RoleMaster}, probes.ReasonWrongRole, "Sentinel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := newProber(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), tc.srv.start(t))
			wantResult(t, res, tc.want, tc.msg)
		})
	}
}

// TestRedisTLS: each mode accepts the servers it should and refuses the
// others with tls.
func TestRedisTLS(t *testing.T) {
	ca, other := newCA(t, "server CA"), newCA(t, "other CA")
	byIP, _, _ := ca.Issue(t, "127.0.0.1")
	byName, _, _ := ca.Issue(t, "redis.test")
	foreign, _, _ := other.Issue(t, "127.0.0.1")
	clientCA := newCA(t, "client CA")
	_, clientCert, clientKey := clientCA.Issue(t, "probe")
	clientPool := x509.NewCertPool()
	clientPool.AddCert(clientCA.Cert)
	serve := func(c tls.Certificate) *tls.Config { return &tls.Config{Certificates: []tls.Certificate{c}} }
	mtls := serve(byIP)
	mtls.ClientAuth, mtls.ClientCAs = tls.RequireAndVerifyClientCert, clientPool
	for _, tc := range []struct {
		name   string
		server *tls.Config // nil: a plain server
		cfg    Config
		want   probes.Reason
		sni    string
	}{
		{"require, any certificate", serve(foreign), Config{TLSMode: TLSRequire}, probes.ReasonOK, ""},
		{"verify-ca", serve(byName), Config{TLSMode: TLSVerifyCA, CACert: ca.PEM}, probes.ReasonOK, ""},
		{"verify-ca, wrong CA", serve(foreign), Config{TLSMode: TLSVerifyCA, CACert: ca.PEM}, probes.ReasonTLS, ""},
		{"verify-ca sends the server name", serve(byName), Config{TLSMode: TLSVerifyCA, CACert: ca.PEM, ServerName: "redis.test"}, probes.ReasonOK, "redis.test"},
		{"verify-full, IP SAN", serve(byIP), Config{TLSMode: TLSVerifyFull, CACert: ca.PEM}, probes.ReasonOK, ""},
		{"verify-full, server name", serve(byName), Config{TLSMode: TLSVerifyFull, CACert: ca.PEM, ServerName: "redis.test"}, probes.ReasonOK, "redis.test"},
		{"verify-full, wrong name", serve(byName), Config{TLSMode: TLSVerifyFull, CACert: ca.PEM, ServerName: "other.test"}, probes.ReasonTLS, ""},
		{"verify-full, no IP SAN", serve(byName), Config{TLSMode: TLSVerifyFull, CACert: ca.PEM}, probes.ReasonTLS, ""},
		{"verify-full, wrong CA", serve(foreign), Config{TLSMode: TLSVerifyFull, CACert: ca.PEM}, probes.ReasonTLS, ""},
		{"client certificate", mtls, Config{TLSMode: TLSVerifyFull, CACert: ca.PEM, ClientCert: clientCert, ClientKey: clientKey}, probes.ReasonOK, ""},
		{"client certificate missing", mtls, Config{TLSMode: TLSVerifyFull, CACert: ca.PEM}, probes.ReasonTLS, ""},
		{"TLS to a plain server", nil, Config{TLSMode: TLSRequire}, probes.ReasonTLS, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &fakeRedis{tls: tc.server}
			res := newProber(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), srv.start(t))
			wantResult(t, res, tc.want)
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if tc.sni != "" && srv.sni != tc.sni {
				t.Errorf("SNI %q, want %q", srv.sni, tc.sni)
			}
			if tc.want == probes.ReasonOK && tc.cfg.ClientCert != nil && srv.peer != 1 {
				t.Errorf("the server saw %d client certificates", srv.peer)
			}
		})
	}
	t.Run("plain to a TLS server", func(t *testing.T) {
		// The TLS server reads the command as a broken ClientHello and
		// closes, or answers with an alert: not RESP either way.
		srv := &fakeRedis{tls: serve(byIP)}
		res := newProber(t, Config{TLSMode: TLSDisable}).Probe(ctxTimeout(t, 5*time.Second), srv.start(t))
		if res.Passed() || (res.Reason != probes.ReasonProtocol && res.Reason != probes.ReasonReset) {
			t.Fatalf("got %v, want a protocol or reset failure", res)
		}
	})
}

// TestRedisNetwork: the connection-level reasons, as probes.Classify gives
// them, with the deadline kept.
func TestRedisNetwork(t *testing.T) {
	p := newProber(t, Config{Role: RoleMaster})
	t.Run("refused", func(t *testing.T) {
		res := p.Probe(ctxTimeout(t, 5*time.Second), probes.TargetFrom(testnet.Refused(t, "tcp4", "127.0.0.1")))
		wantResult(t, res, probes.ReasonRefused, "connecting")
	})
	t.Run("silent", func(t *testing.T) {
		const deadline = 200 * time.Millisecond
		res := p.Probe(ctxTimeout(t, deadline), probes.TargetFrom(testnet.Silent(t, "tcp4", "127.0.0.1")))
		wantResult(t, res, probes.ReasonTimeout, "reading the answer to PING")
		if res.Latency < deadline/2 || res.Latency > deadline+time.Second {
			t.Errorf("latency %v with a %v deadline", res.Latency, deadline)
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		res := p.Probe(ctx, probes.TargetFrom(testnet.Silent(t, "tcp4", "127.0.0.1")))
		wantResult(t, res, probes.ReasonCanceled, "context canceled")
	})
	t.Run("invalid target", func(t *testing.T) {
		wantResult(t, p.Probe(context.Background(), probes.Target{Host: "127.0.0.1", Port: 0}), probes.ReasonInvalidTarget)
	})
	t.Run("dialer error", func(t *testing.T) {
		failing := newProber(t, Config{Dialer: dialerFunc(func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no route to the fixture")
		})})
		wantResult(t, failing.Probe(ctxTimeout(t, time.Second), probes.Target{Host: "redis.test", Port: 6379}), probes.ReasonError, "no route to the fixture")
	})
	t.Run("no deadline", func(t *testing.T) {
		res := p.Probe(context.Background(), probes.TargetFrom(testnet.Silent(t, "tcp4", "127.0.0.1")))
		wantResult(t, res, probes.ReasonTimeout)
		if res.Latency < probes.DefaultTimeout/2 {
			t.Errorf("latency %v, want about probes.DefaultTimeout", res.Latency)
		}
	})
}

// TestRedisConcurrent: one Prober probes several servers at once, each
// result its own server's (run with -race).
func TestRedisConcurrent(t *testing.T) {
	p := newProber(t, Config{Role: RoleMaster})
	master := (&fakeRedis{}).start(t)
	replica := (&fakeRedis{role: []byte(replicaRole("10.0.0.1", 6379, "connected"))}).start(t)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			target, want := master, probes.ReasonOK
			if i%2 == 1 {
				target, want = replica, probes.ReasonWrongRole
			}
			if res := p.Probe(ctxTimeout(t, 5*time.Second), target); res.Reason != want {
				t.Errorf("probe %d: %v, want %s", i, res, want)
			}
		})
	}
	wg.Wait()
}
