package realnode_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/swh-dev/swh/test/e2e/realnode"
	"github.com/swh-dev/swh/test/images"
)

// soakFault is one kind of fault: run injects it, holds it a while and
// heals it, telling rec what it did and which failures it explains. When
// possible is set and says no, the fault cannot be injected in the
// cluster's present state and another is drawn (before anything is
// charged to it).
type soakFault struct {
	name     string
	run      func(ctx context.Context, w *soakWorld, rng *rand.Rand, rec *faultRecord) error
	possible func(ctx context.Context, w *soakWorld) bool
}

func soakFaults() []soakFault {
	return []soakFault{
		{"backend-port", backendPortFault, nil},
		{"pod-delete", podDeleteFault, nil},
		{"rollout", rolloutFault, nil},
		{"agent-kill", agentKillFault, nil},
		{"agent-restart", agentRestartFault, nil},
		{"agent-upgrade", agentUpgradeFault, redundant},
		{"controller-leader-kill", leaderKillFault, redundant},
		{"apiserver-restart", apiServerRestartFault, redundant},
		{"etcd-pause", etcdPauseFault, nil},
		{"watch-expiry", watchExpiryFault, nil},
		{"node-power", nodePowerFault, redundant},
		{"node-cut", nodeCutFault, redundant},
		{"checker-drop", checkerDropFault, func(ctx context.Context, w *soakWorld) bool {
			agents, _ := checkerDropCandidates(ctx, w)
			return len(agents) > 0
		}},
		{"exclusive-failover", exclusiveFailoverFault, nil},
	}
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// between returns a random duration in [lo, hi] seconds.
func between(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Second
}

// backendPortFault: one port of one pod fails its checks (503) for a
// while, then recovers. Only that port of that pod is withdrawn, within
// soakDetect; requests it answers fail until soakDetect + soakPropagate.
func backendPortFault(ctx context.Context, w *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	pods, err := w.pods(ctx)
	if err != nil || len(pods) == 0 {
		return fmt.Errorf("the workload's pods: %v (%d)", err, len(pods))
	}
	p, port := pick(rng, pods), pick(rng, soakPorts)
	hold := between(rng, 5, 10)
	rec.detail = fmt.Sprintf("%s on %s fails port %s for %s", p.Name, p.Spec.NodeName, port.name, hold)
	at := time.Now()
	rec.failTarget(target{p.Name, port.name}, at)
	rec.allowFailures(func(f soakFailure) bool {
		return f.pod == p.Name && f.port == port.name && f.at.Before(at.Add(soakDetect+soakPropagate))
	})
	if err := control(ctx, p, int(port.target), "fail"); err != nil {
		return err
	}
	time.Sleep(hold)
	return control(ctx, p, int(port.target), "recover")
}

// podDeleteFault: a pod is deleted (gracefully); the Deployment replaces
// it. Its endpoints turn terminating, and no request fails.
func podDeleteFault(ctx context.Context, w *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	pods, err := w.pods(ctx)
	if err != nil || len(pods) == 0 {
		return fmt.Errorf("the workload's pods: %v (%d)", err, len(pods))
	}
	p := pick(rng, pods)
	rec.detail = fmt.Sprintf("%s on %s deleted", p.Name, p.Spec.NodeName)
	return cluster.CP.Client.Delete(ctx, &p)
}

// rolloutFault: a rolling update of the workload (one pod more at a time,
// none unavailable). No request fails.
func rolloutFault(ctx context.Context, w *soakWorld, _ *rand.Rand, rec *faultRecord) error {
	var d appsv1.Deployment
	if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "soak"}, &d); err != nil {
		return err
	}
	// A patch: the deployment controller may write the status meanwhile.
	before := d.DeepCopy()
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["soak/rollout"] = strconv.Itoa(rec.seq)
	if err := cluster.CP.Client.Patch(ctx, &d, client.MergeFrom(before)); err != nil {
		return err
	}
	rec.detail = "rolling update of 6 pods"
	rec.convergeBound = 4 * time.Minute
	return waitFor(ctx, 4*time.Minute, func() error {
		if err := cluster.CP.Client.Get(ctx, client.ObjectKeyFromObject(&d), &d); err != nil {
			return err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 6 || st.Replicas != 6 || st.AvailableReplicas != 6 {
			return fmt.Errorf("rollout status %+v", st)
		}
		return nil
	})
}

