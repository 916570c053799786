package kubectlswh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// agentHistoryPath is where an agent serves its targets' history, on its
// metrics port (publisher.HistoryPath; this module does not import the
// agent's).
const agentHistoryPath = "/history"

// HistoryReport is what `kubectl swh history -o json|yaml` prints: what
// the agents of the resource's pods remember of each probe of each pod.
type HistoryReport struct {
	Namespace string `json:"namespace"`
	// Name is the resource's.
	Name    string       `json:"name"`
	Targets []NodeTarget `json:"targets"`
	// Errors says, by node, why its agent's memory could not be read.
	Errors map[string]string `json:"errors,omitempty"`
}

// NodeTarget is one target's history, with the node whose agent keeps it.
type NodeTarget struct {
	Node string `json:"node"`
	swhv1alpha1.TargetHistory
}

func (o *options) historyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history NAME [POD]",
		Short: "The last transitions of each probe of each pod of NAME, from its agent's memory",
		Long: `history asks the agent of each node that runs a pod of NAME, through the API
server's pod proxy, what it remembers of the resource's targets: whether each is
published passing, its last transitions (withdrawn, published, kept by fail
static, released, damped) with the result that made them, and, with
flapDamping, how many times in a row it was withdrawn and until when it stays
out. Nothing of it is stored in the cluster: an agent that restarts starts
afresh. The agents serve it only with --serve-history (chart value
agent.serveHistory); it needs get on pods/proxy in the agents' namespace.`,
		Example: `  kubectl swh history web -n shop
  kubectl swh history web web-0 -o json`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: o.completeResources,
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := o.printer()
			if err != nil {
				return err
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			snap, err := Read(ctx, s.client, s.namespace, args[0], s.agents)
			if err != nil {
				return err
			}
			pod := ""
			if len(args) == 2 {
				pod = args[1]
			}
			report := readHistory(ctx, s.clientset, snap, pod)
			if printer == nil {
				return writeHistory(o.streams.Out, report, o.noHeaders)
			}
			return printAs(printer, o.streams.Out, "History", report.Namespace, report.Name, report)
		},
	}
	o.addOutputFlags(cmd)
	return cmd
}

// readHistory asks the agent of every node with a pod of the resource
// (only pod's node when pod is set) for its targets of the resource.
func readHistory(ctx context.Context, cs kubernetes.Interface, s *Snapshot, pod string) HistoryReport {
	r := HistoryReport{Namespace: s.Resource.Namespace, Name: s.Resource.Name, Targets: []NodeTarget{}, Errors: map[string]string{}}
	nodes := map[string]bool{}
	for _, p := range s.Pods {
		if p.Spec.NodeName != "" && (pod == "" || p.Name == pod) {
			nodes[p.Spec.NodeName] = true
		}
	}
	if pod != "" && len(nodes) == 0 {
		r.Errors["-"] = fmt.Sprintf("%s/%s selects no pod %s on a node", r.Namespace, r.Name, pod)
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	// Ask the agents together: one slow or unreachable node costs its
	// 10 s timeout once, not once per node before it.
	answers := make([]nodeHistory, len(names))
	var wg sync.WaitGroup
	limit := make(chan struct{}, historyConcurrency)
	for i, node := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit <- struct{}{}
			defer func() { <-limit }()
			answers[i] = askAgent(ctx, cs, s, node)
		}()
	}
	wg.Wait()
	for i, node := range names {
		if answers[i].err != "" {
			r.Errors[node] = answers[i].err
			continue
		}
		for _, t := range answers[i].targets {
			if pod == "" || t.Pod == pod {
				r.Targets = append(r.Targets, NodeTarget{Node: node, TargetHistory: t})
			}
		}
	}
	if len(r.Errors) == 0 {
		r.Errors = nil
	}
	return r
}

// historyConcurrency bounds the agents asked at once.
const historyConcurrency = 16

// nodeHistory is one agent's answer: its targets of the resource, or why
// there are none.
type nodeHistory struct {
	targets []swhv1alpha1.TargetHistory
	err     string
}

// askAgent asks the agent on node for its targets of the snapshot's resource.
func askAgent(ctx context.Context, cs kubernetes.Interface, s *Snapshot, node string) nodeHistory {
	agent := s.Agents[node]
	switch {
	case s.AgentsError != nil:
		return nodeHistory{err: s.AgentsError.Error()}
	case agent == nil:
		return nodeHistory{err: "no agent pod runs on the node"}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := cs.CoreV1().Pods(agent.Namespace).ProxyGet("http", agent.Name, metricsPort(agent), agentHistoryPath,
		map[string]string{"namespace": s.Resource.Namespace, "name": s.Resource.Name}).DoRaw(ctx)
	if err != nil {
		return nodeHistory{err: fmt.Sprintf("asking agent %s: %v", agent.Name, err)}
	}
	var targets []swhv1alpha1.TargetHistory
	if err := json.Unmarshal(raw, &targets); err != nil {
		return nodeHistory{err: fmt.Sprintf("reading agent %s's answer: %v", agent.Name, err)}
	}
	return nodeHistory{targets: targets}
}

// metricsPort is the agent container's port named metrics, as the chart
// names it, or the agent's default.
func metricsPort(agent *corev1.Pod) string {
	for _, c := range agent.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "metrics" {
				return strconv.Itoa(int(p.ContainerPort))
			}
		}
	}
	return "8080"
}

// writeHistory prints a report: a row per target, each followed by its
// transitions, oldest first.
func writeHistory(w io.Writer, r HistoryReport, noHeaders bool) error {
	header := []string{"POD", "PROBE", "NODE", "PUBLISHED", "EJECTIONS"}
	rows := make([][]string, len(r.Targets))
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = len(h)
	}
	for i, t := range r.Targets {
		published := "out"
		if t.Passing {
			published = "passing"
		}
		rows[i] = []string{t.Pod, strconv.Itoa(int(t.Probe)), t.Node, published, strconv.Itoa(t.Ejections)}
		for j, c := range rows[i] {
			widths[j] = max(widths[j], len(c))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for j, c := range cells {
			if j < len(cells)-1 {
				fmt.Fprintf(&b, "%-*s  ", widths[j], c)
			} else {
				b.WriteString(c)
			}
		}
		return b.String()
	}
	if !noHeaders && len(rows) > 0 {
		fmt.Fprintln(w, line(header))
	}
	for i, t := range r.Targets {
		fmt.Fprintln(w, line(rows[i]))
		for _, e := range t.Transitions {
			text := "  " + e.At.Format(time.RFC3339) + " " + e.Event
			if e.Reason != "" {
				text += " (" + e.Reason + ")"
			}
			if e.OutUntil != nil {
				text += fmt.Sprintf(", out until %s (ejection %d in a row)", e.OutUntil.Format(time.RFC3339), e.Ejections)
			}
			fmt.Fprintln(w, text)
		}
	}
	nodes := make([]string, 0, len(r.Errors))
	for n := range r.Errors {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		fmt.Fprintf(w, "node %s: %s\n", n, r.Errors[n])
	}
	if len(r.Targets) == 0 && len(r.Errors) == 0 {
		_, err := fmt.Fprintln(w, "no agent remembers a target of "+r.Namespace+"/"+r.Name)
		return err
	}
	return nil
}
