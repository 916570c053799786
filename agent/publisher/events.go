package publisher

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// reportTransitions emits an event for every pod and port whose readiness
// changed between the slices that existed and the ones written. The event
// recorder aggregates and rate-limits repeated events.
func (p *Publisher) reportTransitions(swh *swhv1alpha1.ServiceWithHealthchecks, before, after []discoveryv1.EndpointSlice, failures map[types.UID]*probes.Result) {
	was, now := readiness(before), readiness(after)
	for key, ready := range now {
		if prev, ok := was[key]; ok && prev == ready {
			continue
		}
		if ready {
			p.Recorder.Eventf(swh, nil, corev1.EventTypeNormal, "EndpointReady", "PublishEndpoints",
				"pod %s on node %s is ready on port %q", key.pod, p.NodeName, key.port)
			continue
		}
		why := "failing probes or pod not ready"
		if f, seen := failures[key.uid]; seen && f != nil {
			why = fmt.Sprintf("%s: %s", f.Reason, f.Message)
		} else if seen && swh.Spec.Healthcheck != nil && len(swh.Spec.Healthcheck.Probes) > 0 {
			why = "no probe has passed yet"
		}
		p.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, "EndpointNotReady", "PublishEndpoints",
			"pod %s on node %s is not ready on port %q (%s)", key.pod, p.NodeName, key.port, why)
	}
}

type podPort struct {
	uid  types.UID
	pod  string
	port string
}

func readiness(slices []discoveryv1.EndpointSlice) map[podPort]bool {
	out := map[podPort]bool{}
	for i := range slices {
		s := &slices[i]
		port := ""
		if len(s.Ports) > 0 && s.Ports[0].Name != nil {
			port = *s.Ports[0].Name
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil {
				continue
			}
			key := podPort{uid: ep.TargetRef.UID, pod: ep.TargetRef.Name, port: port}
			out[key] = out[key] || ep.Conditions.Ready == nil || *ep.Conditions.Ready
		}
	}
	return out
}
