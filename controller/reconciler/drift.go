package reconciler

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// drift is what someone else changed on the child Service that changes
// traffic. Server-side apply alone does not undo it: a field the spec leaves
// unset is not the controller's (a selector, a port added, a policy), so the
// apply leaves it; a field the spec sets moves to whoever changed it, and
// the forced apply takes it back.
type drift struct {
	// changes say what drifted, in the order found.
	changes []change
	// patch, a JSON merge patch of spec, puts back the fields the spec
	// leaves unset (null: the API server defaults them again); nil when
	// none drifted.
	patch map[string]any
	// selector is the selector removed, "" when there was none.
	selector string
}

// change is one drifted value.
type change struct {
	// field is the metric label (the spec field).
	field string
	// note says what drifted and which field managers set it.
	note string
	// path is where managed fields record the value.
	path []string
}

func (d *drift) add(field, note string, path ...string) {
	d.changes = append(d.changes, change{field: field, note: note, path: path})
}

func (d *drift) unset(field string, value any, note string, path ...string) {
	d.patch = orNew(d.patch)
	d.patch[field] = value
	d.add(field, note, path...)
}

// fields lists the drifted fields, once each.
func (d drift) fields() []string {
	var out []string
	for _, c := range d.changes {
		if !slices.Contains(out, c.field) {
			out = append(out, c.field)
		}
	}
	return out
}

// String lists the notes for events and logs.
func (d drift) String() string {
	notes := make([]string, 0, len(d.changes))
	for _, c := range d.changes {
		notes = append(notes, c.note)
	}
	return strings.Join(notes, "; ")
}

// split returns the changes for which mine is true and the others, with no
// patch: for reporting.
func (d drift) split(mine func(change) bool) (yes, no drift) {
	for _, c := range d.changes {
		if mine(c) {
			yes.changes = append(yes.changes, c)
		} else {
			no.changes = append(no.changes, c)
		}
	}
	return yes, no
}

