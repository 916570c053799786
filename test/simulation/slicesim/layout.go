package slicesim

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// Write is one object created, updated or deleted: one watch event in
// every kube-proxy.
type Write struct {
	Verb string // create, update or delete
	Size Size
	// Obj is the object as stored (the last state, for a delete).
	Obj *discoveryv1.EndpointSlice
}

// Layout turns the cluster's state into EndpointSlices. A change to one
// resource is published in two calls around the change, so a layout that
// keeps no store can rebuild what existed before.
type Layout interface {
	Name() string
	// Before captures what r has published on nodes, before a change.
	Before(c *Cluster, r *Resource, nodes []int) (any, error)
	// After publishes r on nodes after the change and returns the writes.
	// With before nil and every node of r, it publishes r from nothing.
	After(c *Cluster, r *Resource, nodes []int, before any) ([]Write, error)
}

// eventType is the watch event type of a write.
func eventType(verb string) string {
	switch verb {
	case "create":
		return string(watch.Added)
	case "delete":
		return string(watch.Deleted)
	}
	return string(watch.Modified)
}

// measured returns the write of obj, measured.
func measured(verb string, obj *discoveryv1.EndpointSlice) (Write, error) {
	size, err := Measure(obj, eventType(verb))
	return Write{Verb: verb, Size: size, Obj: obj}, err
}
