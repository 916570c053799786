package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// PortFloor says what a port publishes when fewer pods than MinPassing
// pass its probes across the cluster. Withdrawing every failing pod is
// right while the others can take their traffic; below some number, the
// ones left would be overwhelmed, or there would be none, and publishing
// the failing pods too (Envoy's panic mode), or keeping what was
// published, can serve better than the few that pass.
type PortFloor struct {
	// MinPassing is how many of the port's pods must pass its probes,
	// across every node, for the probes alone to decide: a number of pods
	// from 1, or a percentage from 1% to 100% of the pods published on the
	// port (terminating ones aside), rounded up as a PodDisruptionBudget's
	// minAvailable is.
	// +required
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=4
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[0-9]+%$') && int(self.replace('%', '')) >= 1 && int(self.replace('%', '')) <= 100",message="spec.ports[].floor.minPassing must be a number of pods from 1, or a percentage from 1% to 100%"
	MinPassing intstr.IntOrString `json:"minPassing"`

	// Below is what the port publishes while fewer pods than MinPassing
	// pass it: Closed, the pods that pass (as without a floor); Open,
	// every pod of the port its probes have a result for, passing or not
	// (not one terminating, on a node not Ready or in maintenance there);
	// Freeze, the pods published ready when the port went below, kept,
	// plus the pods that pass. Neither Open nor Freeze is allowed on an
	// exclusive port.
	// +optional
	// +kubebuilder:default=Closed
	// +kubebuilder:validation:Enum=Closed;Open;Freeze
	Below FloorMode `json:"below,omitempty"`
}

// FloorMode is what a port publishes below its floor.
type FloorMode string

// The floor modes.
const (
	// FloorClosed publishes the pods that pass, as without a floor.
	FloorClosed FloorMode = "Closed"
	// FloorOpen publishes every pod of the port, passing or not.
	FloorOpen FloorMode = "Open"
	// FloorFreeze keeps the pods published ready when the port went
	// below its floor, and adds those that pass.
	FloorFreeze FloorMode = "Freeze"
)

// Mode is Below, Closed when unset; a nil floor is Closed.
func (f *PortFloor) Mode() FloorMode {
	if f == nil || f.Below == "" {
		return FloorClosed
	}
	return f.Below
}

// Engages reports whether the floor changes what is published: Open or
// Freeze. A Closed floor, or none, leaves the probes to decide.
func (f *PortFloor) Engages() bool {
	m := f.Mode()
	return m == FloorOpen || m == FloorFreeze
}

// MinPassingOf is how many pods must pass the port when total pods are
// published on it: MinPassing, or its percentage of total rounded up.
func (f *PortFloor) MinPassingOf(total int) (int, error) {
	v := f.MinPassing
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, total, true)
	if err != nil {
		return 0, fmt.Errorf("floor.minPassing %s: %w", f.MinPassing.String(), err)
	}
	return n, nil
}

// KeptByFloor reports whether an endpoint published ready with this
// reason (its reasons annotation entry) is kept there by a floor despite
// its probes, so that it does not count as passing its port: a port's
// floor (floor-open, floor-frozen, floor-held) or a probe's lag floor
// (replication-lag-kept). Fail static's endpoints count as passing: the
// checker is suspected, not the pods.
func KeptByFloor(reason string) bool {
	return reason == ReasonFloorOpen || reason == ReasonFloorFrozen || reason == ReasonFloorHeld || reason == ReasonReplicationLagKept
}
