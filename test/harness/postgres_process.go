package harness

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swh-dev/swh/test/harness/process"
)

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }

// start runs the postmaster in the foreground as a child of this process, so
// the harness owns its PID; settings given here override the copied
// configuration of a replica.
func (p *Postgres) start(ctx context.Context) error {
	args := []string{
		"-D", p.dataDir(),
		"-p", strconv.Itoa(p.opts.Port),
		"-c", "listen_addresses=" + p.opts.Addr,
		"-c", "unix_socket_directories=" + p.dir,
		"-c", "max_connections=" + strconv.Itoa(p.opts.MaxConnections),
		"-c", "superuser_reserved_connections=1",
		"-c", "shared_buffers=16MB",
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "wal_level=replica",
		"-c", "max_wal_senders=5",
		"-c", "hot_standby=on",
		"-c", "logging_collector=off",
		"-c", "log_connections=on",
	}
	if p.opts.TLS != nil {
		cert, key := filepath.Join(p.dir, "server.crt"), filepath.Join(p.dir, "server.key")
		if err := p.writeOwned(cert, p.opts.TLS.CertPEM, 0o644); err != nil {
			return err
		}
		if err := p.writeOwned(key, p.opts.TLS.KeyPEM, 0o600); err != nil {
			return err
		}
		args = append(args, "-c", "ssl=on", "-c", "ssl_cert_file="+cert, "-c", "ssl_key_file="+key)
	}
	// The postmaster leads its process group: Stop kills every backend
	// with it. Fast shutdown first, SIGKILL after 30 s.
	server, err := process.Start(process.Spec{
		Name: "postgres on " + p.Addr(), Path: filepath.Join(p.binDir, "postgres"), Args: args,
		Env: p.env(nil), CleanEnv: true, Dir: p.dir, Log: filepath.Join(p.dir, "postgres.log"),
		Credential: p.owner, OwnGroup: true, DiesWithSuite: true, Within: p.opts.Within,
		StopSignal: syscall.SIGINT, StopTimeout: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	p.server = server
	if err := p.waitReady(ctx); err != nil {
		return errors.Join(err, p.Stop())
	}
	return nil
}

// waitReady polls until the server answers a query over TCP.
func (p *Postgres) waitReady(ctx context.Context) error {
	db, err := sql.Open("postgres", p.DSN("postgres"))
	if err != nil {
		return fmt.Errorf("opening %s: %w", p.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	var last error
	for {
		select {
		case <-p.server.Exited():
			return fmt.Errorf("postgres on %s exited while starting; its log:\n%s", p.Addr(), tail(p.Log(), 40))
		default:
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = db.PingContext(qctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres on %s not ready: %w (last error: %v); its log:\n%s", p.Addr(), ctx.Err(), last, tail(p.Log(), 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// run executes one of the PostgreSQL programs as the server's owner.
func (p *Postgres) run(ctx context.Context, env []string, name string, args ...string) error {
	cmd := p.command(env, name, args...)
	var out []byte
	err := p.within(func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// within runs start through PostgresOptions.Within when it is set.
func (p *Postgres) within(start func() error) error {
	if p.opts.Within == nil {
		return start()
	}
	return p.opts.Within(start)
}

func (p *Postgres) command(env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.binDir, name), args...)
	cmd.Dir = p.dir
	cmd.Env = p.env(env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.owner, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// env is the programs' whole environment: no variable of the suite's.
func (p *Postgres) env(extra []string) []string {
	return append([]string{"PATH=/usr/bin:/bin", "LC_ALL=C", "HOME=" + p.dir}, extra...)
}

func (p *Postgres) writeOwned(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	return p.chown(path)
}

func (p *Postgres) chown(path string) error {
	if p.owner == nil {
		return nil
	}
	if err := os.Chown(path, int(p.owner.Uid), int(p.owner.Gid)); err != nil {
		return fmt.Errorf("giving %s to uid %d: %w", path, p.owner.Uid, err)
	}
	return nil
}

// fail cleans up after a failed start and returns err.
func (p *Postgres) fail(err error) error {
	return errors.Join(err, p.Close())
}

// postgresBinDir finds the system's PostgreSQL server programs: $SWH_PG_BIN,
// the newest /usr/lib/postgresql/*/bin (Debian), or initdb on the PATH.
func postgresBinDir() (string, error) {
	if dir := os.Getenv("SWH_PG_BIN"); dir != "" {
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(path), nil
	}
	return "", fmt.Errorf("%w: PostgreSQL server binaries not found (Debian: apt-get install postgresql)", ErrMissingDependency)
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// unprivilegedOwner picks the user the server runs as: none (the current
// user) when not root, else "postgres" or "nobody". In a user namespace where
// only root is mapped no such user exists, and PostgreSQL cannot run.
func unprivilegedOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		if !uidMapped(uint32(uid)) {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("%w: PostgreSQL refuses to run as root and no unprivileged user (postgres, nobody) is usable here (a rootless user namespace maps only root)", ErrMissingDependency)
}

// uidMapped reports whether uid exists in this process's user namespace.
func uidMapped(uid uint32) bool {
	f, err := os.Open("/proc/self/uid_map")
	if err != nil {
		return true
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var inside, outside, count uint64
		if _, err := fmt.Sscan(sc.Text(), &inside, &outside, &count); err != nil {
			continue
		}
		if uint64(uid) >= inside && uint64(uid) < inside+count {
			return true
		}
	}
	return false
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
