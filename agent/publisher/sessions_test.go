package publisher

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/probes"
)

// TestStillWithdrawn: the later rounds of ending a pod's sessions go on
// while it is published and not ready on some port they were for, at the
// address they were made for; they stop once it is ready on all of them,
// gone, or probed at another address.
func TestStillWithdrawn(t *testing.T) {
	resource := types.NamespacedName{Namespace: "ns", Name: "db"}
	const uid, pod = types.UID("swh-uid"), types.UID("pod-uid")
	addr := probes.Target{Host: "10.0.0.5", Port: 5432}
	c := closing{pod: podRef{uid: pod, name: "db-0"}, probe: 0, addr: addr, ports: []string{"write", "read"}}
	state := func(ready bool) endpointState { return endpointState{pod: podRef{pod, "db-0"}, ready: ready} }
	tests := []struct {
		name   string
		states map[podPort]endpointState
		addr   probes.Target
		want   bool
	}{
		{"withdrawn from both", map[podPort]endpointState{{pod, "write"}: state(false), {pod, "read"}: state(false)}, addr, true},
		{"ready again on read only: still out of write", map[podPort]endpointState{{pod, "write"}: state(false), {pod, "read"}: state(true)}, addr, true},
		{"ready again on both", map[podPort]endpointState{{pod, "write"}: state(true), {pod, "read"}: state(true)}, addr, false},
		{"gone from the slices", map[podPort]endpointState{}, addr, false},
		{"another address (a new pod took the IP)", map[podPort]endpointState{{pod, "write"}: state(false)}, probes.Target{Host: "10.0.0.9", Port: 5432}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Publisher{targets: newTargetTable(false)}
			p.targets.put(targetKey{Resource: resource, Pod: pod, Probe: 0}, &target{addr: tt.addr})
			p.told.set(resource, publication{uid: uid, states: tt.states})
			if got := p.stillWithdrawn(resource, uid, c); got != tt.want {
				t.Errorf("stillWithdrawn = %v, want %v", got, tt.want)
			}
		})
	}
	p := &Publisher{targets: newTargetTable(false)}
	if p.stillWithdrawn(resource, uid, c) {
		t.Error("a resource forgotten (deleted): still withdrawn")
	}
}
