package slicesim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Node is a node of the simulated cluster.
type Node struct {
	Name, Zone string
}

// Pod is a pod's state, all a layout needs to publish it.
type Pod struct {
	Name string
	UID  types.UID
	Node int // index in Cluster.Nodes
	IP   netip.Addr
	// Failing has bit i set when the probe of port i fails.
	Failing uint8
	// Starting: no probe verdict yet (a new pod); nothing passes.
	Starting    bool
	Terminating bool
	// Since is when the pod's verdicts last changed (the reasons' time).
	Since time.Time
}

// Passing reports whether the pod passes the probe of port i.
func (p *Pod) Passing(i int) bool { return !p.Starting && p.Failing&(1<<i) == 0 }

// Resource is a ServiceWithHealthchecks (ours) or a Service with a selector
// (builtin): the same Service spec, one probe per port for ours, a readiness
// probe covering every port for builtin.
type Resource struct {
	Namespace, Name string
	UID             types.UID
	Labels          map[string]string
	Ports           []corev1.ServicePort
	Pods            []*Pod
	DaemonSet       bool
}

// NodesOf returns the nodes the resource has pods on, sorted.
func (r *Resource) NodesOf() []int {
	var out []int
	for _, p := range r.Pods {
		out = append(out, p.Node)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Cluster is the simulated cluster. It is not safe for concurrent use.
type Cluster struct {
	Nodes     []Node
	Resources []*Resource
	// Down marks the nodes whose Ready condition is not True.
	Down map[int]bool
	// Now is the simulated clock, advanced by every change.
	Now time.Time
	rng *rand.Rand
	// nextHost is the last host byte given on each node's /24.
	nextHost []int
}

// epoch is the simulated clock's start: fixed, so sizes are reproducible.
func epoch() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }

// NewCluster returns a cluster of the given nodes without resources.
func NewCluster(nodes []Node, seed uint64) *Cluster {
	return &Cluster{
		Nodes:    nodes,
		Down:     map[int]bool{},
		Now:      epoch(),
		rng:      rand.New(rand.NewPCG(seed, seed^0x5eed)),
		nextHost: make([]int, len(nodes)),
	}
}

// Tick advances the clock by one second.
func (c *Cluster) Tick() { c.Now = c.Now.Add(time.Second) }

// NewPod makes a pod of r on node with a fresh IP from the node's /24, not
// added to r. Deployment pods are named "<r>-<10>-<5>", DaemonSet pods
// "<r>-<5>", like their controllers name them.
func (c *Cluster) NewPod(r *Resource, node int) *Pod {
	name := r.Name + "-" + c.token(5)
	if !r.DaemonSet {
		name = r.Name + "-" + c.token(10) + "-" + c.token(5)
	}
	c.nextHost[node] = c.nextHost[node]%252 + 1
	host := c.nextHost[node] + 1
	ip := netip.AddrFrom4([4]byte{10, byte(64 + node/256), byte(node % 256), byte(host)})
	return &Pod{Name: name, UID: c.uid(), Node: node, IP: ip, Since: c.Now}
}

// AddPod adds a new pod of r on node and returns it.
func (c *Cluster) AddPod(r *Resource, node int) *Pod {
	p := c.NewPod(r, node)
	r.Pods = append(r.Pods, p)
	return p
}

// RemovePod removes p from r.
func (c *Cluster) RemovePod(r *Resource, p *Pod) {
	r.Pods = slices.DeleteFunc(r.Pods, func(q *Pod) bool { return q == p })
}

const alnum = "bcdfghjklmnpqrstvwxz2456789" // the apiserver's generateName alphabet

func (c *Cluster) token(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[c.rng.IntN(len(alnum))]
	}
	return string(b)
}

func (c *Cluster) uid() types.UID {
	var b [16]byte
	for i := range b {
		b[i] = byte(c.rng.Uint32())
	}
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]))
}

// NewResource returns a resource with the given ports (name, targetPort),
// without pods. A single port may be unnamed.
func (c *Cluster) NewResource(namespace, name string, ports ...corev1.ServicePort) *Resource {
	return &Resource{
		Namespace: namespace, Name: name, UID: c.uid(), Ports: ports,
		// Helm-style labels: the built-in controller copies a Service's
		// labels onto its slices.
		Labels: map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "Helm"},
	}
}

// Port returns a TCP Service port.
func Port(name string, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(target)}
}

// Config sizes a generated cluster.
type Config struct {
	Nodes, Resources, Pods int
	// DaemonSets is the number of resources with one pod on every node.
	DaemonSets int
	// Big is the replica count of one more Deployment (2 ports), the one the
	// rolling update replaces; 0 for none.
	Big  int
	Seed uint64
}

// Scaled returns the shape of the largest simulated cluster (5,000 nodes,
// 10,000 resources, 150,000 pods) scaled to nodes.
func Scaled(nodes int) Config {
	return Config{Nodes: nodes, Resources: 2 * nodes, Pods: 30 * nodes, DaemonSets: 5, Big: 1000, Seed: 1}
}

// shapes holds the names and port sets of the generated cluster: realistic
// lengths matter for bytes.
type shapes struct {
	words, roles, envs []string
	ports              [][]corev1.ServicePort
	daemonSets         []daemonSet
}

type daemonSet struct {
	name  string
	ports []corev1.ServicePort
}