// foreignDrift returns the fields of the live Service that the spec leaves
// unset and that another field manager than the controller's apply set in a
// way that changes traffic: a selector (the built-in EndpointSlice
// controller would publish pods by readiness next to the agents' slices),
// ports the spec does not have, and a type, traffic policy, affinity,
// external IPs, source ranges, traffic distribution or
// publishNotReadyAddresses other than the API server's default. A value the
// controller's apply owns is never drift: it is what the last applied spec
// said, and a spec that no longer says it is a change the apply makes (or,
// when the API server refuses it, must not be made by other means). Only
// the fields include accepts are looked at (nil: all).
func foreignDrift(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, fieldOwner string, include func(field string) bool) drift {
	want := swh.Spec.ServiceSpec()
	live := &svc.Spec
	by := func(path ...string) string { return setBy(svc, fieldOwner, path...) }
	// foreign: the field is looked at and the controller's apply does not
	// own the value.
	foreign := func(field string, path ...string) bool {
		return (include == nil || include(field)) && !appliedBy(svc, fieldOwner, path...)
	}
	var d drift

	if p := []string{"f:spec", "f:selector"}; len(live.Selector) > 0 && foreign("selector", p...) {
		d.selector = labels.SelectorFromSet(live.Selector).String()
		d.unset("selector", nil, "selector "+d.selector+by(p...), p...)
	}
	typePath := []string{"f:spec", "f:type"}
	typeReset := want.Type == "" && live.Type != "" && live.Type != corev1.ServiceTypeClusterIP && foreign("type", typePath...)
	if typeReset {
		d.unset("type", nil, fmt.Sprintf("type %s%s", live.Type, by(typePath...)), typePath...)
	}
	if p := []string{"f:spec", "f:externalName"}; want.ExternalName == "" && live.ExternalName != "" && foreign("externalName", p...) {
		d.unset("externalName", nil, "externalName "+live.ExternalName+by(p...), p...)
	}

	wanted := map[string]*corev1.ServicePort{}
	for i := range want.Ports {
		wanted[portKey(&want.Ports[i])] = &want.Ports[i]
	}
	kept := make([]corev1.ServicePort, 0, len(live.Ports))
	portsDrift := false
	for _, p := range live.Ports {
		key := portKey(&p)
		path := []string{"f:spec", "f:ports", portPath(&p)}
		w, ok := wanted[key]
		if !ok {
			if foreign("ports", path...) {
				portsDrift = true
				d.add("ports", "port "+key+by(path...), path...)
				continue
			}
			// The last applied spec's: the apply removes it.
			kept = append(kept, p)
			continue
		}
		if name := append(slices.Clone(path), "f:name"); w.Name == "" && p.Name != "" && foreign("ports", name...) {
			portsDrift = true
			d.add("ports", fmt.Sprintf("name %q of port %s%s", p.Name, key, by(name...)), name...)
			p.Name = ""
		}
		if proto := append(slices.Clone(path), "f:appProtocol"); w.AppProtocol == nil && p.AppProtocol != nil && foreign("ports", proto...) {
			portsDrift = true
			d.add("ports", fmt.Sprintf("appProtocol %q of port %s%s", *p.AppProtocol, key, by(proto...)), proto...)
			p.AppProtocol = nil
		}
		if typeReset {
			p.NodePort = 0 // a ClusterIP Service has none
		}
		kept = append(kept, p)
	}
	// With none of the spec's ports left, the apply adds them back first
	// (a Service needs a port); the next pass removes the others.
	if portsDrift && len(kept) > 0 {
		d.patch = orNew(d.patch)
		d.patch["ports"] = kept
	}

	if p := []string{"f:spec", "f:externalTrafficPolicy"}; want.ExternalTrafficPolicy == "" && live.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal &&
		foreign("externalTrafficPolicy", p...) {
		d.unset("externalTrafficPolicy", nil, "externalTrafficPolicy Local"+by(p...), p...)
	}
	if p := []string{"f:spec", "f:internalTrafficPolicy"}; want.InternalTrafficPolicy == nil && live.InternalTrafficPolicy != nil &&
		*live.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal && foreign("internalTrafficPolicy", p...) {
		d.unset("internalTrafficPolicy", nil, "internalTrafficPolicy Local"+by(p...), p...)
	}
	if p := []string{"f:spec", "f:publishNotReadyAddresses"}; !want.PublishNotReadyAddresses && live.PublishNotReadyAddresses && foreign("publishNotReadyAddresses", p...) {
		d.unset("publishNotReadyAddresses", nil, "publishNotReadyAddresses true"+by(p...), p...)
	}
	if p := []string{"f:spec", "f:sessionAffinity"}; want.SessionAffinity == "" && live.SessionAffinity == corev1.ServiceAffinityClientIP && foreign("sessionAffinity", p...) {
		d.unset("sessionAffinity", nil, "sessionAffinity ClientIP"+by(p...), p...)
		d.patch["sessionAffinityConfig"] = nil // must go with it
	}
	if p := []string{"f:spec", "f:externalIPs"}; len(want.ExternalIPs) == 0 && len(live.ExternalIPs) > 0 && foreign("externalIPs", p...) {
		d.unset("externalIPs", nil, fmt.Sprintf("externalIPs %v%s", live.ExternalIPs, by(p...)), p...)
	}
	if p := []string{"f:spec", "f:loadBalancerSourceRanges"}; len(want.LoadBalancerSourceRanges) == 0 && len(live.LoadBalancerSourceRanges) > 0 &&
		foreign("loadBalancerSourceRanges", p...) {
		d.unset("loadBalancerSourceRanges", nil, fmt.Sprintf("loadBalancerSourceRanges %v%s", live.LoadBalancerSourceRanges, by(p...)), p...)
	}
	if p := []string{"f:spec", "f:trafficDistribution"}; want.TrafficDistribution == nil && live.TrafficDistribution != nil && foreign("trafficDistribution", p...) {
		d.unset("trafficDistribution", nil, "trafficDistribution "+*live.TrafficDistribution+by(p...), p...)
	}
	return d
}

