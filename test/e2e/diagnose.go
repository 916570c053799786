package e2e

import (
	"fmt"
	"strings"
)

// Diagnose describes the state of the data path that decides whether a
// new connection is carried: for every node, its conntrack entries that
// never saw a reply (a SYN that kube-proxy's rules did not translate, or
// that was lost further on) and its neighbours; for every client, its
// neighbours. Printed when requests fail once a step had converged, so a
// rare failure leaves evidence (conntrack is Debian's package conntrack).
func (c *Cluster) Diagnose() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		out, err := n.NS.Output("conntrack", "-L", "-p", "tcp")
		if err != nil {
			fmt.Fprintf(&b, "%s conntrack: %v: %s\n", n.Name, err, out)
		} else {
			fmt.Fprintf(&b, "%s conntrack entries without reply:\n", n.Name)
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "UNREPLIED") || strings.Contains(line, "SYN_SENT") || strings.Contains(line, "SYN_RECV") {
					fmt.Fprintf(&b, "  %s\n", line)
				}
			}
		}
		neigh, _ := n.NS.Output("ip", "neigh")
		fmt.Fprintf(&b, "%s neighbours:\n  %s\n", n.Name, strings.ReplaceAll(neigh, "\n", "\n  "))
		if n.Client != nil {
			neigh, _ := n.Client.NS.Output("ip", "neigh")
			fmt.Fprintf(&b, "%s neighbours:\n  %s\n", n.Client.Name, strings.ReplaceAll(neigh, "\n", "\n  "))
		}
	}
	return b.String()
}