// chartPods lists the chart's pods of a component (agent, controller)
// that are not being deleted.
func chartPods(ctx context.Context, component string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := cluster.CP.Client.List(ctx, &pods, client.InNamespace(realnode.ChartNamespace), client.MatchingLabels{"app.kubernetes.io/component": component}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out, nil
}

// restarts is how many times the pod's containers restarted.
func restarts(p corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// agentKillFault: SIGKILL to one node's agent (a crash): kubelet restarts
// the container. Nothing is withdrawn and no request fails. The agent
// restarted least is chosen, so that kubelet's crash-loop back-off (10 s,
// doubling) stays short.
func agentKillFault(ctx context.Context, _ *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	agents, err := chartPods(ctx, "agent")
	if err != nil || len(agents) == 0 {
		return fmt.Errorf("the agents: %v (%d)", err, len(agents))
	}
	rng.Shuffle(len(agents), func(i, j int) { agents[i], agents[j] = agents[j], agents[i] })
	victim := agents[0]
	for _, a := range agents[1:] {
		if restarts(a) < restarts(victim) {
			victim = a
		}
	}
	rec.detail = fmt.Sprintf("agent %s on %s killed (restarted %d times before)", victim.Name, victim.Spec.NodeName, restarts(victim))
	rec.convergeBound = 5 * time.Minute
	return killPod(victim.Name)
}

// agentRestartFault: one node's agent pod is deleted; the DaemonSet
// starts another. Nothing is withdrawn and no request fails.
func agentRestartFault(ctx context.Context, _ *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	agents, err := chartPods(ctx, "agent")
	if err != nil || len(agents) == 0 {
		return fmt.Errorf("the agents: %v (%d)", err, len(agents))
	}
	victim := pick(rng, agents)
	rec.detail = fmt.Sprintf("agent pod %s on %s deleted", victim.Name, victim.Spec.NodeName)
	return cluster.CP.Client.Delete(ctx, &victim)
}

// agentUpgradeFault: helm upgrade with a changed agent pod template rolls
// the agents one node at a time, as an upgrade to a new version does, and
// waits until the release is Ready (--wait). Nothing is withdrawn and no
// request fails. It is drawn only while both controller replicas are
// Ready: --wait waits for every workload of the release, and a replica in
// crash-loop back-off (an earlier fault's) would hold it up to five
// minutes.
func agentUpgradeFault(ctx context.Context, _ *soakWorld, _ *rand.Rand, rec *faultRecord) error {
	rec.detail = "helm upgrade rolls the agents"
	rec.convergeBound = 5 * time.Minute
	out, err := cluster.InstallChart(ctx, true, "controller.replicas=2", fmt.Sprintf("agent.podAnnotations.soak-upgrade=u%d", rec.seq))
	if err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// leaderKillFault: SIGKILL to the controller replica that holds the
// leader Lease; the other takes over once the Lease expires.
func leaderKillFault(ctx context.Context, _ *soakWorld, _ *rand.Rand, rec *faultRecord) error {
	rec.convergeBound = 5 * time.Minute
	// The Lease may name a replica whose process is not running (it lost
	// the lead in an earlier fault and exits to start over): wait for a
	// live holder.
	return waitFor(ctx, time.Minute, func() error {
		var lease coordinationv1.Lease
		if err := cluster.CP.Client.Get(ctx, client.ObjectKey{Namespace: realnode.ChartNamespace, Name: "swh-controller"}, &lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("the controller's Lease has no holder")
		}
		pod := strings.SplitN(*lease.Spec.HolderIdentity, "_", 2)[0]
		rec.detail = "controller leader " + pod + " killed"
		return killPod(pod)
	})
}

// killPod sends SIGKILL to the swh binary of pod's container (a container
// process has HOSTNAME=<pod name>; the pause process runs another binary).
func killPod(pod string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || strings.SplitN(string(cmdline), "\x00", 2)[0] != images.BinaryPath {
			continue
		}
		environ, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(environ), "\x00") {
			if kv == "HOSTNAME="+pod {
				if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
					killed++
				}
				break
			}
		}
	}
	if killed == 0 {
		return fmt.Errorf("no %s process of pod %s to kill", images.BinaryPath, pod)
	}
	return nil
}

