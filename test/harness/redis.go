package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swh-dev/swh/test/harness/process"
)

// RedisOptions configures a throwaway Redis server.
type RedisOptions struct {
	// Addr is the IP address to listen on; defaults to 127.0.0.1.
	Addr string
	// Port is the TCP port (the TLS port with TLS); 0 picks a free one.
	Port int
	// Password is requirepass, the default user's password; empty: none.
	Password string
	// Users are ACL users created besides the default one.
	Users []RedisUser
	// TLS, when set, makes the server speak TLS only, with this
	// certificate, on Port. Clients need no certificate.
	TLS *Issued
	// ReplPingPeriod is repl-ping-replica-period, how often a master pings
	// its replicas when idle; defaults to 1 s, so that
	// master_last_io_seconds_ago stays near 0 on a healthy idle replica
	// (Redis's default, 10 s, lets it reach 10).
	ReplPingPeriod time.Duration
}

// RedisUser is an ACL user.
type RedisUser struct {
	Name, Password string
	// Rules are its ACL rules; defaults to "~* &* +@all".
	Rules string
}

func (o *RedisOptions) setDefaults() {
	if o.Addr == "" {
		o.Addr = "127.0.0.1"
	}
	if o.ReplPingPeriod == 0 {
		o.ReplPingPeriod = time.Second
	}
}

// Redis is a redis-server running from the system's binary in a temporary
// folder, as the unprivileged user PostgreSQL runs as when there is one
// (Redis would run as root, but need not).
type Redis struct {
	opts  RedisOptions
	path  string
	owner *syscall.Credential
	dir   string
	// master is "host port" of the master a replica follows, "" for a
	// master; masterPassword is its masterauth. Both follow Promote and
	// ReplicaOf, so that Restart starts the server in the role it had.
	master, masterPassword string
	// server is the running process; nil when stopped.
	server *process.Proc
	frozen bool
}

// StartRedis starts a master in a new temporary folder.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	opts.setDefaults()
	r, err := newRedis(opts)
	if err != nil {
		return nil, err
	}
	if err := r.start(ctx); err != nil {
		return nil, r.fail(err)
	}
	return r, nil
}

// StartReplica starts a replica of r with opts (Password defaults to r's,
// and masterauth is r's) and waits until its link to r is up and r lists
// it online.
func (r *Redis) StartReplica(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if r.opts.TLS != nil {
		return nil, errors.New("redis: the harness does not start replicas of a TLS master")
	}
	if opts.Password == "" {
		opts.Password = r.opts.Password
	}
	opts.setDefaults()
	rep, err := newRedis(opts)
	if err != nil {
		return nil, err
	}
	rep.master, rep.masterPassword = r.opts.Addr+" "+strconv.Itoa(r.opts.Port), r.opts.Password
	if err := rep.start(ctx); err != nil {
		return nil, rep.fail(err)
	}
	if err := rep.WaitLinkUp(ctx); err != nil {
		return nil, rep.fail(err)
	}
	if err := r.WaitReplicaOnline(ctx, rep); err != nil {
		return nil, rep.fail(err)
	}
	return rep, nil
}

func newRedis(opts RedisOptions) (*Redis, error) {
	path, err := redisServerPath()
	if err != nil {
		return nil, err
	}
	// Redis runs as root too: without an unprivileged user (a rootless
	// user namespace maps only root), it runs as this process's user.
	owner, _ := unprivilegedOwner()
	dir, err := os.MkdirTemp("", "swh-redis-")
	if err != nil {
		return nil, fmt.Errorf("creating a folder for Redis: %w", err)
	}
	r := &Redis{opts: opts, path: path, owner: owner, dir: dir}
	// The server may run as another user: it must reach and own its
	// folder (a replica writes the master's data there).
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, r.fail(fmt.Errorf("opening up %s: %w", dir, err))
	}
	if err := r.chown(dir); err != nil {
		return nil, r.fail(err)
	}
	return r, nil
}

// redisServerPath finds redis-server: $SWH_REDIS_SERVER or the PATH.
func redisServerPath() (string, error) {
	if path := os.Getenv("SWH_REDIS_SERVER"); path != "" {
		return path, nil
	}
	if path, err := exec.LookPath("redis-server"); err == nil {
		return path, nil
	}
	return "", fmt.Errorf("%w: redis-server not found (Debian: apt-get install redis-server)", ErrMissingDependency)
}

// Addr returns "ip:port" of the server.
func (r *Redis) Addr() string { return net.JoinHostPort(r.opts.Addr, strconv.Itoa(r.opts.Port)) }

