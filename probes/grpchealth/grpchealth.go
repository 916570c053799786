package grpchealth

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/swh-dev/swh/probes"
)

// checkPath is the one method the prober calls.
const checkPath = "/grpc.health.v1.Health/Check"

// HTTP/2 settings of the probe's connection. Flow control bounds how much
// response data the transport buffers before the prober reads it; frames
// are read whole, so their size is capped at HTTP/2's minimum.
const (
	maxReadFrameBytes  = 16 << 10 // SETTINGS_MAX_FRAME_SIZE, the protocol's minimum
	maxStreamWindow    = 16 << 10 // per-stream receive window: a response needs ~1 KiB
	maxConnWindow      = 64 << 10 // per-connection receive window; net/http's minimum
	maxHeaderTableSize = 4 << 10  // HPACK dynamic table, the protocol's default
)

// Prober calls grpc.health.v1.Health/Check on one fresh connection per
// probe and passes when the answer is SERVING. It is safe for concurrent
// use; build one per configuration and probe any number of targets.
type Prober struct {
	subjectPrefix string      // `gRPC health of service "foo" on `
	scheme        string      // "http" (h2c) or "https"
	body          []byte      // the request body, the same for every probe
	header        http.Header // copied per probe to add grpc-timeout
	authority     string      // :authority, "" for the target address
	tls           *tls.Config // nil without TLS; ServerName "" means the target's host
	dialer        probes.Dialer
	transport     *http.Transport // the template of each probe's transport
}

var _ probes.Prober = (*Prober)(nil)

// New validates cfg and returns a prober.
func New(cfg Config) (*Prober, error) {
	if err := validService(cfg.Service); err != nil {
		return nil, err
	}
	p := &Prober{scheme: "http", dialer: cfg.Dialer}
	p.subjectPrefix = "gRPC health of the server on "
	if cfg.Service != "" {
		// Cut, so that a long name leaves room for the verdict.
		p.subjectPrefix = fmt.Sprintf("gRPC health of service %q on ", cut(cfg.Service, maxServiceInMessageBytes))
	}
	var err error
	if p.header, err = buildHeader(cfg.Metadata, cfg.UserAgent); err != nil {
		return nil, err
	}
	serverName := ""
	if cfg.ServerName != "" {
		if p.authority, serverName, err = parseServerName(cfg.ServerName); err != nil {
			return nil, err
		}
	}
	if p.tls, err = tlsConfig(cfg, serverName); err != nil {
		return nil, err
	}
	if p.dialer == nil {
		// As the probes package's default: keep-alive is pointless on a
		// connection that lives for one probe.
		p.dialer = &net.Dialer{KeepAlive: -1}
	}
	p.body = appendRequest(nil, cfg.Service)

	protocols := new(http.Protocols)
	p.transport = &http.Transport{
		Proxy:                  nil,  // probes go straight to the pod, whatever HTTPS_PROXY says
		DisableKeepAlives:      true, // one connection per probe, closed with the response body
		DisableCompression:     true,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		Protocols:              protocols,
		HTTP2: &http.HTTP2Config{
			MaxReadFrameSize:              maxReadFrameBytes,
			MaxReceiveBufferPerStream:     maxStreamWindow,
			MaxReceiveBufferPerConnection: maxConnWindow,
			MaxDecoderHeaderTableSize:     maxHeaderTableSize,
		},
	}
	if p.tls != nil {
		p.scheme = "https"
		protocols.SetHTTP2(true)
		// The prober does the handshake itself, to insist on ALPN h2:
		// the transport would fall back to HTTP/1.1 silently.
		p.transport.DialTLSContext = p.dialTLS
	} else {
		protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		p.transport.DialContext = p.dial
	}
	return p, nil
}

// Probe calls Check on target and judges the answer (see the package
// documentation for the reasons).
func (p *Prober) Probe(ctx context.Context, target probes.Target) probes.Result {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		return fail(start, probes.ReasonInvalidTarget, fmt.Errorf("%s: %w", p.subject(target), err))
	}
	status, err := p.check(ctx, target)
	if err != nil {
		return fail(start, reasonOf(ctx, err), fmt.Errorf("%s: %w", p.subject(target), err))
	}
	return pass(start, p.subject(target)+": "+status.String())
}

// subject starts the messages of a probe of target.
func (p *Prober) subject(target probes.Target) string {
	return p.subjectPrefix + target.Addr()
}

// check makes the call on a connection of its own, closed before it
// returns, and returns SERVING or why not.
func (p *Prober) check(ctx context.Context, target probes.Target) (ServingStatus, error) {
	addr := target.Addr()
	state := &probeState{probe: ctx}
	ctx = context.WithValue(ctx, probeStateKey{}, state)
	defer state.finish()

	header := make(http.Header, len(p.header)+1)
	for k, v := range p.header {
		header[k] = v // shared values: the transport only reads them
	}
	if deadline, ok := ctx.Deadline(); ok {
		header["Grpc-Timeout"] = []string{encodeTimeout(time.Until(deadline))}
	}
	req := (&http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: p.scheme, Host: addr, Path: checkPath},
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(p.body)),
		ContentLength: int64(len(p.body)),
		Host:          p.authority,
	}).WithContext(ctx)
	// A transport of its own and its RoundTrip, not a ClientConn of
	// Transport.NewClientConn: with keep-alives off it dials a connection
	// for this request alone, while every connection closed through a
	// ClientConn stayed reachable (12 KB each, Go 1.26: 500 MiB in an
	// agent probing 3,000 times a second). Its own, since a shared
	// transport sends concurrent requests to one address on one HTTP/2
	// connection. The transport dials in a goroutine of its own without
	// the request's deadline: the dialers bound it again, and finish
	// closes the connection however the transport ends (a late dial, a
	// retry, a connection left in its pool).
	resp, err := p.transport.Clone().RoundTrip(req)
	if err != nil {
		return 0, state.explain(ctx, err, false)
	}
	defer resp.Body.Close()
	status, err := judge(resp)
	return status, state.explain(ctx, err, true)
}

// encodeTimeout formats d as a grpc-timeout value: at most 8 digits and a
// unit, rounded up so that the server never gives up before the probe.
func encodeTimeout(d time.Duration) string {
	const maxValue = 1e8 - 1
	d = max(d, time.Nanosecond)
	for _, u := range []struct {
		unit time.Duration
		name string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}} {
		v := d / u.unit
		if d%u.unit != 0 {
			v++
		}
		if v <= maxValue {
			return strconv.FormatInt(int64(v), 10) + u.name
		}
	}
	return "99999999H"
}

// begin starts a probe as the probes package's probers do: it records the
// start time, applies probes.DefaultTimeout when ctx has no deadline, and
// validates the target.
func begin(ctx context.Context, t probes.Target) (context.Context, context.CancelFunc, time.Time, error) {
	start := time.Now()
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, probes.DefaultTimeout)
	}
	return ctx, cancel, start, t.Validate()
}

func pass(start time.Time, msg string) probes.Result {
	return probes.Result{Status: probes.Success, Reason: probes.ReasonOK, Message: probes.CutMessage(msg), Latency: time.Since(start)}
}

func fail(start time.Time, reason probes.Reason, err error) probes.Result {
	return probes.Result{Status: probes.Failure, Reason: reason, Message: probes.CutMessage(err.Error()), Latency: time.Since(start), Err: err}
}
