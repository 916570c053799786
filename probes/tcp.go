package probes

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
)

// Prober checks one target. Implementations are safe for concurrent use and
// bound each probe by ctx: its deadline is the probe's timeout (DefaultTimeout
// when it has none) and its cancellation aborts the probe. Probe never
// panics on a bad target; it returns a failure with ReasonInvalidTarget.
type Prober interface {
	Probe(ctx context.Context, target Target) Result
}

// ProberFunc adapts a function to the Prober interface.
type ProberFunc func(ctx context.Context, target Target) Result

// Probe calls f.
func (f ProberFunc) Probe(ctx context.Context, target Target) Result { return f(ctx, target) }

// TCPConfig configures a TCPProber. The zero value connects and closes.
type TCPConfig struct {
	// Dialer opens the connection; nil means a net.Dialer, except that on
	// Linux a target whose Host is an IP address is connected to with
	// direct system calls instead, when the probe only connects: the same
	// connection, reset and errors, for about half the system calls and
	// less CPU per probe.
	Dialer Dialer

	// Steps make the probe a short conversation (HAProxy's tcp-check
	// send/expect): in order, each step sends its Send, then reads until
	// its Expect matches what arrived since the previous match. At most
	// MaxScriptSteps steps, MaxSendBytes sent and MaxExpectBytes read per
	// step.
	Steps []Step

	// TLS makes the probe complete a TLS handshake right after connecting
	// (TLS first, not STARTTLS); the steps then run inside it.
	TLS bool
	// ServerName is the TLS server name, for SNI and verification; empty
	// means the target's host (an IP address verifies against the
	// certificate's IP addresses and sends no SNI).
	ServerName string
	// CACert is a PEM bundle of the authorities that verify the server.
	// Empty means the system roots.
	CACert []byte
	// InsecureSkipVerify accepts any server certificate (not with CACert).
	InsecureSkipVerify bool
}

// Step is one exchange of a TCP script: Send, if any, is written, then
// Expect, if set, must match what the server sends. A step has at least
// one of the two.
type Step struct {
	Send   []byte
	Expect *Expect
}

// TCPProber passes when the target accepts a TCP connection and, with a
// script, answers each step as expected. Without a script it writes
// nothing: servers that greet or expect a command (SMTP, Redis) only see a
// connection opened and reset. It closes with a RST, so probing leaves no
// TIME_WAIT socket behind.
type TCPProber struct {
	dialer Dialer
	direct bool        // connectDirect for IP targets
	steps  []step      // the script; nil: connect only
	tls    *tls.Config // nil: no TLS
}

// step is a validated Step.
type step struct {
	send   []byte
	expect *matcher
}

var _ Prober = (*TCPProber)(nil)

// NewTCP validates cfg and returns a TCP prober.
func NewTCP(cfg TCPConfig) (*TCPProber, error) {
	p := &TCPProber{dialer: cfg.Dialer}
	if len(cfg.Steps) > MaxScriptSteps {
		return nil, fmt.Errorf("probes: tcp: %d steps, at most %d", len(cfg.Steps), MaxScriptSteps)
	}
	for i, s := range cfg.Steps {
		if len(s.Send) == 0 && s.Expect == nil {
			return nil, fmt.Errorf("probes: tcp: step %d has neither Send nor Expect", i+1)
		}
		if len(s.Send) > MaxSendBytes {
			return nil, fmt.Errorf("probes: tcp: step %d sends %d bytes, at most %d", i+1, len(s.Send), MaxSendBytes)
		}
		st := step{send: bytes.Clone(s.Send)}
		if s.Expect != nil {
			m, err := compileExpect(*s.Expect)
			if err != nil {
				return nil, fmt.Errorf("probes: tcp: step %d: expect: %w", i+1, err)
			}
			st.expect = m
		}
		p.steps = append(p.steps, st)
	}
	if cfg.TLS {
		tc, err := clientTLSConfig(cfg.ServerName, cfg.CACert, cfg.InsecureSkipVerify)
		if err != nil {
			return nil, fmt.Errorf("probes: tcp: %w", err)
		}
		p.tls = tc
	} else if cfg.ServerName != "" || len(cfg.CACert) > 0 || cfg.InsecureSkipVerify {
		return nil, errors.New("probes: tcp: ServerName, CACert and InsecureSkipVerify need TLS")
	}
	if p.dialer == nil {
		p.dialer = newDefaultDialer()
		p.direct = directDialing && p.steps == nil && p.tls == nil
	}
	return p, nil
}

// Probe connects to target and closes the connection.
func (p *TCPProber) Probe(ctx context.Context, target Target) Result {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		return fail(start, ReasonInvalidTarget, err)
	}
	if p.direct {
		if ap, ok := ipTarget(target); ok {
			if err := connectDirect(ctx, ap); err != nil {
				return fail(start, Classify(ctx, err), err)
			}
			return pass(start, "connected")
		}
	}
	conn, err := p.dialer.DialContext(ctx, "tcp", target.Addr())
	if err != nil {
		return fail(start, Classify(ctx, err), err)
	}
	resetOnClose(conn)
	if p.steps == nil && p.tls == nil {
		_ = conn.Close() // a close error cannot change what the connect proved
		return pass(start, "connected")
	}
	defer conn.Close()
	return p.converse(ctx, start, target, conn)
}

// ipTarget returns the address of a target whose Host is an IP address
// without a zone (an IPv4-mapped IPv6 address as IPv4, as net does).
func ipTarget(t Target) (netip.AddrPort, bool) {
	addr, err := netip.ParseAddr(t.Host)
	if err != nil || addr.Zone() != "" {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(t.Port)), true
}
