package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"
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

// WaitProgrammed waits until every node's kube-proxy has rules for the
// cluster IP ip. Requests sent before that are not translated: their SYNs
// leave un-NATed conntrack entries that live 120 s, and a later connection
// that happens to get the same source port (the kernel reuses one within
// seconds) matches such an entry and is lost as well, long after the rules
// are there (kubernetes/kubernetes#48719; seen here in iptables mode, where
// a Service kube-proxy does not know yet has no rule at all). Clients of a
// new Service therefore start once it is programmed; the step's time still
// counts from the change.
func (c *Cluster) WaitProgrammed(ctx context.Context, ip string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		for {
			rules, err := n.Rules()
			if err == nil && strings.Contains(rules, ip) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s's kube-proxy has no rule for %s (last error: %v)", n.Name, ip, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Rules prints the node's packet filter rules, as kube-proxy's mode sees
// them.
func (n *Node) Rules() (string, error) {
	if n.c.Mode == "iptables" {
		return n.NS.Output("xtables-legacy-multi", "iptables-save")
	}
	return n.NS.Output("nft", "list", "ruleset")
}
