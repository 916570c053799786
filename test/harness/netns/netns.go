// Package netns runs code, programs and sockets inside network namespaces
// that a test creates and holds by file descriptor, so that nothing of them
// outlives the test process.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Namespace is a network namespace held by a file descriptor of this process:
// it has no name under /run/netns, so nothing of it exists outside this
// process, and the kernel destroys it once the descriptor is closed and no
// process or socket lives in it any more.
type Namespace struct {
	// Name is for messages only.
	Name string
	fd   int
	// Inode identifies the namespace in /proc/*/ns/net.
	Inode uint64
	// ports are the source ports DialContext's TCP clients take.
	ports sourcePorts
}

// currentNetNS opens the network namespace of the calling thread.
func currentNetNS() (int, error) {
	fd, err := syscall.Open("/proc/thread-self/ns/net", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the thread's network namespace: %w", err)
	}
	return fd, nil
}

func setns(fd int) error {
	return unix.Setns(fd, unix.CLONE_NEWNET)
}

// onLockedThread runs fn on an OS thread of its own that is in the network
// namespace target (or a new one when target < 0), then moves the thread back
// to its original namespace. A thread that cannot be moved back is left
// locked, so the Go runtime ends it with the goroutine instead of reusing it.
func onLockedThread(target int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := currentNetNS()
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = syscall.Close(orig) }()
		if target < 0 {
			err = syscall.Unshare(syscall.CLONE_NEWNET)
		} else {
			err = setns(target)
		}
		if err != nil {
			errc <- fmt.Errorf("entering a network namespace: %w", err)
			return // the thread may have moved: let it end with this goroutine
		}
		fnErr := fn()
		if err := setns(orig); err != nil {
			errc <- fmt.Errorf("returning to the original network namespace: %w (after %v)", err, fnErr)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// New creates an empty network namespace with its loopback up.
func New(name string) (*Namespace, error) {
	ns := &Namespace{Name: name, fd: -1}
	err := onLockedThread(-1, func() error {
		fd, err := currentNetNS()
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			_ = syscall.Close(fd)
			return fmt.Errorf("stat of the new namespace: %w", err)
		}
		ns.fd, ns.Inode = fd, st.Ino
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("creating network namespace %s: %w", name, err)
	}
	if err := ns.IP("link set lo up"); err != nil {
		return nil, errors.Join(err, ns.Close())
	}
	return ns, nil
}

// Path is a file that names the namespace for other programs, as in
// `ip link set DEV netns PATH`.
func (ns *Namespace) Path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.fd) }

// Do runs fn with the calling thread inside the namespace: sockets fn opens
// and processes it starts belong to the namespace.
func (ns *Namespace) Do(fn func() error) error {
	if ns.fd < 0 {
		return fmt.Errorf("network namespace %s is closed", ns.Name)
	}
	return onLockedThread(ns.fd, fn)
}

// Run runs a command to completion inside the namespace.
func (ns *Namespace) Run(name string, args ...string) error {
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w: %s", ns.Name, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Output runs a command inside the namespace and returns what it printed.
func (ns *Namespace) Output(name string, args ...string) (string, error) {
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return strings.TrimSpace(string(out)), err
}

// IP runs `ip` commands, one per argument, as a batch inside the namespace.
func (ns *Namespace) IP(commands ...string) error {
	var out []byte
	err := ns.Do(func() error {
		cmd := exec.Command("ip", "-batch", "-")
		cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\n")
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: ip %q: %w: %s", ns.Name, commands, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Sysctl writes a per-namespace setting such as net/ipv4/ip_forward.
func (ns *Namespace) Sysctl(key, value string) error {
	return ns.Do(func() error {
		if err := os.WriteFile("/proc/sys/"+key, []byte(value), 0o644); err != nil {
			return fmt.Errorf("%s: setting %s: %w", ns.Name, key, err)
		}
		return nil
	})
}

// Listen opens a TCP listener inside the namespace.
func (ns *Namespace) Listen(addr string) (net.Listener, error) {
	var l net.Listener
	err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: listening on %s: %w", ns.Name, addr, err)
	}
	return l, nil
}

// DialContext connects from inside the namespace; it fits
// http.Transport.DialContext and lib/pq's Dialer. A dial gives up after 4 s
// (three SYNs) even without a deadline in ctx: http.Transport finishes the
// dials of requests that timed out in the background, and a socket still
// sending SYNs to an address that drops them would keep the namespace alive.
// A TCP dial binds a source port from sourcePorts, which holds back the
// ports of failed connections (see there why); addr should be an address,
// since the dials to every address a name resolves to share the port.
func (ns *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := ns.Do(func() error {
		if !strings.HasPrefix(network, "tcp") {
			var err error
			conn, err = (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, addr)
			return err
		}
		for attempt := 1; ; attempt++ {
			port := ns.ports.pick(time.Now())
			d := &net.Dialer{Timeout: dialTimeout, LocalAddr: &net.TCPAddr{Port: port}}
			c, err := d.DialContext(ctx, network, addr)
			if errors.Is(err, syscall.EADDRINUSE) && attempt < bindAttempts {
				continue // another socket holds the port
			}
			if leavesFlow(err) {
				ns.ports.fail(port, time.Now())
			}
			if err != nil {
				return err
			}
			conn = &trackedConn{Conn: c, port: port, ports: &ns.ports}
			return nil
		}
	})
	return conn, err
}

// dialTimeout lets a dial send three SYNs (at 0, 1 and 3 s).
const dialTimeout = 4 * time.Second

// SourcePortHeld reports whether DialContext holds back port, because a
// connection from it failed within the last few minutes.
func (ns *Namespace) SourcePortHeld(port int) bool { return ns.ports.held(port, time.Now()) }

// Sockets lists the TCP sockets left in the namespace, but those in
// TIME-WAIT: any other keeps the namespace alive after its descriptor is
// closed.
func (ns *Namespace) Sockets() string {
	var out []byte
	_ = ns.Do(func() error {
		var err error
		out, err = exec.Command("ss", "-tanH", "exclude", "time-wait").CombinedOutput()
		return err
	})
	return strings.TrimSpace(string(out))
}

// Close releases the namespace; the kernel destroys it once nothing lives in
// it any more.
func (ns *Namespace) Close() error {
	if ns.fd < 0 {
		return nil
	}
	err := syscall.Close(ns.fd)
	ns.fd = -1
	if err != nil {
		return fmt.Errorf("closing network namespace %s: %w", ns.Name, err)
	}
	return nil
}

// Open reports whether the namespace is still held (not yet closed).
func (ns *Namespace) Open() bool { return ns.fd >= 0 }

// LinkPod joins pod to node as a point-to-point CNI plugin does: a veth
// pair named host on the node's side and eth0 in the pod, the pod holding
// ip/32 with gateway (an address of the node's side) as its default route,
// and the node routing ip to host.
func LinkPod(node, pod *Namespace, host, ip, gateway string) error {
	if err := node.IP(
		"link add "+host+" type veth peer name eth0 netns "+pod.Path(),
		"link set "+host+" up",
		"addr add "+gateway+"/32 dev "+host,
		"route add "+ip+"/32 dev "+host,
	); err != nil {
		return err
	}
	return pod.IP(
		"addr add "+ip+"/32 dev eth0",
		"link set eth0 up",
		"route add "+gateway+"/32 dev eth0",
		"route add default via "+gateway+" dev eth0",
	)
}
