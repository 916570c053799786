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
	// fields are the metric labels of what drifted, once each.
	fields []string
	// notes say what drifted and which field managers set it.
	notes []string
	// patch, a JSON merge patch of spec, puts back the fields the spec
	// leaves unset (null: the API server defaults them again); nil when
	// none drifted.
	patch map[string]any
	// selector is the selector removed, "" when there was none.
	selector string
}

func (d *drift) add(field, note string) {
	if !slices.Contains(d.fields, field) {
		d.fields = append(d.fields, field)
	}
	d.notes = append(d.notes, note)
}

func (d *drift) unset(field string, value any, note string) {
	if d.patch == nil {
		d.patch = map[string]any{}
	}
	d.patch[field] = value
	d.add(field, note)
}

// String lists the notes for events and logs.
func (d drift) String() string { return strings.Join(d.notes, "; ") }

// foreignDrift returns the fields of the live Service that the spec leaves
// unset and that someone set in a way that changes traffic: a selector (the
// built-in EndpointSlice controller would publish pods by readiness next to
// the agents' slices), ports the spec does not have, and a type, traffic
// policy, affinity, external IPs, source ranges, traffic distribution or
// publishNotReadyAddresses other than the API server's default.
func foreignDrift(swh *swhv1alpha1.ServiceWithHealthchecks, svc *corev1.Service, fieldOwner string) drift {
	want := swh.Spec.ServiceSpec()
	live := &svc.Spec
	by := func(path ...string) string { return setBy(svc, fieldOwner, path...) }
	var d drift

	if len(live.Selector) > 0 {
		d.selector = labels.SelectorFromSet(live.Selector).String()
		d.unset("selector", nil, "selector "+d.selector+by("f:spec", "f:selector"))
	}
	typeReset := want.Type == "" && live.Type != "" && live.Type != corev1.ServiceTypeClusterIP
	if typeReset {
		d.unset("type", nil, fmt.Sprintf("type %s%s", live.Type, by("f:spec", "f:type")))
	}
	if want.ExternalName == "" && live.ExternalName != "" {
		d.unset("externalName", nil, "externalName "+live.ExternalName+by("f:spec", "f:externalName"))
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
		switch {
		case !ok:
			portsDrift = true
			d.add("ports", "port "+key+by(path...))
			continue
		case w.Name == "" && p.Name != "":
			portsDrift = true
			d.add("ports", fmt.Sprintf("name %q of port %s%s", p.Name, key, by(append(path, "f:name")...)))
			p.Name = ""
		}
		if w.AppProtocol == nil && p.AppProtocol != nil {
			portsDrift = true
			d.add("ports", fmt.Sprintf("appProtocol %q of port %s%s", *p.AppProtocol, key, by(append(path, "f:appProtocol")...)))
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

	if want.ExternalTrafficPolicy == "" && live.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		d.unset("externalTrafficPolicy", nil, "externalTrafficPolicy Local"+by("f:spec", "f:externalTrafficPolicy"))
	}
	if want.InternalTrafficPolicy == nil && live.InternalTrafficPolicy != nil && *live.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal {
		d.unset("internalTrafficPolicy", nil, "internalTrafficPolicy Local"+by("f:spec", "f:internalTrafficPolicy"))
	}
	if !want.PublishNotReadyAddresses && live.PublishNotReadyAddresses {
		d.unset("publishNotReadyAddresses", nil, "publishNotReadyAddresses true"+by("f:spec", "f:publishNotReadyAddresses"))
	}
	if want.SessionAffinity == "" && live.SessionAffinity == corev1.ServiceAffinityClientIP {
		d.unset("sessionAffinity", nil, "sessionAffinity ClientIP"+by("f:spec", "f:sessionAffinity"))
		d.patch["sessionAffinityConfig"] = nil // must go with it
	}
	if len(want.ExternalIPs) == 0 && len(live.ExternalIPs) > 0 {
		d.unset("externalIPs", nil, fmt.Sprintf("externalIPs %v%s", live.ExternalIPs, by("f:spec", "f:externalIPs")))
	}
	if len(want.LoadBalancerSourceRanges) == 0 && len(live.LoadBalancerSourceRanges) > 0 {
		d.unset("loadBalancerSourceRanges", nil, fmt.Sprintf("loadBalancerSourceRanges %v%s", live.LoadBalancerSourceRanges, by("f:spec", "f:loadBalancerSourceRanges")))
	}
	if want.TrafficDistribution == nil && live.TrafficDistribution != nil {
		d.unset("trafficDistribution", nil, "trafficDistribution "+*live.TrafficDistribution+by("f:spec", "f:trafficDistribution"))
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
			d.add(field, what+who)
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
		if (mf.Manager == fieldOwner && mf.Operation == metav1.ManagedFieldsOperationApply) || mf.FieldsV1 == nil {
			continue
		}
		tree := map[string]any{}
		if err := json.Unmarshal(mf.FieldsV1.Raw, &tree); err != nil {
			continue
		}
		if hasPath(tree, path) && !slices.Contains(who, mf.Manager) {
			who = append(who, mf.Manager)
		}
	}
	if len(who) == 0 {
		return ""
	}
	sort.Strings(who)
	return " (set by " + strings.Join(who, ", ") + ")"
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
