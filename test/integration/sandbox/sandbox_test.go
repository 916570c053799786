// Package sandbox_test drives the local sandbox (`make run`, command
// swh-sandbox) end to end without a terminal: it starts the program, reaches
// its API server through the forwarded host port with the kubeconfig it
// writes, checks the slices of the documented examples, acts on
// the backends through stdin and through subcommands, stops it with SIGINT
// and checks that nothing is left behind.
package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
	"github.com/swh-dev/swh/test/harness/process"
)

func TestMain(m *testing.M) {
	// The test's own client logs nothing worth showing.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	os.Exit(m.Run())
}

// sandbox is a running swh-sandbox.
type sandbox struct {
	t      *testing.T
	bin    string
	out    string // its -out folder
	proc   *process.Proc
	stdin  *os.File
	output *harness.Buffer
	c      client.Client
}

// build compiles swh-sandbox, swh-controller and swh-agent into one folder:
// the sandbox looks for the other two next to itself first.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"github.com/swh-dev/swh/test/cmd/swh-sandbox",
		"github.com/swh-dev/swh/controller/cmd/swh-controller",
		"github.com/swh-dev/swh/agent/cmd/swh-agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the sandbox: %v\n%s", err, out)
	}
	return dir
}

// start runs the sandbox non-interactively (stdin is a pipe) on a free host
// port and waits until it says it is up.
func start(t *testing.T) *sandbox {
	t.Helper()
	binDir, err := harness.BinDir()
	if err != nil {
		harness.Unavailable(t, err)
	}
	for _, name := range []string{"kube-apiserver", "etcd", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(binDir, name)); err != nil {
			harness.Unavailable(t, fmt.Errorf("%w: %s not found in %s (make tools)", harness.ErrMissingDependency, name, binDir))
		}
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		harness.Unavailable(t, fmt.Errorf("%w: unshare (util-linux) is needed", harness.ErrMissingDependency))
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := &sandbox{t: t, bin: filepath.Join(build(t), "swh-sandbox"), out: t.TempDir(), output: &harness.Buffer{}}
	args := []string{"-out", s.out, "-port", "0"}
	if harness.InCI() {
		args = append(args, "-require-postgres", "-require-redis") // a missing server fails in CI
	}
	// A pipe the sandbox holds itself: no copy to wait for once it exits.
	stdin, input, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stdin = input
	proc, err := process.Start(process.Spec{Name: "swh-sandbox", Path: s.bin, Args: args, Dir: root, Output: s.output, Stdin: stdin,
		// SIGINT, as Ctrl-C: the sandbox stops what it runs, in order.
		StopSignal: syscall.SIGINT, StopTimeout: 2 * time.Minute})
	_ = stdin.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.proc = proc
	t.Cleanup(func() {
		// A failed test: stop it anyway, and show what it said.
		s.proc.Stop()
		_ = input.Close()
		if t.Failed() {
			t.Logf("swh-sandbox printed:\n%s", s.output.String())
			for _, log := range []string{"controller", "agent-node-1", "agent-node-2", "agent-node-3"} {
				data, _ := os.ReadFile(filepath.Join(s.out, "logs", log+".log"))
				t.Logf("%s.log (last 3000 bytes):\n%s", log, lastBytes(data, 3000))
			}
		}
	})
	s.waitOutput("The sandbox is up", 4*time.Minute)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.out, "kubeconfig"))
	if err != nil {
		t.Fatalf("reading the kubeconfig: %v", err)
	}
	scheme, err := harness.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	if s.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	return s
}

func lastBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// waitOutput waits until the sandbox has printed want.
func (s *sandbox) waitOutput(want string, timeout time.Duration) {
	s.t.Helper()
	harness.Eventually(s.t, timeout, fmt.Sprintf("swh-sandbox prints %q", want), func() error {
		if strings.Contains(s.output.String(), want) {
			return nil
		}
		select {
		case <-s.proc.Exited():
			s.t.Fatalf("swh-sandbox exited (%v) before printing %q", s.proc.Err(), want)
		default:
		}
		return errors.New("not printed")
	})
}

// send types a command on the sandbox's stdin.
func (s *sandbox) send(command string) {
	s.t.Helper()
	if _, err := s.stdin.Write([]byte(command + "\n")); err != nil {
		s.t.Fatalf("sending %q: %v", command, err)
	}
}

