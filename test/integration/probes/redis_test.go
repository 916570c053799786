package probes_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/redis"
	"github.com/swh-dev/swh/test/harness"
)

// The Redis tests run redis-server on 127.0.0.1, each on a port of its
// own that the harness picks: inside hack/netns.sh loopback is private to
// the run; outside it, the harness retries a port another process took.

const redisPassword = "redis-test-password"

func newRedis(t testing.TB, cfg redis.Config) *redis.Prober {
	t.Helper()
	if cfg.TLSMode == "" {
		cfg.TLSMode = redis.TLSDisable
	}
	p, err := redis.New(cfg)
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	return p
}

// withPassword logs in as the default user over plain TCP, which the test
// allows explicitly.
func withPassword(role redis.Role) redis.Config {
	return redis.Config{Password: redisPassword, AllowCleartextPassword: true, Role: role}
}

func expectMessage(t testing.TB, res probes.Result, parts ...string) {
	t.Helper()
	for _, part := range parts {
		if !strings.Contains(res.Message, part) {
			t.Errorf("message %q does not hold %q", res.Message, part)
		}
	}
}

// connections returns how many connections the server has accepted, the
// harness's own included.
func connections(t testing.TB, ctx context.Context, r *harness.Redis) int {
	t.Helper()
	info, err := r.Info(ctx, "stats")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(info["total_connections_received"])
	if err != nil {
		t.Fatalf("total_connections_received: %v", err)
	}
	return n
}

// TestRedisPrimaryAndReplica tells a master from its replica by role,
// follows a failover (the master stops: the replica's link goes down; the
// replica is promoted: it passes as a master, as a redis-write Service
// needs) and the old master's return as a replica of the new one.
func TestRedisPrimaryAndReplica(t *testing.T) {
	ctx := testContext(t)
	primary := harness.StartTestRedis(t, harness.RedisOptions{Password: redisPassword})
	replica := primary.StartTestReplica(t, harness.RedisOptions{})
	primaryTarget, replicaTarget := target(t, primary.Addr()), target(t, replica.Addr())
	anyRole := newRedis(t, withPassword(redis.RoleAny))
	master := newRedis(t, withPassword(redis.RoleMaster))
	replicaRole := newRedis(t, withPassword(redis.RoleReplica))

	res := expect(t, anyRole, primaryTarget, probes.Success, probes.ReasonOK)
	expectMessage(t, res, "PONG")
	expect(t, anyRole, replicaTarget, probes.Success, probes.ReasonOK)
	res = expect(t, master, primaryTarget, probes.Success, probes.ReasonOK)
	expectMessage(t, res, "master with 1 replica")
	res = expect(t, master, replicaTarget, probes.Failure, probes.ReasonWrongRole)
	expectMessage(t, res, "replica of "+primary.Addr())
	res = expect(t, replicaRole, replicaTarget, probes.Success, probes.ReasonOK)
	expectMessage(t, res, "replica of "+primary.Addr()+", link up")
	expect(t, replicaRole, primaryTarget, probes.Failure, probes.ReasonWrongRole)

	// The master goes away: the replica notices at once (the connection
	// closes) and keeps trying to reconnect.
	if err := primary.Stop(); err != nil {
		t.Fatal(err)
	}
	expect(t, master, primaryTarget, probes.Failure, probes.ReasonRefused)
	harness.Eventually(t, 10*time.Second, "the replica reports its link down", func() error {
		if res := probe(replicaRole, replicaTarget, probeTimeout); res.Reason != probes.ReasonReplicaLinkDown {
			return fmt.Errorf("probe = %v", res)
		}
		return nil
	})
	// Still a replica, up and answering: a probe of any role passes.
	expect(t, anyRole, replicaTarget, probes.Success, probes.ReasonOK)
	expect(t, master, replicaTarget, probes.Failure, probes.ReasonWrongRole)

	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, master, replicaTarget, probes.Success, probes.ReasonOK)
	expect(t, replicaRole, replicaTarget, probes.Failure, probes.ReasonWrongRole)

	// The old master returns (a master of its own data) and is made a
	// replica of the new one.
	if err := primary.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, master, primaryTarget, probes.Success, probes.ReasonOK)
	if err := primary.ReplicaOf(ctx, replica.Host(), replica.Port()); err != nil {
		t.Fatal(err)
	}
	if err := primary.WaitLinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	if err := replica.WaitReplicaOnline(ctx, primary); err != nil {
		t.Fatal(err)
	}
	res = expect(t, replicaRole, primaryTarget, probes.Success, probes.ReasonOK)
	expectMessage(t, res, "replica of "+replica.Addr())
	expect(t, master, primaryTarget, probes.Failure, probes.ReasonWrongRole)
	res = expect(t, master, replicaTarget, probes.Success, probes.ReasonOK)
	expectMessage(t, res, "master with 1 replica")
}

