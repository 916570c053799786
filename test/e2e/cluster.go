package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/netns"
	"github.com/swh-dev/swh/test/harness/process"
)

// The addresses of the cluster. The world namespace (the one the suite runs
// in, made by hack/netns.sh) holds the bridge, kube-apiserver, etcd, our
// controller and kube-controller-manager. Pods use 10.245.0.0/16, apart
// from the 10.244.0.0/16 that hack/netns.sh makes local in the world.
const (
	bridgeName  = "swh-br0"
	worldIP     = "10.250.0.1"
	bridgeCIDR  = "10.250.0.0/24"
	externalIP  = "10.250.0.100" // the client outside the cluster
	clusterCIDR = "10.245.0.0/16"
	nodeCount   = 3
	// nodeMonitorGracePeriod is how long a node may miss its heartbeats
	// before the node lifecycle controller marks it Ready=Unknown (40 s by
	// default; shorter here so scenario 9 takes seconds).
	nodeMonitorGracePeriod = 8 * time.Second
)

func nodeIP(i int) string       { return fmt.Sprintf("10.250.0.%d", 10+i) }
func podCIDR(i int) string      { return fmt.Sprintf("10.245.%d.0/24", i) }
func podGateway(i int) string   { return fmt.Sprintf("10.245.%d.1", i) }
func podIP(i, k int) string     { return fmt.Sprintf("10.245.%d.%d", i, k) }
func nodeName(i int) string     { return fmt.Sprintf("node-%d", i) }
func clientPodIP(i int) string  { return podIP(i, 250) }
func nodeVeth(i int) string     { return fmt.Sprintf("swh-n%d", i) }
func externalVeth() string      { return "swh-c0" }
func proxyHealthz(i int) string { return "http://" + nodeIP(i) + ":10256/healthz" }

// Cluster is the whole data path on one machine.
type Cluster struct {
	Mode     string
	CP       *harness.ControlPlane
	Nodes    []*Node
	External *netns.Namespace
	bin      string
	dir      string

	// procs holds the processes and namespaces the suite started.
	procs    *process.Group
	mu       sync.Mutex
	podsByIP map[string]string
	stopped  bool
	// ids are the ServiceAccounts the controller and agents run as.
	ids identities
}

// Node is a node namespace with its kube-proxy and agent.
type Node struct {
	Index  int
	Name   string
	IP     string
	NS     *netns.Namespace
	Proxy  *Proc
	Agent  *Proc
	Client *Pod
	c      *Cluster
	mu     sync.Mutex
	next   int
	// agentRuns and proxyRuns number the runs, for log names.
	agentRuns, proxyRuns int
	// heartbeat renews the node's Lease, as its kubelet would; nil while
	// the node is silent.
	heartbeat *harness.Heartbeat
	// proxyConfig and proxyEnv start its kube-proxy.
	proxyConfig string
	proxyEnv    []string
}

// Pod is a pod namespace joined to its node by a routed veth pair.
type Pod struct {
	Name string
	IP   string
	Node *Node
	NS   *netns.Namespace
}

// Proc is a program the suite started, stopped by its PID.
type Proc = process.Proc

// world runs `ip` commands in the suite's own namespace (the world).
func world(commands ...string) error { return process.World(commands...) }

// iptablesBackend returns the environment that makes kube-proxy's iptables
// mode use the legacy (x_tables) backend, as upstream's iptables-wrapper
// picks on many nodes. With Debian's default, iptables-nft, about one run in
// three saw 1-2 of 200 new connections time out (SYNs never answered) just
// after an endpoint went not ready; with the legacy backend, none in six
// runs of the same scenarios. Other modes need nothing.
func (c *Cluster) iptablesBackend() ([]string, error) {
	if c.Mode != "iptables" {
		return nil, nil
	}
	multi, err := exec.LookPath("xtables-legacy-multi")
	if err != nil {
		if multi, err = exec.LookPath("/usr/sbin/xtables-legacy-multi"); err != nil {
			return nil, fmt.Errorf("iptables' legacy backend (Debian package iptables): %w", err)
		}
	}
	dir := filepath.Join(c.dir, "iptables-legacy")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := os.Symlink(multi, filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("linking %s: %w", name, err)
		}
	}
	return []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH")}, nil
}

