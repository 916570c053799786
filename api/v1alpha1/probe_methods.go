package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// TargetPort is the port the probe checks, whichever mode it has; the zero
// value when no mode section is set.
func (p *Probe) TargetPort() intstr.IntOrString {
	switch {
	case p.TCP != nil:
		return p.TCP.TargetPort
	case p.HTTP != nil:
		return p.HTTP.TargetPort
	case p.PostgreSQL != nil:
		return p.PostgreSQL.TargetPort
	}
	return intstr.IntOrString{}
}

// Describe names the probe for people, as the agent's messages, events and
// the reasons on its slices do: "HTTP probe on 8080", "TCP probe on smtp".
func (p *Probe) Describe() string {
	target := p.TargetPort()
	return fmt.Sprintf("%s probe on %s", p.Mode, target.String())
}
