package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

// commandHelp documents the commands, in the live view, on stdin and as
// subcommands.
const commandHelp = `commands (type one in the live view and press Enter, or run
` + "`swh-sandbox COMMAND`" + ` in another terminal):
  fail POD[:PORT]      make a backend fail: HTTP answers 503, SMTP greets
                       with 421, other TCP servers, PostgreSQL and Redis
                       stop (all the pod's backends without :PORT)
  recover POD[:PORT]   undo fail (an old primary comes back as a replica)
  promote POD          promote a PostgreSQL replica (the old primary stops)
                       or a Redis replica (the old master and the other
                       replicas follow it): db-write or redis-write moves
  split-brain POD      promote a replica while the old primary runs on:
                       two primaries, one published on db-write
  lag POD              pause a replica's replay and write on the primary:
                       db-read withdraws it (replication-lag)
  catch-up POD         resume its replay
  delete POD           delete a pod: terminating for 10 s, then gone
  recreate POD [NODE]  create a deleted pod again (on NODE if given)
  drain NODE           cordon the node and delete its pods
  uncordon NODE        make a drained node schedulable again
  delete-node NODE     delete the node: its agent stops, its pods go
  stop-agent NODE      stop the node's agent: its pod (swh-system) turns
                       not ready, its slices stay as last published
  start-agent NODE     start a stopped agent again
  help                 this list
  quit                 stop the sandbox (Ctrl-C does the same)`

// terminationGrace is how long a deleted pod stays terminating.
const terminationGrace = 10 * time.Second

// errQuit is returned by a quit command.
var errQuit = errors.New("quit")

// serveControl answers commands on the control socket: one command line per
// connection, answered with lines of text; a last line "error: ..." marks a
// failure.
func (s *sandbox) serveControl(ctx context.Context, stop context.CancelFunc, l net.Listener) {
	go func() { <-ctx.Done(); _ = l.Close() }()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = conn.Close() }()
			_ = conn.SetDeadline(time.Now().Add(3 * time.Minute))
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil && line == "" {
				return
			}
			out, err := s.execute(ctx, strings.TrimSpace(line))
			if errors.Is(err, errQuit) {
				_, _ = fmt.Fprintln(conn, "stopping the sandbox")
				stop()
				return
			}
			if out != "" {
				_, _ = fmt.Fprintln(conn, out)
			}
			if err != nil {
				_, _ = fmt.Fprintf(conn, "error: %v\n", err)
			}
		}()
	}
}

// execute runs one command and returns what it did.
func (s *sandbox) execute(ctx context.Context, line string) (string, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	verb, args := fields[0], fields[1:]
	want := func(min, max int) error {
		if len(args) < min || len(args) > max {
			return fmt.Errorf("%s: wrong number of arguments (see help)", verb)
		}
		return nil
	}
	switch verb {
	case "help", "h", "?":
		return commandHelp + "\npods: " + strings.Join(s.podNames(), " "), nil
	case "quit", "q", "exit", "stop":
		return "", errQuit
	case "fail", "recover":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.setFailed(ctx, args[0], verb == "fail")
	case "promote":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.promote(ctx, args[0])
	case "split-brain":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.splitBrain(ctx, args[0])
	case "lag", "catch-up":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.setLagging(ctx, args[0], verb == "lag")
	case "delete", "delete-pod":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.deletePod(ctx, args[0])
	case "recreate":
		if err := want(1, 2); err != nil {
			return "", err
		}
		node := ""
		if len(args) == 2 {
			node = args[1]
		}
		return s.recreate(ctx, args[0], node)
	case "drain":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.drain(ctx, args[0])
	case "uncordon":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.uncordon(ctx, args[0])
	case "stop-agent", "start-agent":
		if err := want(1, 1); err != nil {
			return "", err
		}
		if verb == "stop-agent" {
			return s.stopAgent(ctx, args[0])
		}
		return s.restartAgent(ctx, args[0])
	case "delete-node":
		if err := want(1, 1); err != nil {
			return "", err
		}
		return s.deleteNode(ctx, args[0])
	}
	return "", fmt.Errorf("unknown command %q (try help)", verb)
}

