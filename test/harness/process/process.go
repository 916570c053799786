// Package process runs the programs of every suite as one type, Proc:
// started as a Spec says (inside a network namespace, as another user, in
// a process group of its own), logging to a file, reaped when it exits,
// stopped by its PID. A Group is what the suites that build a cluster out
// of processes and network namespaces (test/e2e, test/e2e/realnode) started:
// each program inside a namespace or in the suite's own ("the world",
// which hack/netns.sh makes), logging to a file of the suite's folder; and
// the proof, when the suite ends, that none of them and none of the
// namespaces is left.
package process

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/swh-dev/swh/test/harness/netns"
)

// Spec says how to start a program.
type Spec struct {
	// Name names it in messages.
	Name string
	Path string
	Args []string
	// Env is added to the suite's environment; with CleanEnv, it is the
	// whole environment.
	Env      []string
	CleanEnv bool
	// Dir is its working folder; empty: the suite's.
	Dir string
	// Log is the file its standard output and error are appended to;
	// empty: they go to Output (nowhere when nil).
	Log    string
	Output io.Writer
	// Stdin is what it reads; nil: nothing.
	Stdin io.Reader
	// Credential runs it as another user.
	Credential *syscall.Credential
	// OwnGroup makes it lead a process group of its own, which Stop and
	// Kill end whole: nothing it forked outlives it.
	OwnGroup bool
	// DiesWithSuite kills it (SIGKILL) when the suite's process dies
	// without stopping it: a panic or a kill skips the cleanups. The
	// kernel ties it to the thread that started it: with Within, that
	// thread must outlive it (netns.Namespace.Do's does, unless it cannot
	// return to its own namespace).
	DiesWithSuite bool
	// Within starts it, for example (*netns.Namespace).Do to start it
	// inside a network namespace; nil: directly.
	Within func(start func() error) error
	// StopSignal is what Stop sends first (SIGTERM when zero); StopTimeout
	// is how long Stop waits for the exit before SIGKILL (10 s when zero).
	StopSignal  syscall.Signal
	StopTimeout time.Duration
}

// Proc is a running program, stopped by its PID: the one process type of
// every suite, whatever it runs (a control plane's kube-controller-manager,
// a PostgreSQL server, a node's kubelet, an swh binary).
type Proc struct {
	Name string
	PID  int
	// Log is the file its standard output and error go to; empty when
	// Spec.Log was.
	Log string

	group       bool
	stopSignal  syscall.Signal
	stopTimeout time.Duration
	done        chan struct{}
	err         error
}

