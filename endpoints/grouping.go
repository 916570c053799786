package endpoints

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ErrInvalid is wrapped by every error this package returns for input that
// cannot describe a valid Service, node, pod or EndpointSlice.
var ErrInvalid = errors.New("invalid input")

// Grouping decides which probes gate which port of a Service. It holds the
// part of the decision that does not depend on the pod, so build it once per
// Service spec and probe list and ask it per pod. A Grouping is immutable and
// safe for concurrent use.
//
// A probe checks a Service port when their target ports are the same: equal
// numbers, equal names, or a name and a number (or two names) that resolve to
// the same number on the pod. A probe that checks no port gates every port
// (a dedicated health port). A port's gate is its own probes plus those
// pod-wide probes; a port with an empty gate follows pod readiness.
//
// Probes compare by port number only: a probe on 53 checks both a TCP and a
// UDP Service port whose targetPort is 53. A probe whose name resolves to no
// port of a pod checks no port there, so it gates the whole pod: a probe
// that cannot run should count as failing, and the misconfiguration then
// shows instead of being ignored.
type Grouping struct {
	ports     []groupPort
	numProbes int
	probes    []intstr.IntOrString
	// pairs[i*numProbes+j] says whether probe j checks port i.
	pairs []pairKind
	// static is the answer for every pod when no name needs resolving.
	static []PortGate
}

type groupPort struct {
	target   intstr.IntOrString // targetPort with unset meaning the port number
	protocol corev1.Protocol
}

type pairKind uint8

const (
	pairNever pairKind = iota
	pairAlways
	pairIfSameNumber // decided per pod, once names are resolved
)

// PortGate is the decision for one Service port on one pod.
type PortGate struct {
	// Port is the endpoint port: the Service port's targetPort resolved on
	// the pod. It is 0 when a named targetPort names no port of the pod; the
	// pod is then not published on this port.
	Port int32
	// Probes must all pass for the pod to receive traffic on this port. When
	// empty, the port follows pod readiness, like a plain Service.
	Probes ProbeSet
}

// PortVerdict is what the builder needs to know about one pod on one port.
type PortVerdict struct {
	// Port is the endpoint port number; 0 leaves the pod out of this port.
	Port int32
	// Passing is true when the pod may receive traffic on this port. It
	// becomes the endpoint's serving condition, and ready unless the pod is
	// terminating.
	Passing bool
}

// Verdict applies the gate: the port passes when every gating probe is in
// passing, or, for a port no probe gates, when the pod is ready. A port that
// does not resolve on the pod never passes.
func (g PortGate) Verdict(passing ProbeSet, podReady bool) PortVerdict {
	if g.Port == 0 {
		return PortVerdict{}
	}
	ok := passing.Contains(g.Probes)
	if g.Probes.Empty() {
		ok = podReady
	}
	return PortVerdict{Port: g.Port, Passing: ok}
}

// NewGrouping prepares the grouping of probes over the ports of a Service.
// ports are the Service's spec.ports, where an unset targetPort means the
// port number; probes are the probes' target ports, and a probe is known by
// its index in that slice from then on.
func NewGrouping(ports []corev1.ServicePort, probes []intstr.IntOrString) (*Grouping, error) {
	if len(probes) > MaxProbes {
		return nil, fmt.Errorf("%d probes, at most %d are supported: %w", len(probes), MaxProbes, ErrInvalid)
	}
	g := &Grouping{
		ports:     make([]groupPort, len(ports)),
		numProbes: len(probes),
		probes:    slices.Clone(probes),
		pairs:     make([]pairKind, len(ports)*len(probes)),
	}
	for j, t := range probes {
		if err := checkTarget(t); err != nil {
			return nil, fmt.Errorf("probe %d: %w", j, err)
		}
	}
	static := true
	for i := range ports {
		if !validPortNumber(ports[i].Port) {
			return nil, fmt.Errorf("port %d (%q): port %d is not in 1-65535: %w", i, ports[i].Name, ports[i].Port, ErrInvalid)
		}
		t := serviceTarget(&ports[i])
		if err := checkTarget(t); err != nil {
			return nil, fmt.Errorf("port %d (%q): %w", i, ports[i].Name, err)
		}
		g.ports[i] = groupPort{target: t, protocol: orTCP(ports[i].Protocol)}
		if t.Type == intstr.String {
			static = false
		}
		for j, pt := range probes {
			k := pairOf(t, pt)
			g.pairs[i*len(probes)+j] = k
			if k == pairIfSameNumber {
				static = false
			}
		}
	}
	if static {
		g.static = g.appendGates(nil, nil)
	}
	return g, nil
}

