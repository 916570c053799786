//go:build !linux

package probes

import (
	"context"
	"net/netip"
)

// directDialing reports whether a TCPProber without a Dialer connects with
// connectDirect: on Linux only; elsewhere it uses a net.Dialer.
const directDialing = false

func connectDirect(context.Context, netip.AddrPort) error {
	panic("probes: connectDirect is Linux-only")
}
