package publisher

import (
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// annotateReasons puts on each desired slice why its endpoints that do not
// pass are not ready (swhv1alpha1.AnnotationEndpointReasons), so that an
// operator reads it with the slice (kubectl swh status). A pod's entry is
// carried over from the existing slices of its port while its reason and
// probe stay the same, message and time included: the annotation changes
// when a reason does, never because a probe ran, and at steady state it
// costs no write. A reason that changes without the slice's conditions
// changing (refused, then timeout) costs one update of that slice.
func annotateReasons(desired, existing []discoveryv1.EndpointSlice, why notReadyReasons, now time.Time) error {
	var own []discoveryv1.EndpointSlice
	for i := range existing {
		// A holder of a taken name, or a slice someone else labelled like
		// ours: its reasons are not this agent's. An annotation that does
		// not parse is rewritten from what the agent knows.
		if sameOwner(&existing[i], desired) {
			own = append(own, existing[i])
		}
	}
	before := reasonsByPort(own)
	since := metav1.NewTime(now.UTC().Truncate(time.Second))
	for i := range desired {
		s := &desired[i]
		port := slicePortName(s)
		reasons := swhv1alpha1.EndpointReasons{}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				continue
			}
			c, ok := why[ep.TargetRef.UID][port]
			if !ok {
				continue
			}
			r := reasonOf(c, since)
			// A start state (no result yet, or passing again fewer than
			// successThreshold times) is no news: after an agent restart
			// or an edit of the probes, the last reason stands until a
			// verdict, which costs no write in between.
			if old, ok := before[port][ep.TargetRef.Name]; ok && (old.SameReason(r) || c.kind == causeStart) {
				r = old
			}
			reasons[ep.TargetRef.Name] = r
		}
		value, err := reasons.EncodeBounded(swhv1alpha1.MaxEndpointReasonsBytes)
		if err != nil {
			return fmt.Errorf("slice %s: %w", s.Name, err)
		}
		if value != "" {
			setAnnotation(s, swhv1alpha1.AnnotationEndpointReasons, value)
		}
	}
	return nil
}

// reasonOf turns a cause into the annotation's entry.
func reasonOf(c cause, since metav1.Time) swhv1alpha1.EndpointReason {
	return swhv1alpha1.EndpointReason{Reason: c.reason, Probe: c.probe, Message: swhv1alpha1.TruncateReasonMessage(c.text), Since: since}
}

// sameOwner reports whether s carries the service-name, managed-by and
// node labels of the desired slices.
func sameOwner(s *discoveryv1.EndpointSlice, desired []discoveryv1.EndpointSlice) bool {
	if len(desired) == 0 {
		return false
	}
	for _, k := range []string{discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy, endpoints.DefaultNodeLabel} {
		if s.Labels[k] != desired[0].Labels[k] {
			return false
		}
	}
	return true
}

// slicePortName is the name of the Service port a slice publishes (its
// only port); "" for an unnamed port.
func slicePortName(s *discoveryv1.EndpointSlice) string {
	name, _ := endpoints.SlicePort(s)
	return name
}
