package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
	"github.com/swh-dev/swh/test/images"
)

// The addresses of the cluster. The world (the namespace of hack/netns.sh
// the suite runs in) holds the bridge, kube-apiserver, etcd, kube-scheduler
// and kube-controller-manager. Pods use 10.246.0.0/16, apart from the
// 10.244.0.0/16 hack/netns.sh makes local and the e2e suite's 10.245.
const (
	bridgeName  = "swh-rbr0"
	worldIP     = "10.251.0.1"
	bridgeCIDR  = "10.251.0.0/24"
	clusterCIDR = "10.246.0.0/16"
	// kubernetesServiceIP is the kubernetes Service's ClusterIP in
	// envtest's service range (10.0.0.0/24): pods reach the API server
	// through it, so the serving certificate names it.
	kubernetesServiceIP = "10.0.0.1"
	// nodeMonitorGracePeriod: how long a node may miss heartbeats before
	// the node lifecycle controller marks it NotReady (40 s by default).
	nodeMonitorGracePeriod = 10 * time.Second
)

func nodeIP(i int) string     { return fmt.Sprintf("10.251.0.%d", 10+i) }
func podCIDR(i int) string    { return fmt.Sprintf("10.246.%d.0/24", i) }
func podGateway(i int) string { return fmt.Sprintf("10.246.%d.1", i) }
func podIP(i, k int) string   { return fmt.Sprintf("10.246.%d.%d", i, k) }
func nodeName(i int) string   { return fmt.Sprintf("node-%d", i) }
func nodeVeth(i int) string   { return fmt.Sprintf("swh-rn%d", i) }

// Options configures Start.
type Options struct {
	// Nodes is the number of nodes (3 when zero).
	Nodes int
	// Images are imported into every node's containerd (make images);
	// one of them must be the pause image.
	Images []images.Result
	// ProxyMode is kube-proxy's mode (nftables when empty).
	ProxyMode string
}

// Cluster is a control plane and real kubelet nodes on one machine.
type Cluster struct {
	CP    *harness.ControlPlane
	Nodes []*Node

	bin, dir, cniBin, pauseRef string
	images                     []images.Result
	proxyMode                  string
	ca                         *harness.CA
	cgroups                    *cgroups
	host                       hostState

	// chartVersion is the chart version InstallChart installs: the last
	// Publish's, or the checkout's.
	chartVersion string

	// procs holds the processes and namespaces the cluster started.
	procs   *process.Group
	stopped bool
}

