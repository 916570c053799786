package probes

// timeHeap is a binary min-heap by time: the scheduler's idle entries of a
// group by due time, and its groups by their earliest due entry. Each item
// holds its time next to the pointer, so that sifting through 10,000 items
// compares contiguous memory instead of chasing a pointer (and missing the
// cache) at every comparison; index points to where the item's owner keeps
// its place in the heap (-1 once out of it).
type timeHeap[P any] []timed[P]

type timed[P any] struct {
	at    int64
	index *int
	p     P
}

func (h *timeHeap[P]) push(p P, at int64, index *int) {
	*h = append(*h, timed[P]{at: at, index: index, p: p})
	h.up(len(*h) - 1)
}

// pop removes and returns the earliest item.
func (h *timeHeap[P]) pop() P {
	p := (*h)[0].p
	h.remove(0)
	return p
}

// remove takes the item at index i out of the heap.
func (h *timeHeap[P]) remove(i int) {
	old := *h
	last := len(old) - 1
	*old[i].index = -1
	if i != last {
		old[i] = old[last]
		*old[i].index = i
	}
	old[last] = timed[P]{}
	*h = old[:last]
	if i < last && !h.down(i) {
		h.up(i)
	}
}

// fix gives the item at index i the time at and restores the order.
func (h *timeHeap[P]) fix(i int, at int64) {
	(*h)[i].at = at
	if !h.down(i) {
		h.up(i)
	}
}

func (h timeHeap[P]) up(i int) {
	item := h[i]
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].at <= item.at {
			break
		}
		h[i] = h[parent]
		*h[i].index = i
		i = parent
	}
	h[i] = item
	*item.index = i
}

// down sifts the item at i towards the leaves and reports whether it moved.
func (h timeHeap[P]) down(i int) bool {
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
		*h[i].index = i
		i = child
	}
	h[i] = item
	*item.index = i
	return i > start
}