// apiServerRestartFault: kube-apiserver stops and starts again after a
// few seconds down. The data path does not depend on it.
func apiServerRestartFault(ctx context.Context, _ *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	down := between(rng, 1, 5)
	rec.detail = fmt.Sprintf("kube-apiserver restarted, %s down", down)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cluster.CP.RestartAPIServer(rctx, down); err != nil {
		return err
	}
	// The kubelets could not renew their Leases meanwhile: once the node
	// lifecycle controller is back, it may find them older than its grace
	// period and turn nodes NotReady. The fault lasts until that is seen.
	time.Sleep(aftermath)
	return nil
}

// aftermath is how long a fault of the control plane is watched after its
// heal: the node grace period (10 s here), and as long again for the node
// lifecycle controller to reconnect and act.
const aftermath = 25 * time.Second

// etcdPauseFault: etcd frozen (SIGSTOP) for a few seconds.
func etcdPauseFault(_ context.Context, _ *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	hold := between(rng, 2, 6)
	rec.detail = fmt.Sprintf("etcd paused %s", hold)
	resume, err := cluster.CP.PauseEtcd()
	if err != nil {
		return err
	}
	time.Sleep(hold)
	if err := resume(); err != nil {
		return err
	}
	time.Sleep(aftermath)
	return nil
}

// watchExpiryFault: etcd's history is compacted to its current revision
// and every connection to kube-apiserver is reset. The watches of the
// slices (served from etcd, not the watch cache, in this cluster) resume
// from versions that no longer exist, are told 410 Gone and relist; the
// others resume from the watch cache. Nothing is withdrawn and no request
// fails.
func watchExpiryFault(ctx context.Context, w *soakWorld, _ *rand.Rand, rec *faultRecord) error {
	before, err := sliceRelists(ctx)
	if err != nil {
		return err
	}
	// A write of the soak's own first: a watch that saw the newest write
	// would resume at the compacted revision itself, which is valid, and
	// not relist (seed 44: 2 relists of 3).
	bump := &corev1.ConfigMap{Data: map[string]string{"fault": strconv.Itoa(rec.seq)}}
	bump.Namespace, bump.Name = w.ns, "soak-watch-expiry"
	err = cluster.CP.Client.Create(ctx, bump)
	if apierrors.IsAlreadyExists(err) {
		bump.ResourceVersion = "" // an unconditional update
		err = cluster.CP.Client.Update(ctx, bump)
	}
	if err != nil {
		return fmt.Errorf("writing before the compaction: %w", err)
	}
	rev, err := cluster.CP.CompactEtcd(ctx)
	if err != nil {
		return err
	}
	conns, err := cluster.CP.DropClientConnections()
	if err != nil {
		return err
	}
	rec.detail = fmt.Sprintf("etcd compacted at revision %d, %d connections to kube-apiserver reset", rev, conns)
	// Every node's kube-proxy watches every slice, and so do others (the
	// kube-controller-manager's slice controllers, the test's informers):
	// at least as many relists as nodes show that the watches expired.
	var relists float64
	err = waitFor(ctx, 30*time.Second, func() error {
		after, err := sliceRelists(ctx)
		if err != nil {
			return err
		}
		if relists = after - before; relists < float64(len(cluster.Nodes)) {
			return fmt.Errorf("%.0f relists of the slices since the compaction, want %d at least", relists, len(cluster.Nodes))
		}
		return nil
	})
	rec.detail += fmt.Sprintf(", %.0f relists of the slices", relists)
	time.Sleep(5 * time.Second)
	return err
}

