package endpoints

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Service is what the slices of a Service are built from.
type Service struct {
	Name      string
	Namespace string
	// UID is the Service's UID, for the owner reference that makes the
	// garbage collector delete the slices with the Service.
	UID types.UID
	// Ports are the Service's spec.ports; the slices of port i take the
	// verdicts at index i.
	Ports []corev1.ServicePort
	// Headless marks the slices service.kubernetes.io/headless, so
	// kube-proxy ignores them while DNS serves them.
	Headless bool
	// PublishNotReadyAddresses publishes every running pod with an IP as
	// ready, whatever its verdicts.
	PublishNotReadyAddresses bool
	// IPFamilies are the families to publish, the first one being primary
	// (see NameParts). Empty publishes every family the pods have, with
	// IPv4 primary.
	IPFamilies []corev1.IPFamily
	// ProxyName is the Service's service.kubernetes.io/service-proxy-name
	// label, copied to the slices when not empty.
	ProxyName string
	// TrafficDistribution is the Service's spec.trafficDistribution. As
	// with the built-in controller, PreferClose and PreferSameZone give
	// every ready endpoint a hint for its own zone, and PreferSameNode a
	// hint for its own node too; kube-proxy routes by those hints.
	TrafficDistribution string
}

// ServiceFrom takes the fields Build needs from a Service object. Only
// clusterIP "None" is headless: an unset one may just not be allocated yet.
func ServiceFrom(svc *corev1.Service) Service {
	return Service{
		Name:                     svc.Name,
		Namespace:                svc.Namespace,
		UID:                      svc.UID,
		Ports:                    svc.Spec.Ports,
		Headless:                 svc.Spec.ClusterIP == corev1.ClusterIPNone,
		PublishNotReadyAddresses: svc.Spec.PublishNotReadyAddresses,
		IPFamilies:               svc.Spec.IPFamilies,
		ProxyName:                svc.Labels[LabelServiceProxyName],
		TrafficDistribution:      ptrOr(svc.Spec.TrafficDistribution, ""),
	}
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// Node is the node whose pods a set of slices publishes.
type Node struct {
	// Name is the exact name of the Node object: kube-proxy counts local
	// endpoints by it for the Local traffic policies.
	Name string
	// Zone is the node's topology.kubernetes.io/zone label, if any.
	Zone string
}

// NodeFrom takes the fields Build needs from a Node object.
func NodeFrom(node *corev1.Node) Node {
	return Node{Name: node.Name, Zone: node.Labels[corev1.LabelTopologyZone]}
}

// PodVerdicts is one pod of the node with its verdict on each Service port.
type PodVerdicts struct {
	Pod *corev1.Pod
	// Ports holds one verdict per Service port, in the order of
	// Service.Ports (see Grouping.Verdicts).
	Ports []PortVerdict
}

// Options tune Build and Plan. The zero value is the swh agent's setting.
type Options struct {
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value;
	// DefaultManagedBy when empty. Another controller reusing this package
	// sets its own, so the two never touch each other's slices.
	ManagedBy string
	// NodeLabel is the key of the label holding NodeLabelValue of the node;
	// DefaultNodeLabel when empty.
	NodeLabel string
	// MaxEndpointsPerSlice splits bigger slices; MaxEndpointsPerSlice (the
	// API server's limit) when 0.
	MaxEndpointsPerSlice int
	// OwnedAnnotations are the keys of annotations the caller sets on
	// desired slices (Build sets none): Plan updates a slice whose value of
	// one differs, and removes one from an existing slice of the scope when
	// the desired slice lacks it. Other annotations are never compared, so
	// a per-write stamp such as last-change-trigger-time, set after Plan,
	// causes no write by itself.
	OwnedAnnotations []string
}

func (o Options) complete() (Options, error) {
	if o.ManagedBy == "" {
		o.ManagedBy = DefaultManagedBy
	}
	if o.NodeLabel == "" {
		o.NodeLabel = DefaultNodeLabel
	}
	if o.MaxEndpointsPerSlice == 0 {
		o.MaxEndpointsPerSlice = MaxEndpointsPerSlice
	}
	if errs := validation.IsValidLabelValue(o.ManagedBy); len(errs) > 0 {
		return o, fmt.Errorf("managed-by %q: %s: %w", o.ManagedBy, strings.Join(errs, "; "), ErrInvalid)
	}
	if errs := validation.IsQualifiedName(o.NodeLabel); len(errs) > 0 {
		return o, fmt.Errorf("node label %q: %s: %w", o.NodeLabel, strings.Join(errs, "; "), ErrInvalid)
	}
	for _, k := range o.OwnedAnnotations {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return o, fmt.Errorf("owned annotation %q: %s: %w", k, strings.Join(errs, "; "), ErrInvalid)
		}
	}
	if o.MaxEndpointsPerSlice < 1 || o.MaxEndpointsPerSlice > MaxEndpointsPerSlice {
		return o, fmt.Errorf("%d endpoints per slice: must be 1-%d: %w", o.MaxEndpointsPerSlice, MaxEndpointsPerSlice, ErrInvalid)
	}
	return o, nil
}

