package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/swh-dev/swh/test/harness/netns"
)

// world runs `ip` commands in the suite's own namespace.
func world(commands ...string) error {
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(commands, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("world: ip %q: %w: %s", commands, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) newNS(name string) (*netns.Namespace, error) {
	ns, err := netns.New(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.namespaces = append(c.namespaces, ns)
	c.mu.Unlock()
	return ns, nil
}

// start runs a program inside ns (the world when nil), logging to a file of
// the cluster's folder.
func (c *Cluster) start(ns *netns.Namespace, name string, env []string, path string, args ...string) (*Proc, error) {
	log, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	if ns != nil {
		err = ns.Do(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Proc{Name: name, PID: cmd.Process.Pid, Log: log.Name(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// addNode creates node i: its namespace on the bridge, routes to the other
// nodes' pod ranges, forwarding on, and a client namespace.
func (c *Cluster) addNode(i, count int) error {
	ns, err := c.newNS(nodeName(i))
	if err != nil {
		return err
	}
	n := &Node{Index: i, Name: nodeName(i), IP: nodeIP(i), NS: ns, c: c, dir: filepath.Join(c.dir, nodeName(i))}
	c.Nodes = append(c.Nodes, n)
	if err := world("link add "+nodeVeth(i)+" type veth peer name eth0 netns "+ns.Path(), "link set "+nodeVeth(i)+" master "+bridgeName+" up"); err != nil {
		return err
	}
	cmds := []string{"addr add " + n.IP + "/24 dev eth0", "link set eth0 up", "route add default via " + worldIP}
	for j := 1; j <= count; j++ {
		if j != i {
			cmds = append(cmds, "route add "+podCIDR(j)+" via "+nodeIP(j))
		}
	}
	if err := ns.IP(cmds...); err != nil {
		return err
	}
	if err := ns.Sysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	if err := world("route add " + podCIDR(i) + " via " + n.IP); err != nil {
		return err
	}
	return n.addClient()
}

// addClient makes the node's client namespace at .250 of its pod range,
// routed through the node like a pod.
func (n *Node) addClient() error {
	ns, err := n.c.newNS("client-" + n.Name)
	if err != nil {
		return err
	}
	ip := podIP(n.Index, 250)
	host := fmt.Sprintf("swh-rc%d", n.Index)
	if err := n.NS.IP(
		"link add "+host+" type veth peer name eth0 netns "+ns.Path(),
		"link set "+host+" up",
		"addr add "+podGateway(n.Index)+"/32 dev "+host,
		"route add "+ip+"/32 dev "+host,
	); err != nil {
		return err
	}
	if err := ns.IP(
		"addr add "+ip+"/32 dev eth0", "link set eth0 up",
		"route add "+podGateway(n.Index)+"/32 dev eth0",
		"route add default via "+podGateway(n.Index)+" dev eth0",
	); err != nil {
		return err
	}
	n.Client = &Client{IP: ip, NS: ns}
	return nil
}

// startProxy starts the node's kube-proxy in the node's network namespace
// (as a host process: kube-proxy is not what the scenarios test).
func (n *Node) startProxy(kubeconfig string) error {
	config := filepath.Join(n.c.dir, n.Name+"-kube-proxy.yaml")
	data := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s:10256
metricsBindAddress: %s:10249
mode: %s
clusterCIDR: %s
detectLocalMode: ClusterCIDR
nodePortAddresses: [%q]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
nftables:
  minSyncPeriod: 100ms
  syncPeriod: 30s
iptables:
  minSyncPeriod: 100ms
  syncPeriod: 30s
  localhostNodePorts: false
`, kubeconfig, n.Name, n.IP, n.IP, n.IP, n.c.proxyMode, clusterCIDR, bridgeCIDR)
	if err := os.WriteFile(config, []byte(data), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", config, err)
	}
	p, err := n.c.start(n.NS, n.Name+"-kube-proxy", nil, filepath.Join(n.c.bin, "kube-proxy"), "--config="+config, "--v=1")
	if err != nil {
		return err
	}
	n.Proxy = p
	return nil
}

// Stop ends every process (the nodes' machines first, with their
// containers), the control plane, the namespaces, the bridge and the
// cgroups.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	var errs []error
	c.mu.Lock()
	procs := append([]*Proc(nil), c.procs...)
	c.mu.Unlock()
	// The machines first: kubelet must not restart containers while the
	// rest goes.
	for _, n := range c.Nodes {
		n.PowerOff()
	}
	for i := len(procs) - 1; i >= 0; i-- {
		t0 := time.Now()
		procs[i].Stop()
		if d := time.Since(t0); d > 2*time.Second {
			fmt.Printf("realnode: %s took %s to stop\n", procs[i].Name, d.Round(100*time.Millisecond))
		}
	}
	if c.CP != nil {
		errs = append(errs, c.CP.Stop())
	}
	for _, ns := range c.namespaces {
		errs = append(errs, ns.Close())
	}
	errs = append(errs, world("link del "+bridgeName))
	if c.cgroups != nil {
		// The kernel frees a cgroup's last tasks asynchronously.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := c.cgroups.removeAll()
			if err == nil || time.Now().After(deadline) {
				errs = append(errs, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// Check proves that nothing the cluster made is left: no recorded process,
// no process in its namespaces, no link, no cgroup, no file the nodes would
// have written on the host (/var, /run), and the host's sysctls unchanged.
func (c *Cluster) Check(ctx context.Context) error {
	var errs []error
	for _, p := range c.procs {
		if err := syscall.Kill(p.PID, 0); err == nil || !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("process %s (pid %d) is still there", p.Name, p.PID))
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("ip", "-o", "link", "show").CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("listing links: %w", err))
			break
		}
		var left []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "swh-rn") || strings.Contains(line, bridgeName) {
				left = append(left, strings.TrimSpace(line))
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("links left (their namespaces still exist): %v", left))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if c.cgroups != nil {
		if left := c.cgroups.left(); len(left) > 0 {
			errs = append(errs, fmt.Errorf("cgroups left: %v", left))
		}
	}
	now, err := readHostState()
	if err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, c.host.compare(now))
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		errs = append(errs, fmt.Errorf("the cluster's folder %s is still there", c.dir))
	}
	return errors.Join(errs...)
}

// RemoveDir removes the cluster's folder (logs, node files).
func (c *Cluster) RemoveDir() error {
	// containerd's native snapshots keep read-only files; root removes them.
	return os.RemoveAll(c.dir)
}

// hostState is what the nodes must not change on the host: the global
// sysctls kubelet writes and the paths kubelet, containerd and CNI use by
// default.
type hostState map[string]string

var hostSysctls = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

var hostPaths = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni", "/run/containerd", "/run/netns", "/var/lib/containerd", "/etc/cni/net.d"}

func readHostState() (hostState, error) {
	s := hostState{}
	for _, k := range hostSysctls {
		data, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			continue
		}
		s["sysctl "+k] = strings.TrimSpace(string(data))
	}
	for _, p := range hostPaths {
		if _, err := os.Stat(p); err == nil {
			s["path "+p] = "exists"
		} else {
			s["path "+p] = "absent"
		}
	}
	return s, nil
}

func (s hostState) compare(now hostState) error {
	var errs []error
	for k, v := range s {
		if now[k] != v {
			errs = append(errs, fmt.Errorf("host %s was %q before the cluster, %q after", k, v, now[k]))
		}
	}
	return errors.Join(errs...)
}
