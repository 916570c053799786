package probes

import (
	"math/rand/v2"
	"testing"
)

// TestTimeHeap checks the heap against its invariants under random pushes,
// pops, removals and changes of time.
func TestTimeHeap(t *testing.T) {
	type item struct {
		at    int64
		index int
	}
	r := rand.New(rand.NewPCG(1, 2))
	var h timeHeap[*item]
	queued := map[*item]bool{}
	check := func() {
		t.Helper()
		for i, it := range h {
			if it.p.index != i || it.index != &it.p.index || it.at != it.p.at || !queued[it.p] {
				t.Fatalf("item %d: index %d, at %d, want %d", i, it.p.index, it.at, it.p.at)
			}
			if i > 0 && h[(i-1)/2].at > it.at {
				t.Fatalf("item %d is earlier than its parent", i)
			}
		}
		if len(h) != len(queued) {
			t.Fatalf("%d items, %d queued", len(h), len(queued))
		}
	}
	for range 20000 {
		switch op := r.IntN(4); {
		case op == 0 || len(h) == 0:
			it := &item{at: r.Int64N(1000)}
			h.push(it, it.at, &it.index)
			queued[it] = true
		case op == 1:
			earliest := h[0].at
			it := h.pop()
			if it.at != earliest || it.index != -1 {
				t.Fatalf("pop returned %d (index %d), the minimum was %d", it.at, it.index, earliest)
			}
			delete(queued, it)
		case op == 2:
			it := h[r.IntN(len(h))].p
			h.remove(it.index)
			if it.index != -1 {
				t.Fatalf("a removed item keeps index %d", it.index)
			}
			delete(queued, it)
		default:
			it := h[r.IntN(len(h))].p
			it.at = r.Int64N(1000)
			h.fix(it.index, it.at)
		}
		check()
	}
}
