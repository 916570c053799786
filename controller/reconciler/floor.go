package reconciler

import (
	"fmt"
	"sort"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// withFloor sets the FloorEngaged condition while the agents keep pods
// published on some port whose floor is Open or Freeze because it is below
// its minPassing across the cluster (reasons floor-open, floor-frozen; a
// pod held a moment while the agents count, floor-held, is not the floor
// engaged), naming each port, its mode, how many pods it keeps and the
// count; it removes the condition otherwise. The count is the agents'
// (portfloor.go): ready endpoints but those a floor keeps, over the
// endpoints not terminating.
func withFloor(st swhv1alpha1.ServiceWithHealthchecksStatus, swh *swhv1alpha1.ServiceWithHealthchecks, slices []discoveryv1.EndpointSlice) swhv1alpha1.ServiceWithHealthchecksStatus {
	var parts []string
	for _, port := range swh.Spec.Ports {
		if !port.Floor.Engages() || swh.Spec.IsExclusive(port.Name) {
			continue
		}
		passing, total, kept := floorCount(slices, port.Name)
		if kept == 0 {
			continue
		}
		minimum := port.Floor.MinPassing.String()
		if least, err := port.Floor.MinPassingOf(total); err == nil && port.Floor.MinPassing.StrVal != "" {
			minimum = fmt.Sprintf("%s (%d)", minimum, least)
		}
		parts = append(parts, fmt.Sprintf("port %q is %s: %d pods kept published despite their probes; %d of %d pods pass it, minPassing %s",
			swhv1alpha1.ExclusivePortKey(port), floorState(port.Floor.Mode()), kept, passing, total, minimum))
	}
	if len(parts) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, swhv1alpha1.ConditionFloorEngaged)
		return st
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: swhv1alpha1.ConditionFloorEngaged, ObservedGeneration: swh.Generation,
		Status: metav1.ConditionTrue, Reason: swhv1alpha1.ReasonBelowMinPassing,
		Message: swhv1alpha1.TruncateMessage("below the floor: "+strings.Join(parts, "; "), 1024)})
	sort.Slice(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
	return st
}

// floorCount counts, on port, the pods published ready and not kept by a
// floor (passing), those published and not terminating (total), and those
// published ready that a port's floor keeps (kept). A dual-stack pod
// counts once.
func floorCount(slices []discoveryv1.EndpointSlice, port string) (passing, total, kept int) {
	reasons := map[string]string{}
	for i := range slices {
		if name, _ := endpoints.SlicePort(&slices[i]); name != port {
			continue
		}
		r, err := swhv1alpha1.EndpointReasonsOf(slices[i].Annotations)
		if err != nil {
			continue
		}
		for pod, entry := range r {
			reasons[pod] = entry.Reason
		}
	}
	published, _ := endpoints.Read(slices, endpoints.Options{}) // valid options: no error
	for _, e := range published {
		if e.Port != port || e.Pod == nil || e.Terminating {
			continue
		}
		total++
		switch reason := reasons[e.Pod.Name]; {
		case !e.Serving:
		case reason == swhv1alpha1.ReasonFloorOpen || reason == swhv1alpha1.ReasonFloorFrozen:
			kept++
		case !swhv1alpha1.KeptByFloor(reason):
			passing++
		}
	}
	return passing, total, kept
}

// floorState names a mode's state: open, frozen.
func floorState(mode swhv1alpha1.FloorMode) string {
	if mode == swhv1alpha1.FloorFreeze {
		return "frozen"
	}
	return "open"
}
