package endpoints

import (
	"errors"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestSliceName(t *testing.T) {
	long := strings.Repeat("n", 200) + "." + strings.Repeat("m", 52) // a 253-character node name
	const v4, v6 = discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	tests := []struct {
		name  string
		parts NameParts
		want  string
	}{
		{"resource-port-node", NameParts{Service: "web", Port: "http", Node: "node1"}, "web-http-node1"},
		{"single unnamed port", NameParts{Service: "web", Node: "node1"}, "web-node1"},
		{"node with dots", NameParts{Service: "web", Port: "http", Node: "ip-10-0-0-1.ec2.internal"}, "web-http-ip-10-0-0-1.ec2.internal"},
		{"primary family IPv4 has no suffix", NameParts{Service: "web", Port: "http", Node: "n", Family: v4}, "web-http-n"},
		{"IPv6 slice of an IPv4-first dual-stack service", NameParts{Service: "web", Port: "http", Node: "n", Family: v6}, "web-http-n-v6"},
		{"IPv6-first service: IPv6 is plain", NameParts{Service: "web", Port: "http", Node: "n", Family: v6, PrimaryFamily: v6}, "web-http-n"},
		{"IPv6-first service: IPv4 is suffixed", NameParts{Service: "web", Port: "http", Node: "n", Family: v4, PrimaryFamily: v6}, "web-http-n-v4"},
		{"extra port number", NameParts{Service: "web", Port: "http", Node: "n", AltPort: 8443}, "web-http-n-p8443"},
		{"second chunk", NameParts{Service: "web", Port: "http", Node: "n", Chunk: 1}, "web-http-n-c2"},
		{"every suffix, in order", NameParts{Service: "web", Port: "http", Node: "n", Family: v6, AltPort: 81, Chunk: 2}, "web-http-n-v6-p81-c3"},
		{"long node name digested", NameParts{Service: "web", Port: "http", Node: long}, "web-http-" + digest(long, 16)},
		{"long node name digested, suffixes kept", NameParts{Service: "web", Node: long, Family: v6, Chunk: 1}, "web-" + digest(long, 16) + "-v6-c2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SliceName(tt.parts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("SliceName = %q, want %q", got, tt.want)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%q: %v", got, errs)
			}
		})
	}
}

func TestSliceNameDigestOnlyWhenNeeded(t *testing.T) {
	// The longest name that keeps the node name: exactly 253 characters.
	node := strings.Repeat("a", 253-len("web-http-"))
	got, err := SliceName(NameParts{Service: "web", Port: "http", Node: node})
	if err != nil || got != "web-http-"+node {
		t.Errorf("253 characters: %q, %v", got, err)
	}
	got, err = SliceName(NameParts{Service: "web", Port: "http", Node: node, Chunk: 1})
	if err != nil || got != "web-http-"+digest(node, 16)+"-c2" {
		t.Errorf("254 characters: %q, %v", got, err)
	}
}

func TestSliceNameErrors(t *testing.T) {
	for _, p := range []NameParts{
		{Service: "", Node: "n"},
		{Service: "Web", Node: "n"},
		{Service: "web", Port: "http_", Node: "n"},
		{Service: strings.Repeat("w", 64), Node: "n"},
		{Service: "web", Node: ""},
		{Service: "web", Node: "-n"},
		{Service: "web", Node: "n", Family: discoveryv1.AddressTypeFQDN},
		{Service: "web", Node: "n", AltPort: 70000},
		{Service: "web", Node: "n", Chunk: -1},
	} {
		if got, err := SliceName(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("SliceName(%+v) = %q, %v; want ErrInvalid", p, got, err)
		}
	}
}

// FuzzSliceName proves the naming promise: whatever the parts, SliceName
// either refuses them or returns a valid DNS subdomain; parts that are
// valid Kubernetes names are never refused; the result is stable.
func FuzzSliceName(f *testing.F) {
	f.Add("web", "http", "node1", false, false, int32(0), 0)
	f.Add("web", "", strings.Repeat("x", 253), true, true, int32(65535), 1000)
	f.Add("a", "b-c", "d.e-f", true, false, int32(1), 1)
	f.Fuzz(func(t *testing.T, svc, port, node string, v6, v6primary bool, alt int32, chunk int) {
		p := NameParts{Service: svc, Port: port, Node: node, AltPort: alt, Chunk: chunk}
		if v6 {
			p.Family = discoveryv1.AddressTypeIPv6
		}
		if v6primary {
			p.PrimaryFamily = discoveryv1.AddressTypeIPv6
		}
		got, err := SliceName(p)
		if err == nil {
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Fatalf("SliceName(%+v) = %q: %v", p, got, errs)
			}
			if again, _ := SliceName(p); again != got {
				t.Fatalf("unstable: %q then %q", got, again)
			}
			return
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error does not wrap ErrInvalid: %v", err)
		}
		valid := len(validation.IsDNS1123Label(svc)) == 0 &&
			(port == "" || len(validation.IsDNS1123Label(port)) == 0) &&
			len(validation.IsDNS1123Subdomain(node)) == 0 &&
			(alt == 0 || validPortNumber(alt)) && chunk >= 0
		if valid {
			t.Fatalf("SliceName(%+v) refused valid parts: %v", p, err)
		}
	})
}

