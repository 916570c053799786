package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestProbeTargetPortAndDescribe(t *testing.T) {
	for _, tc := range []struct {
		probe Probe
		want  string
	}{
		{Probe{Mode: ProbeModeTCP, TCP: &TCPProbe{TargetPort: intstr.FromString("smtp")}}, "TCP probe on smtp"},
		{Probe{Mode: ProbeModeHTTP, HTTP: &HTTPProbe{TargetPort: intstr.FromInt32(8080)}}, "HTTP probe on 8080"},
		{Probe{Mode: ProbeModePostgreSQL, PostgreSQL: &PostgreSQLProbe{TargetPort: intstr.FromInt32(5432)}}, "PostgreSQL probe on 5432"},
		{Probe{Mode: ProbeModeTCP}, "TCP probe on 0"},
	} {
		if got := tc.probe.Describe(); got != tc.want {
			t.Errorf("Describe() = %q, want %q", got, tc.want)
		}
	}
}
