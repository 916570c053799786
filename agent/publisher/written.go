package publisher

import (
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
)

// writtenSlices remembers, per resource, what this agent last wrote of
// each of its slices (the resourceVersion the API server answered, or ""
// for a slice it deleted) until its cache shows the same. A cache whose
// watch is reconnecting (after a kube-apiserver restart, for seconds to a
// minute) would otherwise serve slices older than the agent's own writes:
// every plan made from them conflicts, and the verdicts meanwhile are not
// published. While the cache lags, the agent reads its slices from the API
// server instead.
type writtenSlices struct {
	mu sync.Mutex
	// byResource maps slice names to the resourceVersion expected.
	byResource map[types.NamespacedName]map[string]string
	// stale marks resources whose cached slices proved wrong: read live,
	// until the cache shows what that read found.
	stale map[types.NamespacedName]bool
}

func newWrittenSlices() *writtenSlices {
	return &writtenSlices{byResource: map[types.NamespacedName]map[string]string{}, stale: map[types.NamespacedName]bool{}}
}

// wrote records a slice written (created or updated) with the
// resourceVersion the API server answered.
func (w *writtenSlices) wrote(resource types.NamespacedName, name, resourceVersion string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byResource[resource] == nil {
		w.byResource[resource] = map[string]string{}
	}
	w.byResource[resource][name] = resourceVersion
}

// deleted records a slice deleted.
func (w *writtenSlices) deleted(resource types.NamespacedName, name string) {
	w.wrote(resource, name, "")
}

// after records a create or update's outcome: the resourceVersion
// answered, or, when the write failed in a way that says the cache was
// wrong (a conflict, a name taken, a slice gone) or leaves unknown whether
// it landed (a timeout, a lost answer), that the next plan must read the
// slices from the API server. A refusal (RBAC, admission, an invalid
// slice) changed nothing and says nothing of the cache.
func (w *writtenSlices) after(resource types.NamespacedName, s *discoveryv1.EndpointSlice, err error) {
	switch {
	case err == nil:
		w.wrote(resource, s.Name, s.ResourceVersion)
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
	default:
		w.conflicted(resource)
	}
}

// conflicted marks a resource whose cached slices proved wrong or whose
// write may have landed unseen: its plans read the slices from the API
// server until the cache shows what that read found.
func (w *writtenSlices) conflicted(resource types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stale[resource] = true
}

// lagging reports whether cached, the resource's slices as the cache has
// them, are older than what the agent wrote or known stale. Expectations
// the cache meets are dropped.
func (w *writtenSlices) lagging(resource types.NamespacedName, cached []discoveryv1.EndpointSlice) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	lag := w.stale[resource]
	expected := w.byResource[resource]
	for name, rv := range expected {
		if cachedVersion(cached, name) == rv {
			delete(expected, name)
		} else {
			lag = true
		}
	}
	if len(expected) == 0 {
		delete(w.byResource, resource)
	}
	return lag
}

// readLive records the slices read from the API server in place of the
// cache's: the cache must now show these (and none of the others expected).
func (w *writtenSlices) readLive(resource types.NamespacedName, live []discoveryv1.EndpointSlice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.stale, resource)
	expected := map[string]string{}
	for name := range w.byResource[resource] {
		expected[name] = ""
	}
	for i := range live {
		expected[live[i].Name] = live[i].ResourceVersion
	}
	w.byResource[resource] = expected
}

func (w *writtenSlices) forget(resource types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byResource, resource)
	delete(w.stale, resource)
}

// cachedVersion is the resourceVersion of the slice named name in slices,
// or "" when there is none.
func cachedVersion(slices []discoveryv1.EndpointSlice, name string) string {
	for i := range slices {
		if slices[i].Name == name {
			return slices[i].ResourceVersion
		}
	}
	return ""
}