// Build returns the EndpointSlices that publish pods of node for svc,
// sorted by name, endpoints sorted by address.
//
// There is one slice per Service port and address family, more when a named
// targetPort resolves to several numbers or a slice would exceed the
// endpoint limit (see NameParts). A pod is left out when it has finished
// (Succeeded or Failed) or has no IP, and out of one port when its verdict
// for that port has no port number. Each endpoint carries one address,
// nodeName, zone, a targetRef to the pod and the conditions
// ready = passing && !terminating, serving = passing,
// terminating = deletionTimestamp set; with PublishNotReadyAddresses, ready
// is always true. A Service without ports, or a node without such pods,
// gets no slice.
//
// Build returns an error wrapping ErrInvalid when the input could not make
// valid slices: invalid names, a pod from another namespace or node, a
// verdict count that differs from the port count.
func Build(svc Service, node Node, pods []PodVerdicts, opts Options) ([]discoveryv1.EndpointSlice, error) {
	opts, err := opts.complete()
	if err != nil {
		return nil, err
	}
	families, err := checkService(&svc)
	if err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(node.Name); len(errs) > 0 {
		return nil, fmt.Errorf("node name %q: %s: %w", node.Name, strings.Join(errs, "; "), ErrInvalid)
	}
	groups := make(map[groupKey][]entry)
	for k := range pods {
		if err := addPod(groups, &svc, &node, &pods[k], families); err != nil {
			return nil, err
		}
	}
	return assemble(groups, &svc, &node, families, opts)
}

// groupKey identifies the endpoints that share one slice before splitting.
type groupKey struct {
	port   int // index in Service.Ports
	family discoveryv1.AddressType
	number int32
}

// checkService validates svc and returns the families to publish, primary
// first.
func checkService(svc *Service) ([]discoveryv1.AddressType, error) {
	if errs := validation.IsDNS1123Label(svc.Name); len(errs) > 0 {
		return nil, fmt.Errorf("service name %q: %s: %w", svc.Name, strings.Join(errs, "; "), ErrInvalid)
	}
	if errs := validation.IsDNS1123Label(svc.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("service %s: namespace %q: %s: %w", svc.Name, svc.Namespace, strings.Join(errs, "; "), ErrInvalid)
	}
	if svc.UID == "" {
		return nil, fmt.Errorf("service %s/%s: no UID for the owner reference: %w", svc.Namespace, svc.Name, ErrInvalid)
	}
	if svc.ProxyName != "" {
		if errs := validation.IsValidLabelValue(svc.ProxyName); len(errs) > 0 {
			return nil, fmt.Errorf("service %s/%s: proxy name %q: %s: %w", svc.Namespace, svc.Name, svc.ProxyName, strings.Join(errs, "; "), ErrInvalid)
		}
	}
	seen := make(map[string]bool, len(svc.Ports))
	for i := range svc.Ports {
		p := &svc.Ports[i]
		if p.Name == "" && len(svc.Ports) > 1 {
			return nil, fmt.Errorf("service %s/%s: port %d has no name, required with several ports: %w", svc.Namespace, svc.Name, i, ErrInvalid)
		}
		if p.Name != "" {
			if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
				return nil, fmt.Errorf("service %s/%s: port name %q: %s: %w", svc.Namespace, svc.Name, p.Name, strings.Join(errs, "; "), ErrInvalid)
			}
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("service %s/%s: port name %q repeated: %w", svc.Namespace, svc.Name, p.Name, ErrInvalid)
		}
		seen[p.Name] = true
		switch orTCP(p.Protocol) {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return nil, fmt.Errorf("service %s/%s: port %q: protocol %q: %w", svc.Namespace, svc.Name, p.Name, p.Protocol, ErrInvalid)
		}
	}
	if len(svc.IPFamilies) == 0 {
		return []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6}, nil
	}
	var families []discoveryv1.AddressType
	for _, f := range svc.IPFamilies {
		t := discoveryv1.AddressType(f) // the two enums share their values
		if (t != discoveryv1.AddressTypeIPv4 && t != discoveryv1.AddressTypeIPv6) || slices.Contains(families, t) {
			return nil, fmt.Errorf("service %s/%s: IP families %v: %w", svc.Namespace, svc.Name, svc.IPFamilies, ErrInvalid)
		}
		families = append(families, t)
	}
	return families, nil
}

