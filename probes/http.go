package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// DefaultMaxBodyBytes is how much of a response body an HTTP probe reads
// before closing the connection. Reading a little lets servers that write
// their whole response before checking the socket finish cleanly; reading
// everything would let a huge or endless body hold the probe.
const DefaultMaxBodyBytes = 10 << 10

// Bounds on what an HTTP probe reads and keeps of a response. The transport
// reads at most maxResponseHeaderBytes of status line and header fields
// (1xx responses included) and the prober at most MaxBodyBytes of the body;
// crypto/tls bounds handshake messages (64 KiB, certificates 256 KiB).
const (
	maxResponseHeaderBytes = 64 << 10
	maxStatusBytes         = 128 // of the status line kept in results
	maxLocationBytes       = 256 // of a redirect's Location kept in results
)

// Header is one HTTP request header field.
type Header struct {
	Name  string
	Value string
}

// HTTPConfig configures an HTTPProber. The zero value probes "GET /" over
// plain HTTP and expects 200-399.
type HTTPConfig struct {
	// Scheme is "http" (the default) or "https", in any case.
	Scheme string
	// Method is "GET" (the default) or "HEAD", in any case.
	Method string
	// Path is the request target, "/" by default. It may carry a query; a
	// missing leading "/" is added. It must not start with "//" (that reads
	// as a host) nor hold a fragment, white space or control characters.
	Path string
	// Host is sent as the Host header and, with https, used as the TLS
	// server name (for SNI and certificate verification). It may carry a
	// port. Empty means the target address, as Kubernetes probes do. A
	// "Host" entry in Headers is the same as setting this field.
	Host string
	// Headers are extra request headers. A User-Agent here replaces
	// UserAgent; an Accept replaces "*/*". Connection, Content-Length and
	// Transfer-Encoding are refused: the prober controls them.
	Headers []Header
	// UserAgent is the User-Agent sent when Headers has none, for a program
	// that knows its own version (the swh agent sends "swh-probe/<agent
	// version>"). Empty means "swh-probe/<version>" with this module's
	// version as the binary records it: "dev" in a build where the go
	// command does not know it (a go.work workspace).
	UserAgent string
	// ExpectedStatusCodes are the statuses that pass, in the syntax of
	// ParseStatusCodes ("200-399", "204"). Empty means 200-399. Redirects
	// are never followed; a 3xx is judged like any other status.
	ExpectedStatusCodes []string
	// CACert is a PEM bundle of the authorities that verify the server
	// (https only). Empty means the system roots.
	CACert []byte
	// InsecureSkipVerify accepts any server certificate (https only; not
	// together with CACert).
	InsecureSkipVerify bool
	// MaxBodyBytes is how much of the body is read and discarded: 0 means
	// DefaultMaxBodyBytes, a negative value means none.
	MaxBodyBytes int64
	// ExpectBody, when set, must match within the first ExpectBodyBytes
	// of the body (decoded from chunked, never decompressed) of a
	// response whose status is expected; else the probe fails with
	// ReasonBodyMismatch. A HEAD request has no body to match.
	ExpectBody *Expect
	// ExpectBodyBytes is how much of the body ExpectBody searches: 0 means
	// DefaultExpectBodyBytes, at most MaxExpectBodyBytes.
	ExpectBodyBytes int
	// Dialer opens the connection; nil means a net.Dialer.
	Dialer Dialer
}

// HTTPProber sends one request per probe, on a fresh connection that it
// closes afterwards (no keep-alive), and passes when the response status is
// expected. It never follows redirects and never uses a proxy from the
// environment.
type HTTPProber struct {
	method    string
	url       url.URL     // scheme, path and query; Host is set per probe
	host      string      // Host header override, "" for the target address
	header    http.Header // shared by every request: the transport only reads it
	codes     StatusCodes
	maxBody   int64
	body      *matcher // nil: the body is not matched
	bodyBytes int      // how much of the body body searches
	transport *http.Transport
}

var _ Prober = (*HTTPProber)(nil)

