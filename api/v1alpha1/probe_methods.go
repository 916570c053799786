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
	case p.GRPC != nil:
		return p.GRPC.TargetPort
	case p.Redis != nil:
		return p.Redis.TargetPort
	case p.MySQL != nil:
		return p.MySQL.TargetPort
	}
	return intstr.IntOrString{}
}

// AuthSecretName is the Secret the probe reads its credentials from, ""
// when it reads none.
func (p *Probe) AuthSecretName() string {
	switch {
	case p.PostgreSQL != nil:
		return p.PostgreSQL.AuthSecretName
	case p.Redis != nil:
		return p.Redis.AuthSecretName
	case p.MySQL != nil:
		return p.MySQL.AuthSecretName
	}
	return ""
}

// Describe names the probe for people, as the agent's messages, events and
// the reasons on its slices do: "HTTP probe on 8080", "TCP probe on smtp".
func (p *Probe) Describe() string {
	target := p.TargetPort()
	return fmt.Sprintf("%s probe on %s", p.Mode, target.String())
}