func newShapes() shapes {
	return shapes{
		words: []string{"cart", "checkout", "payments", "search", "catalog", "orders", "users", "auth",
			"billing", "shipping", "inventory", "reviews", "pricing", "ads", "media", "notify",
			"ledger", "fraud", "gateway", "profile", "session", "report", "export", "import"},
		roles: []string{"api", "web", "worker", "grpc", "cache", "db", "svc", "backend"},
		envs:  []string{"prod", "staging", "team-a", "team-b", "platform", "data"},
		ports: [][]corev1.ServicePort{
			{Port("http", 80, 8080)},
			{Port("http", 80, 8080), Port("metrics", 9090, 9090)},
			{Port("http", 80, 8080), Port("grpc", 9000, 9000), Port("metrics", 9090, 9090)},
			{Port("http", 80, 8080), Port("grpc", 9000, 9000), Port("admin", 8081, 8081), Port("metrics", 9090, 9090)},
		},
		daemonSets: []daemonSet{
			{"node-local-dns", []corev1.ServicePort{
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
				{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)}}},
			{"node-exporter", []corev1.ServicePort{Port("metrics", 9100, 9100)}},
			{"log-agent", []corev1.ServicePort{Port("", 2020, 2020)}},
			{"csi-node", []corev1.ServicePort{Port("metrics", 9808, 9808)}},
			{"mesh-proxy", []corev1.ServicePort{Port("inbound", 15006, 15006), Port("stats", 15090, 15090)}},
		},
	}
}

// NodeName is the name of node i: cloud-provider style, about 40 bytes.
func NodeName(i int) string {
	return fmt.Sprintf("ip-10-%d-%d-%d.eu-west-1.compute.internal", 16+i/65536, i/256%256, i%256)
}

// Generate makes a cluster of cfg: DaemonSets on every node, one Big
// Deployment, and Deployments of 3-300 replicas (a heavy tail: most are
// small) with 1-4 ports (half 1, 30% 2, 12% 3, 8% 4) filling the rest of the
// pods. A Deployment's replicas go to distinct random nodes, as the
// scheduler's default spreading does.
func Generate(cfg Config) (*Cluster, error) {
	deployments := cfg.Resources - cfg.DaemonSets
	if cfg.Big > 0 {
		deployments--
	}
	budget := cfg.Pods - cfg.DaemonSets*cfg.Nodes - cfg.Big
	sh := newShapes()
	if cfg.DaemonSets > len(sh.daemonSets) || deployments < 0 || budget < 3*deployments || budget > 300*deployments {
		return nil, fmt.Errorf("config %+v: cannot place the pods", cfg)
	}
	nodes := make([]Node, cfg.Nodes)
	for i := range nodes {
		nodes[i] = Node{Name: NodeName(i), Zone: "eu-west-1" + string(rune('a'+i%3))}
	}
	c := NewCluster(nodes, cfg.Seed)
	for _, ds := range sh.daemonSets[:cfg.DaemonSets] {
		r := c.NewResource("kube-system", ds.name, ds.ports...)
		r.DaemonSet = true
		for n := range nodes {
			c.AddPod(r, n)
		}
		c.Resources = append(c.Resources, r)
	}
	if cfg.Big > 0 {
		r := c.NewResource("shop-prod", "storefront-web", sh.ports[1]...)
		c.spread(r, cfg.Big)
		c.Resources = append(c.Resources, r)
	}
	for i, n := range c.replicas(deployments, budget) {
		ports := sh.ports[0]
		switch u := c.rng.Float64(); {
		case u >= 0.92:
			ports = sh.ports[3]
		case u >= 0.80:
			ports = sh.ports[2]
		case u >= 0.50:
			ports = sh.ports[1]
		case u < 0.25:
			ports = []corev1.ServicePort{Port("", 80, 8080)} // a single unnamed port
		}
		ns := sh.words[c.rng.IntN(len(sh.words))] + "-" + sh.envs[c.rng.IntN(len(sh.envs))]
		name := fmt.Sprintf("%s-%s-%d", sh.words[c.rng.IntN(len(sh.words))], sh.roles[c.rng.IntN(len(sh.roles))], i)
		r := c.NewResource(ns, name, ports...)
		c.spread(r, n)
		c.Resources = append(c.Resources, r)
	}
	return c, nil
}

// replicas draws n replica counts in [3, 300] from a truncated Pareto
// distribution, scaled and adjusted to sum exactly to total.
func (c *Cluster) replicas(n, total int) []int {
	out := make([]int, n)
	raw := make([]float64, n)
	sum := 0.0
	for i := range raw {
		raw[i] = math.Min(300, 3*math.Pow(1-c.rng.Float64(), -1/1.2))
		sum += raw[i]
	}
	got := 0
	for i := range out {
		out[i] = min(300, max(3, int(math.Round(raw[i]*float64(total)/sum))))
		got += out[i]
	}
	for got != total {
		i := c.rng.IntN(n)
		switch {
		case got < total && out[i] < 300:
			out[i]++
			got++
		case got > total && out[i] > 3:
			out[i]--
			got--
		}
	}
	return out
}

// spread adds n pods of r, on distinct random nodes while there are enough.
func (c *Cluster) spread(r *Resource, n int) {
	perm := c.rng.Perm(len(c.Nodes))
	for i := range n {
		c.AddPod(r, perm[i%len(perm)])
	}
}

// RandomNode returns a node chosen by the cluster's generator.
func (c *Cluster) RandomNode() int { return c.rng.IntN(len(c.Nodes)) }

// Pods returns the number of pods.
func (c *Cluster) Pods() int {
	n := 0
	for _, r := range c.Resources {
		n += len(r.Pods)
	}
	return n
}