// sliceRelists is how many times kube-apiserver served the whole of the
// EndpointSlices: LIST requests, and watches that list first
// (sendInitialEvents, client-go's WatchListClient, on by default since
// 1.35), counted once their initial events ended.
func sliceRelists(ctx context.Context) (float64, error) {
	cs, err := kubernetes.NewForConfig(cluster.CP.Config)
	if err != nil {
		return 0, err
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("kube-apiserver's metrics: %w", err)
	}
	var n float64
	for _, line := range strings.Split(string(raw), "\n") {
		lists := strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `verb="LIST"`)
		watchLists := strings.HasPrefix(line, "apiserver_watch_list_duration_seconds_count{")
		if !(lists || watchLists) || !strings.Contains(line, `resource="endpointslices"`) {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
				n += v
			}
		}
	}
	return n, nil
}

// nodePowerFault: a node loses power (kubelet, containerd, its agent and
// pods end at once) and comes back. Requests to its pods fail until the
// controller withdrew them (once the node turned NotReady) and kube-proxy
// followed; none after.
func nodePowerFault(ctx context.Context, w *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	n := pick(rng, cluster.Nodes)
	pods, err := w.pods(ctx)
	if err != nil {
		return err
	}
	var lost []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName == n.Name {
			lost = append(lost, p)
		}
	}
	hold := between(rng, 5, 15)
	rec.detail = fmt.Sprintf("%s powered off with %d workload pods, on again %s after their withdrawal", n.Name, len(lost), hold)
	rec.nodeDown(n.Name)
	rec.convergeBound = 5 * time.Minute
	var until time.Time
	rec.allowFailures(func(f soakFailure) bool { return until.IsZero() || f.at.Before(until) })
	n.PowerOff()
	off := time.Now()
	werr := waitFor(ctx, 2*time.Minute, func() error {
		ready, err := readyPerPort(ctx, w.ns, "soak")
		if err != nil {
			return err
		}
		for _, p := range lost {
			for port, addrs := range ready {
				if _, still := addrs[p.Status.PodIP]; still {
					return fmt.Errorf("%s still ready on %s", p.Name, port)
				}
			}
		}
		return nil
	})
	for _, p := range lost {
		if werr != nil {
			break
		}
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		werr = cluster.WaitProgrammedWithout(pctx, p.Status.PodIP)
		cancel()
	}
	until = time.Now().Add(soakPropagate)
	rec.detail += fmt.Sprintf("; withdrawn and out of kube-proxy %s after the power cut", until.Sub(off).Round(100*time.Millisecond))
	time.Sleep(hold)
	if err := n.PowerOn(); err != nil {
		return errors.Join(werr, err)
	}
	return werr
}

// redundant reports whether both controller replicas are Ready. The
// faults that can cost a replica wait for it: the leader killed, a lead
// lost (the API server restarted, the leader's node cut off), a node lost
// with the replica it runs. Each restart lengthens kubelet's crash-loop
// back-off (10 s doubling to five minutes, reset after ten minutes up);
// with one replica backing off, such a fault is two at once, and the soak
// injects one at a time. Only the controller withdraws a lost node's
// endpoints.
func redundant(ctx context.Context, _ *soakWorld) bool {
	return chartReady(ctx, false) == nil
}

// nodeCutFault: a node cannot reach the API server (its kubelet, agent
// and kube-proxy), while its pods keep running. The node turns NotReady
// and the controller withdraws its endpoints; no request fails (the pods
// answer). Healed, the node's agent publishes them again.
func nodeCutFault(ctx context.Context, _ *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	n := pick(rng, cluster.Nodes)
	u, err := url.Parse(cluster.CP.Config.Host)
	if err != nil {
		return err
	}
	hold := between(rng, 15, 25)
	rec.detail = fmt.Sprintf("%s cut from the API server (%s) for %s", n.Name, u.Host, hold)
	rec.nodeDown(n.Name)
	rec.convergeBound = 3 * time.Minute
	rule := fmt.Sprintf("table inet swh-soak-cut {\n"+
		" chain cut_out { type filter hook output priority 0; policy accept; ip daddr %[1]s tcp dport %[2]s drop; }\n"+
		" chain cut_fwd { type filter hook forward priority 0; policy accept; ip daddr %[1]s tcp dport %[2]s drop; }\n}\n", u.Hostname(), u.Port())
	if err := nft(n, rule); err != nil {
		return err
	}
	time.Sleep(hold)
	return n.NS.Run("nft", "delete", "table", "inet", "swh-soak-cut")
}