// NewHTTP validates cfg and returns an HTTP prober.
func NewHTTP(cfg HTTPConfig) (*HTTPProber, error) {
	p := &HTTPProber{maxBody: cfg.MaxBodyBytes, codes: DefaultStatusCodes()}
	if p.maxBody == 0 {
		p.maxBody = DefaultMaxBodyBytes
	}

	scheme := strings.ToLower(cfg.Scheme)
	switch scheme {
	case "":
		scheme = "http"
	case "http", "https":
	default:
		return nil, fmt.Errorf("probes: http: scheme %q is not http or https", cfg.Scheme)
	}
	if scheme == "http" && (len(cfg.CACert) > 0 || cfg.InsecureSkipVerify) {
		return nil, errors.New("probes: http: CACert and InsecureSkipVerify need scheme https")
	}

	p.method = strings.ToUpper(cfg.Method)
	switch p.method {
	case "":
		p.method = http.MethodGet
	case http.MethodGet, http.MethodHead:
	default:
		return nil, fmt.Errorf("probes: http: method %q is not GET or HEAD", cfg.Method)
	}

	target, err := parsePath(cfg.Path)
	if err != nil {
		return nil, err
	}
	p.url = url.URL{Scheme: scheme, Path: target.Path, RawPath: target.RawPath, RawQuery: target.RawQuery}

	p.header, p.host, err = buildHeader(cfg.Headers, cfg.Host, cfg.UserAgent)
	if err != nil {
		return nil, err
	}
	serverName := ""
	if p.host != "" {
		if p.host, serverName, err = parseHost(p.host); err != nil {
			return nil, err
		}
	}

	if len(cfg.ExpectedStatusCodes) > 0 {
		if p.codes, err = parseStatusCodes(cfg.ExpectedStatusCodes); err != nil {
			return nil, fmt.Errorf("probes: http: %w", err)
		}
	}

	if cfg.ExpectBody != nil {
		if p.method == http.MethodHead {
			return nil, errors.New("probes: http: ExpectBody needs method GET: a HEAD response has no body")
		}
		if p.body, err = compileExpect(*cfg.ExpectBody); err != nil {
			return nil, fmt.Errorf("probes: http: ExpectBody: %w", err)
		}
		switch p.bodyBytes = cfg.ExpectBodyBytes; {
		case p.bodyBytes == 0:
			p.bodyBytes = DefaultExpectBodyBytes
		case p.bodyBytes < 0 || p.bodyBytes > MaxExpectBodyBytes:
			return nil, fmt.Errorf("probes: http: ExpectBodyBytes %d out of range 1-%d", cfg.ExpectBodyBytes, MaxExpectBodyBytes)
		}
	}

	var tlsConfig *tls.Config
	if scheme == "https" {
		if tlsConfig, err = httpTLSConfig(cfg, serverName); err != nil {
			return nil, err
		}
	}
	dialer := cfg.Dialer
	if dialer == nil {
		dialer = newDefaultDialer()
	}
	p.transport = &http.Transport{
		Proxy: nil, // probes go straight to the pod, whatever HTTP_PROXY says
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				// The prober closes first (at the end of the body or
				// of the cap), so it would hold the TIME_WAIT.
				resetOnClose(conn)
			}
			return conn, err
		},
		TLSClientConfig:        tlsConfig,
		DisableKeepAlives:      true,
		DisableCompression:     true, // no Accept-Encoding: a body is matched as sent, never decompressed
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return p, nil
}