// Host returns the address the server listens on; Port its port.
func (r *Redis) Host() string { return r.opts.Addr }
func (r *Redis) Port() int    { return r.opts.Port }

// Options returns the options the server runs with, defaults applied and
// the port chosen.
func (r *Redis) Options() RedisOptions { return r.opts }

// Dir returns the server's temporary folder (configuration, data, log).
func (r *Redis) Dir() string { return r.dir }

// Log returns what the server has written to its log so far.
func (r *Redis) Log() string {
	data, _ := os.ReadFile(r.logPath())
	return string(data)
}

func (r *Redis) logPath() string { return filepath.Join(r.dir, "redis.log") }

// startAttempts bounds the tries at a free port: another process may take
// the one picked between its choice and the server's bind.
const startAttempts = 5

// start writes the configuration and runs the server in the foreground as
// a child of this process, so the harness owns its PID, then waits until
// it answers.
func (r *Redis) start(ctx context.Context) error {
	pick := r.opts.Port == 0
	for attempt := 1; ; attempt++ {
		if pick {
			port, err := freePort(r.opts.Addr)
			if err != nil {
				return err
			}
			r.opts.Port = port
			// A fresh log: the check below must read this attempt's.
			if err := os.Remove(r.logPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("removing the log of redis-server: %w", err)
			}
		}
		err := r.startOnce(ctx)
		if err == nil || !pick || attempt == startAttempts || !strings.Contains(r.Log(), "Address already in use") {
			return err
		}
		r.opts.Port = 0
	}
}

