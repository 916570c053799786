package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
)

// manifests are the sandbox's resources; the database ones carry the label
// example=database and are skipped without PostgreSQL, the Redis ones
// example=cache and are skipped without Redis.
//
//go:embed manifests.yaml
var manifests []byte

// namespace holds the sandbox's workloads.
const namespace = metav1.NamespaceDefault

// nodeSpec is a simulated node.
type nodeSpec struct {
	name, zone string
}

// nodeSpecs are the sandbox's simulated nodes.
func nodeSpecs() []nodeSpec {
	return []nodeSpec{{"node-1", "zone-a"}, {"node-2", "zone-b"}, {"node-3", "zone-c"}}
}

// backendKind is what serves a container port.
type backendKind int

const (
	kindHTTP backendKind = iota
	kindTCP
	kindPostgres
	kindRedis
)

func (k backendKind) String() string {
	return [...]string{"HTTP", "TCP", "PostgreSQL", "Redis"}[k]
}

// backend is a real server on a pod address.
type backend struct {
	name string // the container port's name
	port int
	kind backendKind

	http  *harness.HTTPServer
	tcp   *harness.TCPServer
	pg    *harness.Postgres
	redis *harness.Redis
	// greeting is what a TCP backend sends first (a mail server's banner).
	greeting string
	// failed is what the user asked: fail sets it, recover clears it.
	failed bool
	// demoted marks a PostgreSQL primary stopped by a promotion, or a
	// Redis master stopped when another was promoted: it comes back as a
	// replica of the new primary (master).
	demoted bool
}

// pod is a simulated pod and its backends.
type pod struct {
	name, node, ip string
	labels         map[string]string
	backends       []*backend
	// gone is true once the pod object is deleted (its backends stop).
	gone bool
	// deleting is true while a deleted pod terminates.
	deleting bool
}

func (p *pod) ports() []corev1.ContainerPort {
	out := make([]corev1.ContainerPort, 0, len(p.backends))
	for _, b := range p.backends {
		out = append(out, corev1.ContainerPort{Name: b.name, ContainerPort: int32(b.port), Protocol: corev1.ProtocolTCP})
	}
	return out
}

// backendByPort finds a backend by port name or number.
func (p *pod) backendByPort(port string) *backend {
	for _, b := range p.backends {
		if b.name == port || fmt.Sprint(b.port) == port {
			return b
		}
	}
	return nil
}

// node is a simulated node and its agent.
type node struct {
	nodeSpec
	agent    *child
	cordoned bool
	gone     bool
}

// sandbox owns everything the inner process runs. Its methods are called
// with mu held by the command server, except start and close.
type sandbox struct {
	cp   *harness.ControlPlane
	opts options

	mu         sync.Mutex
	controller *child
	nodes      []*node
	pods       []*pod
	primary    string // the PostgreSQL primary's pod, empty without PostgreSQL
	master     string // the Redis master's pod, empty without Redis
	pending    sync.WaitGroup
	// lagging are the replicas whose replay the lag command paused;
	// stopWrites ends the writes on the primary that make them lag.
	lagging    map[string]bool
	stopWrites context.CancelFunc
}

func newSandbox(cp *harness.ControlPlane, opts options) *sandbox {
	s := &sandbox{cp: cp, opts: opts}
	for _, n := range nodeSpecs() {
		s.nodes = append(s.nodes, &node{nodeSpec: n})
	}
	return s
}

