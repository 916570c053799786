package slicesim

import (
	"flag"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	benchNodes   = flag.String("slicesim.nodes", "500,1000,5000", "cluster sizes (nodes) to simulate")
	benchRollout = flag.String("slicesim.rollout", "5000", "sizes at which to run the rolling update (it costs the most time)")
	benchGroup   = flag.Int("slicesim.group", 100, "grouped layout: nodes per group")
	benchThresh  = flag.Int("slicesim.threshold", 16, "grouped layout: resources on more nodes than this are grouped")
	benchSweep   = flag.Int("slicesim.sweep", 1000, "size (nodes) at which to compare grouped parameters; 0: none")
)

func ints(t testing.TB, s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("bad size %q: %v", f, err)
		}
		out = append(out, n)
	}
	return out
}

// BenchmarkSliceLayouts prints the simulation's tables (make bench-slices);
// run it with -benchtime 1x.
func BenchmarkSliceLayouts(b *testing.B) {
	opts := Options{
		Nodes:    ints(b, *benchNodes),
		Rollout:  ints(b, *benchRollout),
		Grouping: Grouping{Threshold: *benchThresh, NodesPerGroup: *benchGroup},
		Seed:     1,
		// Threshold and nodes per group: the default, everything grouped,
		// small groups, few big groups, one group (per port per resource).
		SweepNodes: *benchSweep,
		Sweep:      []Grouping{{16, 100}, {0, 100}, {16, 25}, {0, 250}, {0, 1000}},
	}
	// The simulation allocates a lot and keeps little: less GC, same figures.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	for range b.N {
		start := time.Now()
		if _, err := Run(os.Stdout, opts); err != nil {
			b.Fatal(err)
		}
		b.Logf("simulated %v in %s (%s, GOMAXPROCS %d)", opts.Nodes, time.Since(start).Round(time.Second), runtime.Version(), runtime.GOMAXPROCS(0))
	}
}
