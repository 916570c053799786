package publisher

import (
	"hash/fnv"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// phaseOf places a resource's probes within their period: every target of
// one resource (on every node) probes at the same phase, so a failure of all
// its pods is seen within milliseconds and costs one write per slice, while
// different resources spread over the period instead of firing together.
func phaseOf(resource types.NamespacedName, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(resource.String()))
	return time.Duration(h.Sum64() % uint64(period))
}

// alignedDelay returns the wait, at least minDelay, until the next instant
// whose offset in the period (counted from the Unix epoch, the same on
// every node) is phase.
func alignedDelay(now time.Time, minDelay, period, phase time.Duration) time.Duration {
	if period <= 0 {
		return minDelay
	}
	earliest := now.Add(minDelay).UnixNano()
	off := (earliest - int64(phase)) % int64(period)
	if off < 0 {
		off += int64(period)
	}
	wait := (int64(period) - off) % int64(period)
	return minDelay + time.Duration(wait)
}