// podSpecs are the sandbox's pods, spread over the three nodes.
func podSpecs() []*pod {
	db := map[string]string{"app": "db"}
	cache := map[string]string{"app": "cache"}
	vm := map[string]string{"vm": "my-vm"}
	app := map[string]string{"app": "app"}
	pg := func() []*backend { return []*backend{{name: "postgres", port: 5432, kind: kindPostgres}} }
	redis := func() []*backend { return []*backend{{name: "redis", port: 6379, kind: kindRedis}} }
	web := func(host string) []*backend {
		return []*backend{{name: "http", port: 8080, kind: kindHTTP}, {name: "smtp", port: 2525, kind: kindTCP, greeting: "220 " + host + ".example.test ESMTP\r\n"}}
	}
	api := func() []*backend {
		return []*backend{{name: "api", port: 8443, kind: kindTCP}, {name: "grpc", port: 9000, kind: kindTCP}, {name: "health", port: 8081, kind: kindHTTP}}
	}
	return []*pod{
		{name: "db-0", node: "node-1", ip: "10.244.1.10", labels: db, backends: pg()},
		{name: "db-1", node: "node-2", ip: "10.244.2.10", labels: db, backends: pg()},
		{name: "db-2", node: "node-3", ip: "10.244.3.10", labels: db, backends: pg()},
		{name: "cache-0", node: "node-1", ip: "10.244.1.40", labels: cache, backends: redis()},
		{name: "cache-1", node: "node-2", ip: "10.244.2.40", labels: cache, backends: redis()},
		{name: "cache-2", node: "node-3", ip: "10.244.3.40", labels: cache, backends: redis()},
		{name: "vm-0", node: "node-1", ip: "10.244.1.20", labels: vm, backends: web("vm-0")},
		{name: "vm-1", node: "node-2", ip: "10.244.2.20", labels: vm, backends: web("vm-1")},
		{name: "app-0", node: "node-2", ip: "10.244.2.30", labels: app, backends: api()},
		{name: "app-1", node: "node-3", ip: "10.244.3.30", labels: app, backends: api()},
	}
}

// start creates the nodes, starts the controller and the agents, the
// backends, the pods and the resources.
func (s *sandbox) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cp.Client
	progress("creating nodes %s, %s and %s", s.nodes[0].name, s.nodes[1].name, s.nodes[2].name)
	for _, n := range s.nodes {
		if _, err := harness.CreateNode(ctx, c, harness.NodeOptions{Name: n.name, Zone: n.zone}); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(s.opts.logDir(), 0o755); err != nil {
		return fmt.Errorf("creating the log folder: %w", err)
	}
	progress("starting swh-controller and one swh-agent per node (logs in %s)", s.opts.logDir())
	var err error
	s.controller, err = s.startBinary("swh-controller", "controller", "--leader-elect=false")
	if err != nil {
		return err
	}
	// kubectl swh tells a node's agent is alive by its pod, as the chart's
	// DaemonSet would run it.
	if err := harness.EnsureNamespace(ctx, c, agentNamespace); err != nil {
		return err
	}
	for _, n := range s.nodes {
		if err := s.startAgent(ctx, n); err != nil {
			return err
		}
	}

	pods := podSpecs()
	withDB := false
	if s.opts.noPostgres {
		progress("skipping the PostgreSQL example (-no-postgres)")
	} else {
		progress("starting PostgreSQL: a primary on db-0 and streaming replicas on db-1 and db-2")
		switch err := s.startPostgres(ctx, pods); {
		case err == nil:
			withDB = true
		case errors.Is(err, harness.ErrMissingDependency) && !s.opts.requirePostgres:
			progress("WARNING: no PostgreSQL example (db-read, db-write): %v", err)
			if postgresInstalled() {
				progress("  PostgreSQL refuses to run as root, and only root exists in a rootless namespace: run make run as root (sudo) to see it")
			} else {
				progress("  install PostgreSQL's server to see it: sudo apt-get install postgresql (Debian)")
			}
		default:
			return fmt.Errorf("starting PostgreSQL: %w", err)
		}
	}
	progress("starting Redis: a master on cache-0 and replicas on cache-1 and cache-2")
	withCache := false
	switch err := s.startRedis(ctx, pods); {
	case err == nil:
		withCache = true
	case errors.Is(err, harness.ErrMissingDependency) && !s.opts.requireRedis:
		progress("WARNING: no Redis example (redis-read, redis-write): %v", err)
	default:
		return fmt.Errorf("starting Redis: %w", err)
	}
	for _, p := range pods {
		if p.labels["app"] == "db" && !withDB || p.labels["app"] == "cache" && !withCache {
			continue
		}
		s.pods = append(s.pods, p)
	}

	progress("starting the backends and creating the pods")
	for _, p := range s.pods {
		if err := s.startBackends(p); err != nil {
			return err
		}
		if err := s.createPod(ctx, p); err != nil {
			return err
		}
	}
	progress("creating the ServiceWithHealthchecks resources")
	if withDB {
		o := s.pod(s.primary).backends[0].pg.Options()
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "db-credentials"},
			StringData: map[string]string{"user": o.User, "password": o.Password},
		}
		if err := c.Create(ctx, secret); err != nil {
			return fmt.Errorf("creating the Secret db-credentials: %w", err)
		}
	}
	resources, err := resources()
	if err != nil {
		return err
	}
	for _, r := range resources {
		if r.Labels["example"] == "database" && !withDB || r.Labels["example"] == "cache" && !withCache {
			continue
		}
		if err := c.Create(ctx, r); err != nil {
			return fmt.Errorf("creating %s: %w", r.Name, err)
		}
	}
	return nil
}

