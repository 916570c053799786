package slicesim

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Grouping configures the candidate grouped layout: a resource whose pods
// are on more than Threshold nodes has its nodes hashed into groups of about
// NodesPerGroup nodes of the cluster, and one slice per port per group,
// written by one agent elected per group. Zero values are swh's layout: one
// slice per port per node.
type Grouping struct {
	Threshold, NodesPerGroup int
}

func (g Grouping) enabled() bool { return g.NodesPerGroup > 0 }

// Ours is swh's layout, built by the endpoints library as the agent calls
// it; with a Grouping, the candidate grouped layout.
type Ours struct {
	grouping  Grouping
	sv        server
	groupings map[*Resource]*endpoints.Grouping
	// grouped holds the resources laid out by group, decided on their
	// first publication and kept (a move between layouts is not simulated).
	grouped map[*Resource]bool
}

// NewOurs returns swh's layout, or the grouped candidate.
func NewOurs(g Grouping) *Ours {
	return &Ours{grouping: g, groupings: map[*Resource]*endpoints.Grouping{}, grouped: map[*Resource]bool{}}
}

// Name implements Layout.
func (o *Ours) Name() string {
	if o.grouping.enabled() {
		return "grouped"
	}
	return "ours"
}

// The agent's and the controller's field managers.
const (
	agentManager      = "swh-agent"
	controllerManager = "swh-controller"
)

// scope is the slices one writer owns: of one resource on one node, or on
// one group of nodes.
type scope struct {
	name    string // the node's name, or the group's
	members []int  // the nodes
}

func (o *Ours) scopes(c *Cluster, r *Resource, nodes []int) []scope {
	if !o.grouped[r] {
		out := make([]scope, len(nodes))
		for i, n := range nodes {
			out[i] = scope{name: c.Nodes[n].Name, members: []int{n}}
		}
		return out
	}
	groups := o.groups(len(c.Nodes))
	wanted := map[int]bool{}
	for _, n := range nodes {
		wanted[o.groupOf(c, n, groups)] = true
	}
	byGroup := map[int][]int{}
	for _, n := range r.NodesOf() {
		if g := o.groupOf(c, n, groups); wanted[g] {
			byGroup[g] = append(byGroup[g], n)
		}
	}
	var out []scope
	for _, g := range slices.Sorted(maps.Keys(wanted)) {
		out = append(out, scope{name: fmt.Sprintf("group-%d", g), members: byGroup[g]})
	}
	return out
}

func (o *Ours) groups(nodes int) int {
	return max(1, (nodes+o.grouping.NodesPerGroup-1)/o.grouping.NodesPerGroup)
}

func (o *Ours) groupOf(c *Cluster, n, groups int) int {
	h := fnv.New32a()
	h.Write([]byte(c.Nodes[n].Name))
	return int(h.Sum32() % uint32(groups))
}

