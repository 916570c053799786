package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// maxTransitions is how many recent transitions the view keeps.
const maxTransitions = 12

// row is one line of the table: a resource's port on a node.
type row struct {
	resource, port, node string
	ready, total         int
	endpoints            []string
}

// endpointKey names one endpoint across polls.
type endpointKey struct {
	resource, port, node, pod string
}

// transition is a change the view noticed, or an action of the sandbox.
type transition struct {
	at     time.Time
	text   string
	reason string
	// key and down let a later agent event fill in the reason.
	key  endpointKey
	down bool
}

func (t transition) String() string {
	s := t.at.Format("15:04:05") + "  " + t.text
	if t.reason != "" {
		s += "  (" + t.reason + ")"
	}
	return s
}

// agentNoteHead matches the start of the agents' EndpointReady /
// EndpointNotReady notes; parseAgentNote reads the rest.
var agentNoteHead = regexp.MustCompile(`^pod (\S+) on node (\S+) is (not )?ready on (.*)$`)

// agentNote is one parsed agent note: per port, why it is not ready (empty
// for ready ports).
type agentNote struct {
	pod, node string
	notReady  bool
	ports     map[string]string
}

// parseAgentNote reads `pod P on node N is [not ]ready on CLAUSES`, where
// the clauses are `port "a" (why)`, `ports "a", "b" (why)` or, for an
// unnamed port, `port 8080 (why)`, joined by "; ". A reason may hold
// parentheses of its own.
func parseAgentNote(note string) (agentNote, bool) {
	m := agentNoteHead.FindStringSubmatch(note)
	if m == nil {
		return agentNote{}, false
	}
	n := agentNote{pod: m[1], node: m[2], notReady: m[3] != "", ports: map[string]string{}}
	rest := m[4]
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, "ports "):
			rest = rest[len("ports "):]
		case strings.HasPrefix(rest, "port "):
			rest = rest[len("port "):]
		default:
			return agentNote{}, false
		}
		var names []string
		for {
			name, after, ok := portName(rest)
			if !ok {
				return agentNote{}, false
			}
			names, rest = append(names, name), after
			if !strings.HasPrefix(rest, ", ") {
				break
			}
			rest = rest[2:]
		}
		why := ""
		if strings.HasPrefix(rest, " (") {
			depth, end := 0, -1
			for i, r := range rest[1:] {
				if r == '(' {
					depth++
				} else if r == ')' {
					if depth--; depth == 0 {
						end = i + 1
						break
					}
				}
			}
			if end < 0 {
				return agentNote{}, false
			}
			why, rest = rest[2:end], rest[end+1:]
		}
		for _, name := range names {
			n.ports[name] = why
		}
		if rest != "" {
			if !strings.HasPrefix(rest, "; ") {
				return agentNote{}, false
			}
			rest = rest[2:]
		}
	}
	return n, len(n.ports) > 0
}

// portName reads a port at the start of s: a quoted name, or the number
// of the resource's only port, which has no name.
func portName(s string) (string, string, bool) {
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	if digits > 0 {
		return "", s[digits:], true
	}
	return quoted(s)
}

// quoted reads a Go-quoted string at the start of s.
func quoted(s string) (string, string, bool) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", false
	}
	v, err := strconv.Unquote(q)
	return v, s[len(q):], err == nil
}

// reason is an agent's explanation of an endpoint going not ready.
type reason struct {
	text string
	at   time.Time
}

// reasonFor returns the reason of a transition to not ready at t: the
// agent's event about it usually arrives within a second or two. An event
// repeated within minutes is folded into a series whose updates the event
// recorder sends late, so after a few seconds without a fresh one the
// previous reason is the best guess.
func (s *state) reasonFor(k endpointKey, t, now time.Time) string {
	r, ok := s.reasons[k]
	switch {
	case !ok:
		return ""
	case !r.at.Before(t.Add(-3*time.Second)) || now.Sub(t) > 4*time.Second:
		return r.text
	}
	return ""
}

// state is what the view knows of the sandbox, refreshed by polling the API
// server through the forwarded port, as kubectl sees it.
type state struct {
	c client.Client

	rows        []row
	nodes       []string
	endpoints   map[endpointKey]string // "ready", "not ready", "terminating"
	first       bool
	transitions []transition
	seenEvents  map[types.UID]bool
	// reasons holds the latest not-ready reason per endpoint from the agents'
	// events.
	reasons map[endpointKey]reason
	// portLabels shows a resource's port by its slice port name.
	portLabels map[[2]string]string
	// holders says who holds each exclusive port, from the status.
	holders []string
	err     error
}

