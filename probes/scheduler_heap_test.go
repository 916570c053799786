package probes

import (
	"math/rand/v2"
	"testing"
)

// TestDueHeap checks the heap against its invariants under random pushes,
// pops, removals and changes of due time.
func TestDueHeap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h dueHeap[int]
	queued := map[*entry[int]]bool{}
	check := func() {
		t.Helper()
		for i, it := range h {
			if it.e.index != i || it.at != it.e.next || !queued[it.e] {
				t.Fatalf("item %d: index %d, at %d, next %d", i, it.e.index, it.at, it.e.next)
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
			e := &entry[int]{next: r.Int64N(1000)}
			h.push(e)
			queued[e] = true
		case op == 1:
			earliest := h[0].at
			e := h.pop()
			if e.next != earliest || e.index != -1 {
				t.Fatalf("pop returned %d (index %d), the minimum was %d", e.next, e.index, earliest)
			}
			delete(queued, e)
		case op == 2:
			e := h[r.IntN(len(h))].e
			h.remove(e.index)
			if e.index != -1 {
				t.Fatalf("a removed entry keeps index %d", e.index)
			}
			delete(queued, e)
		default:
			e := h[r.IntN(len(h))].e
			e.next = r.Int64N(1000)
			h.fix(e.index)
		}
		check()
	}
}
