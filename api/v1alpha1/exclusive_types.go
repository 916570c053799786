package v1alpha1

import (
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// Exclusive makes ports on which at most one pod of the whole cluster is
// published ready (and serving) at any time: a database's write port,
// whose primary the probes find, must never route to two pods that both
// claim to be it. The agents coordinate through one coordination.k8s.io
// Lease per resource and port (see ExclusiveLeaseName): only the agent
// that holds it publishes, one pod, and it publishes only after every
// other node's endpoint on the port is withdrawn. A holder whose node dies
// or whose agent is cut off from the API server keeps the port until its
// Lease expires; the controller then withdraws its endpoint and frees the
// Lease. Failing over takes the probes' detection, plus
// LeaseDurationSeconds when the holder's agent cannot withdraw.
type Exclusive struct {
	// Ports names the exclusive ports of spec.ports; empty, every port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	Ports []string `json:"ports,omitempty"`

	// LeaseDurationSeconds is how long a holder keeps a port without
	// renewing its Lease (its agent renews every third of it): the part
	// of a failover that a dead node or a partitioned agent adds.
	// +optional
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=300
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
}

// LabelExclusiveLease marks the Leases of exclusive ports; its value is
// the resource's name. The controller creates and deletes them; agents
// only update them (an admission policy holds them to that).
const LabelExclusiveLease = "network.swh.dev/exclusive-for"

// AnnotationHolderPod names the pod the holder of an exclusive port's
// Lease publishes; the Lease's holderIdentity is the holder's node.
const AnnotationHolderPod = "network.swh.dev/holder-pod"

// AnnotationExclusivePort names the port of spec.ports a Lease is for
// (its name, or its number when the resource's single port has no name).
const AnnotationExclusivePort = "network.swh.dev/port"

// ExclusivePortKey is how a port is named in Lease names and annotations:
// its name, or its number when it has none (a single unnamed port).
func ExclusivePortKey(p ServicePort) string {
	if p.Name != "" {
		return p.Name
	}
	return strconv.Itoa(int(p.Port))
}

// ExclusiveLeaseName is the name of the Lease of a resource's exclusive
// port, in the resource's namespace: "swh.<resource>.<port key>".
func ExclusiveLeaseName(resource string, p ServicePort) string {
	return "swh." + resource + "." + ExclusivePortKey(p)
}

// ExclusivePorts returns the spec's exclusive ports, in the order of
// spec.ports; none without spec.exclusive.
func (s *ServiceWithHealthchecksSpec) ExclusivePorts() []ServicePort {
	if s.Exclusive == nil {
		return nil
	}
	var out []ServicePort
	for _, p := range s.Ports {
		if len(s.Exclusive.Ports) == 0 || slices.Contains(s.Exclusive.Ports, p.Name) {
			out = append(out, p)
		}
	}
	return out
}

// IsExclusive reports whether the port named name is exclusive.
func (s *ServiceWithHealthchecksSpec) IsExclusive(name string) bool {
	for _, p := range s.ExclusivePorts() {
		if p.Name == name {
			return true
		}
	}
	return false
}

// DefaultExclusiveLeaseSeconds is spec.exclusive.leaseDurationSeconds when
// unset.
const DefaultExclusiveLeaseSeconds = 15

// LeaseDuration is spec.exclusive.leaseDurationSeconds, or its default.
func (e *Exclusive) LeaseDuration() int32 {
	if e == nil || e.LeaseDurationSeconds == 0 {
		return DefaultExclusiveLeaseSeconds
	}
	return e.LeaseDurationSeconds
}

// ExclusiveLeaseHolder is the node that holds an exclusive port's Lease
// (its holderIdentity), "" when the Lease is free or nil.
func ExclusiveLeaseHolder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// ExclusiveLeaseDuration is a Lease's duration; the default when it has
// none.
func ExclusiveLeaseDuration(l *coordinationv1.Lease) time.Duration {
	if l == nil || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return DefaultExclusiveLeaseSeconds * time.Second
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

// FreedExclusiveLease returns a copy of an exclusive port's Lease with no
// holder: no holderIdentity, times or holder pod. Written with the Lease's
// resourceVersion, it frees the port unless someone wrote meanwhile.
func FreedExclusiveLease(l *coordinationv1.Lease) *coordinationv1.Lease {
	free := l.DeepCopy()
	free.Spec.HolderIdentity = nil
	free.Spec.AcquireTime, free.Spec.RenewTime = nil, nil
	delete(free.Annotations, AnnotationHolderPod)
	return free
}
