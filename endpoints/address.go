package endpoints

import (
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// podAddresses returns the first usable address of each family among the
// pod's IPs (status.podIPs, or status.podIP on objects that predate it), in
// the canonical form the API server requires for EndpointSlices.
func podAddresses(status *corev1.PodStatus) (v4, v6 netip.Addr) {
	ips := make([]string, 0, 2)
	for _, ip := range status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && status.PodIP != "" {
		ips = append(ips, status.PodIP)
	}
	for _, s := range ips {
		a, ok := endpointAddr(s)
		switch {
		case !ok:
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	return v4, v6
}

// endpointAddr parses a pod IP the way the API server does (IPv4 octets with
// leading zeros are decimal, an IPv4-mapped IPv6 address is IPv4), and
// refuses what it rejects in an EndpointSlice: one bad address would fail
// the whole slice.
func endpointAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		if a, err = parseIPv4LeadingZeros(s); err != nil {
			return netip.Addr{}, false
		}
	}
	a = a.Unmap()
	if a.Zone() != "" || a.IsUnspecified() || a.IsLoopback() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
		return netip.Addr{}, false
	}
	return a, true
}

// parseIPv4LeadingZeros accepts dotted quads like "010.001.002.003", which
// the API server's sloppy parser reads as decimal.
func parseIPv4LeadingZeros(s string) (netip.Addr, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return netip.Addr{}, strconv.ErrSyntax
	}
	var b [4]byte
	for i, p := range parts {
		if p == "" || len(p) > 3 || strings.TrimLeft(p, "0123456789") != "" {
			return netip.Addr{}, strconv.ErrSyntax
		}
		n, err := strconv.Atoi(p)
		if err != nil || n > 255 {
			return netip.Addr{}, strconv.ErrSyntax
		}
		b[i] = byte(n)
	}
	return netip.AddrFrom4(b), nil
}

func familyOf(a netip.Addr) discoveryv1.AddressType {
	if a.Is4() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}
