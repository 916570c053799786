package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/swh-dev/swh/test/harness"
)

// tmpPrefix starts the name of the run's temporary folder.
const tmpPrefix = "swh-sandbox-"

// runHost is the sandbox's host side: it opens the host port and the
// control socket, starts the inner process in a private network and PID
// namespace (hack/netns.sh) with both handed over, shows the live view and,
// on Ctrl-C, SIGTERM or quit, stops the inner process and removes what the
// run created.
func runHost(opts options) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer cancel()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	// Output piped into a program that quits early must not kill this
	// process before it has stopped the sandbox and cleaned up.
	signal.Ignore(syscall.SIGPIPE)
	root, err := harness.RepoRoot()
	if err != nil {
		return fmt.Errorf("run the sandbox from the repository (make run): %w", err)
	}
	if err := os.MkdirAll(opts.out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", opts.out, err)
	}
	if _, err := sendCommand(opts.socket(), ""); err == nil {
		return fmt.Errorf("a sandbox is already running with control socket %s (stop it with `swh-sandbox -out %s quit`)", opts.socket(), opts.out)
	}
	_ = os.Remove(opts.socket())
	_ = os.Remove(opts.kubeconfig())

	apiListener, err := listenHost(opts.port)
	if err != nil {
		return err
	}
	defer func() { _ = apiListener.Close() }()
	controlListener, err := net.ListenUnix("unix", &net.UnixAddr{Name: opts.socket(), Net: "unix"})
	if err != nil {
		return fmt.Errorf("opening the control socket: %w", err)
	}
	controlListener.SetUnlinkOnClose(false) // the inner process serves it
	defer func() {
		_ = controlListener.Close()
		_ = os.Remove(opts.socket())
		_ = os.Remove(opts.kubeconfig())
	}()
	tmp, err := os.MkdirTemp("", tmpPrefix)
	if err != nil {
		return fmt.Errorf("creating a temporary folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// PostgreSQL runs as another user and must reach its folder inside.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("opening up %s: %w", tmp, err)
	}

	inner, err := startInner(root, tmp, opts, apiListener, controlListener)
	if err != nil {
		return err
	}
	// From here on, every way out stops the inner process first.
	defer func() {
		if stopErr := inner.stop(); stopErr != nil && err == nil {
			err = stopErr
		}
	}()

	// Only the inner process serves them now: once it ends, the port closes.
	port := apiListener.Addr().(*net.TCPAddr).Port
	_ = apiListener.Close()
	_ = controlListener.Close()
	fmt.Printf(">> starting the sandbox in a private network namespace (API server forwarded from 127.0.0.1:%d; temporary files in %s)\n", port, tmp)
	if err := inner.waitReady(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting: stop quietly
		}
		return err
	}
	fmt.Printf("\nThe sandbox is up. Point kubectl at it:\n\n  export KUBECONFIG=%s\n  kubectl get swh,endpointslices -A\n\nLogs of the controller and the agents: %s\n\n%s\n\n", opts.kubeconfig(), opts.logDir(), commandHelp)
	return runView(ctx, opts, inner)
}

// listenHost listens on 127.0.0.1:port, or on a free port when port is 0 or
// taken.
func listenHost(port int) (*net.TCPListener, error) {
	if port != 0 {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err == nil {
			return l, nil
		}
		fmt.Printf(">> 127.0.0.1:%d is taken (%v); using a free port\n", port, err)
	}
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1: %w", err)
	}
	return l, nil
}

// innerProcess is the sandbox's process inside the namespace, seen from the
// host.
type innerProcess struct {
	cmd *exec.Cmd
	// lifeline's write end: closing it asks the inner process to stop.
	lifeline *os.File
	lines    chan string
	exited   chan struct{}
	err      error // set before exited closes
}

// startInner runs this program again through hack/netns.sh, which unshares
// a network and PID namespace (as root; rootless it adds a user namespace),
// makes 10.244.0.0/16 local and execs it.
func startInner(root, tmp string, opts options, api *net.TCPListener, control *net.UnixListener) (*innerProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program: %w", err)
	}
	apiFile, err := api.File()
	if err != nil {
		return nil, fmt.Errorf("handing over the host port: %w", err)
	}
	defer func() { _ = apiFile.Close() }()
	controlFile, err := control.File()
	if err != nil {
		return nil, fmt.Errorf("handing over the control socket: %w", err)
	}
	defer func() { _ = controlFile.Close() }()
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a pipe: %w", err)
	}
	defer func() { _ = lifeR.Close() }()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating a pipe: %w", err)
	}
	defer func() { _ = outW.Close() }()

	args := []string{self, innerArg, "-out", opts.out, "-port", strconv.Itoa(api.Addr().(*net.TCPAddr).Port)}
	if opts.noPostgres {
		args = append(args, "-no-postgres")
	}
	if opts.requirePostgres {
		args = append(args, "-require-postgres")
	}
	if opts.requireRedis {
		args = append(args, "-require-redis")
	}
	cmd := exec.Command(filepath.Join(root, "hack", "netns.sh"), args...)
	cmd.Env = append(withoutEnv(os.Environ(), "SWH_NETNS", "SWH_NETNS_ROOTLESS", "TMPDIR"), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.ExtraFiles = []*os.File{apiFile, controlFile, lifeR} // fds 3, 4, 5
	// A session of its own: the terminal's Ctrl-C reaches only this side,
	// which then stops the inner process in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		_ = lifeW.Close()
		_ = outR.Close()
		return nil, fmt.Errorf("starting the sandbox in a namespace (hack/netns.sh needs unshare and ip): %w", err)
	}
	p := &innerProcess{cmd: cmd, lifeline: lifeW, lines: make(chan string, 256), exited: make(chan struct{})}
	linesDone := make(chan struct{})
	go func() {
		defer close(linesDone)
		defer close(p.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		_ = outR.Close()
	}()
	go func() {
		err := cmd.Wait()
		<-linesDone
		if err != nil {
			p.err = fmt.Errorf("the sandbox's inner process: %w", err)
		}
		close(p.exited)
	}()
	return p, nil
}

// waitReady prints the inner process's progress until it reports ready.
func (p *innerProcess) waitReady(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case line, ok := <-p.lines:
			if !ok {
				<-p.exited
				if p.err != nil {
					return p.err
				}
				return errors.New("the sandbox stopped while starting")
			}
			if line == readyLine {
				return nil
			}
			fmt.Println("   " + line)
		}
	}
}

// stop asks the inner process to stop, waits for it (killing it after two
// minutes: the PID namespace ends with it) and prints what it said meanwhile.
func (p *innerProcess) stop() error {
	select {
	case <-p.exited:
	default:
		fmt.Println(">> stopping the sandbox")
	}
	_ = p.lifeline.Close()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case line, ok := <-p.lines:
			if ok {
				fmt.Println("   " + line)
				continue
			}
			p.lines = nil
		case <-p.exited:
			if p.lines != nil {
				for line := range p.lines {
					fmt.Println("   " + line)
				}
			}
			return p.err
		case <-timeout:
			fmt.Println(">> the sandbox did not stop in time: killing it")
			_ = p.cmd.Process.Kill()
			timeout = nil
		}
	}
}

// withoutEnv drops the named variables from env.
func withoutEnv(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
