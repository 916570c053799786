package publisher

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

const (
	// DefaultSecretCacheBytes and DefaultSecretCacheNamespaceBytes bound
	// what the credentials cache keeps, in total and of one namespace.
	// A Secret costs what the probes use of it (at most 195 KiB: see
	// secretKeyMax) plus secretEntryBase: 8 MiB holds 42 Secrets at their
	// largest, or thousands of a user and a password; 32 MiB keeps the
	// agent far from its 256 MiB limit whatever the tenants name.
	DefaultSecretCacheBytes          = 32 << 20
	DefaultSecretCacheNamespaceBytes = 8 << 20
	// secretEntryBase is what an entry costs besides its key and values:
	// its struct, maps, channel and error message.
	secretEntryBase = 1 << 10
)

// secretBounds bound what the credentials cache keeps, in bytes.
type secretBounds struct {
	// Total bounds every namespace together; Namespace, each one.
	Total, Namespace int64
}

func (b secretBounds) withDefaults() secretBounds {
	if b.Total == 0 {
		b.Total = DefaultSecretCacheBytes
	}
	if b.Namespace == 0 {
		b.Namespace = DefaultSecretCacheNamespaceBytes
	}
	return b
}

// secretUsage counts what the cache's entries cost; the cache's lock
// guards it.
type secretUsage struct {
	bounds     secretBounds
	total      int64
	namespaces map[string]int64
}

// secretCost is what an entry holding data for key counts against the
// bounds; data may be nil.
func secretCost(key types.NamespacedName, data *secretData) int64 {
	cost := int64(secretEntryBase + len(key.Namespace) + len(key.Name))
	if data != nil {
		cost += int64(len(data.oversize))
		for k, v := range data.values {
			cost += int64(len(k) + len(v))
		}
	}
	return cost
}

func (u *secretUsage) add(ns string, delta int64) {
	u.total += delta
	u.namespaces[ns] += delta
	if u.namespaces[ns] <= 0 {
		delete(u.namespaces, ns)
	}
}

// over says which bound taking delta more in namespace ns would exceed,
// "" when neither.
func (u *secretUsage) over(ns string, delta int64) string {
	switch {
	case u.namespaces[ns]+delta > u.bounds.Namespace:
		return fmt.Sprintf("the Secrets of namespace %s take %s of the agent's %s per namespace (--secret-cache-namespace-mib)",
			ns, size(u.namespaces[ns]), size(u.bounds.Namespace))
	case u.total+delta > u.bounds.Total:
		return fmt.Sprintf("the agent's credentials Secrets take %s of its %s (--secret-cache-mib)", size(u.total), size(u.bounds.Total))
	}
	return ""
}

// admit refuses a new entry for key when even an empty one would exceed a
// bound: nothing is read, and the probes fail until others make room.
func (u *secretUsage) admit(key types.NamespacedName) error {
	if why := u.over(key.Namespace, secretCost(key, nil)); why != "" {
		//lint:ignore ST1005 Secret is the Kubernetes kind's name
		return fmt.Errorf("Secret %s not read: the agent's credentials cache is full: %s", key, why)
	}
	return nil
}

// resize counts e as holding data (nil: none). When data would exceed a
// bound, e is counted empty and the error says which bound; the caller
// must then drop what e held.
func (u *secretUsage) resize(key types.NamespacedName, e *secretEntry, data *secretData) error {
	empty := secretCost(key, nil)
	cost := secretCost(key, data)
	if why := u.over(key.Namespace, cost-e.cost); why != "" && cost > empty {
		u.add(key.Namespace, empty-e.cost)
		e.cost = empty
		//lint:ignore ST1005 Secret is the Kubernetes kind's name
		return fmt.Errorf("Secret %s not kept: its %s would exceed the agent's bound: %s", key, size(cost), why)
	}
	u.add(key.Namespace, cost-e.cost)
	e.cost = cost
	return nil
}

// size says n bytes in KiB below 1 MiB (rounded up), in MiB above.
func size(n int64) string {
	switch {
	case n < 1<<20:
		return fmt.Sprintf("%d KiB", (n+(1<<10)-1)>>10)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
