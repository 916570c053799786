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

// withFailStatic sets the FailingStatic condition while the agents' reasons
// annotations say some endpoints are kept published although their probes
// fail (fail static), naming each node, how many pods it keeps and why;
// it removes the condition when none are.
func withFailStatic(st swhv1alpha1.ServiceWithHealthchecksStatus, swh *swhv1alpha1.ServiceWithHealthchecks, slices []discoveryv1.EndpointSlice) swhv1alpha1.ServiceWithHealthchecksStatus {
	type kept struct {
		pods    map[string]bool
		example string
	}
	byNode := map[string]*kept{}
	for i := range slices {
		reasons, err := swhv1alpha1.EndpointReasonsOf(slices[i].Annotations)
		if err != nil {
			continue
		}
		node := slices[i].Labels[endpoints.DefaultNodeLabel]
		for pod, r := range reasons {
			if r.Reason != swhv1alpha1.ReasonFailStatic {
				continue
			}
			k := byNode[node]
			if k == nil {
				k = &kept{pods: map[string]bool{}}
				byNode[node] = k
			}
			k.pods[pod] = true
			if k.example == "" || r.Message < k.example {
				k.example = r.Message
			}
		}
	}
	if len(byNode) == 0 {
		meta.RemoveStatusCondition(&st.Conditions, swhv1alpha1.ConditionFailingStatic)
		return st
	}
	nodes := make([]string, 0, len(byNode))
	for node := range byNode {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	parts := make([]string, len(nodes))
	for i, node := range nodes {
		parts[i] = fmt.Sprintf("node %s keeps %d pods (%s)", node, len(byNode[node].pods), byNode[node].example)
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: swhv1alpha1.ConditionFailingStatic, ObservedGeneration: swh.Generation,
		Status: metav1.ConditionTrue, Reason: swhv1alpha1.ReasonCheckerSuspected,
		Message: swhv1alpha1.TruncateMessage("endpoints kept published although their probes fail, the failures pointing at the checker: "+strings.Join(parts, "; "), 1024)})
	sort.Slice(st.Conditions, func(i, j int) bool { return st.Conditions[i].Type < st.Conditions[j].Type })
	return st
}
