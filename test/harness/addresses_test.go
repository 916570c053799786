package harness_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/swh-dev/swh/test/harness"
)

// block returns the /24 of a pod address.
func block(t *testing.T, ip string) netip.Prefix {
	t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	p, err := a.Prefix(24)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPodIPsAreDistinctPodAddresses(t *testing.T) {
	pods := netip.MustParsePrefix("10.244.0.0/16")
	reserved := block(t, harness.SandboxCheckAddress)
	var all []string
	for _, n := range []int{1, 3, 254, 300, 2} {
		ips := harness.PodIPs(t, n)
		if len(ips) != n {
			t.Fatalf("PodIPs(%d) returned %d addresses", n, len(ips))
		}
		if n <= 254 && block(t, ips[0]) != block(t, ips[n-1]) {
			t.Errorf("PodIPs(%d) spans two /24s: %s to %s", n, ips[0], ips[n-1])
		}
		all = append(all, ips...)
	}
	all = append(all, harness.PodIP(t))
	seen := map[string]bool{}
	for _, ip := range all {
		a := netip.MustParseAddr(ip)
		last := a.As4()[3]
		switch {
		case seen[ip]:
			t.Errorf("%s handed out twice", ip)
		case !pods.Contains(a) || reserved.Contains(a):
			t.Errorf("%s is not a pod address of hack/netns.sh, or is reserved", ip)
		case last == 0 || last == 255:
			t.Errorf("%s ends in .0 or .255", ip)
		}
		seen[ip] = true
	}
}

// TestPodIPsOfAnotherProcessAreNotHandedOut runs this test binary again as
// another suite of the same run: asked for as many /24s as it takes to
// reach the one this process hands out, it gets others.
func TestPodIPsOfAnotherProcessAreNotHandedOut(t *testing.T) {
	if os.Getenv("SWH_HARNESS_ADDRESS_HOLDER") != "" {
		t.Skip("this is the other process")
	}
	mine := block(t, harness.PodIPs(t, 254)[0])
	blocks := int(mine.Addr().As4()[2]) + 1
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldPodIPs$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("SWH_HARNESS_ADDRESS_HOLDER=%d", blocks))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the other process: %v\n%s", err, out)
	}
	theirs, ok := strings.CutPrefix(strings.SplitN(string(out), "\n", 2)[0], "took ")
	if !ok {
		t.Fatalf("the other process said %q", out)
	}
	for ip := range strings.SplitSeq(theirs, ",") {
		if block(t, ip) == mine {
			t.Fatalf("the other process got %s, in %s that this one hands out", ip, mine)
		}
	}
}

// TestHoldPodIPs is the other process of
// TestPodIPsOfAnotherProcessAreNotHandedOut: it takes the /24s it is asked
// for and prints their first addresses.
func TestHoldPodIPs(t *testing.T) {
	blocks, err := strconv.Atoi(os.Getenv("SWH_HARNESS_ADDRESS_HOLDER"))
	if err != nil {
		t.Skip("run by TestPodIPsOfAnotherProcessAreNotHandedOut")
	}
	var firsts []string
	for range blocks {
		firsts = append(firsts, harness.PodIPs(t, 254)[0])
	}
	fmt.Printf("took %s\n", strings.Join(firsts, ","))
}

// TestPodIPv6TakenUntilTheTestEnds: two tests at once get two addresses,
// and one ending gives its address back: 17 tests in a row take one each
// of the 16.
func TestPodIPv6TakenUntilTheTestEnds(t *testing.T) {
	held := harness.PodIPv6(t)
	if !netip.MustParsePrefix("fd00:10:244::/112").Contains(netip.MustParseAddr(held)) {
		t.Fatalf("%s is not one of hack/netns.sh's IPv6 pod addresses", held)
	}
	for i := range 17 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if ip := harness.PodIPv6(t); ip == held {
				t.Fatalf("%s handed out twice to tests running at once", ip)
			}
		})
	}
}