// build returns the slices of r for one scope as they are now, without
// server metadata: the agent's (Build with its reasons), or, on a node that
// is not Ready, the controller's withdrawal of the agent's.
func (o *Ours) build(c *Cluster, r *Resource, sc scope) ([]discoveryv1.EndpointSlice, error) {
	g, err := o.groupingOf(r)
	if err != nil {
		return nil, err
	}
	byNode := make(map[int][]*Pod, len(sc.members))
	for _, n := range sc.members {
		byNode[n] = nil
	}
	byName := map[string]*Pod{}
	for _, p := range r.Pods {
		if pods, ok := byNode[p.Node]; ok {
			byNode[p.Node] = append(pods, p)
			byName[p.Name] = p
		}
	}
	svc := endpoints.ServiceFrom(serviceObject(r))
	var out []discoveryv1.EndpointSlice
	for _, n := range sc.members {
		verdicts := make([]endpoints.PodVerdicts, 0, len(byNode[n]))
		for _, p := range byNode[n] {
			var passing endpoints.ProbeSet
			for i := range r.Ports {
				if p.Passing(i) {
					passing = passing.With(i)
				}
			}
			pod := c.podObject(r, p)
			verdicts = append(verdicts, endpoints.PodVerdicts{Pod: pod, Ports: g.Verdicts(pod, passing)})
		}
		slices, err := endpoints.Build(svc, endpoints.NodeFrom(c.nodeObject(n)), verdicts, endpoints.Options{})
		if err != nil {
			return nil, fmt.Errorf("building %s/%s on %s: %w", r.Namespace, r.Name, c.Nodes[n].Name, err)
		}
		for i := range slices {
			if c.Down[n] {
				endpoints.Withdraw(&slices[i], false)
			}
		}
		out = append(out, slices...)
	}
	if o.grouped[r] {
		var err error
		if out, err = merge(r, sc.name, out); err != nil {
			return nil, err
		}
	}
	for i := range out {
		if err := c.annotateReasons(r, byName, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// groupingOf returns the probe grouping of r: one probe per port, on the
// port's targetPort, so each port is gated by its own probe.
func (o *Ours) groupingOf(r *Resource) (*endpoints.Grouping, error) {
	if g := o.groupings[r]; g != nil {
		return g, nil
	}
	targets := make([]intstr.IntOrString, len(r.Ports))
	for i, p := range r.Ports {
		targets[i] = p.TargetPort
	}
	g, err := endpoints.NewGrouping(r.Ports, targets)
	if err != nil {
		return nil, fmt.Errorf("grouping %s/%s: %w", r.Namespace, r.Name, err)
	}
	o.groupings[r] = g
	return g, nil
}

// merge puts the per-node slices of one group together: one slice per port
// (and number), named and labelled by the group instead of a node.
func merge(r *Resource, group string, parts []discoveryv1.EndpointSlice) ([]discoveryv1.EndpointSlice, error) {
	type key struct {
		port   string
		number int32
	}
	byKey := map[key]*discoveryv1.EndpointSlice{}
	var order []key
	for i := range parts {
		p := &parts[i]
		k := key{*p.Ports[0].Name, *p.Ports[0].Port}
		if s := byKey[k]; s != nil {
			s.Endpoints = append(s.Endpoints, p.Endpoints...)
			continue
		}
		name, err := endpoints.SliceName(endpoints.NameParts{Service: r.Name, Port: k.port, Node: group})
		if err != nil {
			return nil, err
		}
		s := p.DeepCopy()
		s.Name = name
		s.Labels[endpoints.DefaultNodeLabel] = endpoints.NodeLabelValue(group)
		byKey[k] = s
		order = append(order, k)
	}
	out := make([]discoveryv1.EndpointSlice, 0, len(order))
	for _, k := range order {
		s := byKey[k]
		if len(s.Endpoints) > endpoints.MaxEndpointsPerSlice {
			return nil, fmt.Errorf("group %s of %s/%s: %d endpoints on port %q: chunks are not simulated", group, r.Namespace, r.Name, len(s.Endpoints), k.port)
		}
		slices.SortFunc(s.Endpoints, func(a, b discoveryv1.Endpoint) int {
			return netip.MustParseAddr(a.Addresses[0]).Compare(netip.MustParseAddr(b.Addresses[0]))
		})
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Before implements Layout: the slices of each scope as the API server
// holds them.
func (o *Ours) Before(c *Cluster, r *Resource, nodes []int) (any, error) {
	if o.grouping.enabled() {
		if _, ok := o.grouped[r]; !ok {
			o.grouped[r] = len(r.NodesOf()) > o.grouping.Threshold
		}
	}
	existing := map[string][]discoveryv1.EndpointSlice{}
	for _, sc := range o.scopes(c, r, nodes) {
		got, err := o.build(c, r, sc)
		if err != nil {
			return nil, err
		}
		for i := range got {
			setTrigger(&got[i], c.Now)
			o.sv.write(&got[i], agentManager, c.Now, true)
		}
		existing[sc.name] = got
	}
	return existing, nil
}

// After implements Layout: Plan against what existed, as the agent does
// (or the controller's withdrawal on a node that is not Ready).
func (o *Ours) After(c *Cluster, r *Resource, nodes []int, before any) ([]Write, error) {
	if before == nil {
		var err error
		if before, err = o.Before(c, r, nil); err != nil {
			return nil, err
		}
	}
	existing := before.(map[string][]discoveryv1.EndpointSlice)
	opts := endpoints.Options{OwnedAnnotations: []string{swhv1alpha1.AnnotationEndpointReasons}}
	var writes []Write
	for _, sc := range o.scopes(c, r, nodes) {
		desired, err := o.build(c, r, sc)
		if err != nil {
			return nil, err
		}
		ch, err := endpoints.Plan(endpoints.Scope{Namespace: r.Namespace, Service: r.Name, Node: sc.name}, existing[sc.name], desired, opts)
		if err != nil {
			return nil, fmt.Errorf("planning %s/%s on %s: %w", r.Namespace, r.Name, sc.name, err)
		}
		manager := agentManager
		for _, n := range sc.members {
			if c.Down[n] {
				manager = controllerManager
			}
		}
		for _, list := range []struct {
			verb string
			objs []discoveryv1.EndpointSlice
		}{{"create", ch.Create}, {"update", ch.Update}, {"delete", ch.Delete}} {
			for i := range list.objs {
				s := &list.objs[i]
				if list.verb != "delete" {
					setTrigger(s, c.Now)
					o.sv.write(s, manager, c.Now, list.verb == "create")
				}
				w, err := measured(list.verb, s)
				if err != nil {
					return nil, err
				}
				writes = append(writes, w)
			}
		}
	}
	return writes, nil
}

// setTrigger sets the last-change-trigger-time annotation, as the agent and
// the controller do on every write.
func setTrigger(s *discoveryv1.EndpointSlice, now time.Time) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = now.UTC().Format(time.RFC3339)
}