// kubeProxyConfig is the configuration of one node's kube-proxy. Inside a
// network namespace kube-proxy cannot set nf_conntrack_max, hence the zero
// conntrack sizes.
func (c *Cluster) kubeProxyConfig(n *Node, kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s:10256
metricsBindAddress: 127.0.0.1:10249
mode: %s
clusterCIDR: %s
detectLocalMode: ClusterCIDR
nodePortAddresses: [%q]
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
iptables:
  minSyncPeriod: 100ms
  syncPeriod: 30s
  localhostNodePorts: false
nftables:
  minSyncPeriod: 100ms
  syncPeriod: 30s
`, kubeconfig, n.Name, n.IP, n.IP, c.Mode, clusterCIDR, bridgeCIDR)
}

// StartCluster builds the namespaces and starts every component.
func StartCluster(ctx context.Context, mode string) (c *Cluster, err error) {
	bin, err := harness.BinDir()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-proxy", "kube-controller-manager", "swh-agent", "swh-controller"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%w: %s not in %s (make e2e builds it)", harness.ErrMissingDependency, name, bin)
		}
	}
	for _, tool := range []string{"ip", "nft", "iptables", "conntrack"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s (Debian: nftables iptables iproute2 conntrack)", harness.ErrMissingDependency, tool)
		}
	}
	dir, err := os.MkdirTemp("", "swh-e2e-")
	if err != nil {
		return nil, fmt.Errorf("creating the suite's folder: %w", err)
	}
	c = &Cluster{Mode: mode, bin: bin, dir: dir, procs: process.NewGroup(dir, 15*time.Second), podsByIP: map[string]string{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	if err := world("link add "+bridgeName+" type bridge", "addr add "+worldIP+"/24 dev "+bridgeName, "link set "+bridgeName+" up"); err != nil {
		return c, err
	}
	for i := 1; i <= nodeCount; i++ {
		if err := c.addNode(i); err != nil {
			return c, err
		}
	}
	// E2E_PCAP=DIR captures TCP and ARP in every node and client
	// namespace (tcpdump), to tell where a lost SYN went.
	if dir := os.Getenv("E2E_PCAP"); dir != "" {
		for _, n := range c.Nodes {
			for _, ns := range []*netns.Namespace{n.NS, n.Client.NS} {
				if _, err := c.procs.Start(ns, "tcpdump-"+ns.Name, nil, "tcpdump", "-i", "any", "-n", "-s", "128", "-U",
					"-w", filepath.Join(dir, ns.Name+".pcap"), "tcp or arp"); err != nil {
					return c, err
				}
			}
		}
	}
	if c.External, err = c.procs.NewNS("client"); err != nil {
		return c, err
	}
	if err := c.attach(c.External, externalVeth(), externalIP); err != nil {
		return c, err
	}

	cp, err := harness.StartControlPlane(ctx, harness.ControlPlaneOptions{
		APIServerAddress:    worldIP,
		KubeconfigPath:      filepath.Join(dir, "admin.kubeconfig"),
		ExtraAPIServerFlags: map[string]string{"advertise-address": worldIP},
	})
	if err != nil {
		return c, err
	}
	c.CP = cp
	proxyKubeconfig := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := cp.WriteUserKubeconfig(proxyKubeconfig, "system:kube-proxy"); err != nil {
		return c, err
	}
	proxyEnv, err := c.iptablesBackend()
	if err != nil {
		return c, err
	}
	// The binaries run as the chart's ServiceAccounts, under its RBAC and
	// admission policies, as they would in a cluster.
	if c.ids, err = installAccess(ctx, cp.Client); err != nil {
		return c, err
	}
	controllerKubeconfig, err := c.controllerKubeconfig(ctx)
	if err != nil {
		return c, err
	}
	if _, err := c.procs.Start(nil, "swh-controller", []string{"KUBECONFIG=" + controllerKubeconfig}, filepath.Join(bin, "swh-controller"),
		"--leader-elect=false", "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--agent-service-account="+c.ids.namespace+"/"+c.ids.agent); err != nil {
		return c, err
	}
	// The nodes and their heartbeats first: the node lifecycle controller
	// marks a node that does not renew its Lease within the grace period
	// Ready=Unknown (scenario 9 stops one).
	for _, n := range c.Nodes {
		if _, err := harness.CreateNode(ctx, cp.Client, harness.NodeOptions{Name: n.Name, InternalIP: n.IP, Zone: "zone-" + n.Name}); err != nil {
			return c, err
		}
		if err := n.StartHeartbeat(); err != nil {
			return c, err
		}
	}
	if _, err := c.procs.Start(nil, "kube-controller-manager", nil, filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+cp.Kubeconfig,
		"--controllers=endpointslice-controller,endpointslice-mirroring-controller,node-lifecycle-controller",
		"--node-monitor-period=1s", "--node-monitor-grace-period="+nodeMonitorGracePeriod.String(),
		"--leader-elect=false", "--secure-port=0"); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		n.proxyConfig, n.proxyEnv = filepath.Join(dir, n.Name+"-kube-proxy.yaml"), proxyEnv
		if err := os.WriteFile(n.proxyConfig, []byte(c.kubeProxyConfig(n, proxyKubeconfig)), 0o600); err != nil {
			return c, fmt.Errorf("writing %s: %w", n.proxyConfig, err)
		}
		if err := n.StartProxy(); err != nil {
			return c, err
		}
		if err := n.StartAgent(ctx); err != nil {
			return c, err
		}
	}
	for _, n := range c.Nodes {
		if err := waitHTTP(ctx, proxyHealthz(n.Index), n.Proxy); err != nil {
			return c, err
		}
	}
	return c, nil
}

// StartProxy starts the node's kube-proxy inside the node's namespace.
func (n *Node) StartProxy() error {
	n.proxyRuns++
	name := n.Name + "-kube-proxy"
	if n.proxyRuns > 1 {
		name = fmt.Sprintf("%s-%d", name, n.proxyRuns)
	}
	p, err := n.c.procs.Start(n.NS, name, n.proxyEnv, filepath.Join(n.c.bin, "kube-proxy"), "--config="+n.proxyConfig, "--v="+cmp.Or(os.Getenv("E2E_PROXY_V"), "2"))
	if err != nil {
		return err
	}
	n.Proxy = p
	return nil
}

// StartHeartbeat renews the node's Lease every second, as its kubelet would.
func (n *Node) StartHeartbeat() error {
	h, err := harness.StartHeartbeat(n.c.CP.Client, n.Name, time.Second)
	if err != nil {
		return err
	}
	n.heartbeat = h
	return nil
}

// StopHeartbeat stops renewing the node's Lease: after the grace period
// the node lifecycle controller finds the node silent.
func (n *Node) StopHeartbeat() {
	if n.heartbeat != nil {
		n.heartbeat.Stop()
		n.heartbeat = nil
	}
}

// Unplug takes the node's link to the bridge down: nothing reaches the node
// or its pods any more, as when a machine loses power or its network.
func (n *Node) Unplug() error { return world("link set " + nodeVeth(n.Index) + " down") }

// Plug brings the node's link back, and forgets the failed neighbour
// entries the outage left in the world and on every node: until they
// expire, connections to or through the node fail with "no route to host".
func (n *Node) Plug() error {
	if err := world("link set "+nodeVeth(n.Index)+" up", "neigh flush dev "+bridgeName); err != nil {
		return err
	}
	for _, other := range n.c.Nodes {
		if err := other.NS.IP("neigh flush dev eth0"); err != nil {
			return err
		}
	}
	return nil
}

// StartAgent starts the node's swh-agent inside the node's namespace, as a
// DaemonSet pod with hostNetwork would run, and waits until it is ready
// (its caches synced).
func (n *Node) StartAgent(ctx context.Context) error {
	n.agentRuns++
	kubeconfig, err := n.agentKubeconfig(ctx)
	if err != nil {
		return err
	}
	p, err := n.c.procs.Start(n.NS, fmt.Sprintf("%s-swh-agent-%d", n.Name, n.agentRuns), []string{"KUBECONFIG=" + kubeconfig},
		filepath.Join(n.c.bin, "swh-agent"), "--node-name="+n.Name, "--metrics-bind-address="+n.IP+":9080",
		"--health-probe-bind-address="+n.IP+":9081")
	if err != nil {
		return err
	}
	n.Agent = p
	return waitHTTP(ctx, "http://"+n.IP+":9081/readyz", p)
}

// waitHTTP polls url from the world until it answers 200.
func waitHTTP(ctx context.Context, url string, p *Proc) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		if !p.Running() {
			return fmt.Errorf("%s exited; its log:\n%s", p.Name, p.LogTail(30))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s: %v; its log:\n%s", p.Name, url, last, p.LogTail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// attach links ns to the bridge with address ip.
func (c *Cluster) attach(ns *netns.Namespace, veth, ip string) error {
	return process.Attach(ns, bridgeName, veth, ip+"/24")
}

// addNode creates node i: its namespace on the bridge, routes to every pod
// range through the node that owns it, forwarding on, and a client pod.
func (c *Cluster) addNode(i int) error {
	ns, err := c.procs.NewNS(nodeName(i))
	if err != nil {
		return err
	}
	n := &Node{Index: i, Name: nodeName(i), IP: nodeIP(i), NS: ns, c: c, next: 10}
	c.Nodes = append(c.Nodes, n)
	if err := c.attach(ns, nodeVeth(i), n.IP); err != nil {
		return err
	}
	// The world (kube-apiserver, the harness's own PostgreSQL queries)
	// reaches pods through their node.
	routes := map[string]string{}
	for j := 1; j <= nodeCount; j++ {
		if j != i {
			routes[podCIDR(j)] = nodeIP(j)
		}
	}
	if err := process.RouteNode(ns, n.IP, worldIP, podCIDR(i), routes); err != nil {
		return err
	}
	n.Client, err = n.addPodAt("client-"+n.Name, clientPodIP(i))
	return err
}

// AddPod creates a pod namespace on the node with the next free address.
func (n *Node) AddPod(name string) (*Pod, error) {
	n.mu.Lock()
	k := n.next
	n.next++
	n.mu.Unlock()
	return n.addPodAt(name, podIP(n.Index, k))
}

func (n *Node) addPodAt(name, ip string) (*Pod, error) {
	ns, err := n.c.procs.NewNS(name)
	if err != nil {
		return nil, err
	}
	host := "vp" + strings.ReplaceAll(strings.TrimPrefix(ip, "10.245."), ".", "x")
	if err := netns.LinkPod(n.NS, ns, host, ip, podGateway(n.Index)); err != nil {
		return nil, err
	}
	n.c.mu.Lock()
	n.c.podsByIP[ip] = name
	n.c.mu.Unlock()
	return &Pod{Name: name, IP: ip, Node: n, NS: ns}, nil
}

// PodByIP names the pod that owns ip.
func (c *Cluster) PodByIP(ip string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if name, ok := c.podsByIP[ip]; ok {
		return name
	}
	return "unknown:" + ip
}

// Stop stops every process by its recorded PID, the control plane, and
// releases every namespace.
func (c *Cluster) Stop() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	for _, n := range c.Nodes {
		n.StopHeartbeat()
	}
	var stopCP func() error
	if c.CP != nil {
		stopCP = c.CP.Stop
	}
	return c.procs.Release(stopCP, bridgeName, true)
}

// Check proves that nothing the suite made is left: every recorded process
// is gone, no process lives in any of the namespaces, the kernel destroyed
// them (their veth ends in the world vanish with them), no named namespace
// exists, and the suite's folder is removed.
func (c *Cluster) Check(ctx context.Context) error {
	errs := []error{c.procs.Left(), process.WaitLinksGone(ctx, "swh-n", "swh-c", bridgeName)}
	// The suite names no namespace (it holds them by file descriptor); one
	// named like its own would be a leak. Others are the host's business.
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil || strings.Contains(string(out), "swh") {
		errs = append(errs, fmt.Errorf("ip netns list: %q (%v)", out, err))
	}
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		errs = append(errs, fmt.Errorf("the suite's folder %s is still there", c.dir))
	}
	return errors.Join(errs...)
}

// RemoveDir removes the suite's folder (logs and kubeconfigs).
func (c *Cluster) RemoveDir() error { return os.RemoveAll(c.dir) }
