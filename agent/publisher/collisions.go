package publisher

import (
	"context"
	"fmt"
	"sort"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
)

// takenNames remembers, per resource, the slice names a create found held by
// another slice. The cache holds only this agent's slices, so endpoints.Plan
// cannot see such a holder until it is read from the API server; once it is
// passed to Plan, the desired slice moves to an alternative name.
type takenNames struct {
	mu         sync.Mutex
	byResource map[types.NamespacedName]map[string]bool
}

func newTakenNames() *takenNames {
	return &takenNames{byResource: map[types.NamespacedName]map[string]bool{}}
}

func (t *takenNames) add(resource types.NamespacedName, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byResource[resource] == nil {
		t.byResource[resource] = map[string]bool{}
	}
	t.byResource[resource][name] = true
}

func (t *takenNames) remove(resource types.NamespacedName, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byResource[resource], name)
	if len(t.byResource[resource]) == 0 {
		delete(t.byResource, resource)
	}
}

func (t *takenNames) forget(resource types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byResource, resource)
}

// names returns the taken names of a resource, sorted.
func (t *takenNames) names(resource types.NamespacedName) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.byResource[resource]))
	for name := range t.byResource[resource] {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// withHolders adds to existing the slices that hold names a create found
// taken, read from the API server (not the cache). A holder that is gone
// frees its name; one already in existing is this agent's own.
func (p *Publisher) withHolders(ctx context.Context, resource types.NamespacedName, existing []discoveryv1.EndpointSlice) ([]discoveryv1.EndpointSlice, error) {
	names := p.takenSliceNames.names(resource)
	if len(names) == 0 {
		return existing, nil
	}
	own := make(map[string]bool, len(existing))
	for i := range existing {
		own[existing[i].Name] = true
	}
	for _, name := range names {
		if own[name] {
			p.takenSliceNames.remove(resource, name)
			continue
		}
		holder := &discoveryv1.EndpointSlice{}
		err := p.reader.Get(ctx, client.ObjectKey{Namespace: resource.Namespace, Name: name}, holder)
		switch {
		case apierrors.IsNotFound(err):
			p.takenSliceNames.remove(resource, name)
		case err != nil:
			return nil, fmt.Errorf("reading slice %s/%s, which holds a name of %s: %w", resource.Namespace, name, resource, err)
		default:
			existing = append(existing, *holder)
		}
	}
	return existing, nil
}

// ownedBy keeps the slices of the resource the agent publishes: the list it
// is given may hold slices of other owners that hold a name it wanted.
func ownedBy(resource types.NamespacedName, slices []discoveryv1.EndpointSlice) []discoveryv1.EndpointSlice {
	out := make([]discoveryv1.EndpointSlice, 0, len(slices))
	for i := range slices {
		l := slices[i].Labels
		if slices[i].Namespace == resource.Namespace && l[discoveryv1.LabelServiceName] == resource.Name &&
			endpoints.ManagedBy(&slices[i], endpoints.Options{}) {
			out = append(out, slices[i])
		}
	}
	return out
}