// subcommand runs `swh-sandbox -out DIR COMMAND...` as a user would in
// another terminal.
func (s *sandbox) subcommand(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(s.bin, append([]string{"-out", s.out}, args...)...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("swh-sandbox %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// slices describes a resource's slices: per slice name, the sorted
// "pod:ready,serving,terminating" (T or F) of its endpoints.
func (s *sandbox) slices(ctx context.Context, resource string) (map[string]string, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := s.c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: resource}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, sl := range list.Items {
		var eps []string
		for _, ep := range sl.Endpoints {
			name := "?"
			if ep.TargetRef != nil {
				name = ep.TargetRef.Name
			}
			eps = append(eps, name+":"+flag(ep.Conditions.Ready, true)+flag(ep.Conditions.Serving, true)+flag(ep.Conditions.Terminating, false))
		}
		sort.Strings(eps)
		out[sl.Name] = strings.Join(eps, ",")
	}
	return out, nil
}

func flag(p *bool, def bool) string {
	if (p == nil && def) || (p != nil && *p) {
		return "T"
	}
	return "F"
}

// waitSlices waits until every listed resource publishes exactly the
// wanted slices at the same moment.
func (s *sandbox) waitSlices(what string, want map[string]map[string]string) {
	s.t.Helper()
	ctx := context.Background()
	harness.Eventually(s.t, 45*time.Second, what, func() error {
		got := map[string]map[string]string{}
		for resource := range want {
			var err error
			if got[resource], err = s.slices(ctx, resource); err != nil {
				return err
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("slices\n got %v\nwant %v", got, want)
		}
		return nil
	})
}

// TestSandbox starts the sandbox, checks the examples' slices, fails and
// recovers backends, promotes a replica, stops the sandbox with SIGINT and
// checks that no process, folder, file or port is left.
// waitAgentPods waits until the agent pods in swh-system are, by node,
// ready or not as want says.
func (s *sandbox) waitAgentPods(what string, want map[string]bool) {
	s.t.Helper()
	ctx := context.Background()
	harness.Eventually(s.t, 15*time.Second, what, func() error {
		pods := &corev1.PodList{}
		err := s.c.List(ctx, pods, client.InNamespace("swh-system"),
			client.MatchingLabels{"app.kubernetes.io/name": "swh", "app.kubernetes.io/component": "agent"})
		if err != nil {
			s.t.Fatalf("%s: listing the agent pods: %v", what, err)
		}
		got := map[string]bool{}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady {
					got[p.Spec.NodeName] = c.Status == corev1.ConditionTrue
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("agent pods ready by node %v, want %v", got, want)
		}
		return nil
	})
}

func TestSandbox(t *testing.T) {
	s := start(t)
	ctx := context.Background()

	resources := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := s.c.List(ctx, resources, client.InNamespace("default")); err != nil {
		t.Fatalf("listing resources through the forwarded port: %v", err)
	}
	withDB, withCache := false, false
	for _, r := range resources.Items {
		withDB = withDB || r.Name == "db-write"
		withCache = withCache || r.Name == "redis-write"
	}
	if !withDB {
		t.Log("no PostgreSQL here: the database example is not checked")
	}
	if !withCache {
		t.Log("no Redis here: the cache example is not checked")
	}

	web := map[string]string{"web-node-1": "vm-0:TTF", "web-node-2": "vm-1:TTF"}
	smtp := map[string]string{"smtp-node-1": "vm-0:TTF", "smtp-node-2": "vm-1:TTF"}
	app := map[string]string{"app-api-node-2": "app-0:TTF", "app-api-node-3": "app-1:TTF", "app-grpc-node-2": "app-0:TTF", "app-grpc-node-3": "app-1:TTF"}
	dbRead := map[string]string{"db-read-node-1": "db-0:TTF", "db-read-node-2": "db-1:TTF", "db-read-node-3": "db-2:TTF"}
	dbWrite := map[string]string{"db-write-node-1": "db-0:TTF", "db-write-node-2": "db-1:FFF", "db-write-node-3": "db-2:FFF"}
	redisWrite := map[string]string{"redis-write-node-1": "cache-0:TTF", "redis-write-node-2": "cache-1:FFF", "redis-write-node-3": "cache-2:FFF"}
	redisRead := map[string]string{"redis-read-node-1": "cache-0:FFF", "redis-read-node-2": "cache-1:TTF", "redis-read-node-3": "cache-2:TTF"}
	want := map[string]map[string]string{"web": web, "smtp": smtp, "app": app}
	if withDB {
		want["db-read"], want["db-write"] = dbRead, dbWrite
	}
	if withCache {
		want["redis-write"], want["redis-read"] = redisWrite, redisRead
	}
	s.waitSlices("at start", want)

	// smtp checks the banner: a mail server that greets with 421 still
	// accepts connections, and leaves smtp; web keeps the pod.
	s.send("fail vm-1:smtp")
	smtp["smtp-node-2"] = "vm-1:FFF"
	s.waitSlices("vm-1 greeting with 421", want)
	s.send("recover vm-1:smtp")
	smtp["smtp-node-2"] = "vm-1:TTF"
	s.waitSlices("vm-1 greeting with 220 again", want)

	if withCache {
		// A Redis failover: redis-write follows the new master within
		// period × (failureThreshold + successThreshold) + 1 s, and the
		// old master, now its replica, serves redis-read.
		s.send("promote cache-1")
		s.waitOutput("promoted cache-1 to master", 20*time.Second)
		promoted := time.Now()
		redisWrite["redis-write-node-1"], redisWrite["redis-write-node-2"] = "cache-0:FFF", "cache-1:TTF"
		s.waitSlices("redis-write following cache-1", map[string]map[string]string{"redis-write": redisWrite})
		moved := time.Since(promoted)
		t.Logf("redis-write moved to the new master %v after the promotion", moved.Round(time.Millisecond))
		if bound := 1*time.Second*(2+1) + time.Second; moved > bound {
			t.Errorf("redis-write moved %v after the promotion, more than period × (failureThreshold + successThreshold) + 1 s = %v", moved, bound)
		}
		redisRead["redis-read-node-1"], redisRead["redis-read-node-2"] = "cache-0:TTF", "cache-1:FFF"
		s.waitSlices("redis-read after the failover", want)
	}

	// A failing web server withdraws vm-0 from web only: smtp keeps it.
	s.send("fail vm-0:http")
	web["web-node-1"] = "vm-0:FFF"
	s.waitSlices("web failing on vm-0", want)
	s.waitOutput("vm-0 ready -> not ready", 10*time.Second)

	// The pod-wide health port withdraws app-0 from both of its ports.
	s.subcommand("fail", "app-0:health")
	app["app-api-node-2"], app["app-grpc-node-2"] = "app-0:FFF", "app-0:FFF"
	s.waitSlices("health port failing on app-0", want)

	s.subcommand("recover", "vm-0:http")
	s.send("recover app-0")
	web["web-node-1"] = "vm-0:TTF"
	app["app-api-node-2"], app["app-grpc-node-2"] = "app-0:TTF", "app-0:TTF"
	s.waitSlices("after recovering", want)

	// Deleted, the resource takes its Service and slices with it (the
	// garbage collector); applied again, its slices follow the probes. The
	// same when it is deleted and created at once (kubectl replace --force).
	s.deleteResource(ctx, "web", true)
	s.waitSlices("web deleted and applied again", want)
	s.deleteResource(ctx, "web", false)
	s.waitSlices("web replaced at once", want)
	s.send("fail vm-0:http")
	web["web-node-1"] = "vm-0:FFF"
	s.waitSlices("web failing on vm-0 after the replace", want)
	s.send("recover vm-0:http")
	web["web-node-1"] = "vm-0:TTF"
	s.waitSlices("web recovered after the replace", want)

	// kubectl on the host reaches the sandbox with the kubeconfig it wrote.
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", filepath.Join(s.out, "kubeconfig"), "get", "swh,endpointslices", "-A").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "smtp-node-2") {
			t.Errorf("kubectl get swh,endpointslices -A: %v\n%s", err, out)
		}
	}

	// Each agent has a pod as the chart's DaemonSet runs it (kubectl swh
	// reads them); stopping an agent turns its pod not ready.
	s.waitAgentPods("at start", map[string]bool{"node-1": true, "node-2": true, "node-3": true})
	s.subcommand("stop-agent", "node-3")
	s.waitAgentPods("node-3's agent stopped", map[string]bool{"node-1": true, "node-2": true, "node-3": false})
	s.send("start-agent node-3")
	s.waitAgentPods("node-3's agent started again", map[string]bool{"node-1": true, "node-2": true, "node-3": true})

	if withDB {
		// A replica whose replay waits under writes leaves db-read (its
		// maxReplicationLag), and comes back once it replays.
		s.send("lag db-2")
		dbRead["db-read-node-3"] = "db-2:FFF"
		s.waitSlices("db-2 lagging", want)
		s.send("catch-up db-2")
		dbRead["db-read-node-3"] = "db-2:TTF"
		s.waitSlices("db-2 caught up", want)

		// db-write follows the promotion; the old primary stops.
		s.send("promote db-1")
		dbWrite["db-write-node-1"], dbWrite["db-write-node-2"] = "db-0:FFF", "db-1:TTF"
		dbRead["db-read-node-1"] = "db-0:FFF"
		s.waitSlices("after promoting db-1", want)

		// Two primaries: db-write is exclusive and keeps its holder.
		s.send("split-brain db-2")
		s.waitOutput("promoted db-2 while db-1 runs on as a primary", 20*time.Second)
		// db-2 passes the write query and stands by for the holder.
		harness.Eventually(t, 30*time.Second, "db-2 standing by on db-write", func() error {
			list := &discoveryv1.EndpointSliceList{}
			if err := s.c.List(ctx, list, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "db-write"}); err != nil {
				return err
			}
			for _, sl := range list.Items {
				reasons, err := swhv1alpha1.EndpointReasonsOf(sl.Annotations)
				if err == nil && reasons["db-2"].Reason == swhv1alpha1.ReasonExclusiveStandby {
					return nil
				}
			}
			return errors.New("db-2 is not standing by")
		})
		s.waitSlices("two primaries, one published", want)
		s.send("show")
		s.waitOutput("db-write 5432: exclusive, held by db-1 on node-2", 10*time.Second)
	}

	// A deleted pod is published as terminating (not ready, still serving)
	// during its grace period.
	s.send("delete vm-1")
	web["web-node-2"], smtp["smtp-node-2"] = "vm-1:FTT", "vm-1:FTT"
	s.waitSlices("vm-1 terminating", want)

	// Stop it as Ctrl-C does, and check what is left.
	tmpDirs := regexp.MustCompile(`temporary files in (\S+)\)`).FindStringSubmatch(s.output.String())
	cfg, err := clientcmd.LoadFromFile(filepath.Join(s.out, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	var apiAddr string
	for _, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil {
			t.Fatal(err)
		}
		apiAddr = u.Host
	}
	if err := s.proc.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.proc.Exited():
	case <-time.After(2 * time.Minute):
		t.Fatal("swh-sandbox did not stop within 2 minutes of SIGINT")
	}
	// A failure, or output still held open 5 s after the exit by
	// something it started (exec.ErrWaitDelay).
	if err := s.proc.Err(); err != nil {
		t.Errorf("swh-sandbox exited with %v", err)
	}
	for _, name := range []string{"kubeconfig", "control.sock"} {
		if _, err := os.Stat(filepath.Join(s.out, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left in %s (%v)", name, s.out, err)
		}
	}
	if len(tmpDirs) != 2 {
		t.Errorf("the sandbox did not name its temporary folder")
	} else if _, err := os.Stat(tmpDirs[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary folder %s is left (%v)", tmpDirs[1], err)
	}
	if conn, err := net.DialTimeout("tcp", apiAddr, time.Second); err == nil {
		_ = conn.Close()
		t.Errorf("%s still accepts connections", apiAddr)
	}
	if left := processesMentioning(filepath.Dir(s.bin), s.out); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if len(tmpDirs) == 2 {
		if left := processesMentioning(tmpDirs[1]); len(left) > 0 {
			t.Errorf("processes left: %v", left)
		}
	}
}

// deleteResource deletes a resource and creates it again from the same
// spec, as kubectl delete and apply (waitGone) or kubectl replace --force
// (at once) do, and waits until its Service is the new resource's.
func (s *sandbox) deleteResource(ctx context.Context, name string, waitGone bool) {
	s.t.Helper()
	old := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, old); err != nil {
		s.t.Fatal(err)
	}
	if err := s.c.Delete(ctx, old); err != nil {
		s.t.Fatal(err)
	}
	if waitGone {
		harness.Eventually(s.t, 45*time.Second, name+"'s Service and slices collected", func() error {
			err := s.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &corev1.Service{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("Service %s: %v", name, err)
			}
			left, err := s.slices(ctx, name)
			if err != nil {
				return err
			}
			if len(left) > 0 {
				return fmt.Errorf("slices left: %v", left)
			}
			return nil
		})
	}
	again := &swhv1alpha1.ServiceWithHealthchecks{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: old.Labels, Annotations: old.Annotations},
		Spec:       old.Spec,
	}
	// At once, the deletion may still be under way (finalizers, the cache):
	// created as soon as the name is free.
	harness.Eventually(s.t, 30*time.Second, name+" created again", func() error {
		return s.c.Create(ctx, again)
	})
	harness.Eventually(s.t, 45*time.Second, name+"'s Service owned by the new resource", func() error {
		svc := &corev1.Service{}
		if err := s.c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, svc); err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(svc); ref == nil || ref.UID != again.UID {
			return fmt.Errorf("Service controlled by %v, want %s", ref, again.UID)
		}
		return nil
	})
}

// processesMentioning lists the processes whose command line mentions one
// of words (the sandbox's binaries and folders make them unique).
func processesMentioning(words ...string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		s := strings.ReplaceAll(string(cmdline), "\x00", " ")
		for _, w := range words {
			if strings.Contains(s, w) {
				out = append(out, e.Name()+": "+s)
				break
			}
		}
	}
	return out
}
