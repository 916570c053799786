package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/swh-dev/swh/test/harness/netns"
	"github.com/swh-dev/swh/test/harness/process"
)

// world runs `ip` commands in the suite's own namespace.
func world(commands ...string) error { return process.World(commands...) }

// addNode creates node i: its namespace on the bridge, routes to the other
// nodes' pod ranges, forwarding on, and a client namespace.
func (c *Cluster) addNode(i, count int) error {
	ns, err := c.procs.NewNS(nodeName(i))
	if err != nil {
		return err
	}
	n := &Node{Index: i, Name: nodeName(i), IP: nodeIP(i), NS: ns, c: c, dir: filepath.Join(c.dir, nodeName(i))}
	c.Nodes = append(c.Nodes, n)
	if err := process.Attach(ns, bridgeName, nodeVeth(i), n.IP+"/24"); err != nil {
		return err
	}
	routes := map[string]string{}
	for j := 1; j <= count; j++ {
		if j != i {
			routes[podCIDR(j)] = nodeIP(j)
		}
	}
	if err := process.RouteNode(ns, n.IP, worldIP, podCIDR(i), routes); err != nil {
		return err
	}
	return n.addClient()
}

// addClient makes the node's client namespace at .250 of its pod range,
// routed through the node like a pod.
func (n *Node) addClient() error {
	ns, err := n.c.procs.NewNS("client-" + n.Name)
	if err != nil {
		return err
	}
	ip := podIP(n.Index, 250)
	host := fmt.Sprintf("swh-rc%d", n.Index)
	if err := netns.LinkPod(n.NS, ns, host, ip, podGateway(n.Index)); err != nil {
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
	p, err := n.c.procs.Start(n.NS, n.Name+"-kube-proxy", nil, filepath.Join(n.c.bin, "kube-proxy"), "--config="+config, "--v=1")
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
	// The machines first: kubelet must not restart containers while the
	// rest goes.
	for _, n := range c.Nodes {
		n.PowerOff()
	}
	var stopCP func() error
	if c.CP != nil {
		stopCP = c.CP.Stop
	}
	errs := []error{c.procs.Release(stopCP, bridgeName, false)}
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
	errs := []error{c.procs.Left(), process.WaitLinksGone(ctx, "swh-rn", bridgeName)}
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
