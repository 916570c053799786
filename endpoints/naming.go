package endpoints

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and limits of the published EndpointSlices.
const (
	// DefaultManagedBy is the endpointslice.kubernetes.io/managed-by value
	// of the slices the swh agent publishes (a label value: no "/").
	DefaultManagedBy = "agent.network.swh.dev"
	// DefaultNodeLabel is the label carrying NodeLabelValue of the node a
	// slice belongs to, so an agent can list its own slices.
	DefaultNodeLabel = "network.swh.dev/node"
	// LabelServiceProxyName is copied from the Service when it has it:
	// kube-proxy then leaves the slices to the named proxy.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// MaxEndpointsPerSlice is the API server's limit.
	MaxEndpointsPerSlice = 1000
)

// digestLen is the number of hex digits of the digests standing in for
// names: 64 bits, so distinct nodes do not meet in practice.
const digestLen = 16

// NameParts is everything the name of a slice derives from.
//
// The name is "<Service>-<Port>-<Node>", or "<Service>-<Node>" when Port is
// empty (a Service with a single unnamed port), followed by these suffixes,
// in this order, when they apply:
//
//   - "-v6" (or "-v4") for a slice whose Family is not PrimaryFamily: the
//     IPv6 slice of a dual-stack Service whose first family is IPv4;
//   - "-p<AltPort>" for the extra slices of a named targetPort that resolves
//     to several numbers among the node's pods;
//   - "-c<Chunk+1>" for the second and later slices when one port on one
//     node has more than 1000 endpoints.
//
// When the name would be longer than 253 characters, the node part is
// replaced by a 16-hex-digit digest of the node name.
type NameParts struct {
	// Service is the name of the Service (a DNS label).
	Service string
	// Port is the name of the Service port, "" only for a single unnamed port.
	Port string
	// Node is the name of the Node object.
	Node string
	// Family is the address type of the slice; "" means PrimaryFamily.
	Family discoveryv1.AddressType
	// PrimaryFamily is the Service's first IP family; "" means IPv4.
	PrimaryFamily discoveryv1.AddressType
	// AltPort, when not 0, is the endpoint port number of an extra slice:
	// a named targetPort resolving to several numbers publishes the smallest
	// under the plain name and each other number under its own.
	AltPort int32
	// Chunk numbers the slices of one port, family and number from 0.
	Chunk int
}

// SliceName returns the name of the slice described by p. It is a valid DNS
// subdomain whenever it returns no error; it returns an error (wrapping
// ErrInvalid) when a part is not a valid Kubernetes name of its kind.
func SliceName(p NameParts) (string, error) {
	if err := p.validate(); err != nil {
		return "", err
	}
	var suffix strings.Builder
	primary := orIPv4(p.PrimaryFamily)
	if p.Family != "" && p.Family != primary {
		suffix.WriteString("-v")
		suffix.WriteString(strings.TrimPrefix(string(p.Family), "IPv"))
	}
	if p.AltPort != 0 {
		suffix.WriteString("-p")
		suffix.WriteString(strconv.Itoa(int(p.AltPort)))
	}
	if p.Chunk > 0 {
		suffix.WriteString("-c")
		suffix.WriteString(strconv.Itoa(p.Chunk + 1))
	}
	prefix := p.Service + "-"
	if p.Port != "" {
		prefix += p.Port + "-"
	}
	name := prefix + p.Node + suffix.String()
	if len(name) > validation.DNS1123SubdomainMaxLength {
		name = prefix + digest(p.Node, digestLen) + suffix.String()
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		// Unreachable with validated parts; kept so the promise holds.
		return "", fmt.Errorf("slice name %q: %s: %w", name, strings.Join(errs, "; "), ErrInvalid)
	}
	return name, nil
}

func (p NameParts) validate() error {
	if errs := validation.IsDNS1123Label(p.Service); len(errs) > 0 {
		return fmt.Errorf("service name %q: %s: %w", p.Service, strings.Join(errs, "; "), ErrInvalid)
	}
	if p.Port != "" {
		if errs := validation.IsDNS1123Label(p.Port); len(errs) > 0 {
			return fmt.Errorf("port name %q: %s: %w", p.Port, strings.Join(errs, "; "), ErrInvalid)
		}
	}
	if errs := validation.IsDNS1123Subdomain(p.Node); len(errs) > 0 {
		return fmt.Errorf("node name %q: %s: %w", p.Node, strings.Join(errs, "; "), ErrInvalid)
	}
	for _, f := range []discoveryv1.AddressType{p.Family, p.PrimaryFamily} {
		if f != "" && f != discoveryv1.AddressTypeIPv4 && f != discoveryv1.AddressTypeIPv6 {
			return fmt.Errorf("address type %q: only IPv4 and IPv6 are published: %w", f, ErrInvalid)
		}
	}
	if p.AltPort != 0 && !validPortNumber(p.AltPort) {
		return fmt.Errorf("port number %d is not in 1-65535: %w", p.AltPort, ErrInvalid)
	}
	if p.Chunk < 0 {
		return fmt.Errorf("chunk %d is negative: %w", p.Chunk, ErrInvalid)
	}
	return nil
}

// NodeLabelValue returns the value of the node label for a node: the node
// name itself when it is a valid label value (at most 63 characters),
// otherwise its first characters followed by "-" and a 16-hex-digit digest
// of the whole name. The result is always a valid label value, and stable.
func NodeLabelValue(node string) string {
	if len(validation.IsValidLabelValue(node)) == 0 {
		return node
	}
	d := digest(node, digestLen)
	keep := min(len(node), validation.LabelValueMaxLength-1-digestLen)
	if v := trimNonAlnumRight(node[:keep]) + "-" + d; len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	return d
}

// digest returns the first n hex digits of the SHA-256 of s.
func digest(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// trimNonAlnumRight drops trailing characters a DNS or label name may not
// end with, so a truncated name can take a suffix.
func trimNonAlnumRight(s string) string {
	return strings.TrimRightFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
	})
}

func orIPv4(f discoveryv1.AddressType) discoveryv1.AddressType {
	if f == "" {
		return discoveryv1.AddressTypeIPv4
	}
	return f
}