// postgresInstalled reports whether PostgreSQL's server programs are where
// the harness looks for them.
func postgresInstalled() bool {
	if os.Getenv("SWH_PG_BIN") != "" {
		return true
	}
	if found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres"); len(found) > 0 {
		return true
	}
	_, err := exec.LookPath("initdb")
	return err == nil
}

// resources decodes the embedded manifests.
func resources() ([]*swhv1alpha1.ServiceWithHealthchecks, error) {
	var out []*swhv1alpha1.ServiceWithHealthchecks
	for i, doc := range bytes.Split(manifests, []byte("\n---\n")) {
		r := &swhv1alpha1.ServiceWithHealthchecks{}
		if err := yaml.UnmarshalStrict(doc, r); err != nil {
			return nil, fmt.Errorf("decoding manifest %d: %w", i, err)
		}
		r.Namespace = namespace
		out = append(out, r)
	}
	return out, nil
}

// startPostgres starts the primary on the first database pod's address and
// a streaming replica on each of the others.
func (s *sandbox) startPostgres(ctx context.Context, pods []*pod) error {
	var db []*pod
	for _, p := range pods {
		if p.labels["app"] == "db" {
			db = append(db, p)
		}
	}
	primary, err := harness.StartPostgres(ctx, harness.PostgresOptions{Addr: db[0].ip})
	if err != nil {
		return err
	}
	db[0].backends[0].pg = primary
	s.primary = db[0].name
	for _, p := range db[1:] {
		r, err := primary.StartReplica(ctx, p.ip, 5432)
		if err != nil {
			return errors.Join(err, primary.Close())
		}
		p.backends[0].pg = r
	}
	return nil
}

// startRedis starts the master on the first cache pod's address and a
// replica on each of the others.
func (s *sandbox) startRedis(ctx context.Context, pods []*pod) error {
	var cache []*pod
	for _, p := range pods {
		if p.labels["app"] == "cache" {
			cache = append(cache, p)
		}
	}
	master, err := harness.StartRedis(ctx, harness.RedisOptions{Addr: cache[0].ip, Port: 6379})
	if err != nil {
		return err
	}
	started := []*harness.Redis{master}
	for _, p := range cache[1:] {
		r, err := master.StartReplica(ctx, harness.RedisOptions{Addr: p.ip, Port: 6379})
		if err != nil {
			for _, r := range started {
				err = errors.Join(err, r.Close())
			}
			return err
		}
		started = append(started, r)
	}
	for i, p := range cache {
		p.backends[0].redis = started[i]
	}
	s.master = cache[0].name
	return nil
}

