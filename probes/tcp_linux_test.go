//go:build linux

package probes

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullBacklogListener returns a loopback listener whose accept queue is full,
// so that the kernel drops further SYNs: a connect to it neither succeeds nor
// fails until the caller gives up. This is the loopback stand-in for an
// address that never answers.
func fullBacklogListener(t *testing.T) Target {
	t.Helper()
	_, target := fullBacklog(t)
	return target
}

// fullBacklog is fullBacklogListener, with the listener: accepting one
// connection makes room for the next SYN (a retransmission, a second
// later).
func fullBacklog(t *testing.T) (net.Listener, Target) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "backlog-0")
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	target := targetOf(t, l)

	// Fill the queue (backlog 0 holds one connection) until a connect hangs.
	for i := 0; ; i++ {
		if i == 16 {
			t.Skip("could not fill the accept queue")
		}
		d := net.Dialer{Timeout: 200 * time.Millisecond}
		c, err := d.Dial("tcp4", target.Addr())
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	return l, target
}

func TestTCPProbeTimeout(t *testing.T) {
	target := fullBacklogListener(t)
	p, _ := NewTCP(TCPConfig{})
	const timeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res := p.Probe(ctx, target)
	wantReason(t, res, Failure, ReasonTimeout)
	if res.Latency < timeout/2 {
		t.Errorf("the probe gave up after %v, before its deadline", res.Latency)
	}
}

// timeWaitHost is a loopback address no other test uses, so that the
// TIME_WAIT sockets counted are this test's own.
const timeWaitHost = "127.0.0.77"

// timeWaitCount counts the TIME_WAIT sockets from or to timeWaitHost, in
// /proc/net/tcp.
func timeWaitCount(t testing.TB) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	const hexHost = "4D00007F:" // 127.0.0.77, little-endian
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 4 || fields[3] != "06" { // 06: TIME_WAIT
			continue
		}
		if strings.HasPrefix(fields[1], hexHost) || strings.HasPrefix(fields[2], hexHost) {
			n++
		}
	}
	return n
}

// TestTCPProbeLeavesNoTimeWait checks the reason for closing with a reset: a
// normal close leaves one TIME_WAIT socket per connection, a probe none.
func TestTCPProbeLeavesNoTimeWait(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp")
	}
	const probes = 50
	// run connects probes times to a server that reads until the client's
	// FIN or RST and closes, and returns the port once the server is done.
	run := func(t *testing.T, connect func(Target)) {
		l := listen(t, "tcp4", timeWaitHost)
		handled := make(chan struct{}, probes)
		serve(t, l, func(c net.Conn) {
			go func() {
				readAll(c)
				c.Close()
				handled <- struct{}{}
			}()
		})
		target := targetOf(t, l)
		for range probes {
			connect(target)
		}
		for range probes {
			<-handled
		}
	}

	t.Run("plain close", func(t *testing.T) {
		before := timeWaitCount(t)
		run(t, func(target Target) {
			c, err := net.Dial("tcp4", target.Addr())
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		})
		n := 0
		for deadline := time.Now().Add(5 * time.Second); n < probes && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			n = timeWaitCount(t) - before
		}
		t.Logf("%d TIME_WAIT sockets after %d plain connect-and-close", n, probes)
	})
	t.Run("probe", func(t *testing.T) {
		p, _ := NewTCP(TCPConfig{})
		before := timeWaitCount(t)
		run(t, func(target Target) {
			if res := p.Probe(context.Background(), target); !res.Passed() {
				t.Fatal(res)
			}
		})
		time.Sleep(100 * time.Millisecond) // let any FIN exchange finish
		if n := timeWaitCount(t) - before; n > 0 {
			t.Errorf("%d new TIME_WAIT sockets after %d probes, want none", n, probes)
		}
	})
}
