package harness

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
)

// Pod addresses for tests. Inside hack/netns.sh every address of
// 10.244.0.0/16 is local, and fd00:10:244::1 to ::10; the suites of one run
// share that namespace, and `go test` runs packages (processes) side by side
// (-p), the tests of a package may run in parallel, and -count runs each test
// again in the same process. A server one test left, or an agent still
// probing a pod of a test that ended, must never meet another test's server
// on the same address. So addresses come from here, never from a test:
//
//   - a process claims a /24 (10.244.B.0/24, B from 0 to 254; 10.244.255.0/24
//     holds SandboxCheckAddress) by binding an abstract Unix socket named
//     after it. The kernel keeps such names unique within a network
//     namespace, frees them when the process ends, even killed, and leaves
//     no file behind;
//   - it hands its blocks' addresses (.1 to .254) out in order and never
//     twice: 65,000 addresses per process, enough for any -count.
//
// IPv6 has 16 addresses only: each is claimed the same way, and given back
// when the test that took it ends.

// addressPool is the process's share of the pod addresses. It is one per
// process because what it shares out is: a package-level value, as a test
// binary's tests have no other common owner.
type addressPool struct {
	mu sync.Mutex
	// held are the claimed /24s, kept open until the process ends.
	held []net.Listener
	// block is the /24 handing out addresses (-1: none yet); host is its
	// next address; nextBlock is the next /24 to try to claim.
	block, host, nextBlock int
	// v6 holds the claims of the IPv6 addresses taken, by their last word.
	v6 map[int]net.Listener
}

var pool = addressPool{block: -1}

const (
	lastIPv4Block = 254 // 10.244.255.0/24 holds SandboxCheckAddress
	hostsPerBlock = 254 // .1 to .254
	ipv6Addresses = 16  // fd00:10:244::1 to ::10, as hack/netns.sh adds them
)

// claim binds the abstract Unix socket name for this network namespace:
// taken is true when another process holds it.
func claim(name string) (l net.Listener, taken bool, err error) {
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: "@swh-test-pod-addresses/" + name, Net: "unix"})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("claiming %s: %w", name, err)
	}
	return l, false, nil
}

// PodIPs returns n IPv4 pod addresses in 10.244.0.0/16 that no other test
// uses: none of this process, before or after, and none of another process
// running meanwhile. Up to 254 are consecutive in one /24. They are
// bindable inside hack/netns.sh only (RequireNetworkSandbox).
func PodIPs(t testing.TB, n int) []string {
	t.Helper()
	ips, err := pool.ipv4(n)
	if err != nil {
		t.Fatalf("taking %d pod addresses: %v", n, err)
	}
	return ips
}

// PodIP returns one IPv4 pod address, as PodIPs.
func PodIP(t testing.TB) string {
	t.Helper()
	return PodIPs(t, 1)[0]
}

// PodIPv6 returns an IPv6 pod address (fd00:10:244::1 to ::10) that no
// other test uses until t ends.
func PodIPv6(t testing.TB) string {
	t.Helper()
	ip, release, err := pool.ipv6()
	if err != nil {
		t.Fatalf("taking an IPv6 pod address: %v", err)
	}
	t.Cleanup(release)
	return ip
}

func (p *addressPool) ipv4(n int) ([]string, error) {
	if n < 1 {
		return nil, fmt.Errorf("%d addresses asked", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ips := make([]string, 0, n)
	for len(ips) < n {
		left := n - len(ips)
		// A request that fits in one block is never split.
		if p.block < 0 || p.host > hostsPerBlock || (left <= hostsPerBlock && p.host+left-1 > hostsPerBlock) {
			if err := p.claimBlock(); err != nil {
				return nil, err
			}
		}
		for ; len(ips) < n && p.host <= hostsPerBlock; p.host++ {
			ips = append(ips, fmt.Sprintf("10.244.%d.%d", p.block, p.host))
		}
	}
	return ips, nil
}

// claimBlock claims the next /24 no process holds.
func (p *addressPool) claimBlock() error {
	for ; p.nextBlock <= lastIPv4Block; p.nextBlock++ {
		l, taken, err := claim(fmt.Sprintf("10.244.%d.0/24", p.nextBlock))
		if err != nil {
			return err
		}
		if taken {
			continue // another process of this run has it
		}
		p.held = append(p.held, l)
		p.block, p.host = p.nextBlock, 1
		p.nextBlock++
		return nil
	}
	return fmt.Errorf("every /24 of 10.244.0.0/16 is taken (%d by this process)", len(p.held))
}

func (p *addressPool) ipv6() (string, func(), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 1; i <= ipv6Addresses; i++ {
		if p.v6[i] != nil {
			continue
		}
		ip := fmt.Sprintf("fd00:10:244::%x", i)
		l, taken, err := claim(ip)
		if err != nil {
			return "", nil, err
		}
		if taken {
			continue
		}
		if p.v6 == nil {
			p.v6 = map[int]net.Listener{}
		}
		p.v6[i] = l
		release := func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			_ = l.Close()
			delete(p.v6, i)
		}
		return ip, release, nil
	}
	return "", nil, fmt.Errorf("all %d are taken", ipv6Addresses)
}