func parsePath(path string) (*url.URL, error) {
	if path == "" {
		path = "/"
	}
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	if strings.HasPrefix(path, "//") {
		return nil, fmt.Errorf("probes: http: path %q starts with //", path)
	}
	if strings.ContainsFunc(path, func(r rune) bool { return r == '#' || unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return nil, fmt.Errorf("probes: http: path %q holds a fragment, white space or a control character", path)
	}
	u, err := url.ParseRequestURI(path)
	if err != nil {
		return nil, fmt.Errorf("probes: http: path: %w", err)
	}
	return u, nil
}

// parseHost checks a Host value and returns it as sent in the header (IPv6
// literals bracketed) and as a TLS server name (no port, no brackets).
func parseHost(h string) (header, serverName string, err error) {
	bad := func() (string, string, error) {
		return "", "", fmt.Errorf("probes: http: invalid host %q", h)
	}
	if strings.ContainsAny(h, "/?#@\\%") || strings.ContainsFunc(h, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return bad()
	}
	if ip := net.ParseIP(h); ip != nil && strings.Contains(h, ":") {
		return "[" + h + "]", h, nil // bare IPv6 literal
	}
	if inner, ok := strings.CutPrefix(h, "["); ok && strings.HasSuffix(inner, "]") {
		inner = strings.TrimSuffix(inner, "]")
		if ip := net.ParseIP(inner); ip == nil || !strings.Contains(inner, ":") {
			return bad()
		}
		return h, inner, nil // bracketed IPv6 literal without a port
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.ContainsAny(h, "[]:") {
			return bad()
		}
		return h, h, nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return bad()
	}
	return h, host, nil
}

func buildHeader(fields []Header, host, userAgent string) (http.Header, string, error) {
	if strings.ContainsAny(userAgent, "\r\n\x00") {
		return nil, "", errors.New("probes: http: UserAgent holds CR, LF or NUL")
	}
	if userAgent == "" {
		userAgent = defaultUserAgent()
	}
	h := make(http.Header, len(fields)+2)
	for _, f := range fields {
		if !isToken(f.Name) {
			return nil, "", fmt.Errorf("probes: http: invalid header name %q", f.Name)
		}
		if strings.ContainsAny(f.Value, "\r\n\x00") {
			return nil, "", fmt.Errorf("probes: http: header %s: value holds CR, LF or NUL", f.Name)
		}
		name := http.CanonicalHeaderKey(f.Name)
		switch name {
		case "Host":
			if host != "" && host != f.Value {
				return nil, "", errors.New("probes: http: Host is set both in Host and in Headers")
			}
			host = f.Value
			continue
		case "Connection", "Content-Length", "Transfer-Encoding":
			return nil, "", fmt.Errorf("probes: http: header %s is controlled by the prober", name)
		}
		h.Add(name, f.Value)
	}
	if _, ok := h["User-Agent"]; !ok {
		h.Set("User-Agent", userAgent)
	}
	if _, ok := h["Accept"]; !ok {
		h.Set("Accept", "*/*")
	}
	return h, host, nil
}

// isToken reports whether s is an RFC 9110 token (a valid field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func httpTLSConfig(cfg HTTPConfig, serverName string) (*tls.Config, error) {
	// An empty ServerName makes the transport use the dialed host, so a
	// certificate for the pod IP verifies without Host.
	tc, err := clientTLSConfig(serverName, cfg.CACert, cfg.InsecureSkipVerify)
	if err != nil {
		return nil, fmt.Errorf("probes: http: %w", err)
	}
	return tc, nil
}

// StatusError is the Err of a result whose HTTP status was not expected.
type StatusError struct {
	Code     int
	Status   string // as received, e.g. "503 Service Unavailable"
	Expected StatusCodes
	Location string // the Location header of a redirect, if any
	Body     string // the start of the body, printable, for diagnosis
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s, expected %s", e.Status, e.Expected)
	if e.Location != "" {
		fmt.Fprintf(&b, ", Location %q", e.Location)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %s", e.Body)
	}
	return b.String()
}

