// Package testnet holds the loopback servers the probes module's tests
// probe: a listener, a port nothing listens on, a server that accepts and
// never answers, a server that hands each connection to a handler. Every
// one ends with its test. It imports the standard library only, as the
// module does, and not package probes, whose own tests import it.
package testnet

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"
)

// Listen opens a listener on a loopback address of network ("tcp4",
// "tcp6"), skipping the test when that family is not available.
func Listen(t testing.TB, network, host string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// AddrPort is the address and port a listener listens on.
func AddrPort(t testing.TB, l net.Listener) netip.AddrPort {
	t.Helper()
	tcp, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", l.Addr())
	}
	return tcp.AddrPort()
}

// Refused returns a loopback port nothing listens on.
func Refused(t testing.TB, network, host string) netip.AddrPort {
	t.Helper()
	l := Listen(t, network, host)
	ap := AddrPort(t, l)
	_ = l.Close()
	return ap
}

// Silent returns the address of a server that accepts connections and
// never writes to them, until the test ends.
func Silent(t testing.TB, network, host string) netip.AddrPort {
	t.Helper()
	l := Listen(t, network, host)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
	return AddrPort(t, l)
}

// Serve accepts connections on l and hands each to handle, until the test
// ends.
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { _ = l.Close(); <-done })
}

// Context returns a context that expires after d, or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
