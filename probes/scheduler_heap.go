package probes

// dueHeap is a binary min-heap of idle entries by due time. Each item holds
// its due time next to the entry pointer, so that sifting through 10,000
// entries compares contiguous memory instead of chasing a pointer (and
// missing the cache) at every comparison.
type dueHeap[K comparable] []dueItem[K]

type dueItem[K comparable] struct {
	at int64 // e.next when pushed or fixed
	e  *entry[K]
}

func (h *dueHeap[K]) push(e *entry[K]) {
	*h = append(*h, dueItem[K]{at: e.next, e: e})
	h.up(len(*h) - 1)
}

// pop removes and returns the earliest entry.
func (h *dueHeap[K]) pop() *entry[K] {
	e := (*h)[0].e
	h.remove(0)
	return e
}

// remove takes the entry at index i out of the heap.
func (h *dueHeap[K]) remove(i int) {
	old := *h
	last := len(old) - 1
	old[i].e.index = -1
	if i != last {
		old[i] = old[last]
		old[i].e.index = i
	}
	old[last] = dueItem[K]{}
	*h = old[:last]
	if i < last && !h.down(i) {
		h.up(i)
	}
}

// fix restores the order after the entry at index i changed its due time.
func (h *dueHeap[K]) fix(i int) {
	(*h)[i].at = (*h)[i].e.next
	if !h.down(i) {
		h.up(i)
	}
}

func (h dueHeap[K]) up(i int) {
	item := h[i]
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= item.at {
			break
		}
		h[i] = h[parent]
		h[i].e.index = i
		i = parent
	}
	h[i] = item
	item.e.index = i
}

// down sifts the item at i towards the leaves and reports whether it moved.
func (h dueHeap[K]) down(i int) bool {
	start, item, n := i, h[i], len(h)
	for {
		child := 2*i + 1
		if child >= n {
			break
		}
		if right := child + 1; right < n && h[right].at < h[child].at {
			child = right
		}
		if item.at <= h[child].at {
			break
		}
		h[i] = h[child]
		h[i].e.index = i
		i = child
	}
	h[i] = item
	item.e.index = i
	return i > start
}
