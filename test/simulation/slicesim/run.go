package slicesim

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// Options of a full run.
type Options struct {
	// Nodes lists the cluster sizes, each shaped by Scaled.
	Nodes    []int
	Grouping Grouping
	Seed     uint64
	// Rollout runs the rolling update at these sizes only (it costs the
	// most time); nil runs it at every size.
	Rollout []int
	// SweepNodes, when not 0, compares the Sweep groupings at that size.
	SweepNodes int
	Sweep      []Grouping
}

// Result is what one cluster size gave, per layout: ours, builtin, then
// grouped with each Grouping.
type Result struct {
	Config    Config
	Layouts   []string
	Groupings []Grouping
	// PackedPerPort is the number of slices if every port of every resource
	// were packed 100 endpoints per slice, as builtin packs all ports: the
	// fewest slices per-port conditions can take.
	PackedPerPort int
	Steady        []Totals
	// HeapPerObject is the Go heap of one decoded object in an informer.
	HeapPerObject []float64
	// Changes holds the one-endpoint changes, by case.
	Changes     []Case
	NodeFailure []Totals
	FailedNode  string
	Rollout     []Totals // nil when not run
	Elapsed     time.Duration
}

// Case is one scenario's writes, per layout.
type Case struct {
	Name   string
	Totals []Totals
}