func TestNodeLabelValue(t *testing.T) {
	long := strings.Repeat("a", 45) + "." + strings.Repeat("b", 40)
	tests := []struct{ node, want string }{
		{"node1", "node1"},
		{"ip-10-0-0-1.ec2.internal", "ip-10-0-0-1.ec2.internal"},
		{strings.Repeat("a", 63), strings.Repeat("a", 63)},
		{strings.Repeat("a", 64), strings.Repeat("a", 46) + "-" + digest(strings.Repeat("a", 64), 16)},
		// The kept prefix ends with "." and loses it.
		{long, strings.Repeat("a", 45) + "-" + digest(long, 16)},
	}
	for _, tt := range tests {
		got := NodeLabelValue(tt.node)
		if got != tt.want {
			t.Errorf("NodeLabelValue(%q) = %q, want %q", tt.node, got, tt.want)
		}
	}
	// Two long names sharing their first 46 characters stay apart.
	a, b := strings.Repeat("x", 70)+"a", strings.Repeat("x", 70)+"b"
	if NodeLabelValue(a) == NodeLabelValue(b) {
		t.Error("distinct long node names share a label value")
	}
}

// FuzzNodeLabelValue: the node label is always a valid, stable label value,
// and the node name itself when that is one.
func FuzzNodeLabelValue(f *testing.F) {
	f.Add("node1")
	f.Add(strings.Repeat("n", 253))
	f.Add("a/b")
	f.Add(strings.Repeat("a", 45) + ".-" + strings.Repeat("b", 30))
	f.Fuzz(func(t *testing.T, node string) {
		got := NodeLabelValue(node)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Fatalf("NodeLabelValue(%q) = %q: %v", node, got, errs)
		}
		if len(validation.IsValidLabelValue(node)) == 0 && got != node {
			t.Fatalf("NodeLabelValue(%q) = %q, want the name itself", node, got)
		}
		if NodeLabelValue(node) != got {
			t.Fatal("unstable")
		}
	})
}

// FuzzSliceNameValidParts maps arbitrary input onto valid Kubernetes names
// of every length, so the digest path is walked as often as the plain one:
// valid parts always give a valid name.
func FuzzSliceNameValidParts(f *testing.F) {
	f.Add("web", uint8(63), "http", uint8(0), "node1", uint8(255), uint16(0), uint8(0))
	f.Add("x", uint8(63), "y", uint8(63), "z.", uint8(255), uint16(443), uint8(7))
	f.Fuzz(func(t *testing.T, svc string, svcLen uint8, port string, portLen uint8, node string, nodeLen uint8, alt uint16, flags uint8) {
		p := NameParts{
			Service: toName(svc, 1+int(svcLen)%63, false),
			Port:    toName(port, int(portLen)%64, false),
			Node:    toName(node, 1+int(nodeLen)%253, true),
			AltPort: int32(alt),
			Chunk:   int(flags >> 2),
		}
		if flags&1 != 0 {
			p.Family = discoveryv1.AddressTypeIPv6
		}
		if flags&2 != 0 {
			p.PrimaryFamily = discoveryv1.AddressTypeIPv6
		}
		got, err := SliceName(p)
		if err != nil {
			t.Fatalf("SliceName(%+v): %v", p, err)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Fatalf("SliceName(%+v) = %q: %v", p, got, errs)
		}
	})
}

// toName turns s into a valid DNS label (or subdomain, with dots) of
// exactly n characters, n = 0 giving "".
func toName(s string, n int, dots bool) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-."
	if n == 0 {
		return ""
	}
	sep := func(c byte) bool { return c == '-' || c == '.' }
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
		if len(s) > 0 {
			b[i] = alphabet[int(s[i%len(s)])%len(alphabet)]
		}
		if b[i] == '.' && !dots {
			b[i] = '-'
		}
		// A dot must sit between two letters or digits.
		if i > 0 && ((b[i] == '.' && sep(b[i-1])) || (b[i] == '-' && b[i-1] == '.')) {
			b[i] = 'a'
		}
	}
	if sep(b[0]) {
		b[0] = 'a'
	}
	if sep(b[n-1]) {
		b[n-1] = 'a'
	}
	return string(b)
}
