package endpoints

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Published is one pod on one port of one node, as slices this package
// built publish it: every entry they hold for it (one per address family,
// more when a slice was split) combined.
type Published struct {
	// Port is the Service port's name ("" for a single unnamed port) and
	// PortNumber the number the slice carries (0 when it has none).
	Port       string
	PortNumber int32
	// Pod is the entries' target reference; nil when they have none, and
	// Key is then their first address.
	Pod *corev1.ObjectReference
	// Key identifies the pod: its UID, else its name, else the entry's
	// first address.
	Key string
	// Node is the entries' nodeName.
	Node string
	// Addresses are the entries' addresses, sorted.
	Addresses []string
	// Ready and Serving are true when every entry is; Terminating when any
	// is. A condition left nil reads as the EndpointSlice API says and
	// kube-proxy reads it: ready and serving true, terminating false.
	Ready, Serving, Terminating bool
	// Entries is the number of slice entries combined.
	Entries int
}

// Available reports whether the pod passes its probes on the port and
// takes new connections: serving and not terminating. Unlike Ready, it
// does not depend on the Service's publishNotReadyAddresses, which makes
// every entry ready.
func (p Published) Available() bool { return p.Serving && !p.Terminating }

// Read returns what slices publish, one Published per port, pod and node,
// sorted by port, key and node. It reads only slices this package built
// with the same Options (the managed-by label), so a list of every slice
// of a Service can be passed whole; and in them only the entries whose
// nodeName is the node the slice is labelled for: a slice speaks for its
// own node only (the layout's admission policy holds an agent to its
// node's slices, not to the pods it names), and an entry without a
// nodeName speaks for no node. Read returns an error wrapping ErrInvalid
// when opts is invalid.
func Read(list []discoveryv1.EndpointSlice, opts Options) ([]Published, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	type key struct{ port, pod, node string }
	byKey := map[key]*Published{}
	for i := range list {
		s := &list[i]
		if !managedBy(s, opts) {
			continue
		}
		port, number := SlicePort(s)
		label := s.Labels[opts.NodeLabel]
		for j := range s.Endpoints {
			ep := &s.Endpoints[j]
			if ep.NodeName == nil || *ep.NodeName == "" || NodeLabelValue(*ep.NodeName) != label {
				continue
			}
			k := key{port: port, pod: podKey(ep), node: *ep.NodeName}
			if k.pod == "" {
				continue
			}
			ready, serving, terminating := Conditions(ep.Conditions)
			p := byKey[k]
			if p == nil {
				p = &Published{Port: port, PortNumber: number, Key: k.pod, Node: k.node, Ready: true, Serving: true}
				if ep.TargetRef != nil {
					ref := *ep.TargetRef
					p.Pod = &ref
				}
				byKey[k] = p
			}
			p.Entries++
			p.Addresses = append(p.Addresses, ep.Addresses...)
			p.Ready = p.Ready && ready
			p.Serving = p.Serving && serving
			p.Terminating = p.Terminating || terminating
		}
	}
	out := make([]Published, 0, len(byKey))
	for _, p := range byKey {
		// The same entry in two slices (a split or a stale copy) is one
		// address.
		slices.Sort(p.Addresses)
		p.Addresses = slices.Compact(p.Addresses)
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Published) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Node, b.Node))
	})
	return out, nil
}

// Conditions reads an endpoint's conditions as the EndpointSlice API
// documents them and kube-proxy reads them: a nil ready or serving is
// true, a nil terminating false.
func Conditions(c discoveryv1.EndpointConditions) (ready, serving, terminating bool) {
	return c.Ready == nil || *c.Ready, c.Serving == nil || *c.Serving, c.Terminating != nil && *c.Terminating
}

// SlicePort returns the name and number of a slice's port; this layout has
// one per slice. Both are zero when the slice has none.
func SlicePort(s *discoveryv1.EndpointSlice) (name string, number int32) {
	if len(s.Ports) == 0 {
		return "", 0
	}
	if s.Ports[0].Name != nil {
		name = *s.Ports[0].Name
	}
	if s.Ports[0].Port != nil {
		number = *s.Ports[0].Port
	}
	return name, number
}

// ManagedBy reports whether s is a slice this package builds with opts:
// its managed-by label is opts.ManagedBy (DefaultManagedBy when empty).
func ManagedBy(s *discoveryv1.EndpointSlice, opts Options) bool {
	if opts.ManagedBy == "" {
		opts.ManagedBy = DefaultManagedBy
	}
	return managedBy(s, opts)
}

func managedBy(s *discoveryv1.EndpointSlice, opts Options) bool {
	return s.Labels[discoveryv1.LabelManagedBy] == opts.ManagedBy
}

// podKey identifies the pod of an entry: its UID, else its name, else its
// first address.
func podKey(ep *discoveryv1.Endpoint) string {
	switch {
	case ep.TargetRef != nil && ep.TargetRef.UID != "":
		return string(ep.TargetRef.UID)
	case ep.TargetRef != nil && ep.TargetRef.Name != "":
		return ep.TargetRef.Name
	case len(ep.Addresses) > 0:
		return ep.Addresses[0]
	}
	return ""
}
