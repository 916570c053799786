package probes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultTimeout bounds a probe whose context carries no deadline. It matches
// the default timeoutSeconds of Kubernetes probes.
const DefaultTimeout = time.Second

// Status is the outcome of one probe.
type Status uint8

// The statuses. The zero value, Unknown, means "no result yet"; probers
// never return it.
const (
	Unknown Status = iota
	Success
	Failure
)

// String returns "unknown", "success" or "failure".
func (s Status) String() string {
	switch s {
	case Success:
		return "success"
	case Failure:
		return "failure"
	default:
		return "unknown"
	}
}

// Reason is a short, stable, machine-readable cause of a result, suitable as
// a metric label. Messages are for humans and may change; reasons do not.
type Reason string

// The reasons. A successful result always carries ReasonOK.
const (
	ReasonOK Reason = "ok"

	// Connection-level reasons, shared by every prober.
	ReasonRefused     Reason = "refused"     // nothing listens on the port (RST to SYN)
	ReasonTimeout     Reason = "timeout"     // the deadline passed (connect, handshake, response or query)
	ReasonCanceled    Reason = "canceled"    // the context was canceled before the probe finished
	ReasonDNS         Reason = "dns"         // the target host name did not resolve
	ReasonReset       Reason = "reset"       // the peer reset or closed the connection mid-probe
	ReasonUnreachable Reason = "unreachable" // no route to the host or network
	ReasonTLS         Reason = "tls"         // TLS handshake or certificate verification failed
	ReasonProtocol    Reason = "protocol"    // the server did not speak the expected protocol

	// HTTP.
	ReasonHTTPStatus   Reason = "http-status"   // the response status is not an expected one
	ReasonBodyMismatch Reason = "body-mismatch" // the response body does not match within the bytes read

	// TCP send/expect scripts.
	ReasonExpectMismatch Reason = "expect-mismatch" // what the server sent does not match a step's expect

	// gRPC health (package probes/grpchealth).
	ReasonGRPCNotServing     Reason = "grpc-not-serving"     // the health service answered NOT_SERVING or UNKNOWN
	ReasonGRPCServiceUnknown Reason = "grpc-service-unknown" // the health service does not know the service name
	ReasonGRPCUnimplemented  Reason = "grpc-unimplemented"   // the server has no grpc.health.v1.Health service
	ReasonGRPCStatus         Reason = "grpc-status"          // the call ended with another gRPC status code

	// Redis (package probes/redis).
	ReasonWrongRole       Reason = "wrong-role"        // the server is not in the role the probe asks for (master, replica)
	ReasonReplicaLinkDown Reason = "replica-link-down" // a replica is not connected to its master, or is still syncing

	// Databases (packages probes/postgresql, probes/mysql, probes/redis).
	ReasonAuth               Reason = "auth"                 // authentication failed (SQLSTATE 28000, 28P01)
	ReasonDBMissing          Reason = "db-missing"           // the database does not exist (3D000)
	ReasonTooManyConnections Reason = "too-many-connections" // no connection slot left (53300)
	ReasonUnavailable        Reason = "unavailable"          // starting up, shutting down or in recovery (57P0x)
	ReasonQueryError         Reason = "query-error"          // the query failed
	ReasonQueryFalse         Reason = "query-false"          // the query's first column is false
	ReasonReplicationLag     Reason = "replication-lag"      // a replica is further behind its primary than allowed

	ReasonInvalidTarget Reason = "invalid-target" // the Target itself is malformed
	ReasonError         Reason = "error"          // anything else; see Message and Err
)

// MaxMessageBytes bounds a Result's Message: probers cut longer messages
// (a server's error text can be long, or hostile) on a UTF-8 boundary and
// end them with "…", and the Scheduler does the same to results of any
// Prober before delivering them, so a message can be stored, logged and put
// into a Kubernetes event (whose note holds 1 KiB) as it is.
const MaxMessageBytes = 1024

// Result says what one probe found.
type Result struct {
	Status  Status
	Reason  Reason
	Message string        // human-readable detail; never empty; at most MaxMessageBytes
	Latency time.Duration // from the start of the probe to its end, close included
	Err     error         // the underlying error of a failure, for errors.Is/As; nil on success
}

// Passed reports whether the result is a success.
func (r Result) Passed() bool { return r.Status == Success }

// String formats the result for logs, e.g. "failure (refused, 1.2ms): dial
// tcp 10.0.0.1:80: connect: connection refused".
func (r Result) String() string {
	return fmt.Sprintf("%s (%s, %s): %s", r.Status, r.Reason, r.Latency, r.Message)
}

// Target is the endpoint one probe checks.
type Target struct {
	// Host is an IP address or a DNS name. IPv6 addresses are written
	// without brackets ("::1"); brackets are added where the syntax needs
	// them.
	Host string
	// Port is the TCP port, 1 to 65535.
	Port int
}

// TargetFrom returns the Target of an address and port.
func TargetFrom(ap netip.AddrPort) Target {
	return Target{Host: ap.Addr().String(), Port: int(ap.Port())}
}

// Addr returns "host:port", with IPv6 hosts bracketed, as net.Dial expects.
func (t Target) Addr() string {
	return net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
}

// String is Addr.
func (t Target) String() string { return t.Addr() }

// Validate reports whether the target can be dialed at all.
func (t Target) Validate() error {
	switch {
	case t.Host == "":
		return errors.New("probes: target host is empty")
	case strings.ContainsAny(t.Host, "[]/@ \t\r\n"):
		// Brackets would be doubled by Addr; '/' and '@' would turn the
		// host into a path or userinfo in URLs and a socket path for pq.
		return fmt.Errorf("probes: invalid target host %q", t.Host)
	case t.Port < 1 || t.Port > 65535:
		return fmt.Errorf("probes: target port %d out of range 1-65535", t.Port)
	}
	return nil
}

// begin starts a probe: it records the start time, applies DefaultTimeout
// when ctx has no deadline, and validates the target.
func begin(ctx context.Context, t Target) (context.Context, context.CancelFunc, time.Time, error) {
	start := time.Now()
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
	}
	return ctx, cancel, start, t.Validate()
}

func pass(start time.Time, msg string) Result {
	return Result{Status: Success, Reason: ReasonOK, Message: CutMessage(msg), Latency: time.Since(start)}
}

func fail(start time.Time, reason Reason, err error) Result {
	return Result{Status: Failure, Reason: reason, Message: CutMessage(err.Error()), Latency: time.Since(start), Err: err}
}

// CutMessage bounds msg to MaxMessageBytes as the probers do with their
// messages: cut on a UTF-8 boundary and ended with "…", invalid UTF-8
// dropped, control characters (a hostile server's bytes) made spaces. The
// Scheduler applies it to the results of any Prober; a Prober written
// elsewhere applies it to the Results it returns to other callers.
func CutMessage(msg string) string { return cutText(msg, MaxMessageBytes) }

// cutText bounds s to n bytes, cutting on a rune boundary and marking the
// cut; invalid UTF-8 is dropped and control characters (a hostile server's
// bytes) become spaces, so the text stays one printable line.
func cutText(s string, n int) string {
	const mark = "…"
	if len(s) > n {
		cut := n - len(mark)
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + mark
	}
	if strings.IndexFunc(s, unicode.IsControl) < 0 && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}