// Probe sends the request to target.
func (p *HTTPProber) Probe(ctx context.Context, target Target) Result {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		return fail(start, ReasonInvalidTarget, err)
	}
	u := p.url
	u.Host = target.Addr() // bracketed IPv6; the path already starts with a single "/"
	req := &http.Request{
		Method:     p.method,
		URL:        &u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     p.header,
		Host:       p.host,
		Close:      true,
	}
	// RoundTrip, not a Client: it follows no redirect and the context
	// bounds the dial, the TLS handshake, the response header and the body.
	resp, err := p.transport.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return fail(start, classifyHTTP(ctx, err), err)
	}
	defer resp.Body.Close()

	var statusErr *StatusError
	read := int64(0)
	if !p.codes.Contains(resp.StatusCode) {
		statusErr = &StatusError{Code: resp.StatusCode, Status: cutText(resp.Status, maxStatusBytes), Expected: p.codes,
			Location: cutText(resp.Header.Get("Location"), maxLocationBytes)}
		if p.maxBody > 0 {
			statusErr.Body, read = bodySnippet(resp.Body, min(p.maxBody, 256))
		}
	}
	var mismatch error
	if statusErr == nil && p.body != nil {
		var n int
		if n, mismatch = p.matchBody(ctx, resp.Body); mismatch != nil && !isMismatch(mismatch) {
			err := fmt.Errorf("reading the body of HTTP %s: %w", resp.Status, mismatch)
			return fail(start, classifyHTTP(ctx, err), err)
		}
		read = int64(n)
	}
	// A body matched as far as it came before the deadline has no more
	// to read.
	if p.maxBody > read && (p.body == nil || ctx.Err() == nil) {
		if _, err := io.CopyN(io.Discard, resp.Body, p.maxBody-read); err != nil && err != io.EOF {
			err = fmt.Errorf("reading the body of HTTP %s: %w", resp.Status, err)
			return fail(start, classifyHTTP(ctx, err), err)
		}
	}
	if statusErr != nil {
		return fail(start, ReasonHTTPStatus, statusErr)
	}
	if mismatch != nil {
		return fail(start, ReasonBodyMismatch, fmt.Errorf("HTTP %s: %w", cutText(resp.Status, maxStatusBytes), mismatch))
	}
	if p.body != nil {
		return pass(start, "HTTP "+cutText(resp.Status, maxStatusBytes)+", body matches")
	}
	return pass(start, "HTTP "+cutText(resp.Status, maxStatusBytes))
}

// matchBody reads up to bodyBytes of body and searches them. It returns
// how many bytes it read and a *MismatchError when they do not match, or
// the read's error. The whole window is read before searching, so that a
// regular expression sees the same bytes however the server chunks them;
// but a body that stops coming (the deadline passes, the connection
// breaks) is searched as far as it came: a match passes, and a mismatch
// is one only when the server stalled rather than broke the connection.
func (p *HTTPProber) matchBody(ctx context.Context, body io.Reader) (int, error) {
	buf := make([]byte, p.bodyBytes)
	n, err := readFull(body, buf)
	buf = buf[:n]
	why := "searched the first " + strconv.Itoa(p.bodyBytes) + " bytes"
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		why = "searched the whole body"
	case p.body.end(buf) >= 0:
		return n, nil
	case ctx.Err() == context.DeadlineExceeded || errors.Is(err, os.ErrDeadlineExceeded):
		// At the deadline net/http closes the connection under the read.
		if n == 0 {
			return n, err
		}
		why = "nothing more of the body arrived before the deadline"
	default:
		return n, err // a body cut short (io.ErrUnexpectedEOF), a reset
	}
	if p.body.end(buf) >= 0 {
		return n, nil
	}
	return n, mismatch(0, p.body, buf, why)
}

// readFull is io.ReadFull, except that it returns io.EOF when the body
// ends before buf is full: io.ReadFull would say io.ErrUnexpectedEOF, which
// is what net/http says of a body cut short of its Content-Length.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func isMismatch(err error) bool {
	var m *MismatchError
	return errors.As(err, &m)
}

// bodySnippet reads up to n bytes and returns them as printable text.
func bodySnippet(r io.Reader, n int64) (string, int64) {
	buf := make([]byte, n)
	got, _ := io.ReadFull(r, buf) // a short or failed read shows up in the next read
	// Invalid UTF-8, a rune cut by the cap included, is dropped.
	s := strings.ToValidUTF8(string(buf[:got]), "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s), int64(got)
}

func classifyHTTP(ctx context.Context, err error) Reason {
	reason := Classify(ctx, err)
	if reason == ReasonError {
		// net/http does not export its protocol errors.
		msg := err.Error()
		if strings.Contains(msg, "malformed HTTP") || strings.Contains(msg, "server response headers exceeded") ||
			strings.Contains(msg, "HTTP/1.x transport connection broken") ||
			// a chunked body's framing (net/http/internal)
			strings.Contains(msg, "header line too long") || strings.Contains(msg, "chunk") {
			return ReasonProtocol
		}
		if strings.HasPrefix(msg, "tls: ") { // crypto/tls's untyped handshake errors
			return ReasonTLS
		}
	}
	return reason
}
