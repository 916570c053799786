package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestSliceNameHeldByAnotherServiceMovesAside: a slice of another owner
// already holds the name the agent would give its slice. The agent cannot
// see it in its cache (it holds only its own slices), learns it from the
// create's AlreadyExists, publishes under an alternative name, reports the
// collision in an event, and leaves the foreign slice alone.
func TestSliceNameHeldByAnotherServiceMovesAside(t *testing.T) {
	startAgent(t, nodeA)
	ns := namespace(t)
	ctx := context.Background()
	portName, portNumber := "web", int32(8080)
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-web-node-a", Labels: map[string]string{
			discoveryv1.LabelServiceName: "other", discoveryv1.LabelManagedBy: "someone-else",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{harness.PodIP(t)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &portNumber}},
	}
	if err := controlPlane.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	startBackend(t, ns, "taken", "taken-a", nodeA)
	swh := resource(ns, "taken", webAndSMTP[:1], fastProbe(swhv1alpha1.ProbeModeTCP, intstr.FromInt32(8080)))
	if err := controlPlane.Client.Create(ctx, swh); err != nil {
		t.Fatal(err)
	}

	// One budget for both waits.
	deadline := time.Now().Add(30 * time.Second)
	harness.Eventually(t, time.Until(deadline), "slices of taken", func() error {
		got, _, err := published(ctx, ns, "taken")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			for name, eps := range got {
				if strings.HasPrefix(name, "taken-web-node-a-") && eps == "taken-a:TTF" {
					return nil
				}
			}
		}
		return fmt.Errorf("got %v, want one renamed taken-web-node-a-* with taken-a:TTF", got)
	})
	after := &discoveryv1.EndpointSlice{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKeyFromObject(foreign), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != foreign.ResourceVersion {
		t.Errorf("the foreign slice was written: resource version %s, was %s", after.ResourceVersion, foreign.ResourceVersion)
	}
	harness.Eventually(t, time.Until(deadline), "a SliceNameTaken event on taken", func() error {
		events := &eventsv1.EventList{}
		if err := controlPlane.Client.List(ctx, events, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if e.Regarding.Name == "taken" && e.Reason == "SliceNameTaken" {
				if !strings.Contains(e.Note, "taken-web-node-a") || !strings.Contains(e.Note, "other") {
					t.Errorf("event %q names neither the slice nor its holder", e.Note)
				}
				return nil
			}
		}
		return fmt.Errorf("none yet")
	})
}