// Start builds the namespaces and starts the control plane and the nodes,
// and waits until every node is Ready.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	bin, err := harness.BinDir()
	if err != nil {
		return nil, err
	}
	// The node machines bind it from inside a different working folder.
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("the binaries' folder: %w", err)
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-proxy", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return nil, fmt.Errorf("%w: %s not in %s (make test builds it)", harness.ErrMissingDependency, name, bin)
		}
	}
	for _, tool := range []string{"ip", "nft", "containerd", "ctr", "runc", "unshare", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%w: %s (Debian: containerd runc containernetworking-plugins nftables iproute2)", harness.ErrMissingDependency, tool)
		}
	}
	cniBin, err := findCNI()
	if err != nil {
		return nil, err
	}
	pauseRef := ""
	for _, img := range opts.Images {
		if img.Name == "pause" {
			pauseRef = img.Ref
		}
	}
	if pauseRef == "" {
		return nil, errors.New("realnode: no pause image among the images")
	}
	dir, err := os.MkdirTemp("", "swh-realnode-")
	if err != nil {
		return nil, fmt.Errorf("creating the cluster's folder: %w", err)
	}
	if err := outsideReplacedTrees(dir); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	c = &Cluster{bin: bin, dir: dir, cniBin: cniBin, pauseRef: pauseRef, images: opts.Images, proxyMode: opts.ProxyMode,
		procs: process.NewGroup(dir, 20*time.Second)}
	if c.proxyMode == "" {
		c.proxyMode = "nftables"
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	if c.host, err = readHostState(); err != nil {
		return c, err
	}
	if c.cgroups, err = detectCgroups(); err != nil {
		return c, err
	}
	// A run killed before its cleanup (a test timeout) left its cgroups.
	c.cgroups.sweep("swh-realnode-")
	if c.ca, err = harness.NewCA("swh-realnode-kubelets"); err != nil {
		return c, err
	}
	if err := world("link add "+bridgeName+" type bridge", "addr add "+worldIP+"/24 dev "+bridgeName, "link set "+bridgeName+" up"); err != nil {
		return c, err
	}
	// The release, published to a registry as a user would: the nodes pull
	// the swh images from it, helm the chart.
	if err := c.startRegistry(ctx); err != nil {
		return c, err
	}
	start := time.Now()
	out, err := c.publish(ctx, runtime.GOARCH, "")
	if err != nil {
		return c, err
	}
	fmt.Printf("published the release to %s in %s:\n%s", RegistryRepo, time.Since(start).Round(time.Second), out)
	for i := 1; i <= opts.Nodes; i++ {
		if err := c.addNode(i, opts.Nodes); err != nil {
			return c, err
		}
	}
	cp, err := harness.StartControlPlane(ctx, harness.ControlPlaneOptions{
		APIServerAddress: worldIP,
		KubeconfigPath:   filepath.Join(dir, "admin.kubeconfig"),
		ServingNames:     []string{kubernetesServiceIP, "kubernetes.default.svc"},
		ExtraAPIServerFlags: map[string]string{
			"advertise-address": worldIP,
			// Node names do not resolve here: kubectl logs goes to the IP.
			"kubelet-preferred-address-types": "InternalIP",
			// envtest turns ServiceAccount admission off; pods of a real
			// cluster need it to get their tokens mounted.
			"disable-admission-plugins": "",
			// Webhooks (the eviction guard) are called at an endpoint of
			// their Service, not its ClusterIP: the API server runs in the
			// world, which routes to every node's pod range but has no
			// kube-proxy of its own to translate a ClusterIP.
			"enable-aggregator-routing": "true",
			// The slices' watches are served from etcd, not from the watch
			// cache, so that a compaction expires them (the soak's
			// watch-expiry fault) as a busy cluster outrunning its cache
			// window would.
			"watch-cache-sizes": "endpointslices.discovery.k8s.io#0",
		},
	})
	if err != nil {
		return c, err
	}
	c.CP = cp
	if err := c.startControllers(); err != nil {
		return c, err
	}
	proxyKubeconfig := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := cp.WriteUserKubeconfig(proxyKubeconfig, "system:kube-proxy"); err != nil {
		return c, err
	}
	for _, n := range c.Nodes {
		if err := n.prepare(); err != nil {
			return c, err
		}
		if err := n.boot(); err != nil {
			return c, err
		}
		if err := n.startProxy(proxyKubeconfig); err != nil {
			return c, err
		}
	}
	return c, c.WaitNodesReady(ctx, 3*time.Minute)
}

// startControllers starts kube-scheduler and kube-controller-manager (every
// default controller but node IPAM: the nodes' ranges are the CNI's).
func (c *Cluster) startControllers() error {
	if _, err := c.procs.Start(nil, "kube-scheduler", nil, filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig="+c.CP.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1"); err != nil {
		return err
	}
	_, err := c.procs.Start(nil, "kube-controller-manager", nil, filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig="+c.CP.Kubeconfig, "--controllers=*,-node-ipam-controller",
		"--root-ca-file="+c.CP.CAFile, "--use-service-account-credentials=false",
		"--node-monitor-period=1s", "--node-monitor-grace-period="+nodeMonitorGracePeriod.String(),
		"--leader-elect=false", "--secure-port=0", "--v=1")
	return err
}

// WaitNodesReady waits until every node's kubelet reports Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var nodes corev1.NodeList
		err := c.CP.Client.List(ctx, &nodes)
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if err == nil && ready == len(c.Nodes) {
			return nil
		}
		for _, n := range c.Nodes {
			if n.Machine != nil && !n.Machine.Running() {
				return fmt.Errorf("node %s's machine exited: %s\nkubelet:\n%s\ncontainerd:\n%s", n.Name, n.Machine.LogTail(20),
					tail(filepath.Join(n.dir, fmt.Sprintf("kubelet-%d.log", n.runs)), 30),
					tail(filepath.Join(n.dir, fmt.Sprintf("containerd-%d.log", n.runs)), 20))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d nodes Ready (%v): %w\n%s", ready, len(c.Nodes), err, ctx.Err(), c.Diagnose())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Diagnose returns the tails of every node's logs.
func (c *Cluster) Diagnose() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s kubelet (run %d):\n%s\n", n.Name, n.runs, tail(filepath.Join(n.dir, fmt.Sprintf("kubelet-%d.log", n.runs)), 25))
		fmt.Fprintf(&b, "--- %s containerd:\n%s\n", n.Name, tail(filepath.Join(n.dir, fmt.Sprintf("containerd-%d.log", n.runs)), 10))
	}
	return b.String()
}

