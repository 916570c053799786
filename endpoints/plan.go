package endpoints

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Scope names the slices one Plan call owns: those of one Service on one
// node, published by this package with the same Options.
type Scope struct {
	Namespace string
	Service   string
	Node      string
}

// Changes is what to write to make the existing slices the desired ones.
// Apply Create, then Update, then Delete: a renamed slice then exists under
// its new name before the old one goes, and traffic never drops.
type Changes struct {
	// Create holds new slices, possibly renamed (see Collisions).
	Create []discoveryv1.EndpointSlice
	// Update holds existing slices carrying the desired content. They keep
	// the existing metadata (resourceVersion for optimistic concurrency,
	// labels and annotations set by others) except the labels, annotations
	// and owner references this package sets.
	Update []discoveryv1.EndpointSlice
	// Delete holds the existing slices of the scope that are not desired.
	Delete []discoveryv1.EndpointSlice
	// Collisions reports every desired slice whose name was taken.
	Collisions []Collision
}

// Empty reports whether there is nothing to write.
func (c *Changes) Empty() bool {
	return len(c.Create) == 0 && len(c.Update) == 0 && len(c.Delete) == 0
}

// Collision is a desired slice whose name is held by a slice Plan may not
// take over: one of another Service, manager or node, or one of the scope
// whose address type (immutable) differs.
type Collision struct {
	// Name is the name the slice was built with.
	Name string
	// Renamed is the name Plan gave it instead.
	Renamed string
	// Holder identifies the slice holding Name by its labels.
	HolderService, HolderManagedBy, HolderNode string
	// HolderAddressType is the address type of the slice holding Name.
	HolderAddressType discoveryv1.AddressType
}

func (c Collision) String() string {
	return fmt.Sprintf("slice name %q is held by the %s slice of service %q managed by %q for node %q; using %q",
		c.Name, c.HolderAddressType, c.HolderService, c.HolderManagedBy, c.HolderNode, c.Renamed)
}

// Plan compares the slices that exist with the desired ones (from Build)
// and returns the writes that make them match.
//
// existing may hold any slices of the namespace: slices are the scope's own
// when their service-name, managed-by and node labels are those of scope and
// opts; every other slice is never updated nor deleted, and its name is not
// reused. Pass at least the slices labeled with the Service's name, and, when
// a create fails because the name exists, pass that slice too: Plan then
// moves the desired slice to an alternative name, "<name>-<8 hex digits>"
// derived from the name, the Service and the node, and reports it in
// Collisions. Desired slices that can keep their own names take them first,
// so a rename never cascades onto another desired slice.
//
// The outcome depends only on the input, not on its order, and once a plan
// is applied the next one is empty. The exception is a slice of the scope
// whose address type (immutable) no longer matches: the desired slice is
// created under an alternative name while the old one is deleted, and moves
// back to its own name on the next plan, so creates always precede deletes
// and traffic never drops.
//
// Plan returns an error wrapping ErrInvalid when a desired slice is not of
// the scope or two desired slices share a name.
func Plan(scope Scope, existing, desired []discoveryv1.EndpointSlice, opts Options) (Changes, error) {
	opts, err := opts.complete()
	if err != nil {
		return Changes{}, err
	}
	if scope.Namespace == "" || scope.Service == "" || scope.Node == "" {
		return Changes{}, fmt.Errorf("scope %+v: namespace, service and node are required: %w", scope, ErrInvalid)
	}
	nodeLabel := NodeLabelValue(scope.Node)
	ours := func(s *discoveryv1.EndpointSlice) bool {
		return s.Labels[discoveryv1.LabelServiceName] == scope.Service &&
			s.Labels[discoveryv1.LabelManagedBy] == opts.ManagedBy &&
			s.Labels[opts.NodeLabel] == nodeLabel
	}

	held := make(map[string]*discoveryv1.EndpointSlice, len(existing))
	for i := range existing {
		if ns := existing[i].Namespace; ns == "" || ns == scope.Namespace {
			held[existing[i].Name] = &existing[i] // a later copy is fresher
		}
	}
	want := make([]*discoveryv1.EndpointSlice, len(desired))
	for i := range desired {
		d := &desired[i]
		if d.Namespace != scope.Namespace || !ours(d) {
			return Changes{}, fmt.Errorf("desired slice %s/%s is not of %s/%s on node %s (check its namespace and labels): %w",
				d.Namespace, d.Name, scope.Namespace, scope.Service, scope.Node, ErrInvalid)
		}
		if errs := validation.IsDNS1123Subdomain(d.Name); len(errs) > 0 {
			return Changes{}, fmt.Errorf("desired slice name %q: %s: %w", d.Name, strings.Join(errs, "; "), ErrInvalid)
		}
		want[i] = d
	}
	slices.SortFunc(want, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for i := 1; i < len(want); i++ {
		if want[i].Name == want[i-1].Name {
			return Changes{}, fmt.Errorf("two desired slices named %q: %w", want[i].Name, ErrInvalid)
		}
	}

	usable := func(name string, d *discoveryv1.EndpointSlice) bool {
		h := held[name]
		return h == nil || (ours(h) && h.AddressType == d.AddressType)
	}
	named, taken, collisions := assignNames(want, usable, scope.Service+"/"+scope.Node)
	ch := Changes{Collisions: collisions}
	for i := range ch.Collisions {
		h := held[ch.Collisions[i].Name]
		ch.Collisions[i].HolderService = h.Labels[discoveryv1.LabelServiceName]
		ch.Collisions[i].HolderManagedBy = h.Labels[discoveryv1.LabelManagedBy]
		ch.Collisions[i].HolderNode = h.Labels[opts.NodeLabel]
		ch.Collisions[i].HolderAddressType = h.AddressType
	}
	for _, d := range want {
		w := d.DeepCopy()
		w.Name = named[d]
		switch h := held[w.Name]; {
		case h == nil:
			ch.Create = append(ch.Create, *w)
		case !UpToDate(h, w) || !ownedAnnotationsMatch(w, h, opts.OwnedAnnotations):
			ch.Update = append(ch.Update, merged(h, w, opts.OwnedAnnotations))
		}
	}
	slices.SortFunc(ch.Create, byName)
	slices.SortFunc(ch.Update, byName)
	for _, name := range slices.Sorted(maps.Keys(held)) {
		if h := held[name]; ours(h) && !taken[name] {
			ch.Delete = append(ch.Delete, *h.DeepCopy())
		}
	}
	return ch, nil
}

// assignNames gives each desired slice (sorted by name) its own name when
// usable allows it, then an alternative name to the others, and returns the
// name of each and the set of names used. Own names are claimed first so an
// alternative never steals one and renames do not cascade.
func assignNames(want []*discoveryv1.EndpointSlice, usable func(string, *discoveryv1.EndpointSlice) bool, salt string) (
	named map[*discoveryv1.EndpointSlice]string, taken map[string]bool, collisions []Collision,
) {
	named = make(map[*discoveryv1.EndpointSlice]string, len(want))
	taken = make(map[string]bool, len(want))
	own := make(map[string]bool, len(want))
	for _, d := range want {
		own[d.Name] = true
		if usable(d.Name, d) {
			named[d], taken[d.Name] = d.Name, true
		}
	}
	for _, d := range want {
		if _, ok := named[d]; ok {
			continue
		}
		name := freeName(d.Name, salt, func(n string) bool { return taken[n] || own[n] || !usable(n, d) })
		named[d], taken[name] = name, true
		collisions = append(collisions, Collision{Name: d.Name, Renamed: name})
	}
	return named, taken, collisions
}

func byName(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) }