// RunSize simulates one cluster size with ours, builtin and grouped with
// each of groupings.
func RunSize(cfg Config, groupings []Grouping, rollout bool) (*Result, error) {
	start := time.Now()
	c, err := Generate(cfg)
	if err != nil {
		return nil, err
	}
	builtin, err := NewBuiltin(c, cfg.Seed)
	if err != nil {
		return nil, err
	}
	sim := &Sim{C: c, Layouts: []Layout{NewOurs(Grouping{}), builtin}}
	for _, g := range groupings {
		sim.Layouts = append(sim.Layouts, NewOurs(g))
	}
	res := &Result{Config: cfg, Groupings: groupings}
	for _, l := range sim.Layouts {
		res.Layouts = append(res.Layouts, l.Name())
	}
	for _, r := range c.Resources {
		res.PackedPerPort += len(r.Ports) * ((len(r.Pods) + 99) / 100)
	}

	// About 1,500 samples per layout for the heap figure.
	stride := []int{1 + cfg.Pods/1500, 1 + cfg.Resources/1500}
	for range groupings {
		stride = append(stride, 1+cfg.Pods/3000)
	}
	samples := make([][][]byte, len(sim.Layouts))
	var sampleErr error
	res.Steady, err = sim.Steady(stride, func(i int, obj *discoveryv1.EndpointSlice) {
		raw, err := obj.Marshal()
		if err != nil && sampleErr == nil {
			sampleErr = err
		}
		samples[i] = append(samples[i], raw)
	})
	if err == nil {
		err = sampleErr
	}
	if err != nil {
		return nil, err
	}
	for i := range samples {
		h, err := HeapPerObject(samples[i])
		if err != nil {
			return nil, err
		}
		res.HeapPerObject = append(res.HeapPerObject, h)
		samples[i] = nil
	}

	for _, pick := range changeCases(c) {
		ts, err := sim.FlipPort(pick.r, pick.r.Pods[0])
		if err != nil {
			return nil, err
		}
		res.Changes = append(res.Changes, Case{Name: pick.name, Totals: ts})
	}

	node := c.RandomNode()
	res.FailedNode = c.Nodes[node].Name
	if res.NodeFailure, err = sim.NodeFailure(node); err != nil {
		return nil, err
	}

	if rollout && cfg.Big > 0 {
		var big *Resource
		for _, r := range c.Resources {
			if r.Name == "storefront-web" {
				big = r
			}
		}
		if res.Rollout, err = sim.RollingUpdate(big, c.RandomNode); err != nil {
			return nil, err
		}
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

type pick struct {
	name string
	r    *Resource
}

// changeCases picks the resources of the one-endpoint changes: a small and
// the largest multi-port Deployment, the 1,000-pod one, a DaemonSet.
func changeCases(c *Cluster) []pick {
	var small, largest, big, ds *Resource
	for _, r := range c.Resources {
		switch {
		case r.DaemonSet:
			// Not node-local-dns: its two ports share target port 53, so
			// a probe on 53 gates both.
			if r.Name == "mesh-proxy" {
				ds = r
			}
		case r.Name == "storefront-web":
			big = r
		case len(r.Ports) < 2:
		case len(r.Pods) == 3 && small == nil:
			small = r
		case largest == nil || len(r.Pods) > len(largest.Pods):
			largest = r
		}
	}
	var out []pick
	add := func(what string, r *Resource) {
		if r != nil {
			out = append(out, pick{fmt.Sprintf("%s (%d pods, %d ports)", what, len(r.Pods), len(r.Ports)), r})
		}
	}
	add("small Deployment", small)
	add("largest Deployment", largest)
	add("1,000-pod Deployment", big)
	add("DaemonSet", ds)
	return out
}

// Run simulates every size of opts and prints the tables to w.
func Run(w io.Writer, opts Options) ([]*Result, error) {
	var out []*Result
	for _, n := range opts.Nodes {
		cfg := Scaled(n)
		cfg.Seed = opts.Seed
		rollout := opts.Rollout == nil || slices.Contains(opts.Rollout, n)
		res, err := RunSize(cfg, []Grouping{opts.Grouping}, rollout)
		if err != nil {
			return out, fmt.Errorf("%d nodes: %w", n, err)
		}
		Print(w, res)
		out = append(out, res)
	}
	if opts.SweepNodes > 0 {
		cfg := Scaled(opts.SweepNodes)
		cfg.Seed = opts.Seed
		res, err := RunSize(cfg, opts.Sweep, false)
		if err != nil {
			return out, fmt.Errorf("sweep at %d nodes: %w", opts.SweepNodes, err)
		}
		PrintSweep(w, res)
		out = append(out, res)
	}
	return out, nil
}

// PrintSweep writes one row per layout of r: the grouped candidates beside
// ours and builtin.
func PrintSweep(w io.Writer, r *Result) {
	cfg := r.Config
	fmt.Fprintf(w, "\n### Grouped layout, parameters compared: %s nodes, %s resources, %s pods (simulated in %s)\n\n",
		num(int64(cfg.Nodes)), num(int64(cfg.Resources)), num(int64(cfg.Pods)), r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "bytes are per kube-proxy; a change is one endpoint failing on port 0\n\n")
	fmt.Fprintf(w, "| layout | groups | slices | list bytes | informer heap (est.) |")
	for _, c := range r.Changes {
		fmt.Fprintf(w, " change: %s |", c.Name)
	}
	fmt.Fprintf(w, " node failure |\n|---|%s\n", strings.Repeat("--:|", 4+len(r.Changes)+1))
	for i, name := range r.Layouts {
		groups := "—"
		if i >= 2 {
			g := r.Groupings[i-2]
			name = fmt.Sprintf("grouped, above %d nodes, %d nodes per group", g.Threshold, g.NodesPerGroup)
			groups = fmt.Sprint(NewOurs(g).groups(cfg.Nodes))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |", name, groups, num(int64(r.Steady[i].Creates)),
			num(r.Steady[i].Stored), num(int64(r.HeapPerObject[i]*float64(r.Steady[i].Creates))))
		for _, c := range r.Changes {
			fmt.Fprintf(w, " %s |", num(c.Totals[i].Event))
		}
		fmt.Fprintf(w, " %s |\n", num(r.NodeFailure[i].Event))
	}
	fmt.Fprintf(w, "| per-port packed, 100 per slice (count only) | — | %s |%s\n", num(int64(r.PackedPerPort)), strings.Repeat(" |", 3+len(r.Changes)))
}

// Print writes the tables of one cluster size as Markdown: ours, builtin
// and the first grouped layout.
func Print(w io.Writer, full *Result) {
	r := *full
	r.Layouts, r.Steady, r.HeapPerObject = r.Layouts[:3], r.Steady[:3], r.HeapPerObject[:3]
	r.NodeFailure = r.NodeFailure[:3]
	if r.Rollout != nil {
		r.Rollout = r.Rollout[:3]
	}
	r.Changes = slices.Clone(r.Changes)
	for i := range r.Changes {
		r.Changes[i].Totals = r.Changes[i].Totals[:3]
	}
	cfg, g := r.Config, r.Groupings[0]
	fmt.Fprintf(w, "\n### %s nodes, %s resources, %s pods (seed %d; simulated in %s)\n\n",
		num(int64(cfg.Nodes)), num(int64(cfg.Resources)), num(int64(cfg.Pods)), cfg.Seed, r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "grouped: resources on more than %d nodes, groups of about %d nodes (%d groups)\n\n",
		g.Threshold, g.NodesPerGroup, NewOurs(g).groups(cfg.Nodes))
	header(w, "steady state", r.Layouts)
	n := int64(cfg.Nodes)
	rows := []struct {
		name string
		f    func(i int) float64
	}{
		{"objects (slices)", func(i int) float64 { return float64(r.Steady[i].Creates) }},
		{"endpoints", func(i int) float64 { return float64(r.Steady[i].Endpoints) }},
		{"stored bytes (protobuf, etcd)", func(i int) float64 { return float64(r.Steady[i].Stored) }},
		{"JSON bytes", func(i int) float64 { return float64(r.Steady[i].JSON) }},
		{"bytes per object (protobuf)", func(i int) float64 { return float64(r.Steady[i].Stored) / float64(r.Steady[i].Creates) }},
		{"each kube-proxy: slices watched", func(i int) float64 { return float64(r.Steady[i].Creates) }},
		{"each kube-proxy: initial list bytes", func(i int) float64 { return float64(r.Steady[i].Stored) }},
		{"each kube-proxy: informer heap (est.)", func(i int) float64 { return r.HeapPerObject[i] * float64(r.Steady[i].Creates) }},
		{"informer heap per slice (sampled)", func(i int) float64 { return r.HeapPerObject[i] }},
	}
	for _, row := range rows {
		line(w, row.name, len(r.Layouts), row.f)
	}
	fmt.Fprintf(w, "\nper-port packed (every port of a resource in slices of 100, one writer per resource): %s slices, %s builtin's count\n\n",
		num(int64(r.PackedPerPort)), ratio(float64(r.PackedPerPort), float64(r.Steady[1].Creates)))
	for _, c := range r.Changes {
		writesTable(w, "one endpoint fails on port 0: "+c.Name, r.Layouts, c.Totals, n)
	}
	writesTable(w, "node failure ("+r.FailedNode+" not Ready)", r.Layouts, r.NodeFailure, n)
	if r.Rollout != nil {
		writesTable(w, "rolling update of the 1,000-pod Deployment (4 syncs per pod)", r.Layouts, r.Rollout, n)
	}
}

func header(w io.Writer, title string, layouts []string) {
	fmt.Fprintf(w, "| %s | %s |", title, strings.Join(layouts, " | "))
	cols := len(layouts)
	for _, l := range layouts {
		if l != "builtin" {
			fmt.Fprintf(w, " %s/builtin |", l)
			cols++
		}
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("--:|", cols))
}

// line prints one row: each layout's figure, then the others / builtin.
func line(w io.Writer, name string, layouts int, f func(i int) float64) {
	fmt.Fprintf(w, "| %s |", name)
	for i := range layouts {
		fmt.Fprintf(w, " %s |", num(int64(f(i)+0.5)))
	}
	for _, i := range []int{0, 2} {
		if i < layouts {
			fmt.Fprintf(w, " %s |", ratio(f(i), f(1)))
		}
	}
	fmt.Fprintln(w)
}

func writesTable(w io.Writer, title string, layouts []string, ts []Totals, nodes int64) {
	header(w, title, layouts)
	line(w, "writes (create/update/delete)", len(layouts), func(i int) float64 { return float64(ts[i].Writes()) })
	fmt.Fprintf(w, "| — of which create/update/delete |")
	for i := range layouts {
		fmt.Fprintf(w, " %d/%d/%d |", ts[i].Creates, ts[i].Updates, ts[i].Deletes)
	}
	fmt.Fprintf(w, "%s\n", strings.Repeat(" |", len(layouts)-1))
	line(w, "endpoints in the objects written", len(layouts), func(i int) float64 { return float64(ts[i].Endpoints) })
	line(w, "bytes sent to each kube-proxy", len(layouts), func(i int) float64 { return float64(ts[i].Event) })
	line(w, "bytes sent to all kube-proxies (× nodes)", len(layouts), func(i int) float64 { return float64(ts[i].Event * nodes) })
	line(w, "bytes written to etcd", len(layouts), func(i int) float64 { return float64(ts[i].Stored) })
	fmt.Fprintln(w)
}

func ratio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "—"
		}
		return "∞"
	}
	r := a / b
	switch {
	case r >= 10:
		return fmt.Sprintf("%.0f×", r)
	case r >= 0.1:
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.3f×", r)
}

// num formats n with thousands separators.
func num(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + num(-n)
	}
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}
