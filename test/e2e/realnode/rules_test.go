package realnode

import "testing"

// TestRuleMatching: the forms kube-proxy writes (nftables 1.37: one
// endpoint, a DNAT map, a flushed chain's name; iptables) and addresses
// that are prefixes of others.
func TestRuleMatching(t *testing.T) {
	nft := &Node{c: &Cluster{proxyMode: "nftables"}}
	ipt := &Node{c: &Cluster{proxyMode: "iptables"}}
	cases := []struct {
		name  string
		node  *Node
		rules string
		ip    string
		want  bool
	}{
		{"one endpoint", nft, "meta l4proto tcp dnat to 10.246.1.5:8080", "10.246.1.5", true},
		{"map element", nft, "dnat ip addr . port to numgen random mod 2 map { 0 : 10.246.1.5 . 8080, 1 : 10.246.2.5 . 8080 }", "10.246.2.5", true},
		{"flushed chain's name only", nft, "chain endpoint-ABCD-ns/web/tcp/http__10.246.3.5/8080 {\n}", "10.246.3.5", false},
		{"a longer address", nft, "meta l4proto tcp dnat to 10.246.1.50:8080", "10.246.1.5", false},
		{"iptables", ipt, "-A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.246.1.5:8080", "10.246.1.5", true},
		{"iptables, another", ipt, "-A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 10.246.1.50:8080", "10.246.1.5", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.node.forwardsTo(tc.rules, tc.ip); got != tc.want {
				t.Errorf("forwardsTo(%q, %s) = %v, want %v", tc.rules, tc.ip, got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		rules, ip string
		want      bool
	}{
		{"ip daddr . meta l4proto . th dport vmap { 10.0.0.23 . tcp . 80 : goto service-X }", "10.0.0.23", true},
		{"ip daddr . meta l4proto . th dport vmap { 10.0.0.23 . tcp . 80 : goto service-X }", "10.0.0.2", false},
		{"-d 110.0.0.2/32", "10.0.0.2", false},
	} {
		if got := hasAddress(tc.rules, tc.ip); got != tc.want {
			t.Errorf("hasAddress(%q, %s) = %v, want %v", tc.rules, tc.ip, got, tc.want)
		}
	}
}