func newState(kubeconfig string) (*state, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 5 * time.Second
	// Four lists per refresh: client-side throttling would slow the view
	// and print warnings over it.
	cfg.QPS, cfg.Burst = 100, 200
	scheme, err := harness.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("creating a client: %w", err)
	}
	return &state{c: c, endpoints: map[endpointKey]string{}, first: true, seenEvents: map[types.UID]bool{}, reasons: map[endpointKey]reason{}, portLabels: map[[2]string]string{}}, nil
}

// refresh polls the API server and returns the transitions it noticed.
func (s *state) refresh(ctx context.Context) []transition {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	swhs := &swhv1alpha1.ServiceWithHealthchecksList{}
	slices := &discoveryv1.EndpointSliceList{}
	nodes := &corev1.NodeList{}
	events := &eventsv1.EventList{}
	for _, list := range []struct {
		obj  client.ObjectList
		opts []client.ListOption
	}{
		{swhs, []client.ListOption{client.InNamespace(namespace)}},
		{slices, []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy}}},
		{nodes, nil},
		{events, []client.ListOption{client.InNamespace(namespace)}},
	} {
		if err := s.c.List(ctx, list.obj, list.opts...); err != nil {
			s.err = fmt.Errorf("reading the cluster: %w", err)
			return nil
		}
	}
	s.err = nil
	now := time.Now()
	var added []transition
	s.holders = exclusiveHolders(swhs.Items)

	// Nodes.
	s.nodes = s.nodes[:0]
	for _, n := range nodes.Items {
		desc := n.Name
		var notes []string
		if z := n.Labels[harness.ZoneLabel]; z != "" {
			notes = append(notes, z)
		}
		if n.Spec.Unschedulable {
			notes = append(notes, "cordoned")
		}
		if len(notes) > 0 {
			desc += " (" + strings.Join(notes, ", ") + ")"
		}
		s.nodes = append(s.nodes, desc)
	}

	// Table and endpoint states.
	byRow := map[[3]string]*row{}
	current := map[endpointKey]string{}
	rowOf := func(res, portLabel, node string) *row {
		k := [3]string{res, portLabel, node}
		r := byRow[k]
		if r == nil {
			r = &row{resource: res, port: portLabel, node: node}
			byRow[k] = r
		}
		return r
	}
	// A row per slice, empty ones included; the endpoints as endpoints.Read
	// reads each resource's slices (a dual-stack pod once).
	byResource := map[string][]discoveryv1.EndpointSlice{}
	for _, sl := range slices.Items {
		res := sl.Labels[discoveryv1.LabelServiceName]
		port := ""
		portLabel := "-"
		if len(sl.Ports) > 0 {
			if sl.Ports[0].Name != nil {
				port = *sl.Ports[0].Name
			}
			portLabel = portString(port, sl.Ports[0].Port)
		}
		s.portLabels[[2]string{res, port}] = portLabel
		node := sl.Labels[endpoints.DefaultNodeLabel]
		if len(sl.Endpoints) > 0 && sl.Endpoints[0].NodeName != nil {
			node = *sl.Endpoints[0].NodeName
		}
		rowOf(res, portLabel, node)
		byResource[res] = append(byResource[res], sl)
	}
	for res, list := range byResource {
		published, _ := endpoints.Read(list, endpoints.Options{}) // valid options: no error
		for _, p := range published {
			r := rowOf(res, s.portLabels[[2]string{res, p.Port}], p.Node)
			name := "?"
			if p.Pod != nil {
				name = p.Pod.Name
			}
			st := "ready"
			switch {
			case p.Terminating:
				st = "terminating"
				name += " (terminating)"
			case !p.Ready:
				st = "not ready"
				name += " (not ready)"
			default:
				r.ready++
			}
			r.total++
			r.endpoints = append(r.endpoints, name)
			if p.Pod != nil {
				current[endpointKey{res, p.Port, p.Node, p.Pod.Name}] = st
			}
		}
	}
	s.rows = s.rows[:0]
	for _, r := range byRow {
		sort.Strings(r.endpoints)
		s.rows = append(s.rows, *r)
	}
	for _, r := range swhs.Items {
		found := false
		for k := range byRow {
			found = found || k[0] == r.Name
		}
		if !found {
			s.rows = append(s.rows, row{resource: r.Name, port: "-", node: "-", endpoints: []string{"(no slices)"}})
		}
	}
	sort.Slice(s.rows, func(i, j int) bool {
		a, b := s.rows[i], s.rows[j]
		if a.resource != b.resource {
			return a.resource < b.resource
		}
		if a.port != b.port {
			return a.port < b.port
		}
		return a.node < b.node
	})

	// Events: the agents' reasons, the sandbox's actions.
	sort.Slice(events.Items, func(i, j int) bool { return eventTime(&events.Items[i]).Before(eventTime(&events.Items[j])) })
	for i := range events.Items {
		ev := &events.Items[i]
		if ev.ReportingController == "swh-agent" {
			if n, ok := parseAgentNote(ev.Note); ok && n.notReady {
				at := eventTime(ev)
				for port, why := range n.ports {
					key := endpointKey{ev.Regarding.Name, port, n.node, n.pod}
					if at.After(s.reasons[key].at) {
						s.reasons[key] = reason{why, at}
					}
				}
			}
			continue
		}
		if ev.ReportingController == sandboxController && !s.seenEvents[ev.UID] {
			s.seenEvents[ev.UID] = true
			added = append(added, transition{at: eventTime(ev), text: "sandbox: " + ev.Note})
		}
	}

	// Endpoint transitions (none reported for the first poll's state).
	if !s.first {
		keys := make([]endpointKey, 0, len(current))
		for k := range current {
			keys = append(keys, k)
		}
		for k := range s.endpoints {
			if _, ok := current[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			before, after := s.endpoints[k], current[k]
			if before == after {
				continue
			}
			if before == "" {
				before = "absent"
			}
			t := transition{at: now, key: k, text: fmt.Sprintf("%s %s on %s: %s %s -> %s", k.resource, s.portLabels[[2]string{k.resource, k.port}], k.node, k.pod, before, orGone(after))}
			switch after {
			case "not ready":
				t.down = true
				t.reason = s.reasonFor(k, now, now)
			case "terminating":
				t.reason = "pod deleted"
			case "":
				t.reason = "endpoint removed"
			}
			added = append(added, t)
		}
	}
	s.first = false
	s.endpoints = current
	// A reason that arrives after the slice changed fills in the gap.
	for i := range s.transitions {
		t := &s.transitions[i]
		if t.down && t.reason == "" && now.Sub(t.at) < 15*time.Second {
			t.reason = s.reasonFor(t.key, t.at, now)
		}
	}
	s.transitions = append(s.transitions, added...)
	sort.SliceStable(s.transitions, func(i, j int) bool { return s.transitions[i].at.Before(s.transitions[j].at) })
	if len(s.transitions) > maxTransitions {
		s.transitions = s.transitions[len(s.transitions)-maxTransitions:]
	}
	return added
}

