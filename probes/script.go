package probes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

// converse runs the TLS handshake and the script of a TCP probe on conn.
// ctx bounds all of it: its deadline is the connection's, and its
// cancellation interrupts a read or write in progress.
func (p *TCPProber) converse(ctx context.Context, start time.Time, target Target, conn net.Conn) Result {
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	done := "connected"
	if p.tls != nil {
		cfg := p.tls
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = target.Host
		}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			err = fmt.Errorf("TLS handshake with %s: %w", target, err)
			return fail(start, classifyTLS(ctx, err), err)
		}
		conn, done = tc, "TLS "+tls.VersionName(tc.ConnectionState().Version)
	}

	// buf holds what arrived and no expect has consumed yet: at most
	// MaxExpectBytes, since a step that reads that much without a match
	// fails.
	buf := make([]byte, 0, 512)
	budget := regexpSearchBudget
	for i, s := range p.steps {
		if len(s.send) > 0 {
			if _, err := conn.Write(s.send); err != nil {
				err = fmt.Errorf("step %d: sending %d bytes to %s: %w", i+1, len(s.send), target, err)
				return fail(start, Classify(ctx, err), err)
			}
		}
		if s.expect == nil {
			continue
		}
		var err error
		if buf, err = expectFrom(ctx, conn, buf, s.expect, i+1, &budget); err != nil {
			var mismatch *MismatchError
			if errors.As(err, &mismatch) {
				return fail(start, ReasonExpectMismatch, err)
			}
			return fail(start, Classify(ctx, err), fmt.Errorf("%s: %w", target, err))
		}
	}
	if len(p.steps) > 0 {
		done += ", " + strconv.Itoa(len(p.steps)) + " steps as expected"
	}
	return pass(start, done)
}

// idleSearchDelay is how long a step whose regular expression has not
// searched its latest bytes (its budget spent) waits for more before it
// searches them: a server that answered and waits for the next command
// is matched now, not at the deadline.
const idleSearchDelay = 50 * time.Millisecond

// readDeadliner is the part of a net.Conn expectFrom uses to notice that
// the server paused.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// expectFrom reads from r until m matches the bytes in buf and those read
// after them, and returns what follows the match. It fails with a
// *MismatchError when the bytes do not match within MaxExpectBytes, when
// the server closes the connection first, or when the deadline passes after
// this step read some bytes (a server that answered something else and
// waits); with the read's error otherwise. budget is what is left of the
// probe's regexpSearchBudget.
func expectFrom(ctx context.Context, r io.Reader, buf []byte, m *matcher, stepNo int, budget *int) ([]byte, error) {
	searched, full, read := 0, 0, 0
	deadliner, _ := r.(readDeadliner)
	deadline, _ := ctx.Deadline()
	for {
		end := m.search(buf, searched, &full, budget)
		if end < 0 && len(buf) >= MaxExpectBytes {
			end = m.end(buf) // the final search, whatever the budget
		}
		if end >= 0 {
			return buf[:copy(buf, buf[end:])], nil
		}
		if len(buf) >= MaxExpectBytes {
			return nil, mismatch(stepNo, m, buf, "no match within "+strconv.Itoa(MaxExpectBytes)+" bytes")
		}
		searched = len(buf)
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*cap(buf), 512), MaxExpectBytes))
			copy(grown, buf)
			buf = grown
		}
		// Bytes a regular expression has not searched yet are searched
		// if nothing more comes soon.
		idle := deadliner != nil && full < len(buf) && !deadline.IsZero() && time.Until(deadline) > idleSearchDelay
		if idle {
			_ = deadliner.SetReadDeadline(time.Now().Add(idleSearchDelay))
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf, read = buf[:len(buf)+n], read+n
		if idle {
			_ = deadliner.SetReadDeadline(deadline)
			if ctx.Err() != nil {
				_ = deadliner.SetReadDeadline(time.Unix(1, 0)) // canceled meanwhile
			}
			if err != nil && ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) {
				full = len(buf) // the server paused: search everything now
				if end := m.end(buf); end >= 0 {
					return buf[:copy(buf, buf[end:])], nil
				}
				continue
			}
		}
		if err == nil {
			continue
		}
		if end := m.end(buf); end >= 0 { // the final search
			return buf[:copy(buf, buf[end:])], nil
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil, mismatch(stepNo, m, buf, "the server closed the connection")
		case read > 0 && ctx.Err() != context.Canceled && errors.Is(err, os.ErrDeadlineExceeded):
			return nil, mismatch(stepNo, m, buf, "nothing more arrived before the deadline")
		}
		return nil, fmt.Errorf("step %d: waiting for %s: %w", stepNo, m, err)
	}
}

// clientTLSConfig is the TLS configuration of a client that verifies the
// server with the PEM bundle caCert (the system roots when empty), or does
// not verify it at all.
func clientTLSConfig(serverName string, caCert []byte, insecure bool) (*tls.Config, error) {
	if insecure && len(caCert) > 0 {
		return nil, errors.New("CACert and InsecureSkipVerify are mutually exclusive")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, InsecureSkipVerify: insecure}
	if len(caCert) > 0 {
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(caCert) {
			return nil, errors.New("CACert holds no PEM certificate")
		}
	}
	return tc, nil
}

// classifyTLS is Classify for a handshake's error: whatever ended the
// handshake (a refused protocol version or cipher, which crypto/tls
// returns as plain errors, or a server that closed the connection on the
// ClientHello, as one that does not speak TLS does) is reason tls, unless
// the deadline or a cancellation did.
func classifyTLS(ctx context.Context, err error) Reason {
	switch reason := Classify(ctx, err); reason {
	case ReasonTimeout, ReasonCanceled:
		return reason
	}
	return ReasonTLS
}
