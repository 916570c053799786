package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The scheduler's servers can run in a network namespace of their own, made
// by this benchmark for the child process (CLONE_NEWNET), linked to the
// prober's namespace by a veth pair it creates and deletes, on addresses of
// the benchmarking range 198.18.0.0/15 (RFC 2544). That is how a prober
// meets its targets in production: over a link, not on loopback. No route
// leads anywhere else, and the namespace dies with the child.
const (
	// netnsEnv tells the child to configure its end of the veth pair and
	// listen on its address, once its parent says the pair exists.
	netnsEnv   = "SWH_PEERS_NETNS"
	vethProber = "swhpeer0" // in the prober's namespace
	vethServer = "swhpeer1" // in the child's
)

var (
	proberPrefix = netip.MustParsePrefix("198.18.0.1/30")
	serverPrefix = netip.MustParsePrefix("198.18.0.2/30")
)

// Placement is where the servers of a scheduler run listen.
type Placement string

const (
	Loopback Placement = "loopback" // 127.0.0.1, in the prober's network namespace
	Netns    Placement = "netns"    // 198.18.0.2, in a network namespace of their own, over a veth pair
)

// describe says where the servers of p are, for a table's title.
func (p Placement) describe() string {
	if p == Netns {
		return fmt.Sprintf("%s in the server process's own network namespace, over a veth pair from %s", serverPrefix.Addr(), proberPrefix.Addr())
	}
	return "127.0.0.1, in the prober's network namespace"
}

// netnsDefault reports whether the servers of the scheduler runs go in their
// own network namespace unless told otherwise: as root inside hack/netns.sh,
// where the benchmark may create namespaces and links and nothing it links
// reaches the host.
func netnsDefault() bool {
	return os.Geteuid() == 0 && os.Getenv("SWH_NETNS") == "1"
}

// ip runs the ip command of iproute2.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netnsAttr makes a child start in a new network namespace.
func netnsAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
}

// linkChild creates the veth pair between this namespace and that of the
// process pid, and brings up this side with its address.
func linkChild(pid int) error {
	unlinkChild() // a leftover of a run that was killed
	for _, args := range [][]string{
		{"link", "add", vethProber, "type", "veth", "peer", "name", vethServer, "netns", strconv.Itoa(pid)},
		{"addr", "add", proberPrefix.String(), "dev", vethProber},
		{"link", "set", vethProber, "up"},
	} {
		if err := ip(args...); err != nil {
			unlinkChild()
			return fmt.Errorf("linking the server process's network namespace: %w", err)
		}
	}
	return nil
}

// unlinkChild deletes the veth pair, if it exists. (The kernel deletes it
// too when the child's namespace goes away.)
func unlinkChild() {
	_ = exec.Command("ip", "link", "del", vethProber).Run()
}

// setupChildNet runs in the child, in its new namespace, once the pair
// exists: it brings up loopback and its end of the pair with its address,
// and returns the address to listen on.
func setupChildNet() (netip.Addr, error) {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", serverPrefix.String(), "dev", vethServer},
		{"link", "set", vethServer, "up"},
	} {
		if err := ip(args...); err != nil {
			return netip.Addr{}, err
		}
	}
	// Wait for the carrier (both ends up), so that the first probes are
	// not dropped and retransmitted a second later.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		data, err := os.ReadFile("/sys/class/net/" + vethServer + "/operstate")
		if err == nil && strings.TrimSpace(string(data)) == "up" {
			break
		}
	}
	return serverPrefix.Addr(), nil
}

// softirqTicks returns the time all CPUs spent in softirq handlers so far,
// from /proc/stat (machine-wide: it is not per namespace or process).
func softirqTicks() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq ...
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	ticks, _ := strconv.ParseInt(f[7], 10, 64)
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// irqTimeAccounting reads CONFIG_IRQ_TIME_ACCOUNTING from the running
// kernel's configuration: "y", "n", or "" if the configuration is not
// readable. Without it, the time a CPU spends in softirq handlers is charged
// to whatever task they interrupted: the kernel's processing of packets,
// which on loopback and on a veth pair runs on the sending CPU as soon as
// the sender leaves its bottom-half-disabled section, counts as that
// task's system time. With it, it is taken out of the task's time.
func irqTimeAccounting() string {
	var cfg []byte
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			cfg, _ = io.ReadAll(z)
		}
	}
	if cfg == nil {
		var uts syscall.Utsname
		if syscall.Uname(&uts) == nil {
			release := make([]byte, 0, len(uts.Release))
			for _, c := range uts.Release {
				if c == 0 {
					break
				}
				release = append(release, byte(c))
			}
			cfg, _ = os.ReadFile("/boot/config-" + string(release))
		}
	}
	if cfg == nil {
		return ""
	}
	for _, line := range strings.Split(string(cfg), "\n") {
		switch strings.TrimSpace(line) {
		case "CONFIG_IRQ_TIME_ACCOUNTING=y":
			return "y"
		case "# CONFIG_IRQ_TIME_ACCOUNTING is not set":
			return "n"
		}
	}
	return "n"
}
