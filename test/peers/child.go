package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// The servers the probers are measured against run in a child process (this
// same binary, told so by childEnv), so that the CPU the parent measures with
// getrusage is the probers' and not the servers'. They listen on 127.0.0.1
// only, or, for the scheduler runs, on 198.18.0.2 in a network namespace of
// their own (netns.go). The child prints one "ip:port" line per listener,
// answers "cpu" on its standard input with its own CPU time, and exits when
// its standard input closes (the parent went away). In its own namespace, it
// first waits for a line on its standard input: its parent has created the
// link.
const childEnv = "SWH_PEERS_SERVE"

// serveChild runs the child when this process is one and reports whether it
// was; the caller then returns.
func serveChild() bool {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return false
	}
	if err := runChild(spec); err != nil {
		fmt.Fprintln(os.Stderr, "peers child:", err)
		os.Exit(1)
	}
	return true
}

func runChild(spec string) error {
	kind, count, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return fmt.Errorf("bad %s=%q, want tcp:N, http:N or grpc:N", childEnv, spec)
	}
	in := bufio.NewScanner(os.Stdin)
	addr := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	if os.Getenv(netnsEnv) != "" {
		if !in.Scan() {
			return errors.New("the parent went away before linking the network namespace")
		}
		if addr, err = setupChildNet(); err != nil {
			return err
		}
	}
	listeners := make([]net.Listener, 0, n)
	for range n {
		l, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 0).String())
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	out := bufio.NewWriter(os.Stdout)
	for _, l := range listeners {
		fmt.Fprintln(out, l.Addr())
	}
	if err := out.Flush(); err != nil {
		return err
	}
	var grpcSrv *grpc.Server
	for _, l := range listeners {
		switch kind {
		case "tcp":
			go acceptAndDrain(l)
		case "http":
			srv := &http.Server{Handler: http.HandlerFunc(healthz), ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(l) }()
		case "grpc":
			// One grpc-go server with its health service on every
			// listener.
			if grpcSrv == nil {
				grpcSrv = newGRPCServer()
			}
			go func() { _ = grpcSrv.Serve(l) }()
		default:
			return fmt.Errorf("unknown server kind %q", kind)
		}
	}
	for in.Scan() {
		if in.Text() == "cpu" {
			user, sys := cpuTime()
			fmt.Printf("%d %d\n", user, sys)
		}
	}
	return nil
}

// acceptAndDrain accepts connections and reads each until the client closes
// or resets it, then closes: the client is always the side that closes
// first, so TIME_WAIT sockets, if any, are on the prober's side.
func acceptAndDrain(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			_, _ = io.Copy(io.Discard, c)
			_ = c.Close()
		}()
	}
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "ok\n")
}

// child is the parent's handle on a server process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	linked bool // a veth pair links it to this namespace
	Addrs  []string
}

// startChild starts n servers of kind ("tcp", "http" or "grpc") in a child process,
// on 127.0.0.1 or, with placement Netns, in a new network namespace.
func startChild(kind string, n int, placement Placement) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s:%d", childEnv, kind, n))
	if placement == Netns {
		cmd.Env = append(cmd.Env, netnsEnv+"=1")
		cmd.SysProcAttr = netnsAttr()
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the server process: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if placement == Netns {
		c.linked = true
		if err := linkChild(cmd.Process.Pid); err != nil {
			c.Stop()
			return nil, err
		}
		if _, err := io.WriteString(stdin, "linked\n"); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for len(c.Addrs) < n && c.out.Scan() {
		c.Addrs = append(c.Addrs, c.out.Text())
	}
	if len(c.Addrs) < n {
		c.Stop()
		return nil, fmt.Errorf("the server process listed %d of %d listeners", len(c.Addrs), n)
	}
	return c, nil
}

// CPU returns the CPU time the server process has used so far.
func (c *child) CPU() (time.Duration, error) {
	if _, err := io.WriteString(c.stdin, "cpu\n"); err != nil {
		return 0, err
	}
	if !c.out.Scan() {
		return 0, errors.New("the server process did not report its CPU time")
	}
	var user, sys time.Duration
	if _, err := fmt.Sscan(c.out.Text(), &user, &sys); err != nil {
		return 0, err
	}
	return user + sys, nil
}

// Stop ends the server process and waits for it (5 s at most, then kills
// it), and deletes the veth pair, if any.
func (c *child) Stop() {
	if c.linked {
		defer unlinkChild()
	}
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = c.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}
