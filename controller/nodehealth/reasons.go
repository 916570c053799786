package nodehealth

import (
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// noteNodeNotReady records in a withdrawn slice's reasons annotation why
// each endpoint is out, as the node's agent would if it were alive (the
// same reason and message): the agent, back, keeps the entries rather than
// rewriting them. Entries that already say so stay as they are.
func noteNodeNotReady(s *discoveryv1.EndpointSlice, node string, since time.Time) error {
	old, err := swhv1alpha1.EndpointReasonsOf(s.Annotations)
	if err != nil {
		old = nil // rewritten from what is known now
	}
	if since.IsZero() {
		since = time.Now()
	}
	entry := swhv1alpha1.EndpointReason{
		Reason:  swhv1alpha1.ReasonNodeNotReady,
		Message: fmt.Sprintf("node %s is not Ready", node),
		Since:   metav1.NewTime(since.UTC().Truncate(time.Second)),
	}
	reasons := swhv1alpha1.EndpointReasons{}
	for _, ep := range s.Endpoints {
		if ep.TargetRef == nil {
			continue
		}
		reasons[ep.TargetRef.Name] = entry
		if prev, ok := old[ep.TargetRef.Name]; ok && prev.SameReason(entry) {
			reasons[ep.TargetRef.Name] = prev
		}
	}
	value, err := reasons.EncodeBounded(swhv1alpha1.MaxEndpointReasonsBytes)
	if err != nil {
		return fmt.Errorf("slice %s/%s: %w", s.Namespace, s.Name, err)
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if value == "" {
		delete(s.Annotations, swhv1alpha1.AnnotationEndpointReasons)
	} else {
		s.Annotations[swhv1alpha1.AnnotationEndpointReasons] = value
	}
	return nil
}
