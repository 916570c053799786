package netns

import (
	"sync"
	"time"
)

// The source ports a namespace's TCP clients dial from. kube-proxy clears
// no TCP conntrack entry when an endpoint goes: a SYN that went to a pod
// that never answered leaves a SYN_SENT entry on the client's node for
// 120 s after the last retransmission, and a new connection that happens to
// reuse the same source port to the same Service matches that entry and is
// sent to the dead pod again, whatever kube-proxy's rules say by then. The
// kernel picks ports at random and reuses them freely, so a test client
// would fail, once in a long while, long after the data path converged.
// Clients here take ports in turn and never reuse one whose dial failed
// within that window, as a client with many distinct connections would.
const (
	firstSourcePort = 20000 // below the kernel's ephemeral range
	lastSourcePort  = 29999 // below kube-proxy's NodePort range
	// staleSYNWindow is how long after a failed dial its source port stays
	// out of use: nf_conntrack_tcp_timeout_syn_sent plus a margin.
	staleSYNWindow = 125 * time.Second
)

// sourcePorts hands out source ports in turn, skipping the ports whose
// dial failed within staleSYNWindow. The zero value is ready to use.
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
		port := firstSourcePort + s.next%span
		s.next = (s.next + 1) % span
		if at, held := s.failed[port]; held && now.Sub(at) < staleSYNWindow {
			continue
		}
		delete(s.failed, port)
		return port
	}
	// Every port failed within the window: a test gone very wrong; reuse
	// rather than refuse to dial.
	port := firstSourcePort + s.next%span
	s.next = (s.next + 1) % span
	return port
}

// fail holds port back from now on for staleSYNWindow.
func (s *sourcePorts) fail(port int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed == nil {
		s.failed = map[int]time.Time{}
	}
	s.failed[port] = now
}