// Start runs a program as spec says, and reaps it when it exits.
func Start(spec Spec) (*Proc, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(os.Environ(), spec.Env...)
	if spec.CleanEnv {
		// Not nil, which would mean the suite's environment.
		cmd.Env = append([]string{}, spec.Env...)
	}
	cmd.Dir = spec.Dir
	cmd.Stdin = spec.Stdin
	cmd.Stdout, cmd.Stderr = spec.Output, spec.Output
	// A program it forked may hold an output pipe open after it exits:
	// the wait for the copy ends anyway.
	cmd.WaitDelay = 5 * time.Second
	if spec.Log != "" {
		log, err := os.OpenFile(spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("opening the log of %s: %w", spec.Name, err)
		}
		// The child holds its own copy once started.
		defer func() { _ = log.Close() }()
		cmd.Stdout, cmd.Stderr = log, log
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: spec.Credential, Setpgid: spec.OwnGroup}
	if spec.DiesWithSuite {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	start := cmd.Start
	var err error
	if spec.Within != nil {
		err = spec.Within(start)
	} else {
		err = start()
	}
	if err != nil {
		if cmd.Process != nil {
			// Started, then Within failed: nothing may be left running.
			pid := cmd.Process.Pid
			if spec.OwnGroup {
				pid = -pid
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_ = cmd.Wait()
		}
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	p := &Proc{Name: spec.Name, PID: cmd.Process.Pid, Log: spec.Log, group: spec.OwnGroup,
		stopSignal: cmp.Or(spec.StopSignal, syscall.SIGTERM), stopTimeout: cmp.Or(spec.StopTimeout, 10*time.Second), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Running reports whether the process has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Err is how the process exited (nil for status 0); call it once Exited
// is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error { return syscall.Kill(p.PID, sig) }

// Stop sends the stop signal to the process, then SIGKILL after the stop
// timeout, and waits for the exit; with Spec.OwnGroup, what the process
// forked is killed then, as it should have ended with it.
func (p *Proc) Stop() {
	if p.Running() {
		_ = p.Signal(p.stopSignal)
		select {
		case <-p.done:
		case <-time.After(p.stopTimeout):
		}
	}
	p.Kill()
}

// Kill ends the process at once (SIGKILL), as a crash or a lost machine
// would, and waits for the exit; with Spec.OwnGroup, its whole group.
func (p *Proc) Kill() {
	if p.group {
		// Even once the leader is gone: nothing of it may outlive it.
		_ = syscall.Kill(-p.PID, syscall.SIGKILL)
	} else if p.Running() {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	<-p.done
}

// LogTail returns the last lines of the process's log.
func (p *Proc) LogTail(lines int) string {
	if p.Log == "" {
		return "(no log: its output went elsewhere)"
	}
	return Tail(p.Log, lines)
}

// Tail returns the last lines of a file, or why it cannot be read.
func Tail(file string, lines int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// Group records what a suite started: its processes and its namespaces.
type Group struct {
	dir         string
	stopTimeout time.Duration

	mu         sync.Mutex
	procs      []*Proc
	namespaces []*netns.Namespace
}

// NewGroup returns a group whose processes log to files of dir and get
// stopTimeout to exit after SIGTERM.
func NewGroup(dir string, stopTimeout time.Duration) *Group {
	return &Group{dir: dir, stopTimeout: stopTimeout}
}

// NewNS creates a network namespace and records it.
func (g *Group) NewNS(name string) (*netns.Namespace, error) {
	ns, err := netns.New(name)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.namespaces = append(g.namespaces, ns)
	g.mu.Unlock()
	return ns, nil
}

// Start runs a program inside ns (the world when nil), with env added to
// the suite's environment, logging to name.log in the group's folder, and
// records it.
func (g *Group) Start(ns *netns.Namespace, name string, env []string, path string, args ...string) (*Proc, error) {
	log := filepath.Join(g.dir, name+".log")
	// A program started again under its name starts a fresh log.
	if err := os.Remove(log); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the log of %s: %w", name, err)
	}
	spec := Spec{Name: name, Path: path, Args: args, Env: env, Log: log, StopTimeout: g.stopTimeout}
	if ns != nil {
		spec.Within = ns.Do
	}
	p, err := Start(spec)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.procs = append(g.procs, p)
	g.mu.Unlock()
	return p, nil
}

// Procs returns the processes started so far, in order.
func (g *Group) Procs() []*Proc {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Proc(nil), g.procs...)
}

// Namespaces returns the namespaces created so far, in order.
func (g *Group) Namespaces() []*netns.Namespace {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*netns.Namespace(nil), g.namespaces...)
}

// StopAll stops every process, the last started first (clients before
// what they talk to), and prints those that took more than two seconds.
func (g *Group) StopAll() {
	procs := g.Procs()
	for i := len(procs) - 1; i >= 0; i-- {
		t0 := time.Now()
		procs[i].Stop()
		if d := time.Since(t0); d > 2*time.Second {
			fmt.Printf("%s took %s to stop\n", procs[i].Name, d.Round(100*time.Millisecond))
		}
	}
}

// CloseNamespaces releases every namespace, first printing the sockets
// still open in it when printSockets is set (a process that outlived its
// stop would hold them).
func (g *Group) CloseNamespaces(printSockets bool) error {
	var errs []error
	for _, ns := range g.Namespaces() {
		if printSockets && ns.Open() {
			if socks := ns.Sockets(); socks != "" {
				fmt.Printf("sockets still in %s when it is released:\n%s\n", ns.Name, socks)
			}
		}
		errs = append(errs, ns.Close())
	}
	return errors.Join(errs...)
}

// Release ends what a cluster suite made: every process, the last started
// first; then stopControlPlane (what the group did not start; nil for
// none); then every namespace (printing the sockets still open in each when
// printSockets is set), and the world's bridge.
func (g *Group) Release(stopControlPlane func() error, bridge string, printSockets bool) error {
	g.StopAll()
	var errs []error
	if stopControlPlane != nil {
		errs = append(errs, stopControlPlane())
	}
	errs = append(errs, g.CloseNamespaces(printSockets), World("link del "+bridge))
	return errors.Join(errs...)
}

// Left returns an error for every recorded process that still exists and
// every process that still lives in one of the group's namespaces.
func (g *Group) Left() error {
	var errs []error
	for _, p := range g.Procs() {
		if err := syscall.Kill(p.PID, 0); err == nil || !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("process %s (pid %d) is still there", p.Name, p.PID))
		}
	}
	inodes := map[uint64]string{}
	for _, ns := range g.Namespaces() {
		inodes[ns.Inode] = ns.Name
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &st); err == nil {
			if name, ok := inodes[st.Ino]; ok {
				errs = append(errs, fmt.Errorf("process %s still lives in namespace %s", e.Name(), name))
			}
		}
	}
	return errors.Join(errs...)
}

// World runs `ip` commands in the suite's own namespace.
func World(commands ...string) error {
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("world: ip %q: %w: %s", commands, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// WaitLinksGone waits up to 30 s for the world's links whose names hold
// any of parts to vanish: the kernel destroys a namespace, and the veth
// ends it held, asynchronously once nothing references it.
func WaitLinksGone(ctx context.Context, parts ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
		if err != nil {
			return fmt.Errorf("listing links: %w", err)
		}
		var left []string
		for _, line := range strings.Split(string(out), "\n") {
			for _, part := range parts {
				if strings.Contains(line, part) {
					left = append(left, strings.TrimSpace(line))
					break
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("links left in the world (their namespaces still exist): %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Attach joins ns to the world's bridge by a veth pair, named veth on the
// world's side and eth0 in ns, which gets address (a CIDR such as
// 10.250.0.11/24).
func Attach(ns *netns.Namespace, bridge, veth, address string) error {
	if err := World("link add "+veth+" type veth peer name eth0 netns "+ns.Path(), "link set "+veth+" master "+bridge+" up"); err != nil {
		return err
	}
	return ns.IP("addr add "+address+" dev eth0", "link set eth0 up")
}

// RouteNode makes ns, attached at nodeIP, a node of a routed pod network:
// its default route goes through gateway (the world's address on the
// bridge), each other node's pod range through that node (routes: CIDR to
// node address), it forwards packets, and the world reaches its own pod
// range, podCIDR, through it.
func RouteNode(ns *netns.Namespace, nodeIP, gateway, podCIDR string, routes map[string]string) error {
	cmds := []string{"route add default via " + gateway}
	for _, cidr := range slices.Sorted(maps.Keys(routes)) {
		cmds = append(cmds, "route add "+cidr+" via "+routes[cidr])
	}
	if err := ns.IP(cmds...); err != nil {
		return err
	}
	if err := ns.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	return World("route add " + podCIDR + " via " + nodeIP)
}