func addPod(groups map[groupKey][]entry, svc *Service, node *Node, pv *PodVerdicts, families []discoveryv1.AddressType) error {
	pod := pv.Pod
	if pod == nil {
		return fmt.Errorf("nil pod: %w", ErrInvalid)
	}
	if pod.Namespace != svc.Namespace {
		return fmt.Errorf("pod %s/%s is not in the namespace of service %s/%s: %w", pod.Namespace, pod.Name, svc.Namespace, svc.Name, ErrInvalid)
	}
	if pod.Spec.NodeName != node.Name {
		return fmt.Errorf("pod %s/%s is on node %q, not %q: %w", pod.Namespace, pod.Name, pod.Spec.NodeName, node.Name, ErrInvalid)
	}
	if len(pv.Ports) != len(svc.Ports) {
		return fmt.Errorf("pod %s/%s: %d verdicts for %d ports: %w", pod.Namespace, pod.Name, len(pv.Ports), len(svc.Ports), ErrInvalid)
	}
	if podFinished(pod) {
		return nil
	}
	v4, v6 := podAddresses(&pod.Status)
	terminating := pod.DeletionTimestamp != nil
	for i, v := range pv.Ports {
		if v.Port == 0 {
			continue
		}
		if !validPortNumber(v.Port) {
			return fmt.Errorf("pod %s/%s: port %d is not in 1-65535: %w", pod.Namespace, pod.Name, v.Port, ErrInvalid)
		}
		ready := v.Passing && !terminating
		if svc.PublishNotReadyAddresses {
			ready = true
		}
		for _, a := range []netip.Addr{v4, v6} {
			if !a.IsValid() || !slices.Contains(families, familyOf(a)) {
				continue
			}
			key := groupKey{port: i, family: familyOf(a), number: v.Port}
			groups[key] = append(groups[key], entry{a, endpoint(svc, node, pod, a, ready, v.Passing, terminating)})
		}
	}
	return nil
}

func endpoint(svc *Service, node *Node, pod *corev1.Pod, a netip.Addr, ready, serving, terminating bool) discoveryv1.Endpoint {
	ep := discoveryv1.Endpoint{
		Addresses: []string{a.String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       &ready,
			Serving:     &serving,
			Terminating: &terminating,
		},
		TargetRef: &corev1.ObjectReference{
			Kind:      "Pod",
			Namespace: pod.Namespace,
			Name:      pod.Name,
			UID:       pod.UID,
		},
		NodeName: new(node.Name),
	}
	if node.Zone != "" {
		ep.Zone = new(node.Zone)
	}
	ep.Hints = hints(svc.TrafficDistribution, node, ready)
	// As the built-in controller: a pod that names this Service as its
	// subdomain gets a DNS record under its hostname.
	if pod.Spec.Hostname != "" && pod.Spec.Subdomain == svc.Name {
		ep.Hostname = new(pod.Spec.Hostname)
	}
	return ep
}

