package slicesim

import (
	"fmt"
	"runtime"
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Totals sums a set of writes (or, for the steady state, the objects).
type Totals struct {
	Creates, Updates, Deletes int
	Endpoints                 int
	// Event is the sum of the watch events: what one kube-proxy receives.
	Event int64
	// Stored and JSON sum the objects written.
	Stored, JSON int64
}

// Writes is the number of writes.
func (t Totals) Writes() int { return t.Creates + t.Updates + t.Deletes }

func (t *Totals) add(ws []Write) {
	for _, w := range ws {
		switch w.Verb {
		case "create":
			t.Creates++
		case "update":
			t.Updates++
		default:
			t.Deletes++
		}
		t.Endpoints += len(w.Obj.Endpoints)
		t.Event += int64(w.Size.Event)
		t.Stored += int64(w.Size.Stored)
		t.JSON += int64(w.Size.JSON)
	}
}

// Sim runs scenarios on one cluster with several layouts in lockstep: each
// change is captured by every layout before it happens and published by
// every layout after.
type Sim struct {
	C       *Cluster
	Layouts []Layout
}

// Step makes one change to r, touching its pods on nodes, and returns each
// layout's writes.
func (s *Sim) Step(r *Resource, nodes []int, change func()) ([]Totals, error) {
	s.C.Tick()
	before := make([]any, len(s.Layouts))
	for i, l := range s.Layouts {
		var err error
		if before[i], err = l.Before(s.C, r, nodes); err != nil {
			return nil, fmt.Errorf("%s: %w", l.Name(), err)
		}
	}
	change()
	out := make([]Totals, len(s.Layouts))
	for i, l := range s.Layouts {
		ws, err := l.After(s.C, r, nodes, before[i])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.Name(), err)
		}
		out[i].add(ws)
	}
	return out, nil
}

// Steady publishes every resource from nothing: the objects that then exist
// are the creates. sample gets every stride-th object of each layout.
func (s *Sim) Steady(stride []int, sample func(layout int, obj *discoveryv1.EndpointSlice)) ([]Totals, error) {
	out := make([]Totals, len(s.Layouts))
	seen := make([]int, len(s.Layouts))
	for _, r := range s.C.Resources {
		for i, l := range s.Layouts {
			ws, err := l.After(s.C, r, r.NodesOf(), nil)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.Name(), err)
			}
			out[i].add(ws)
			for _, w := range ws {
				if sample != nil && seen[i]%stride[i] == 0 {
					sample(i, w.Obj)
				}
				seen[i]++
			}
		}
	}
	return out, nil
}

// FlipPort makes pod p of r fail the probe of port 0 (builtin: the pod is
// no longer Ready), then pass again; it returns the writes of the failure.
func (s *Sim) FlipPort(r *Resource, p *Pod) ([]Totals, error) {
	failed, err := s.Step(r, []int{p.Node}, func() { p.Failing |= 1; p.Since = s.C.Now })
	if err != nil {
		return nil, err
	}
	_, err = s.Step(r, []int{p.Node}, func() { p.Failing &^= 1; p.Since = s.C.Now })
	return failed, err
}

// NodeFailure makes node not Ready: every resource with pods there is
// published again (ours: the controller withdraws the node's slices;
// builtin: the pods are no longer Ready). Then the node recovers; it
// returns the writes of the failure.
func (s *Sim) NodeFailure(node int) ([]Totals, error) {
	var affected []*Resource
	for _, r := range s.C.Resources {
		if slices.Contains(r.NodesOf(), node) {
			affected = append(affected, r)
		}
	}
	out := make([]Totals, len(s.Layouts))
	for _, down := range []bool{true, false} {
		s.C.Tick()
		before := make([][]any, len(affected))
		for j, r := range affected {
			before[j] = make([]any, len(s.Layouts))
			for i, l := range s.Layouts {
				var err error
				if before[j][i], err = l.Before(s.C, r, []int{node}); err != nil {
					return nil, fmt.Errorf("%s: %w", l.Name(), err)
				}
			}
		}
		if down {
			s.C.Down[node] = true
		} else {
			delete(s.C.Down, node)
		}
		for j, r := range affected {
			for i, l := range s.Layouts {
				ws, err := l.After(s.C, r, []int{node}, before[j][i])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", l.Name(), err)
				}
				if down {
					out[i].add(ws)
				}
			}
		}
	}
	return out, nil
}

// RollingUpdate replaces every pod of r, one at a time, by a new pod with a
// new IP on the node place returns: the new pod appears (not passing),
// passes, then the old one terminates and goes. Each of the four is one
// sync.
func (s *Sim) RollingUpdate(r *Resource, place func() int) ([]Totals, error) {
	out := make([]Totals, len(s.Layouts))
	addAll := func(ts []Totals) {
		for i := range ts {
			out[i].Creates += ts[i].Creates
			out[i].Updates += ts[i].Updates
			out[i].Deletes += ts[i].Deletes
			out[i].Endpoints += ts[i].Endpoints
			out[i].Event += ts[i].Event
			out[i].Stored += ts[i].Stored
			out[i].JSON += ts[i].JSON
		}
	}
	for _, old := range slices.Clone(r.Pods) {
		p := s.C.NewPod(r, place())
		p.Starting = true
		steps := []struct {
			node   int
			change func()
		}{
			{p.Node, func() { r.Pods = append(r.Pods, p) }},
			{p.Node, func() { p.Starting, p.Since = false, s.C.Now }},
			{old.Node, func() { old.Terminating, old.Since = true, s.C.Now }},
			{old.Node, func() { s.C.RemovePod(r, old) }},
		}
		for _, st := range steps {
			ts, err := s.Step(r, []int{st.node}, st.change)
			if err != nil {
				return nil, err
			}
			addAll(ts)
		}
	}
	return out, nil
}

// HeapPerObject decodes the protobuf encodings given, as an informer does
// (managedFields dropped, as kube-proxy's transform does), and returns the
// Go heap they hold, per object: the median of three measurements, as one
// varies by some percent with the runtime's state.
func HeapPerObject(raws [][]byte) (float64, error) {
	if len(raws) == 0 {
		return 0, nil
	}
	var got []float64
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		objs := make([]*discoveryv1.EndpointSlice, len(raws))
		for i, raw := range raws {
			objs[i] = &discoveryv1.EndpointSlice{}
			if err := objs[i].Unmarshal(raw); err != nil {
				return 0, fmt.Errorf("decoding a sample: %w", err)
			}
			objs[i].ManagedFields = nil
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(objs)
		got = append(got, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(len(raws)))
	}
	slices.Sort(got)
	return got[1], nil
}
