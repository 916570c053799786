package disruption_test

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/controller/disruption"
)

// productionSources are the guard's sources as swh-controller wires them
// (controller/app), with c as the API reader.
func productionSources(t *testing.T, c client.Client) disruption.Sources {
	t.Helper()
	hc, err := rest.HTTPClientFor(controlPlane.Config)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := disruption.NewStreamingPods(controlPlane.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	return disruption.Sources{Cache: guards[0].cache, APIReader: c, Scales: c, Pods: pods}
}
