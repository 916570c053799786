package harness

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swh-dev/swh/test/harness/process"
)

// mariadbBinaries are the programs a MariaDB server is made of.
type mariadbBinaries struct {
	server  string // mariadbd
	install string // mariadb-install-db
}

// findMariaDB finds the system's MariaDB programs: in $SWH_MARIADB_BIN,
// /usr/sbin and /usr/bin (Debian), or on the PATH.
func findMariaDB() (mariadbBinaries, error) {
	find := func(name string) string {
		dirs := []string{"/usr/sbin", "/usr/bin"}
		if dir := os.Getenv("SWH_MARIADB_BIN"); dir != "" {
			dirs = []string{dir}
		}
		for _, dir := range dirs {
			if path := filepath.Join(dir, name); isExecutable(path) {
				return path
			}
		}
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
		return ""
	}
	b := mariadbBinaries{server: find("mariadbd"), install: find("mariadb-install-db")}
	if b.server == "" || b.install == "" {
		return b, fmt.Errorf("%w: MariaDB server programs (mariadbd, mariadb-install-db) not found (Debian: apt-get install mariadb-server)", ErrMissingDependency)
	}
	return b, nil
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode()&0o111 != 0
}

// mariadbOwner picks the user the server runs as: none (the current user)
// when not root, else "mysql" or "nobody". In a user namespace where only
// root is mapped no such user exists, and mariadbd cannot run.
func mariadbOwner() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"mysql", "nobody"} {
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
	return nil, fmt.Errorf("%w: mariadbd refuses to run as root and no unprivileged user (mysql, nobody) is usable here (a rootless user namespace maps only root)", ErrMissingDependency)
}

func newMariaDB(opts MariaDBOptions) (*MariaDB, error) {
	bins, err := findMariaDB()
	if err != nil {
		return nil, err
	}
	owner, err := mariadbOwner()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "swh-mariadb-")
	if err != nil {
		return nil, fmt.Errorf("creating a folder for MariaDB: %w", err)
	}
	m := &MariaDB{opts: opts, bins: bins, owner: owner, dir: dir}
	// The server runs as another user: it must reach and own its folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, m.fail(fmt.Errorf("opening up %s: %w", dir, err))
	}
	if err := m.chown(dir); err != nil {
		return nil, m.fail(err)
	}
	return m, nil
}

func (m *MariaDB) dataDir() string { return filepath.Join(m.dir, "data") }

// serverOptions are the options of mariadbd both when mariadb-install-db
// bootstraps the data folder and when it serves: small, fast and
// unsafe on a crash, which a test's server never survives anyway.
func (m *MariaDB) serverOptions() []string {
	return []string{
		"--datadir=" + m.dataDir(),
		"--tmpdir=" + m.dir,
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=16M",
		"--innodb-log-file-size=8M",
		"--innodb-flush-log-at-trx-commit=0",
		"--innodb-doublewrite=0",
		"--innodb-use-native-aio=0", // AIO may be unavailable in a namespace
		"--performance-schema=0",
	}
}

// install creates the data folder and its system tables, and runs
// initFile.
func (m *MariaDB) install(ctx context.Context, initFile string) error {
	args := append([]string{"--no-defaults"}, m.serverOptions()...)
	args = append(args, "--auth-root-authentication-method=normal", "--skip-test-db", "--extra-file="+initFile)
	cmd := exec.CommandContext(ctx, m.bins.install, args...)
	cmd.Dir = m.dir
	cmd.Env = m.env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: m.owner, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out []byte
	err := m.within(func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(m.bins.install), strings.Join(args, " "), err, tail(string(out), 40))
	}
	return nil
}

// start runs mariadbd in the foreground as a child of this process, so the
// harness owns its PID.
func (m *MariaDB) start(ctx context.Context) error {
	args := append([]string{"--no-defaults"}, m.serverOptions()...)
	args = append(args,
		"--socket="+filepath.Join(m.dir, "mariadbd.sock"),
		"--pid-file="+filepath.Join(m.dir, "mariadbd.pid"),
		"--bind-address="+m.opts.Addr,
		"--port="+strconv.Itoa(m.opts.Port),
		"--max-connections="+strconv.Itoa(m.opts.MaxConnections),
		"--server-id="+strconv.Itoa(m.opts.ServerID),
		"--log-bin="+filepath.Join(m.dataDir(), "binlog"),
		"--binlog-format=ROW",
		"--relay-log="+filepath.Join(m.dataDir(), "relay"),
	)
	if m.opts.TLS != nil {
		cert, key := filepath.Join(m.dir, "server.crt"), filepath.Join(m.dir, "server.key")
		if err := m.writeOwned(cert, m.opts.TLS.CertPEM, 0o644); err != nil {
			return err
		}
		if err := m.writeOwned(key, m.opts.TLS.KeyPEM, 0o600); err != nil {
			return err
		}
		args = append(args, "--ssl-cert="+cert, "--ssl-key="+key)
	}
	// mariadbd leads its process group: Stop ends everything with it.
	// SIGTERM is its normal shutdown.
	server, err := process.Start(process.Spec{
		Name: "mariadbd on " + m.Addr(), Path: m.bins.server, Args: args,
		Env: m.env(), CleanEnv: true, Dir: m.dir, Log: filepath.Join(m.dir, "mariadb.log"),
		Credential: m.owner, OwnGroup: true, DiesWithSuite: true, Within: m.opts.Within,
		StopSignal: syscall.SIGTERM, StopTimeout: 30 * time.Second,
	})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.server = server
	m.mu.Unlock()
	if err := m.waitReady(ctx, server); err != nil {
		return errors.Join(err, m.Stop())
	}
	return nil
}

// waitReady polls until the server answers over TCP.
func (m *MariaDB) waitReady(ctx context.Context, server *process.Proc) error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return fmt.Errorf("opening %s: %w", m.Addr(), err)
	}
	defer func() { _ = db.Close() }()
	var last error
	for {
		select {
		case <-server.Exited():
			return fmt.Errorf("mariadbd on %s exited while starting; its log:\n%s", m.Addr(), tail(m.Log(), 40))
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = db.PingContext(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("mariadbd on %s not ready: %w (last error: %v); its log:\n%s", m.Addr(), ctx.Err(), last, tail(m.Log(), 40))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// within runs start through MariaDBOptions.Within when it is set.
func (m *MariaDB) within(start func() error) error {
	if m.opts.Within == nil {
		return start()
	}
	return m.opts.Within(start)
}

// env is the programs' whole environment: no variable of the suite's (no
// MYSQL_HOST, MYSQL_PWD...).
func (m *MariaDB) env() []string {
	return []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "HOME=" + m.dir}
}

func (m *MariaDB) writeOwned(path string, data []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, data, mode); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	return m.chown(path)
}

func (m *MariaDB) chown(path string) error {
	if m.owner == nil {
		return nil
	}
	if err := os.Chown(path, int(m.owner.Uid), int(m.owner.Gid)); err != nil {
		return fmt.Errorf("giving %s to uid %d: %w", path, m.owner.Uid, err)
	}
	return nil
}

// fail cleans up after a failed start and returns err.
func (m *MariaDB) fail(err error) error {
	return errors.Join(err, m.Close())
}