func (r *Redis) startOnce(ctx context.Context) error {
	if r.opts.TLS != nil {
		if err := r.writeOwned(filepath.Join(r.dir, "server.crt"), r.opts.TLS.CertPEM, 0o644); err != nil {
			return err
		}
		if err := r.writeOwned(filepath.Join(r.dir, "server.key"), r.opts.TLS.KeyPEM, 0o600); err != nil {
			return err
		}
	}
	conf := filepath.Join(r.dir, "redis.conf")
	if err := r.writeOwned(conf, []byte(r.config()), 0o600); err != nil {
		return err
	}
	server, err := process.Start(process.Spec{
		Name: "redis-server on " + r.Addr(), Path: r.path, Args: []string{conf},
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + r.dir}, CleanEnv: true, Dir: r.dir, Log: r.logPath(),
		Credential: r.owner, OwnGroup: true, DiesWithSuite: true,
		StopSignal: syscall.SIGTERM, StopTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	r.server = server
	if err := r.waitReady(ctx); err != nil {
		return errors.Join(err, r.Stop())
	}
	return nil
}

// config is the server's redis.conf: one file rather than arguments, so
// that passwords and ACL rules need quoting one way only.
func (r *Redis) config() string {
	o := r.opts
	lines := []string{
		"bind " + o.Addr,
		"protected-mode no", // pod addresses are not loopback
		"daemonize no",
		`save ""`,
		"appendonly no",
		"dir " + quoteRedis(r.dir),
		`logfile ""`, // standard output: the process's log
		"repl-ping-replica-period " + strconv.Itoa(max(1, int(o.ReplPingPeriod/time.Second))),
		// A master waits 5 s by default before a full sync, for more
		// replicas to share it: each replica a test starts would wait.
		"repl-diskless-sync-delay 0",
	}
	if o.TLS != nil {
		lines = append(lines, "port 0", "tls-port "+strconv.Itoa(o.Port),
			"tls-cert-file "+quoteRedis(filepath.Join(r.dir, "server.crt")),
			"tls-key-file "+quoteRedis(filepath.Join(r.dir, "server.key")),
			"tls-auth-clients no")
	} else {
		lines = append(lines, "port "+strconv.Itoa(o.Port))
	}
	if o.Password != "" {
		lines = append(lines, "requirepass "+quoteRedis(o.Password))
	}
	for _, u := range o.Users {
		rules := u.Rules
		if rules == "" {
			rules = "~* &* +@all"
		}
		lines = append(lines, "user "+quoteRedis(u.Name)+" on "+quoteRedis(">"+u.Password)+" "+rules)
	}
	if r.master != "" {
		lines = append(lines, "replicaof "+r.master)
		if r.masterPassword != "" {
			lines = append(lines, "masterauth "+quoteRedis(r.masterPassword))
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// quoteRedis quotes a value of redis.conf: double quotes, with \\, \" and
// \xHH for anything not printable ASCII.
func quoteRedis(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < ' ' || c > '~':
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// waitReady polls until the server answers PING (LOADING while it loads).
func (r *Redis) waitReady(ctx context.Context) error {
	var last error
	for {
		select {
		case <-r.server.Exited():
			return fmt.Errorf("redis-server on %s exited while starting; its log:\n%s", r.Addr(), tail(r.Log(), 40))
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = r.Do(pctx, "PING")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s not ready: %w (last error: %v); its log:\n%s", r.Addr(), ctx.Err(), last, tail(r.Log(), 40))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote makes a replica a master (REPLICAOF NO ONE), as a failover
// does; the server keeps its data and accepts writes at once.
func (r *Redis) Promote(ctx context.Context) error {
	if _, err := r.Do(ctx, "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("promoting %s: %w", r.Addr(), err)
	}
	r.master, r.masterPassword = "", ""
	return nil
}

// ReplicaOf makes the server a replica of host:port, logging in there
// with the server's own password (the servers of a test share one). It
// does not wait for the link: see WaitLinkUp.
func (r *Redis) ReplicaOf(ctx context.Context, host string, port int) error {
	if r.opts.Password != "" {
		if _, err := r.Do(ctx, "CONFIG", "SET", "masterauth", r.opts.Password); err != nil {
			return fmt.Errorf("setting masterauth on %s: %w", r.Addr(), err)
		}
	}
	if _, err := r.Do(ctx, "REPLICAOF", host, strconv.Itoa(port)); err != nil {
		return fmt.Errorf("making %s a replica of %s:%d: %w", r.Addr(), host, port, err)
	}
	r.master, r.masterPassword = host+" "+strconv.Itoa(port), r.opts.Password
	return nil
}

// Freeze stops the server's process (SIGSTOP) without closing anything:
// its connections stay open and silent, as those of a hung server. Thaw
// resumes it.
func (r *Redis) Freeze() error {
	if r.server == nil {
		return errors.New("redis: freezing a stopped server")
	}
	r.frozen = true
	return r.server.Signal(syscall.SIGSTOP)
}

// Thaw resumes a frozen server (SIGCONT).
func (r *Redis) Thaw() error {
	if r.server == nil {
		return errors.New("redis: thawing a stopped server")
	}
	r.frozen = false
	return r.server.Signal(syscall.SIGCONT)
}

// Stop shuts the server down (SIGTERM, then SIGKILL of its process group
// after 10 s) and waits for it. The folder is kept, so the server can be
// started again with Restart.
func (r *Redis) Stop() error {
	if r.server == nil {
		return nil
	}
	if r.frozen {
		_ = r.Thaw() // a stopped process would take SIGTERM only once resumed
	}
	r.server.Stop()
	r.server = nil
	return nil
}

// Restart starts a stopped server again on the same folder, address and
// port, in the role it last had (Promote and ReplicaOf count).
func (r *Redis) Restart(ctx context.Context) error {
	if r.server != nil {
		return nil
	}
	return r.startOnce(ctx)
}

// Close stops the server and removes its folder.
func (r *Redis) Close() error {
	stopErr := r.Stop()
	if err := os.RemoveAll(r.dir); err != nil {
		return errors.Join(stopErr, fmt.Errorf("removing %s: %w", r.dir, err))
	}
	return stopErr
}

func (r *Redis) writeOwned(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	return r.chown(path)
}

func (r *Redis) chown(path string) error {
	if r.owner == nil {
		return nil
	}
	if err := os.Chown(path, int(r.owner.Uid), int(r.owner.Gid)); err != nil {
		return fmt.Errorf("giving %s to uid %d: %w", path, r.owner.Uid, err)
	}
	return nil
}

// fail cleans up after a failed start and returns err.
func (r *Redis) fail(err error) error {
	return errors.Join(err, r.Close())
}

// StartTestRedis starts a master for a test and removes it at the end,
// printing the end of its log when the test failed. A machine without
// redis-server skips the test, except in CI.
func StartTestRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRedis(ctx, opts)
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(func() { closeRedisForTest(t, r) })
	return r
}

// StartTestReplica starts a replica of r for a test (see StartReplica).
func (r *Redis) StartTestReplica(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := r.StartReplica(ctx, opts)
	if err != nil {
		t.Fatalf("starting a replica of %s: %v", r.Addr(), err)
	}
	t.Cleanup(func() { closeRedisForTest(t, rep) })
	return rep
}

func closeRedisForTest(t testing.TB, r *Redis) {
	if t.Failed() {
		t.Logf("redis-server on %s, the end of its log:\n%s", r.Addr(), tail(r.Log(), 30))
	}
	if err := r.Close(); err != nil {
		t.Errorf("%v", err)
	}
}