// target resolves "pod" or "pod:port" to backends.
func (s *sandbox) target(spec string) (*pod, []*backend, error) {
	name, port, _ := strings.Cut(spec, ":")
	p := s.pod(name)
	if p == nil {
		return nil, nil, fmt.Errorf("no pod %q (pods: %s)", name, strings.Join(s.podNames(), " "))
	}
	if port == "" {
		return p, p.backends, nil
	}
	b := p.backendByPort(port)
	if b == nil {
		var names []string
		for _, b := range p.backends {
			names = append(names, fmt.Sprintf("%s/%d", b.name, b.port))
		}
		return nil, nil, fmt.Errorf("pod %s has no port %q (ports: %s)", p.name, port, strings.Join(names, " "))
	}
	return p, []*backend{b}, nil
}

// setFailed fails or recovers backends.
func (s *sandbox) setFailed(ctx context.Context, spec string, fail bool) (string, error) {
	p, backends, err := s.target(spec)
	if err != nil {
		return "", err
	}
	if p.gone {
		return "", fmt.Errorf("pod %s is deleted (recreate it first)", p.name)
	}
	var did []string
	for _, b := range backends {
		what, err := s.setBackend(ctx, p, b, fail)
		if err != nil {
			return strings.Join(did, "\n"), err
		}
		did = append(did, what)
	}
	msg := strings.Join(did, "; ")
	reason := "BackendRecovered"
	if fail {
		reason = "BackendFailed"
	}
	s.record(ctx, podRef(p.name), reason, msg)
	return msg, nil
}

func (s *sandbox) setBackend(ctx context.Context, p *pod, b *backend, fail bool) (string, error) {
	where := fmt.Sprintf("%s:%s (%s %s:%d)", p.name, b.name, b.kind, p.ip, b.port)
	b.failed = fail
	switch b.kind {
	case kindHTTP:
		if fail {
			b.http.SetStatus(http.StatusServiceUnavailable)
			return where + " answers 503", nil
		}
		b.http.SetStatus(http.StatusOK)
		return where + " answers 200", nil
	case kindTCP:
		if b.greeting != "" {
			// A mail server that refuses mail still accepts connections:
			// only a probe that reads the banner tells.
			if fail {
				b.tcp.SetGreeting("421 " + p.name + ".example.test Service not available\r\n")
				return where + " greets with 421", nil
			}
			b.tcp.SetGreeting(b.greeting)
			return where + " greets with 220", nil
		}
		if fail {
			return where + " stopped listening", b.tcp.Stop()
		}
		return where + " listens again", b.tcp.Start()
	case kindRedis:
		return s.setRedis(ctx, p, b, where, fail)
	}
	if fail {
		return where + " stopped", b.pg.Stop()
	}
	if b.demoted {
		primary := s.pod(s.primary)
		if primary == nil || primary.backends[0].pg == nil || primary.backends[0].failed {
			return "", fmt.Errorf("%s was a primary: it rejoins as a replica, and the primary %s is not running", p.name, s.primary)
		}
		_ = b.pg.Close()
		r, err := primary.backends[0].pg.StartReplica(ctx, p.ip, b.port)
		if err != nil {
			b.pg = nil
			return "", fmt.Errorf("rebuilding %s as a replica of %s: %w", p.name, s.primary, err)
		}
		b.pg, b.demoted = r, false
		return where + " rejoined as a replica of " + s.primary, nil
	}
	return where + " running again", b.pg.Restart(ctx)
}

// promote promotes a replica and stops the old primary.
func (s *sandbox) promote(ctx context.Context, name string) (string, error) {
	p := s.pod(name)
	if p != nil && p.labels["app"] == "cache" {
		return s.promoteRedis(ctx, p)
	}
	if p == nil || p.labels["app"] != "db" {
		return "", fmt.Errorf("%q is not a database or cache pod", name)
	}
	if name == s.primary {
		return "", fmt.Errorf("%s is already the primary", name)
	}
	b := p.backends[0]
	if b.failed || b.pg == nil {
		return "", fmt.Errorf("%s is not running (recover it first)", name)
	}
	var did []string
	if old := s.pod(s.primary); old != nil {
		ob := old.backends[0]
		if ob.pg != nil {
			if err := ob.pg.Stop(); err != nil {
				return "", err
			}
		}
		ob.failed, ob.demoted = true, true
		did = append(did, fmt.Sprintf("stopped the old primary %s", old.name))
	}
	if err := b.pg.Promote(ctx); err != nil {
		return strings.Join(did, "; "), err
	}
	s.primary = name
	did = append(did, fmt.Sprintf("promoted %s", name))
	// The other replicas follow the new primary (primary_conninfo reloads).
	o := b.pg.Options()
	conninfo := fmt.Sprintf("host=%s port=%d user=%s password=%s", p.ip, o.Port, o.User, o.Password)
	for _, other := range s.pods {
		ob := other.backends[0]
		if other == p || other.labels["app"] != "db" || ob.pg == nil || ob.failed || other.gone {
			continue
		}
		if err := ob.pg.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = '"+conninfo+"'"); err != nil {
			did = append(did, fmt.Sprintf("%s could not follow: %v", other.name, err))
			continue
		}
		if err := ob.pg.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			did = append(did, fmt.Sprintf("%s could not follow: %v", other.name, err))
			continue
		}
		did = append(did, fmt.Sprintf("%s now replicates from %s", other.name, name))
	}
	msg := strings.Join(did, "; ")
	s.record(ctx, podRef(name), "Promoted", msg)
	return msg, nil
}