// checkerDropCandidates returns the agents whose node runs two workload
// pods at least, and how many each node runs.
func checkerDropCandidates(ctx context.Context, w *soakWorld) ([]corev1.Pod, map[string]int) {
	pods, err := w.pods(ctx)
	if err != nil {
		return nil, nil
	}
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
	}
	agents, err := chartPods(ctx, "agent")
	if err != nil {
		return nil, nil
	}
	var candidates []corev1.Pod
	for _, a := range agents {
		if perNode[a.Spec.NodeName] >= 2 && a.Status.PodIP != "" {
			candidates = append(candidates, a)
		}
	}
	return candidates, perNode
}

// checkerDropFault: the network drops every probe of one node's agent
// (its pod's packets to the node's pods), as a NetworkPolicy or a node
// firewall gone wrong would; the pods still serve. The agent fails
// static: nothing is withdrawn and no request fails. Needs two workload
// pods on the node at least (the rule's limit, docs/concepts.md).
func checkerDropFault(ctx context.Context, w *soakWorld, rng *rand.Rand, rec *faultRecord) error {
	candidates, perNode := checkerDropCandidates(ctx, w)
	if len(candidates) == 0 {
		return errors.New("no agent's node runs two workload pods")
	}
	agent := pick(rng, candidates)
	var n *realnode.Node
	for _, x := range cluster.Nodes {
		if x.Name == agent.Spec.NodeName {
			n = x
		}
	}
	hold := between(rng, 5, 12)
	rec.detail = fmt.Sprintf("probes of agent %s on %s (%d workload pods) dropped for %s", agent.Name, n.Name, perNode[n.Name], hold)
	rule := fmt.Sprintf("table inet swh-soak-drop {\n"+
		" chain drop_fwd { type filter hook forward priority 0; policy accept; ip saddr %s ip daddr %s drop; }\n}\n", agent.Status.PodIP, n.PodCIDR())
	if err := nft(n, rule); err != nil {
		return err
	}
	time.Sleep(hold)
	return n.NS.Run("nft", "delete", "table", "inet", "swh-soak-drop")
}

// nft loads a ruleset into the node's network namespace.
func nft(n *realnode.Node, rules string) error {
	f, err := os.CreateTemp("", "swh-soak-*.nft")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(rules); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return n.NS.Run("nft", "-f", f.Name())
}

// exclusiveFailoverFault: the pod holding the exclusive port fails its
// check (8080: its http port fails too) until another pod holds the port.
// Its agent withdraws it and frees the Lease, and another pod takes over
// within soakDetect + soakHandover: no Lease runs out (that bound, the
// Lease's duration more, is for a holder whose agent cannot withdraw).
// Never two ready (invariant 7).
func exclusiveFailoverFault(ctx context.Context, w *soakWorld, _ *rand.Rand, rec *faultRecord) error {
	pods, err := w.pods(ctx)
	if err != nil {
		return err
	}
	holder, err := w.primary(ctx, pods)
	if err != nil {
		return err
	}
	at := time.Now()
	rec.failTarget(target{holder.Name, "http"}, at)
	rec.allowFailures(func(f soakFailure) bool {
		return f.pod == holder.Name && f.port == "http" && f.at.Before(at.Add(soakDetect+soakPropagate))
	})
	if err := control(ctx, holder, 8080, "fail"); err != nil {
		return err
	}
	bound := soakDetect + soakHandover
	var next corev1.Pod
	err = waitFor(ctx, soakDetect+2*soakPrimaryLease, func() error {
		p, err := w.primary(ctx, pods)
		if err != nil {
			return err
		}
		if p.Name == holder.Name {
			return fmt.Errorf("%s still holds the exclusive port", p.Name)
		}
		next = p
		return nil
	})
	took := time.Since(at)
	rec.detail = fmt.Sprintf("primary %s on %s fails; %s on %s took over after %s", holder.Name, holder.Spec.NodeName, next.Name, next.Spec.NodeName, took.Round(10*time.Millisecond))
	if err == nil && took > bound {
		err = fmt.Errorf("the exclusive port moved %s after its holder failed, over its bound %s", took.Round(10*time.Millisecond), bound)
	}
	return errors.Join(err, control(ctx, holder, 8080, "recover"))
}
