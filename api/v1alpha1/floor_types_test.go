package v1alpha1

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestPortFloorMinPassingOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		min   intstr.IntOrString
		total int
		want  int
	}{
		{"a count ignores the total", intstr.FromInt32(2), 10, 2},
		{"a count above the total", intstr.FromInt32(3), 2, 3},
		{"50% of 4", intstr.FromString("50%"), 4, 2},
		{"50% of 5 rounds up", intstr.FromString("50%"), 5, 3},
		{"1% of 3 rounds up to one", intstr.FromString("1%"), 3, 1},
		{"100% of 7", intstr.FromString("100%"), 7, 7},
		{"a percentage of no pod is none", intstr.FromString("50%"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &PortFloor{MinPassing: tc.min}
			got, err := f.MinPassingOf(tc.total)
			if err != nil || got != tc.want {
				t.Errorf("MinPassingOf(%d) = %d, %v; want %d", tc.total, got, err, tc.want)
			}
		})
	}
	if _, err := (&PortFloor{MinPassing: intstr.FromString("half")}).MinPassingOf(4); err == nil {
		t.Error("minPassing \"half\" gave no error")
	}
}

func TestPortFloorMode(t *testing.T) {
	for _, tc := range []struct {
		floor   *PortFloor
		mode    FloorMode
		engages bool
	}{
		{nil, FloorClosed, false},
		{&PortFloor{}, FloorClosed, false},
		{&PortFloor{Below: FloorClosed}, FloorClosed, false},
		{&PortFloor{Below: FloorOpen}, FloorOpen, true},
		{&PortFloor{Below: FloorFreeze}, FloorFreeze, true},
	} {
		if m, e := tc.floor.Mode(), tc.floor.Engages(); m != tc.mode || e != tc.engages {
			t.Errorf("%+v: Mode() = %s, Engages() = %v; want %s, %v", tc.floor, m, e, tc.mode, tc.engages)
		}
	}
}

func TestKeptByFloor(t *testing.T) {
	for reason, want := range map[string]bool{
		ReasonFloorOpen: true, ReasonFloorFrozen: true, ReasonFloorHeld: true, ReasonReplicationLagKept: true,
		ReasonFailStatic: false, ReasonMaintenance: false, "timeout": false, "": false,
	} {
		if got := KeptByFloor(reason); got != want {
			t.Errorf("KeptByFloor(%q) = %v, want %v", reason, got, want)
		}
	}
}

// TestServicePortLeavesTheFloorOut: the child Service's port is the same
// with a floor or without.
func TestServicePortLeavesTheFloorOut(t *testing.T) {
	bare := ServicePort{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}
	floored := bare
	floored.Floor = &PortFloor{MinPassing: intstr.FromString("50%"), Below: FloorOpen}
	if got, want := floored.ServicePort(), bare.ServicePort(); !reflect.DeepEqual(got, want) {
		t.Errorf("ServicePort() with a floor = %+v, want %+v", got, want)
	}
}
