package grpchealth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/swh-dev/swh/probes"
)

// Bounds on the text kept in errors and messages: the server's, and the
// service name, which a long one would otherwise push the verdict out of a
// message.
const (
	maxStatusMessageBytes    = 256 // of grpc-message
	maxContentTypeBytes      = 64  // of a wrong content-type
	maxServiceInMessageBytes = 128 // of Config.Service
)

// StatusError is the error of a probe whose call ended with a gRPC status
// other than OK.
type StatusError struct {
	Code Code
	// Message is the grpc-message the server sent, percent-decoded and
	// cut to a few hundred bytes; it may be empty.
	Message string
}

func (e *StatusError) Error() string {
	s := "status " + strconv.FormatUint(uint64(e.Code), 10)
	if e.Code <= Unauthenticated {
		s = "status " + e.Code.String() + " (" + strconv.FormatUint(uint64(e.Code), 10) + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// NotServingError is the error of a probe whose health service answered,
// but not SERVING.
type NotServingError struct {
	Status ServingStatus
}

func (e *NotServingError) Error() string { return e.Status.String() }

// protocolError is a response that is not what gRPC's HTTP/2 protocol
// says; its reason is probes.ReasonProtocol.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protocolErrorf(format string, args ...any) error {
	return &protocolError{fmt.Sprintf(format, args...)}
}

// tlsError is a failed TLS handshake, or a connection closed after a
// TLS 1.3 handshake in which the server asked for a client certificate
// (see probeState.explain); its reason is probes.ReasonTLS, unless the
// probe timed out or was canceled.
type tlsError struct {
	err            error
	afterHandshake bool
}

func (e *tlsError) Error() string {
	if e.afterHandshake {
		return "the server closed the connection after asking for a client certificate (refused it?): " + e.err.Error()
	}
	return "TLS handshake: " + e.err.Error()
}

func (e *tlsError) Unwrap() error { return e.err }

// judge reads the response of the Check call and returns SERVING, or the
// error saying what was found instead.
func judge(resp *http.Response) (ServingStatus, error) {
	contentType := resp.Header.Get("Content-Type")
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 || !isGRPCContentType(contentType) {
		return 0, protocolErrorf("not a gRPC response: %s %d, content type %q", resp.Proto, resp.StatusCode, cut(contentType, maxContentTypeBytes))
	}
	if _, ok := resp.Header["Grpc-Status"]; ok {
		// Trailers-Only: the status comes in the only header block,
		// without a message.
		return judgeStatus(resp.Header, nil)
	}
	buf := make([]byte, MaxResponseMessageBytes)
	msg, err := readMessage(resp.Body, buf)
	switch {
	case err == errNoMessage:
		msg = nil
	case err != nil:
		return 0, err
	default:
		// The body must end here, for the trailers to arrive.
		var more [1]byte
		switch _, err := io.ReadFull(resp.Body, more[:]); err {
		case nil:
			return 0, protocolErrorf("the response has more than one message")
		case io.EOF:
		default:
			return 0, err
		}
	}
	return judgeStatus(resp.Trailer, msg)
}

// judgeStatus reads grpc-status and grpc-message from fields (the trailers,
// or the header of a Trailers-Only response) and, for OK, the serving
// status in msg.
func judgeStatus(fields http.Header, msg []byte) (ServingStatus, error) {
	values := fields["Grpc-Status"]
	if len(values) != 1 {
		return 0, protocolErrorf("the response has %d grpc-status fields, not one", len(values))
	}
	code, err := parseCode(values[0])
	if err != nil {
		return 0, err
	}
	if code != OK {
		return 0, &StatusError{Code: code, Message: decodeStatusMessage(fields.Get("Grpc-Message"))}
	}
	if msg == nil {
		return 0, protocolErrorf("status OK without a HealthCheckResponse")
	}
	status, err := parseResponse(msg)
	if err != nil {
		return 0, &protocolError{err.Error()}
	}
	if status != Serving {
		return 0, &NotServingError{status}
	}
	return status, nil
}

// isGRPCContentType reports whether a response's content type is gRPC's
// with the protobuf encoding: "application/grpc" or
// "application/grpc+proto", with parameters or not.
func isGRPCContentType(s string) bool {
	mediaType, _, err := mime.ParseMediaType(s)
	return err == nil && (mediaType == "application/grpc" || mediaType == "application/grpc+proto")
}

// reasonOf maps the error of a probe to its reason.
func reasonOf(ctx context.Context, err error) probes.Reason {
	var (
		statusErr  *StatusError
		servingErr *NotServingError
		protoErr   *protocolError
		tlsErr     *tlsError
	)
	switch {
	case errors.As(err, &servingErr):
		if servingErr.Status == ServiceUnknown {
			return probes.ReasonGRPCServiceUnknown
		}
		return probes.ReasonGRPCNotServing
	case errors.As(err, &statusErr):
		switch statusErr.Code {
		case NotFound: // what grpc-go's health server answers for an unknown service
			return probes.ReasonGRPCServiceUnknown
		case Unimplemented:
			return probes.ReasonGRPCUnimplemented
		case Unauthenticated:
			return probes.ReasonAuth
		}
		return probes.ReasonGRPCStatus
	case errors.As(err, &protoErr):
		return probes.ReasonProtocol
	}
	reason := probes.Classify(ctx, err)
	switch {
	case reason == probes.ReasonTimeout || reason == probes.ReasonCanceled:
		return reason
	case errors.As(err, &tlsErr) && strings.Contains(err.Error(), "no application protocol"):
		// The server's alert for a client offering no protocol it
		// speaks: it has no HTTP/2 (ALPN h2).
		return probes.ReasonProtocol
	case errors.As(err, &tlsErr):
		// The server closing the connection during the handshake is a
		// failed handshake too: a plaintext server does that.
		return probes.ReasonTLS
	case reason != probes.ReasonError:
		return reason
	}
	// net/http does not export its HTTP/2 errors: read their text.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "GOAWAY"), strings.Contains(msg, "received from peer"),
		strings.Contains(msg, "http2: client connection lost"),
		// The connection closed before the request was sent, for a
		// cause the client dropped (probeConn keeps it when it can).
		closedBeforeRequest(err):
		// The server closed the connection or reset the stream.
		return probes.ReasonReset
	case strings.Contains(msg, "http2:"), strings.HasPrefix(msg, "connection error:"),
		strings.HasPrefix(msg, "stream error:"), strings.Contains(msg, "malformed HTTP"):
		return probes.ReasonProtocol
	}
	return reason
}

// decodeStatusMessage percent-decodes a grpc-message (gRPC's HTTP/2
// protocol spec: "%" followed by two hex digits is a byte; anything else is
// kept as it is) and cuts it.
func decodeStatusMessage(s string) string {
	s = cut(s, 3*maxStatusMessageBytes) // enough for the bytes kept below
	if strings.IndexByte(s, '%') >= 0 {
		b := make([]byte, 0, len(s))
		for i := 0; i < len(s); i++ {
			if s[i] == '%' && i+2 < len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
					b = append(b, byte(v))
					i += 2
					continue
				}
			}
			b = append(b, s[i])
		}
		s = string(b)
	}
	return cut(strings.ToValidUTF8(s, "\uFFFD"), maxStatusMessageBytes)
}

// cut bounds s to n bytes on a rune boundary, marking the cut with "…".
// (probes.CutMessage then makes the whole message printable.)
func cut(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