// replica returns a running PostgreSQL replica of the sandbox.
func (s *sandbox) replica(name string) (*backend, error) {
	p := s.pod(name)
	if p == nil || p.labels["app"] != "db" {
		return nil, fmt.Errorf("%q is not a database pod", name)
	}
	if name == s.primary {
		return nil, fmt.Errorf("%s is the primary, not a replica", name)
	}
	b := p.backends[0]
	if b.failed || b.pg == nil {
		return nil, fmt.Errorf("%s is not running (recover it first)", name)
	}
	return b, nil
}

// splitBrain promotes a replica and leaves the old primary running: two
// servers answer SELECT NOT pg_is_in_recovery() true, and the exclusive
// db-write keeps publishing one of them.
func (s *sandbox) splitBrain(ctx context.Context, name string) (string, error) {
	b, err := s.replica(name)
	if err != nil {
		return "", err
	}
	if err := b.pg.Promote(ctx); err != nil {
		return "", err
	}
	old := s.primary
	s.primary = name
	msg := fmt.Sprintf("promoted %s while %s runs on as a primary: two primaries; db-write is exclusive and publishes one", name, old)
	s.record(ctx, podRef(name), "SplitBrain", msg)
	return msg, nil
}

// setLagging pauses a replica's replay, and writes on the primary so that
// WAL waits to be replayed (db-read's maxReplicationLag withdraws it), or
// resumes it.
func (s *sandbox) setLagging(ctx context.Context, name string, lag bool) (string, error) {
	b, err := s.replica(name)
	if err != nil {
		return "", err
	}
	if s.lagging == nil {
		s.lagging = map[string]bool{}
	}
	if !lag {
		if err := b.pg.Exec(ctx, "SELECT pg_wal_replay_resume()"); err != nil {
			return "", err
		}
		delete(s.lagging, name)
		if len(s.lagging) == 0 && s.stopWrites != nil {
			s.stopWrites()
			s.stopWrites = nil
		}
		msg := fmt.Sprintf("%s replays again and catches up", name)
		s.record(ctx, podRef(name), "CaughtUp", msg)
		return msg, nil
	}
	if err := b.pg.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		return "", err
	}
	s.lagging[name] = true
	if s.stopWrites == nil {
		if err := s.startWrites(); err != nil {
			return "", err
		}
	}
	msg := fmt.Sprintf("%s's replay is paused while the primary %s takes writes: db-read withdraws it once WAL has waited past its bound", name, s.primary)
	s.record(ctx, podRef(name), "Lagging", msg)
	return msg, nil
}

