package v1alpha1

import (
	"strings"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DisruptionBudget bounds the voluntary disruptions (evictions: kubectl
// drain, a cluster autoscaler's scale-down, a node upgrade) of the pods a
// resource selects, like a PodDisruptionBudget, except that a pod counts as
// available only when the agents publish it ready on the budget's ports:
// when its probes pass, not when it is Ready. The eviction guard (a
// validating webhook on pods/eviction) enforces it.
//
// +kubebuilder:validation:XValidation:rule="has(self.minAvailable) != has(self.maxUnavailable)",message="spec.disruptionBudget needs exactly one of minAvailable and maxUnavailable"
type DisruptionBudget struct {
	// MinAvailable is how many selected pods must stay available after an
	// eviction: a number, or a percentage of the expected pods rounded up.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) <= 100",message="spec.disruptionBudget.minAvailable must be a non-negative number or a percentage from 0% to 100%"
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`

	// MaxUnavailable is how many of the expected pods may be unavailable
	// after an eviction: a number, or a percentage rounded up. The expected
	// pods are the replicas their Deployments, ReplicaSets or StatefulSets
	// declare, plus the selected pods no such workload owns.
	// +optional
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) <= 100",message="spec.disruptionBudget.maxUnavailable must be a non-negative number or a percentage from 0% to 100%"
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`

	// Ports names the spec.ports a pod must be ready on to count as
	// available; empty, every port.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=63
	Ports []string `json:"ports,omitempty"`

	// UnhealthyPodEvictionPolicy says when a pod that is not available
	// itself may be evicted, with the PodDisruptionBudget's values:
	// IfHealthyBudget (the default) only while the budget is met without
	// it; AlwaysAllow at any time. Neither counts it against the budget.
	// +optional
	// +kubebuilder:validation:Enum=IfHealthyBudget;AlwaysAllow
	UnhealthyPodEvictionPolicy *policyv1.UnhealthyPodEvictionPolicyType `json:"unhealthyPodEvictionPolicy,omitempty"`
}

// DisruptionStatus is the eviction guard's accounting for a resource with a
// disruption budget. The guard and the controller both write it with the
// resource's resourceVersion as a precondition, so that two evictions
// decided at once by two guard replicas cannot both take the last
// disruption.
type DisruptionStatus struct {
	// ObservedGeneration is the generation of the budget counted here.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ExpectedPods is the number of pods the budget is counted over.
	ExpectedPods int32 `json:"expectedPods"`
	// CurrentHealthy is the number of selected pods published ready on the
	// budget's ports, on Ready nodes with a live agent, and not reserved.
	CurrentHealthy int32 `json:"currentHealthy"`
	// DesiredHealthy is the number of available pods the budget requires.
	DesiredHealthy int32 `json:"desiredHealthy"`
	// DisruptionsAllowed is how many more evictions the budget allows now.
	DisruptionsAllowed int32 `json:"disruptionsAllowed"`
	// Reservations are the pods whose eviction the guard allowed and that
	// are not yet deleting; each one counts as unavailable until its pod is
	// terminating or gone, or for at most two minutes (an eviction that a
	// PodDisruptionBudget or the API server refused after the guard allowed
	// it).
	// +optional
	// +listType=map
	// +listMapKey=pod
	// +kubebuilder:validation:MaxItems=2000
	Reservations []DisruptionReservation `json:"reservations,omitempty"`
	// Unavailable names up to ten selected pods that do not count as
	// available, with why, so that a denied eviction can be explained.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	Unavailable []UnavailablePod `json:"unavailable,omitempty"`
}

// DisruptionReservation is one allowed eviction.
type DisruptionReservation struct {
	// Pod is the evicted pod's name.
	Pod string `json:"pod"`
	// UID is the evicted pod's UID.
	UID types.UID `json:"uid"`
	// Time is when the guard allowed the eviction.
	Time metav1.Time `json:"time"`
}

// UnavailablePod is a selected pod that does not count as available.
type UnavailablePod struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Reason says why, in a few words ("not ready on port client",
	// "node node-2 is not Ready", "its eviction was allowed").
	Reason string `json:"reason"`
}

// ReadinessGateMode says what the agent writes in a pod's readiness gate
// condition of a resource (ReadinessGateConditionType).
// +kubebuilder:validation:Enum=Once;Continuous
type ReadinessGateMode string

const (
	// ReadinessGateOnce sets the condition True the first time the pod
	// passes the probes of every port of the resource, and never back to
	// False: a rollout waits for the probes, and a port that fails later
	// leaves only that port, as without the gate.
	ReadinessGateOnce ReadinessGateMode = "Once"
	// ReadinessGateContinuous makes the condition follow the probes: False
	// as soon as any port fails, which takes the pod out of every Service
	// that selects it by readiness.
	ReadinessGateContinuous ReadinessGateMode = "Continuous"
)

// ReadinessGate configures the pod condition the agents write for the pods
// that declare this resource's gate in spec.readinessGates.
type ReadinessGate struct {
	// Mode is Once (the default) or Continuous.
	// +optional
	// +kubebuilder:default=Once
	Mode ReadinessGateMode `json:"mode,omitempty"`
}

// ReadinessGatePrefix starts the pod condition type of every resource's
// readiness gate; the rest is the resource's name.
const ReadinessGatePrefix = "probes.network.swh.dev/"

// ReadinessGateConditionType is the pod condition type the agents write
// for the resource named name: a pod that lists it in
// spec.readinessGates[].conditionType is not Ready before it passes the
// resource's probes.
func ReadinessGateConditionType(name string) string {
	return ReadinessGatePrefix + name
}

// ReadinessGateResource returns the resource name of one of our readiness
// gate condition types, and false for any other condition type.
func ReadinessGateResource(conditionType string) (string, bool) {
	name, ok := strings.CutPrefix(conditionType, ReadinessGatePrefix)
	return name, ok && name != ""
}