func assemble(groups map[groupKey][]entry, svc *Service, node *Node, families []discoveryv1.AddressType, opts Options) ([]discoveryv1.EndpointSlice, error) {
	keys := make([]groupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.port, b.port), cmp.Compare(a.family, b.family), cmp.Compare(a.number, b.number))
	})
	labels := sliceLabels(svc, node, opts)
	var out []discoveryv1.EndpointSlice
	for n, k := range keys {
		entries := groups[k]
		slices.SortFunc(entries, compareEntries)
		eps := make([]discoveryv1.Endpoint, len(entries))
		for i := range entries {
			eps[i] = entries[i].ep
		}
		parts := NameParts{Service: svc.Name, Port: svc.Ports[k.port].Name, Node: node.Name, Family: k.family, PrimaryFamily: families[0]}
		// The smallest number of a port and family keeps the plain name.
		if n > 0 && keys[n-1].port == k.port && keys[n-1].family == k.family {
			parts.AltPort = k.number
		}
		for chunk := 0; len(eps) > 0; chunk++ {
			size := min(len(eps), opts.MaxEndpointsPerSlice)
			parts.Chunk = chunk
			name, err := SliceName(parts)
			if err != nil {
				return nil, err
			}
			out = append(out, newSlice(name, svc, labels, k, eps[:size:size]))
			eps = eps[size:]
		}
	}
	uniqueNames(out, svc.Name+"/"+node.Name)
	return out, nil
}

func newSlice(name string, svc *Service, labels map[string]string, k groupKey, eps []discoveryv1.Endpoint) discoveryv1.EndpointSlice {
	sp := &svc.Ports[k.port]
	port := discoveryv1.EndpointPort{
		Name:     new(sp.Name),
		Protocol: new(orTCP(sp.Protocol)),
		Port:     new(k.number),
	}
	if sp.AppProtocol != nil {
		port.AppProtocol = new(*sp.AppProtocol)
	}
	return discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: svc.Namespace,
			Labels:    maps.Clone(labels),
			// No blockOwnerDeletion: it would need update rights on
			// services/finalizers where OwnerReferencesPermissionEnforcement
			// is on, for nothing the garbage collector does not do anyway.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: new(true),
			}},
		},
		AddressType: k.family,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{port},
	}
}

// sliceLabels returns the labels every slice of svc on node carries.
func sliceLabels(svc *Service, node *Node, opts Options) map[string]string {
	l := map[string]string{
		discoveryv1.LabelServiceName: svc.Name,
		discoveryv1.LabelManagedBy:   opts.ManagedBy,
		opts.NodeLabel:               NodeLabelValue(node.Name),
	}
	if svc.Headless {
		l[corev1.IsHeadlessService] = ""
	}
	if svc.ProxyName != "" {
		l[LabelServiceProxyName] = svc.ProxyName
	}
	return l
}

// entry is an endpoint with its parsed address, the first sort key.
type entry struct {
	addr netip.Addr
	ep   discoveryv1.Endpoint
}

func compareEntries(a, b entry) int {
	return cmp.Or(a.addr.Compare(b.addr),
		cmp.Compare(a.ep.TargetRef.Name, b.ep.TargetRef.Name),
		cmp.Compare(a.ep.TargetRef.UID, b.ep.TargetRef.UID))
}

// hints follows k8s.io/endpointslice/trafficdist: only ready endpoints get
// hints, for their own zone, and for their own node with PreferSameNode.
func hints(trafficDistribution string, node *Node, ready bool) *discoveryv1.EndpointHints {
	if !ready {
		return nil
	}
	var h discoveryv1.EndpointHints
	switch trafficDistribution {
	case corev1.ServiceTrafficDistributionPreferSameNode:
		h.ForNodes = []discoveryv1.ForNode{{Name: node.Name}}
		fallthrough
	case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone:
		if node.Zone != "" {
			h.ForZones = []discoveryv1.ForZone{{Name: node.Zone}}
		}
	}
	if h.ForZones == nil && h.ForNodes == nil {
		return nil
	}
	return &h
}