// startWrites inserts a row on the primary every 100 ms until stopWrites.
func (s *sandbox) startWrites() error {
	p := s.pod(s.primary)
	if p == nil || p.backends[0].pg == nil {
		return fmt.Errorf("no running primary to write on")
	}
	pg := p.backends[0].pg
	ctx, cancel := context.WithCancel(context.Background())
	if err := pg.Exec(ctx, "CREATE TABLE IF NOT EXISTS sandbox_writes (at timestamptz DEFAULT now())"); err != nil {
		cancel()
		return err
	}
	s.stopWrites = cancel
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		for ctx.Err() == nil {
			_ = pg.Exec(ctx, "INSERT INTO sandbox_writes DEFAULT VALUES")
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return nil
}

// deletePod deletes the pod with a grace period: it terminates for a few
// seconds (the agents publish it as terminating), then the sandbox, as a
// kubelet would, removes it and stops its backends.
func (s *sandbox) deletePod(ctx context.Context, name string) (string, error) {
	p := s.pod(name)
	if p == nil {
		return "", fmt.Errorf("no pod %q (pods: %s)", name, strings.Join(s.podNames(), " "))
	}
	if p.gone || p.deleting {
		return "", fmt.Errorf("pod %s is already deleted", name)
	}
	if err := s.deleteGracefully(ctx, p); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("deleted pod %s: terminating for %s", name, terminationGrace)
	s.record(ctx, podRef(name), "PodDeleted", msg)
	return msg, nil
}

func (s *sandbox) deleteGracefully(ctx context.Context, p *pod) error {
	obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: p.name}}
	if err := s.cp.Client.Delete(ctx, obj, client.GracePeriodSeconds(int64(terminationGrace/time.Second))); err != nil {
		return fmt.Errorf("deleting pod %s: %w", p.name, err)
	}
	p.deleting = true
	s.pending.Add(1)
	go func() {
		defer s.pending.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(terminationGrace):
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.removePod(ctx, p)
	}()
	return nil
}

// removePod deletes the pod object at once and stops its backends.
func (s *sandbox) removePod(ctx context.Context, p *pod) {
	if p.gone {
		return
	}
	if err := harness.ForceDeletePod(ctx, s.cp.Client, types.NamespacedName{Namespace: namespace, Name: p.name}); err != nil {
		progress("WARNING: %v", err)
	}
	for _, b := range p.backends {
		switch b.kind {
		case kindHTTP:
			_ = b.http.Stop()
		case kindTCP:
			_ = b.tcp.Stop()
		case kindPostgres:
			if b.pg != nil {
				_ = b.pg.Stop()
			}
		case kindRedis:
			if b.redis != nil {
				_ = b.redis.Stop()
			}
		}
	}
	p.gone, p.deleting = true, false
}

// recreate creates a deleted pod again and restarts its backends.
func (s *sandbox) recreate(ctx context.Context, name, nodeName string) (string, error) {
	p := s.pod(name)
	if p == nil {
		return "", fmt.Errorf("no pod %q (pods: %s)", name, strings.Join(s.podNames(), " "))
	}
	if !p.gone {
		if p.deleting {
			return "", fmt.Errorf("pod %s is still terminating", name)
		}
		return "", fmt.Errorf("pod %s exists (delete it first)", name)
	}
	if nodeName == "" {
		nodeName = p.node
	}
	n := s.node(nodeName)
	switch {
	case n == nil || n.gone:
		return "", fmt.Errorf("no node %q", nodeName)
	case n.cordoned:
		return "", fmt.Errorf("node %s is cordoned (uncordon it, or name another node)", nodeName)
	}
	for _, b := range p.backends {
		b.failed = false
		switch b.kind {
		case kindHTTP:
			b.http.SetStatus(http.StatusOK)
		case kindRedis:
			if _, err := s.setRedis(ctx, p, b, name, false); err != nil {
				return "", err
			}
		case kindPostgres:
			if b.pg == nil {
				return "", fmt.Errorf("the database of %s is gone", name)
			}
			if b.demoted {
				if _, err := s.setBackend(ctx, p, b, false); err != nil {
					return "", err
				}
			} else if err := b.pg.Restart(ctx); err != nil {
				return "", err
			}
		}
	}
	if err := s.startBackends(p); err != nil {
		return "", err
	}
	p.node = nodeName
	if err := s.createPod(ctx, p); err != nil {
		return "", err
	}
	p.gone = false
	msg := fmt.Sprintf("created pod %s on %s again", name, nodeName)
	s.record(ctx, podRef(name), "PodCreated", msg)
	return msg, nil
}

// drain cordons the node and deletes its pods.
func (s *sandbox) drain(ctx context.Context, name string) (string, error) {
	n := s.node(name)
	if n == nil || n.gone {
		return "", fmt.Errorf("no node %q", name)
	}
	if err := s.setUnschedulable(ctx, name, true); err != nil {
		return "", err
	}
	n.cordoned = true
	var deleted []string
	for _, p := range s.pods {
		if p.node != name || p.gone || p.deleting {
			continue
		}
		if err := s.deleteGracefully(ctx, p); err != nil {
			return "", err
		}
		deleted = append(deleted, p.name)
	}
	msg := fmt.Sprintf("cordoned %s; deleting its pods: %s", name, strings.Join(deleted, " "))
	if len(deleted) == 0 {
		msg = fmt.Sprintf("cordoned %s; it runs no pods", name)
	}
	s.record(ctx, nodeRef(name), "NodeDrained", msg)
	return msg, nil
}