func checkTarget(t intstr.IntOrString) error {
	if t.Type == intstr.String {
		if t.StrVal == "" {
			return fmt.Errorf("empty port name: %w", ErrInvalid)
		}
		return nil
	}
	if !validPortNumber(t.IntVal) {
		return fmt.Errorf("target port %d is not in 1-65535: %w", t.IntVal, ErrInvalid)
	}
	return nil
}

func pairOf(port, probe intstr.IntOrString) pairKind {
	switch {
	case port.Type == intstr.Int && probe.Type == intstr.Int:
		if port.IntVal == probe.IntVal {
			return pairAlways
		}
		return pairNever
	case port.Type == intstr.String && probe.Type == intstr.String && port.StrVal == probe.StrVal:
		// Same name: the user's intent is plain even where the name does
		// not resolve (the port then has no endpoint on that pod anyway).
		return pairAlways
	default:
		return pairIfSameNumber
	}
}

// NumProbes returns the number of probes.
func (g *Grouping) NumProbes() int { return g.numProbes }

// Gates returns one PortGate per Service port, in the order of the ports
// given to NewGrouping, for pod.
func (g *Grouping) Gates(pod *corev1.Pod) []PortGate {
	return g.appendGates(make([]PortGate, 0, len(g.ports)), pod)
}

// appendGates appends the gates of pod to dst and returns the extended
// slice; it allocates nothing when dst has room.
func (g *Grouping) appendGates(dst []PortGate, pod *corev1.Pod) []PortGate {
	if g.static != nil {
		return append(dst, g.static...)
	}
	start := len(dst)
	for i := range g.ports {
		p := &g.ports[i]
		num, _ := ResolvePort(pod, p.target, p.protocol)
		dst = append(dst, PortGate{Port: num})
	}
	gates := dst[start:]
	var resolved, podWide ProbeSet
	var probeNum [MaxProbes]int32
	for j := range g.numProbes {
		matched := false
		for i := range gates {
			switch g.pairs[i*g.numProbes+j] {
			case pairNever:
				continue
			case pairIfSameNumber:
				if !resolved.Has(j) {
					probeNum[j], _ = ResolvePort(pod, g.probes[j], "")
					resolved = resolved.With(j)
				}
				if probeNum[j] == 0 || probeNum[j] != gates[i].Port {
					continue
				}
			}
			gates[i].Probes = gates[i].Probes.With(j)
			matched = true
		}
		if !matched {
			podWide = podWide.With(j)
		}
	}
	for i := range gates {
		gates[i].Probes |= podWide
	}
	return dst
}

// Verdicts returns one PortVerdict per Service port for pod, given the
// probes currently passing on it.
func (g *Grouping) Verdicts(pod *corev1.Pod, passing ProbeSet) []PortVerdict {
	return g.appendVerdicts(make([]PortVerdict, 0, len(g.ports)), pod, passing)
}

// appendVerdicts appends the verdicts of pod to dst, like Verdicts.
func (g *Grouping) appendVerdicts(dst []PortVerdict, pod *corev1.Pod, passing ProbeSet) []PortVerdict {
	ready := PodReady(pod)
	if g.static != nil {
		for _, gate := range g.static {
			dst = append(dst, gate.Verdict(passing, ready))
		}
		return dst
	}
	var buf [8]PortGate // most Services have few ports: no allocation
	for _, gate := range g.appendGates(buf[:0], pod) {
		dst = append(dst, gate.Verdict(passing, ready))
	}
	return dst
}