// ownedDrift returns the fields the spec sets whose live value another field
// manager changed. The forced apply puts them back (the change moved them
// to that manager, so the Service is no longer up to date); this only names
// them. A value that differs while still the controller's is a spec change
// the cache has not seen applied yet, not drift.
func ownedDrift(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, fieldOwner string) drift {
	want := swh.Spec.ServiceSpec()
	live := &svc.Spec
	var d drift
	check := func(field, what string, differs bool, path ...string) {
		if who := setBy(svc, fieldOwner, path...); differs && who != "" {
			d.add(field, what+who, path...)
		}
	}
	check("type", fmt.Sprintf("type %s", live.Type), want.Type != "" && live.Type != want.Type, "f:spec", "f:type")
	check("externalTrafficPolicy", fmt.Sprintf("externalTrafficPolicy %s", live.ExternalTrafficPolicy),
		want.ExternalTrafficPolicy != "" && live.ExternalTrafficPolicy != want.ExternalTrafficPolicy, "f:spec", "f:externalTrafficPolicy")
	check("internalTrafficPolicy", "internalTrafficPolicy",
		want.InternalTrafficPolicy != nil && !ptrEqual(live.InternalTrafficPolicy, want.InternalTrafficPolicy), "f:spec", "f:internalTrafficPolicy")
	check("publishNotReadyAddresses", "publishNotReadyAddresses false",
		want.PublishNotReadyAddresses && !live.PublishNotReadyAddresses, "f:spec", "f:publishNotReadyAddresses")
	check("sessionAffinity", fmt.Sprintf("sessionAffinity %s", live.SessionAffinity),
		want.SessionAffinity != "" && live.SessionAffinity != want.SessionAffinity, "f:spec", "f:sessionAffinity")
	check("externalIPs", fmt.Sprintf("externalIPs %v", live.ExternalIPs),
		len(want.ExternalIPs) > 0 && !slices.Equal(live.ExternalIPs, want.ExternalIPs), "f:spec", "f:externalIPs")
	check("loadBalancerSourceRanges", fmt.Sprintf("loadBalancerSourceRanges %v", live.LoadBalancerSourceRanges),
		len(want.LoadBalancerSourceRanges) > 0 && !slices.Equal(live.LoadBalancerSourceRanges, want.LoadBalancerSourceRanges), "f:spec", "f:loadBalancerSourceRanges")
	check("trafficDistribution", "trafficDistribution",
		want.TrafficDistribution != nil && !ptrEqual(live.TrafficDistribution, want.TrafficDistribution), "f:spec", "f:trafficDistribution")
	for i := range want.Ports {
		w := &want.Ports[i]
		idx := slices.IndexFunc(live.Ports, func(p corev1.ServicePort) bool { return portKey(&p) == portKey(w) })
		if idx < 0 {
			check("ports", "port "+portKey(w)+" missing", true, "f:spec", "f:ports")
			continue
		}
		p := &live.Ports[idx]
		differs := p.TargetPort != w.TargetPort || (w.Name != "" && p.Name != w.Name) ||
			(w.AppProtocol != nil && !ptrEqual(p.AppProtocol, w.AppProtocol)) || (w.NodePort != 0 && p.NodePort != w.NodePort)
		check("ports", "port "+portKey(w), differs, "f:spec", "f:ports", portPath(p))
	}
	return d
}

// proxyLabelDrift returns a note when the Service carries a
// service.kubernetes.io/service-proxy-name label the resource does not set:
// kube-proxy then ignores the Service and its slices, and another proxy is
// meant to serve it. Labels are shared with other tools, so the controller
// reports it instead of removing it; "" when there is none.
func proxyLabelDrift(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, fieldOwner string) string {
	const key = endpoints.LabelServiceProxyName
	v, ok := svc.Labels[key]
	if !ok {
		return ""
	}
	if mine, set := swh.Labels[key]; set && mine == v {
		return ""
	}
	return fmt.Sprintf("the child Service has the label %s=%s%s, which the resource does not set: kube-proxy ignores the Service and its EndpointSlices. "+
		"Put the label on the resource if another proxy is meant to serve it, or remove it from the Service", key, v, setBy(svc, fieldOwner, "f:metadata", "f:labels", "f:"+key))
}

// portKey is how the API server tells a Service's ports apart.
func portKey(p *corev1.ServicePort) string {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return fmt.Sprintf("%d/%s", p.Port, proto)
}

// portPath is a port's key in managed fields.
func portPath(p *corev1.ServicePort) string {
	proto := p.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	return fmt.Sprintf(`k:{"port":%d,"protocol":%q}`, p.Port, proto)
}

// setBy names, as " (set by a, b)", the field managers other than the
// controller's apply that own the field at path or anything under it; ""
// when there are none.
func setBy(svc *corev1.Service, fieldOwner string, path ...string) string {
	var who []string
	for _, mf := range svc.ManagedFields {
		if !isApplyOf(mf, fieldOwner) && owns(mf, path) && !slices.Contains(who, mf.Manager) {
			who = append(who, mf.Manager)
		}
	}
	if len(who) == 0 {
		return ""
	}
	sort.Strings(who)
	return " (set by " + strings.Join(who, ", ") + ")"
}

// appliedBy reports whether the controller's server-side apply owns the
// field at path or anything under it.
func appliedBy(svc *corev1.Service, fieldOwner string, path ...string) bool {
	for _, mf := range svc.ManagedFields {
		if isApplyOf(mf, fieldOwner) && owns(mf, path) {
			return true
		}
	}
	return false
}

// isApplyOf reports whether the entry is the controller's apply: what its
// merge patches set is not the controller's in that sense.
func isApplyOf(mf metav1.ManagedFieldsEntry, fieldOwner string) bool {
	return mf.Manager == fieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply
}

// owns reports whether the entry owns the field at path or anything under it.
func owns(mf metav1.ManagedFieldsEntry, path []string) bool {
	if mf.FieldsV1 == nil {
		return false
	}
	tree := map[string]any{}
	if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &tree); err != nil {
		return false
	}
	return hasPath(tree, path)
}

func hasPath(tree map[string]any, path []string) bool {
	for _, key := range path {
		next, ok := tree[key].(map[string]any)
		if !ok {
			return false
		}
		tree = next
	}
	return true
}

func ptrEqual[T comparable](a, b *T) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

func orNew(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