// findCNI finds the CNI plugins of Debian's containernetworking-plugins.
// outsideReplacedTrees refuses a cluster folder under /var or /run: every
// node machine mounts its own over both, which would hide the folder that
// holds the node's configuration from the node itself.
func outsideReplacedTrees(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolving the cluster's folder: %w", err)
	}
	for _, tree := range []string{"/var", "/run"} {
		if real == tree || strings.HasPrefix(real, tree+"/") {
			return fmt.Errorf("realnode: the cluster's folder %s is under %s, which every node replaces with its own; point TMPDIR elsewhere (e.g. /tmp)", real, tree)
		}
	}
	return nil
}

func findCNI() (string, error) {
	for _, d := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if _, err := os.Stat(filepath.Join(d, "ptp")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: the CNI plugins ptp and host-local (Debian: containernetworking-plugins)", harness.ErrMissingDependency)
}

// WaitProgrammed waits until every running node's kube-proxy has rules for
// the ClusterIP clusterIP and forwards to every one of endpoints, so that
// no request finds them missing.
func (c *Cluster) WaitProgrammed(ctx context.Context, clusterIP string, endpoints ...string) error {
	return c.waitRules(ctx, func(n *Node, rules string) string {
		if clusterIP != "" && !hasAddress(rules, clusterIP) {
			return clusterIP
		}
		for _, ip := range endpoints {
			if !n.forwardsTo(rules, ip) {
				return ip
			}
		}
		return ""
	})
}

// WaitProgrammedWithout waits until no running node's kube-proxy forwards
// to addr any more (an endpoint withdrawn).
func (c *Cluster) WaitProgrammedWithout(ctx context.Context, addr string) error {
	return c.waitRules(ctx, func(n *Node, rules string) string {
		if n.forwardsTo(rules, addr) {
			return "no " + addr
		}
		return ""
	})
}

// waitRules polls the rules of every node whose machine runs (a node that
// is off may have missed the API server's news) until missing returns "".
func (c *Cluster) waitRules(ctx context.Context, missing func(*Node, string) string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if n.Machine == nil || !n.Machine.Running() {
			continue
		}
		for {
			rules, err := n.Rules()
			want := missing(n, rules)
			if err == nil && want == "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s's kube-proxy rules lack %s (last error: %v)", n.Name, want, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// forwardsTo reports whether rules forward to ip, as the node's kube-proxy
// mode writes it: nftables "dnat to IP:PORT" (one endpoint, or session
// affinity) or a DNAT map's element "N : IP . PORT"; iptables
// "--to-destination IP:PORT". A withdrawn endpoint's chain keeps its name,
// which holds the address, for a while after it is flushed, so only the
// DNAT itself counts.
func (n *Node) forwardsTo(rules, ip string) bool {
	q := regexp.QuoteMeta(ip)
	if n.c.proxyMode == "iptables" {
		return regexp.MustCompile(`--to-destination ` + q + `:`).MatchString(rules)
	}
	return regexp.MustCompile(`(dnat to |: )` + q + `( \. |:)`).MatchString(rules)
}

// hasAddress reports whether ip appears in rules as a whole address (not
// 10.0.0.2 inside 10.0.0.23).
func hasAddress(rules, ip string) bool {
	for rest := rules; ; {
		i := strings.Index(rest, ip)
		if i < 0 {
			return false
		}
		before, after := byte(' '), byte(' ')
		if i > 0 {
			before = rest[i-1]
		}
		if end := i + len(ip); end < len(rest) {
			after = rest[end]
		}
		if !isAddrByte(before) && !isAddrByte(after) {
			return true
		}
		rest = rest[i+len(ip):]
	}
}

func isAddrByte(b byte) bool { return b == '.' || (b >= '0' && b <= '9') }

// Rules prints the node's packet filter rules as kube-proxy's mode writes
// them.
func (n *Node) Rules() (string, error) {
	if n.c.proxyMode == "iptables" {
		return n.NS.Output("iptables-save")
	}
	return n.NS.Output("nft", "list", "ruleset")
}

// PodLogs returns the last lines of the logs of the pods in namespace
// whose names start with prefix, read from every node's /var/log/pods
// (kubelet removes a deleted pod's folder after a while).
func (c *Cluster) PodLogs(namespace, prefix string, lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		files, _ := filepath.Glob(filepath.Join(n.dir, "var", "log", "pods", namespace+"_"+prefix+"*", "*", "*.log"))
		for _, f := range files {
			fmt.Fprintf(&b, "--- %s %s:\n%s\n", n.Name, strings.TrimPrefix(f, filepath.Join(n.dir, "var", "log", "pods")+"/"), tail(f, lines))
		}
	}
	return b.String()
}