// TestRedisAuth logs in as the default user and as ACL users, right and
// wrong, and checks that each probe opens one connection and that a
// password the prober may not send in clear opens none.
func TestRedisAuth(t *testing.T) {
	ctx := testContext(t)
	srv := harness.StartTestRedis(t, harness.RedisOptions{Password: redisPassword, Users: []harness.RedisUser{
		{Name: "probe", Password: "probe-password", Rules: "+ping +role +info"},
		{Name: "pinger", Password: "pinger-password", Rules: "+ping"},
	}})
	tgt := target(t, srv.Addr())
	acl := func(user, password string, role redis.Role) redis.Config {
		return redis.Config{User: user, Password: password, AllowCleartextPassword: true, Role: role}
	}
	tests := []struct {
		name   string
		cfg    redis.Config
		reason probes.Reason
		msg    string
	}{
		{"default user", withPassword(redis.RoleAny), probes.ReasonOK, "PONG"},
		{"default user by name", acl("default", redisPassword, redis.RoleMaster), probes.ReasonOK, "master"},
		{"no password", redis.Config{}, probes.ReasonAuth, "NOAUTH"},
		{"wrong password", redis.Config{Password: "wrong", AllowCleartextPassword: true}, probes.ReasonAuth, "WRONGPASS"},
		{"ACL user", acl("probe", "probe-password", redis.RoleMaster), probes.ReasonOK, "master with 0 replicas"},
		{"ACL user, lag bound", func() redis.Config {
			c := acl("probe", "probe-password", redis.RoleAny)
			c.MaxReplicationLag = &redis.ReplicationLag{Bytes: 1}
			return c
		}(), probes.ReasonOK, "master"},
		{"ACL user, wrong password", acl("probe", "wrong", redis.RoleAny), probes.ReasonAuth, "WRONGPASS"},
		{"unknown ACL user", acl("nobody", "probe-password", redis.RoleAny), probes.ReasonAuth, "WRONGPASS"},
		{"ACL user without ROLE", acl("pinger", "pinger-password", redis.RoleMaster), probes.ReasonAuth, "NOPERM"},
		{"ACL user without ROLE, any role", acl("pinger", "pinger-password", redis.RoleAny), probes.ReasonOK, "PONG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := connections(t, ctx, srv)
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			res := expect(t, newRedis(t, tt.cfg), tgt, want, tt.reason)
			expectMessage(t, res, tt.msg)
			// The probe's, and the second count's own.
			if got := connections(t, ctx, srv) - before; got != 2 {
				t.Errorf("%d connections for one probe and one count, want 2", got)
			}
		})
	}
	t.Run("password not sent in clear", func(t *testing.T) {
		before := connections(t, ctx, srv)
		res := expect(t, newRedis(t, redis.Config{Password: redisPassword}), tgt, probes.Failure, probes.ReasonAuth)
		expectMessage(t, res, "AllowCleartextPassword")
		if got := connections(t, ctx, srv) - before; got != 1 {
			t.Errorf("%d connections besides the count's own, want none", got-1)
		}
	})
	t.Run("server without a password", func(t *testing.T) {
		open := harness.StartTestRedis(t, harness.RedisOptions{})
		res := expect(t, newRedis(t, withPassword(redis.RoleAny)), target(t, open.Addr()), probes.Failure, probes.ReasonAuth)
		expectMessage(t, res, "without any password configured")
		expect(t, newRedis(t, redis.Config{}), target(t, open.Addr()), probes.Success, probes.ReasonOK)
	})
}

