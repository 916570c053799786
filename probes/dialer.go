package probes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Dialer opens the connections of a prober. *net.Dialer satisfies it; inject
// another to route probes through a proxy, a network namespace or a test
// fixture. It must honour ctx's deadline and cancellation.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// newDefaultDialer is the dialer used when a config leaves Dialer nil.
func newDefaultDialer() *net.Dialer {
	// TCP keep-alive is pointless on a connection that lives for one probe,
	// and enabling it costs several setsockopt calls per dial.
	return &net.Dialer{KeepAlive: -1}
}

// resetOnClose sets SO_LINGER to 0 so that Close sends a RST instead of a
// FIN. A normal close by the active side leaves the socket in TIME_WAIT for
// 60 s on Linux; at a few hundred probes per second to one address that
// exhausts the ephemeral ports (tcp_tw_reuse only helps for loopback). The
// usual cost of a RST, discarding unsent data, does not apply: a probe has
// nothing left to send when it closes. Conns that are not TCP (a custom
// Dialer may wrap them) are left alone.
func resetOnClose(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
}

// Classify maps an error of a probe's connection (dial, TLS handshake, read,
// write) to a Reason: refused, unreachable, reset, tls, dns, timeout or, for
// anything else, ReasonError. ctx is the probe's context: once it is done,
// whatever error the I/O returned (a closed conn, a timeout) is really the
// deadline or the cancellation. The probers of this package and of
// probes/postgresql use it, so that one network failure has one reason
// whatever the protocol; a Prober written elsewhere can too.
func Classify(ctx context.Context, err error) Reason {
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return ReasonTimeout
	case context.Canceled:
		return ReasonCanceled
	}
	var (
		dnsErr     *net.DNSError
		verifyErr  *tls.CertificateVerificationError
		alertErr   tls.AlertError
		recordErr  tls.RecordHeaderError
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalidErr x509.CertificateInvalidError
		opErr      *net.OpError
		netErr     net.Error
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.As(err, &dnsErr):
		return ReasonDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EHOSTDOWN), errors.Is(err, syscall.ENETDOWN):
		return ReasonUnreachable
	case errors.As(err, &verifyErr), errors.As(err, &alertErr), errors.As(err, &recordErr),
		errors.As(err, &unknownCA), errors.As(err, &hostErr), errors.As(err, &invalidErr),
		errors.As(err, &opErr) && opErr.Op == "remote error":
		// crypto/tls reports an alert from the peer (a client
		// certificate refused, say) as an OpError "remote error".
		return ReasonTLS
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonReset
	case errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	}
	return ReasonError
}
