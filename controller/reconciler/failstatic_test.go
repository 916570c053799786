package reconciler

import (
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

func TestWithFailStatic(t *testing.T) {
	slice := func(node string, reasons swhv1alpha1.EndpointReasons) discoveryv1.EndpointSlice {
		s := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{endpoints.DefaultNodeLabel: node}}}
		value, err := reasons.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if value != "" {
			s.Annotations = map[string]string{swhv1alpha1.AnnotationEndpointReasons: value}
		}
		return s
	}
	kept := swhv1alpha1.EndpointReason{Reason: swhv1alpha1.ReasonFailStatic, Message: "HTTP probe on 8080: timeout: …"}
	failing := swhv1alpha1.EndpointReason{Reason: "refused", Message: "connection refused"}
	for _, tc := range []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		// want is the condition's message's parts; nil for no condition.
		want []string
	}{
		{name: "no reasons", slices: []discoveryv1.EndpointSlice{slice("n1", nil)}},
		{name: "failing pods only", slices: []discoveryv1.EndpointSlice{slice("n1", swhv1alpha1.EndpointReasons{"a": failing})}},
		{
			name: "kept on two nodes, a pod on two ports counted once",
			slices: []discoveryv1.EndpointSlice{
				slice("n2", swhv1alpha1.EndpointReasons{"c": kept}),
				slice("n1", swhv1alpha1.EndpointReasons{"a": kept, "b": failing}),
				slice("n1", swhv1alpha1.EndpointReasons{"a": kept}),
			},
			want: []string{"node n1 keeps 1 pods (HTTP probe on 8080: timeout: …); node n2 keeps 1 pods"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := swhv1alpha1.ServiceWithHealthchecksStatus{Conditions: []metav1.Condition{{Type: swhv1alpha1.ConditionFailingStatic, Status: metav1.ConditionTrue}}}
			st = withFailStatic(st, &swhv1alpha1.ServiceWithHealthchecks{}, tc.slices)
			c := meta.FindStatusCondition(st.Conditions, swhv1alpha1.ConditionFailingStatic)
			if (c != nil) != (tc.want != nil) {
				t.Fatalf("condition %+v, want one: %v", c, tc.want != nil)
			}
			for _, part := range tc.want {
				if !strings.Contains(c.Message, part) || c.Reason != swhv1alpha1.ReasonCheckerSuspected {
					t.Errorf("condition %+v does not say %q", c, part)
				}
			}
		})
	}
}