// TestRedisReplicationLag: a replica of an idle master passes a lag bound
// (the master pings it every second); once the master hangs (SIGSTOP, its
// connections open and silent) the replica fails with replication-lag
// within a few seconds of crossing the bound, and passes again once the
// master resumes. A master is never judged.
func TestRedisReplicationLag(t *testing.T) {
	const bound, pingPeriod = 3 * time.Second, time.Second
	primary := harness.StartTestRedis(t, harness.RedisOptions{Password: redisPassword, ReplPingPeriod: pingPeriod})
	replica := primary.StartTestReplica(t, harness.RedisOptions{})
	cfg := withPassword(redis.RoleAny)
	cfg.MaxReplicationLag = &redis.ReplicationLag{Bytes: 1 << 20, Time: bound}
	p := newRedis(t, cfg)
	replicaTarget := target(t, replica.Addr())

	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		res := expect(t, p, replicaTarget, probes.Success, probes.ReasonOK)
		expectMessage(t, res, "link up", "bytes not processed")
	}
	expect(t, p, target(t, primary.Addr()), probes.Success, probes.ReasonOK)

	if err := primary.Freeze(); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	var lagged probes.Result
	harness.Eventually(t, bound+5*time.Second, "the replica fails with replication-lag", func() error {
		lagged = probe(p, replicaTarget, probeTimeout)
		if lagged.Reason != probes.ReasonReplicationLag {
			return fmt.Errorf("probe = %v", lagged)
		}
		return nil
	})
	// The replica counts from the last ping it got, up to a ping period
	// before the freeze, in whole seconds of a clock Redis updates ten times
	// a second: the probe may fail that much before the bound has passed
	// since the freeze, and no earlier.
	earliest := bound - pingPeriod - 200*time.Millisecond
	if since := time.Since(frozen); since < earliest {
		t.Errorf("the replica failed %v after the master hung, before %v (the bound of %v less a ping period and Redis's clock tick)", since, earliest, bound)
	}
	expectMessage(t, lagged, "last heard from its master "+primary.Addr(), "(bound 3s)")

	if err := primary.Thaw(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the replica passes again", func() error {
		if res := probe(p, replicaTarget, probeTimeout); !res.Passed() {
			return fmt.Errorf("probe = %v", res)
		}
		return nil
	})
}

// TestRedisTLS probes a redis-server that speaks TLS only, in every mode.
func TestRedisTLS(t *testing.T) {
	ca, err := harness.NewCA("redis CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := harness.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("redis.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	srv := harness.StartTestRedis(t, harness.RedisOptions{Password: redisPassword, TLS: cert})
	tgt := target(t, srv.Addr())
	tlsCfg := func(mode redis.TLSMode, caPEM []byte, serverName string) redis.Config {
		return redis.Config{Password: redisPassword, Role: redis.RoleMaster, TLSMode: mode, CACert: caPEM, ServerName: serverName}
	}
	withAllow := func(c redis.Config) redis.Config { c.AllowCleartextPassword = true; return c }
	tests := []struct {
		name   string
		cfg    redis.Config
		reason probes.Reason
	}{
		{"verify-full, IP SAN", tlsCfg(redis.TLSVerifyFull, ca.PEM, ""), probes.ReasonOK},
		{"verify-full, server name", tlsCfg(redis.TLSVerifyFull, ca.PEM, "redis.test"), probes.ReasonOK},
		{"verify-full, wrong name", tlsCfg(redis.TLSVerifyFull, ca.PEM, "other.test"), probes.ReasonTLS},
		{"verify-full, wrong CA", tlsCfg(redis.TLSVerifyFull, other.PEM, ""), probes.ReasonTLS},
		{"verify-ca", tlsCfg(redis.TLSVerifyCA, ca.PEM, "other.test"), probes.ReasonOK},
		{"verify-ca, wrong CA", tlsCfg(redis.TLSVerifyCA, other.PEM, ""), probes.ReasonTLS},
		{"require, password refused", tlsCfg(redis.TLSRequire, nil, ""), probes.ReasonAuth},
		{"require, password allowed", withAllow(tlsCfg(redis.TLSRequire, nil, "")), probes.ReasonOK},
		{"verify-full, wrong password", func() redis.Config { c := tlsCfg(redis.TLSVerifyFull, ca.PEM, ""); c.Password = "wrong"; return c }(), probes.ReasonAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := probes.Success
			if tt.reason != probes.ReasonOK {
				want = probes.Failure
			}
			expect(t, newRedis(t, tt.cfg), tgt, want, tt.reason)
		})
	}
	t.Run("plain TCP to the TLS port", func(t *testing.T) {
		res := probe(newRedis(t, withPassword(redis.RoleAny)), tgt, probeTimeout)
		if res.Passed() || (res.Reason != probes.ReasonReset && res.Reason != probes.ReasonProtocol) {
			t.Fatalf("probe = %v, want a reset or protocol failure", res)
		}
	})
}