// ownedAnnotationsMatch reports whether existing carries the owned
// annotations of desired, and none desired lacks.
func ownedAnnotationsMatch(desired, existing *discoveryv1.EndpointSlice, owned []string) bool {
	for _, k := range owned {
		want, wanted := desired.Annotations[k]
		got, has := existing.Annotations[k]
		if wanted != has || want != got {
			return false
		}
	}
	return true
}

// merged returns existing carrying the content of desired, without the
// owned annotations desired lacks.
func merged(existing, desired *discoveryv1.EndpointSlice, owned []string) discoveryv1.EndpointSlice {
	out := existing.DeepCopy()
	for _, k := range owned {
		if _, ok := desired.Annotations[k]; !ok {
			delete(out.Annotations, k)
		}
	}
	if out.Labels == nil {
		out.Labels = make(map[string]string, len(desired.Labels))
	}
	maps.DeleteFunc(out.Labels, func(k, _ string) bool { return optionalLabel(k) })
	maps.Copy(out.Labels, desired.Labels)
	if len(desired.Annotations) > 0 {
		if out.Annotations == nil {
			out.Annotations = make(map[string]string, len(desired.Annotations))
		}
		maps.Copy(out.Annotations, desired.Annotations)
	}
	out.OwnerReferences = desired.OwnerReferences
	out.AddressType = desired.AddressType
	out.Ports = desired.Ports
	out.Endpoints = desired.Endpoints
	return *out
}

// freeName returns the first alternative to name that taken refuses:
// "<name>-<8 hex digits>", the digits hashed from salt, name and an attempt
// counter, name shortened to keep the result within 253 characters.
func freeName(name, salt string, taken func(string) bool) string {
	const hashLen = 8
	base := name
	if limit := validation.DNS1123SubdomainMaxLength - 1 - hashLen; len(base) > limit {
		base = trimNonAlnumRight(base[:limit])
	}
	for attempt := 1; ; attempt++ {
		c := base + "-" + digest(salt+"\x00"+name+"\x00"+strconv.Itoa(attempt), hashLen)
		if !taken(c) {
			return c
		}
	}
}

// uniqueNames renames the later of slices that share a name, the way Plan
// resolves collisions, then sorts them by name. Distinct parts only meet in
// contrived cases (a port name that looks like a suffix).
func uniqueNames(out []discoveryv1.EndpointSlice, salt string) {
	taken := make(map[string]bool, len(out))
	for i := range out {
		if taken[out[i].Name] {
			out[i].Name = freeName(out[i].Name, salt, func(n string) bool { return taken[n] })
		}
		taken[out[i].Name] = true
	}
	slices.SortFunc(out, byName)
}
