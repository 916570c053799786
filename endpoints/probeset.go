package endpoints

import (
	"iter"
	"math/bits"
	"strconv"
	"strings"
)

// MaxProbes is the number of probes a Grouping can tell apart. A bitset of
// one machine word keeps the per-pod decision a single AND; the
// ServiceWithHealthchecks API allows at most 32 probes.
const MaxProbes = 64

// ProbeSet is a set of probe indices (0 to MaxProbes-1), the positions of the
// probes in the slice given to NewGrouping. The zero value is the empty set.
//
// The agent keeps one ProbeSet per pod holding the probes that currently pass
// on that pod; a port passes when its gate's Probes are a subset of it.
type ProbeSet uint64

// ProbeSetOf returns the set holding the given indices. Indices outside
// [0, MaxProbes) are ignored.
func ProbeSetOf(indices ...int) ProbeSet {
	var s ProbeSet
	for _, i := range indices {
		s = s.With(i)
	}
	return s
}

// With returns s plus probe i. An index outside [0, MaxProbes) leaves s unchanged.
func (s ProbeSet) With(i int) ProbeSet {
	if i < 0 || i >= MaxProbes {
		return s
	}
	return s | 1<<uint(i)
}

// Without returns s minus probe i.
func (s ProbeSet) Without(i int) ProbeSet {
	if i < 0 || i >= MaxProbes {
		return s
	}
	return s &^ (1 << uint(i))
}

// Has reports whether probe i is in s.
func (s ProbeSet) Has(i int) bool {
	return i >= 0 && i < MaxProbes && s&(1<<uint(i)) != 0
}

// Contains reports whether every probe of t is in s: with s the passing
// probes and t a port's gate, whether the port passes.
func (s ProbeSet) Contains(t ProbeSet) bool {
	return t&^s == 0
}

// Empty reports whether s holds no probe.
func (s ProbeSet) Empty() bool { return s == 0 }

// Len returns the number of probes in s.
func (s ProbeSet) Len() int { return bits.OnesCount64(uint64(s)) }

// All yields the indices in s in increasing order.
func (s ProbeSet) All() iter.Seq[int] {
	return func(yield func(int) bool) {
		for rest := uint64(s); rest != 0; rest &= rest - 1 {
			if !yield(bits.TrailingZeros64(rest)) {
				return
			}
		}
	}
}

// String formats s as {0,2,5}.
func (s ProbeSet) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range s.All() {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
	}
	b.WriteByte('}')
	return b.String()
}