func (s *sandbox) uncordon(ctx context.Context, name string) (string, error) {
	n := s.node(name)
	if n == nil || n.gone {
		return "", fmt.Errorf("no node %q", name)
	}
	if err := s.setUnschedulable(ctx, name, false); err != nil {
		return "", err
	}
	n.cordoned = false
	msg := fmt.Sprintf("uncordoned %s", name)
	s.record(ctx, nodeRef(name), "NodeUncordoned", msg)
	return msg, nil
}

func (s *sandbox) setUnschedulable(ctx context.Context, name string, unschedulable bool) error {
	n := &corev1.Node{}
	if err := s.cp.Client.Get(ctx, types.NamespacedName{Name: name}, n); err != nil {
		return fmt.Errorf("reading node %s: %w", name, err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	n.Spec.Unschedulable = unschedulable
	if err := s.cp.Client.Patch(ctx, n, patch); err != nil {
		return fmt.Errorf("cordoning node %s: %w", name, err)
	}
	return nil
}

// deleteNode deletes the Node, stops its agent and removes its pods, as a
// cluster does when a machine goes away (the controller then removes the
// node's slices).
func (s *sandbox) deleteNode(ctx context.Context, name string) (string, error) {
	n := s.node(name)
	if n == nil || n.gone {
		return "", fmt.Errorf("no node %q", name)
	}
	n.agent.stop()
	// As the pod garbage collector does for a deleted node's pods.
	if err := harness.ForceDeletePod(ctx, s.cp.Client, agentPod(n)); err != nil {
		progress("WARNING: %v", err)
	}
	var removed []string
	for _, p := range s.pods {
		if p.node == name && !p.gone {
			s.removePod(ctx, p)
			removed = append(removed, p.name)
		}
	}
	if err := s.cp.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); client.IgnoreNotFound(err) != nil {
		return "", fmt.Errorf("deleting node %s: %w", name, err)
	}
	n.gone = true
	msg := fmt.Sprintf("deleted node %s and stopped its agent", name)
	if len(removed) > 0 {
		msg += "; its pods are gone: " + strings.Join(removed, " ")
	}
	s.record(ctx, nodeRef(name), "NodeDeleted", msg)
	return msg, nil
}

func podRef(name string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name}
}

func nodeRef(name string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name}
}

// sandboxController is the reportingController of the sandbox's events.
const sandboxController = "swh-sandbox"

// record writes an event for an action, so that the live view and
// `kubectl get events` show it next to the agents' transitions.
func (s *sandbox) record(ctx context.Context, regarding corev1.ObjectReference, reason, note string) {
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: namespace, GenerateName: "swh-sandbox-"},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: sandboxController,
		ReportingInstance:   sandboxController,
		Action:              reason,
		Reason:              reason,
		Regarding:           regarding,
		Note:                note,
		Type:                corev1.EventTypeNormal,
	}
	if len(ev.Note) > 1000 {
		ev.Note = ev.Note[:1000]
	}
	if err := s.cp.Client.Create(ctx, ev); err != nil {
		progress("WARNING: recording %q: %v", note, err)
	}
}

// runClient sends one command to a running sandbox and prints the answer.
func runClient(opts options, command string) error {
	out, err := sendCommand(opts.socket(), command)
	if err != nil && command == "help" {
		fmt.Println(commandHelp) // no sandbox needed for the list
		return nil
	}
	fmt.Print(out)
	return err
}

// sendCommand sends one command over the control socket and returns the
// answer; an answer ending in an "error: " line is an error.
func sendCommand(socket, command string) (string, error) {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return "", fmt.Errorf("no sandbox is running with control socket %s (start one with make run)", socket)
		}
		return "", fmt.Errorf("reaching the sandbox: %w", err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := fmt.Fprintln(conn, command); err != nil {
		return "", fmt.Errorf("sending %q: %w", command, err)
	}
	data, err := io.ReadAll(conn)
	if err != nil {
		return string(data), fmt.Errorf("reading the answer to %q: %w", command, err)
	}
	out := string(data)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; strings.HasPrefix(last, "error: ") {
		return strings.Join(lines[:len(lines)-1], "\n"), errors.New(strings.TrimPrefix(last, "error: "))
	}
	return out, nil
}
