package netns

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// The source ports a namespace's TCP clients dial from. kube-proxy clears
// no TCP conntrack entry when an endpoint goes. A SYN that went to a pod
// that never answered leaves a SYN_SENT entry on the client's node for
// 120 s after the last retransmission; a connection that lost its pod
// midway leaves an ESTABLISHED or FIN_WAIT one while the kernel retransmits
// its FIN. A new connection that reuses such a source port to the same
// Service matches the entry (conntrack takes its SYN for a retransmission,
// or ignores it) and is sent to the dead pod again, whatever kube-proxy's
// rules say by then. The kernel picks ports at random and reuses them
// freely, so a test client failed, once in a long while, long after the
// data path had converged. Clients here take ports in turn and never reuse
// one whose connection failed within staleFlowWindow, as a client with many
// distinct connections would.
const (
	firstSourcePort = 10000
	lastSourcePort  = 60999 // the kernel's ephemeral range ends here
	// staleFlowWindow is how long a port whose connection failed stays out
	// of use: the SYN_SENT or FIN_WAIT timeout (120 s) after up to about
	// 100 s of retransmissions, with a margin.
	staleFlowWindow = 5 * time.Minute
	// bindAttempts bounds the ports tried for one dial when others are
	// taken (a socket in TIME_WAIT holds its port for 60 s).
	bindAttempts = 100
)

// sourcePorts hands out source ports in turn, skipping the ports whose
// connection failed within staleFlowWindow. The zero value is ready to use.
type sourcePorts struct {
	mu     sync.Mutex
	next   int
	failed map[int]time.Time
}

// pick returns the next port not held back at now.
func (s *sourcePorts) pick(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	span := lastSourcePort - firstSourcePort + 1
	for range span {
		port := firstSourcePort + s.next
		s.next = (s.next + 1) % span
		if at, held := s.failed[port]; held && now.Sub(at) < staleFlowWindow {
			continue
		}
		delete(s.failed, port)
		return port
	}
	// Every port failed within the window: a test gone very wrong; reuse
	// rather than refuse to dial.
	port := firstSourcePort + s.next
	s.next = (s.next + 1) % span
	return port
}

// fail holds port back from now on for staleFlowWindow.
func (s *sourcePorts) fail(port int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[int]time.Time{}
	}
	s.failed[port] = now
}

// held reports whether port is held back at now.
func (s *sourcePorts) held(port int, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.failed[port]
	return ok && now.Sub(at) < staleFlowWindow
}

// leavesFlow reports whether a failed dial may have left a conntrack entry
// that a later SYN from its port would follow. A refused dial was answered
// (a RST, or kube-proxy's reject of a Service without endpoints) and left
// none; a port already taken sent nothing.
func leavesFlow(err error) bool {
	return err != nil && !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EADDRINUSE)
}

// trackedConn holds its source port back once a read or write fails: the
// connection may have lost its pod, and its conntrack entry outlives it.
type trackedConn struct {
	net.Conn
	port  int
	ports *sourcePorts
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.check(err)
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.check(err)
	return n, err
}

func (c *trackedConn) check(err error) {
	if err != nil && !errors.Is(err, io.EOF) {
		c.ports.fail(c.port, time.Now())
	}
}