func orGone(st string) string {
	if st == "" {
		return "absent"
	}
	return st
}

// portString shows a slice port: its name and number, or the number alone.
func portString(name string, number *int32) string {
	switch {
	case number == nil && name == "":
		return "(port)"
	case number == nil:
		return name
	case name == "":
		return fmt.Sprint(*number)
	}
	return fmt.Sprintf("%s/%d", name, *number)
}

func eventTime(ev *eventsv1.Event) time.Time {
	switch {
	case ev.Series != nil:
		return ev.Series.LastObservedTime.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.DeprecatedLastTimestamp.Time
}

// exclusiveHolders describes the exclusive ports of the resources and
// their holders, as the controller's status has them.
func exclusiveHolders(swhs []swhv1alpha1.ServiceWithHealthchecks) []string {
	var out []string
	for i := range swhs {
		r := &swhs[i]
		for _, p := range r.Spec.ExclusivePorts() {
			holder := "no holder"
			for _, st := range r.Status.Ports {
				if st.Name == p.Name && st.Holder != "" {
					holder = "held by " + st.Holder + " on " + st.HolderNode
				}
			}
			out = append(out, fmt.Sprintf("%s %s: exclusive, %s", r.Name, swhv1alpha1.ExclusivePortKey(p), holder))
		}
	}
	sort.Strings(out)
	return out
}

// table renders the resource → port → node table, then who holds each
// exclusive port.
func (s *state) table() []string {
	out := []string{fmt.Sprintf("%-10s %-10s %-8s %-6s %s", "RESOURCE", "PORT", "NODE", "READY", "ENDPOINTS")}
	var last row
	for _, r := range s.rows {
		res, port := r.resource, r.port
		if r.resource == last.resource {
			res = ""
			if r.port == last.port {
				port = ""
			}
		}
		ready := fmt.Sprintf("%d/%d", r.ready, r.total)
		if r.node == "-" {
			ready = "-"
		}
		out = append(out, fmt.Sprintf("%-10s %-10s %-8s %-6s %s", res, port, r.node, ready, strings.Join(r.endpoints, " ")))
		last = r
	}
	return append(out, s.holders...)
}