// startBackends starts the pod's servers (PostgreSQL and Redis are already
// running).
func (s *sandbox) startBackends(p *pod) error {
	for _, b := range p.backends {
		addr := fmt.Sprintf("%s:%d", p.ip, b.port)
		var err error
		switch b.kind {
		case kindHTTP:
			if b.http == nil {
				b.http, err = harness.StartHTTPServer(harness.HTTPServerOptions{Addr: addr})
			} else {
				err = b.http.Start()
			}
		case kindTCP:
			if b.tcp == nil {
				b.tcp, err = harness.StartTCPServer(addr)
			} else {
				err = b.tcp.Start()
			}
			if err == nil && b.greeting != "" {
				b.tcp.SetGreeting(b.greeting)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// createPod creates the pod object with the status a kubelet would write.
func (s *sandbox) createPod(ctx context.Context, p *pod) error {
	_, err := harness.CreatePod(ctx, s.cp.Client, harness.PodOptions{
		Namespace: namespace, Name: p.name, Node: p.node, Labels: p.labels,
		IPs: []string{p.ip}, Ports: p.ports(),
	})
	return err
}

func (s *sandbox) pod(name string) *pod {
	for _, p := range s.pods {
		if p.name == name {
			return p
		}
	}
	return nil
}

func (s *sandbox) node(name string) *node {
	for _, n := range s.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

func (s *sandbox) podNames() []string {
	var out []string
	for _, p := range s.pods {
		out = append(out, p.name)
	}
	sort.Strings(out)
	return out
}

// close stops the agents, the controller and every backend.
func (s *sandbox) close() {
	s.mu.Lock()
	if s.stopWrites != nil {
		s.stopWrites()
	}
	s.mu.Unlock()
	s.pending.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	var procs []*child
	for _, n := range s.nodes {
		if n.agent != nil {
			procs = append(procs, n.agent)
		}
	}
	if s.controller != nil {
		procs = append(procs, s.controller)
	}
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	for _, p := range s.pods {
		for _, b := range p.backends {
			switch {
			case b.http != nil:
				_ = b.http.Stop()
			case b.tcp != nil:
				_ = b.tcp.Stop()
			case b.pg != nil:
				_ = b.pg.Close()
			case b.redis != nil:
				_ = b.redis.Close()
			}
		}
	}
}

// child is one of the swh binaries the sandbox runs, its output in a log
// file.
type child struct {
	*process.Proc
	// stopping is closed when stop is called: an exit after it is expected.
	stopping chan struct{}
	once     sync.Once
}

// startBinary runs one of the swh binaries against the control plane, its
// output in logDir/logName.log (started afresh).
func (s *sandbox) startBinary(binary, logName string, args ...string) (*child, error) {
	path, err := findBinary(binary)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.opts.logDir(), logName+".log")
	if err := os.Remove(logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("starting %s afresh: %w", logPath, err)
	}
	proc, err := process.Start(process.Spec{
		Name: logName, Path: path, Log: logPath, DiesWithSuite: true,
		Args: append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...),
		Env:  []string{"KUBECONFIG=" + s.cp.Kubeconfig},
	})
	if err != nil {
		return nil, err
	}
	c := &child{Proc: proc, stopping: make(chan struct{})}
	go func() {
		<-proc.Exited()
		select {
		case <-c.stopping:
		default:
			progress("WARNING: %s exited (%v); its log: %s", logName, proc.Err(), logPath)
		}
	}()
	return c, nil
}

// stop ends the process (SIGTERM, SIGKILL after 10 s) and waits for it.
func (c *child) stop() {
	c.once.Do(func() { close(c.stopping) })
	c.Stop()
}

// findBinary looks for swh-controller or swh-agent next to this program,
// then in the repository's bin/.
func findBinary(name string) (string, error) {
	var dirs []string
	if self, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(self))
	}
	if dir, err := harness.BinDir(); err == nil {
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", fmt.Errorf("%s not found in %v: run `make build`", name, dirs)
}
