package endpoints

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpToDate reports whether existing, as read from the API server, already
// publishes what desired describes, so writing desired would change nothing
// that matters. desired is the reference: the comparison is not symmetric
// (labels below), hence the name and the order of the arguments, existing
// first, as in "existing is up to date with desired".
//
// It compares the name, namespace, labels, owner references, address type,
// ports and endpoints, and ignores what the API server sets or defaults:
// resourceVersion, uid, generation, creationTimestamp, managedFields and the
// rest of the metadata; a nil port name and ""; a nil protocol and TCP; nil
// conditions and their meaning (ready and serving true, terminating false);
// nil and empty strings for hostname, nodeName and zone; the targetRef's
// resourceVersion; deprecatedTopology, which discovery/v1 drops.
//
// Labels compare one way: every label of desired must be on existing with
// the same value, and the optional labels this package manages
// (service.kubernetes.io/headless and service-proxy-name) must be absent
// from existing when desired lacks them; other labels on existing are left
// to whoever set them. Annotations are not compared (Plan compares
// Options.OwnedAnnotations): the caller's last-change-trigger-time must not
// cause a write by itself. Two nil slices are up to date; one nil is not.
func UpToDate(existing, desired *discoveryv1.EndpointSlice) bool {
	if desired == nil || existing == nil {
		return desired == existing
	}
	return desired.Name == existing.Name &&
		desired.Namespace == existing.Namespace &&
		labelsMatch(desired.Labels, existing.Labels) &&
		ownersEqual(desired.OwnerReferences, existing.OwnerReferences) &&
		desired.AddressType == existing.AddressType &&
		slices.EqualFunc(desired.Ports, existing.Ports, portEqual) &&
		slices.EqualFunc(desired.Endpoints, existing.Endpoints, endpointEqual)
}

// optionalLabel reports whether key is a label this package sets on some
// slices and must remove from the others.
func optionalLabel(key string) bool {
	return key == corev1.IsHeadlessService || key == LabelServiceProxyName
}

func labelsMatch(desired, existing map[string]string) bool {
	for k, v := range desired {
		if got, ok := existing[k]; !ok || got != v {
			return false
		}
	}
	for k := range existing {
		if _, ok := desired[k]; !ok && optionalLabel(k) {
			return false
		}
	}
	return true
}

func ownersEqual(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.ContainsFunc(b, func(o metav1.OwnerReference) bool { return ownerEqual(a[i], o) }) {
			return false
		}
	}
	return true
}

func ownerEqual(a, b metav1.OwnerReference) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind && a.Name == b.Name && a.UID == b.UID &&
		boolOr(a.Controller, false) == boolOr(b.Controller, false) &&
		boolOr(a.BlockOwnerDeletion, false) == boolOr(b.BlockOwnerDeletion, false)
}

func portEqual(a, b discoveryv1.EndpointPort) bool {
	return strOr(a.Name, "") == strOr(b.Name, "") &&
		orTCP(derefOr(a.Protocol, "")) == orTCP(derefOr(b.Protocol, "")) &&
		ptrEqual(a.Port, b.Port) &&
		strOr(a.AppProtocol, "") == strOr(b.AppProtocol, "")
}

func endpointEqual(a, b discoveryv1.Endpoint) bool {
	return slices.Equal(a.Addresses, b.Addresses) &&
		boolOr(a.Conditions.Ready, true) == boolOr(b.Conditions.Ready, true) &&
		boolOr(a.Conditions.Serving, true) == boolOr(b.Conditions.Serving, true) &&
		boolOr(a.Conditions.Terminating, false) == boolOr(b.Conditions.Terminating, false) &&
		strOr(a.Hostname, "") == strOr(b.Hostname, "") &&
		strOr(a.NodeName, "") == strOr(b.NodeName, "") &&
		strOr(a.Zone, "") == strOr(b.Zone, "") &&
		targetRefEqual(a.TargetRef, b.TargetRef) &&
		hintsEqual(a.Hints, b.Hints)
}

func targetRefEqual(a, b *corev1.ObjectReference) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	// The pod's resourceVersion changes on every status write; it says
	// nothing about the endpoint.
	x.ResourceVersion, y.ResourceVersion = "", ""
	return x == y
}

func hintsEqual(a, b *discoveryv1.EndpointHints) bool {
	var za, zb []discoveryv1.ForZone
	var na, nb []discoveryv1.ForNode
	if a != nil {
		za, na = a.ForZones, a.ForNodes
	}
	if b != nil {
		zb, nb = b.ForZones, b.ForNodes
	}
	return slices.Equal(za, zb) && slices.Equal(na, nb)
}

func derefOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func boolOr(p *bool, def bool) bool      { return derefOr(p, def) }
func strOr(p *string, def string) string { return derefOr(p, def) }

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
