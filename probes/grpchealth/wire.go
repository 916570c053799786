package grpchealth

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// This file is the wire format of the one call the prober makes: gRPC's
// length-prefixed messages and the two protobuf messages of
// grpc.health.v1 (health.proto), encoded and decoded by hand. The decoder
// takes bytes from the server and is fuzzed (wire_test.go).

// Bounds on what a probe reads of a response.
const (
	// MaxResponseMessageBytes is the largest HealthCheckResponse a probe
	// accepts: a frame that declares more fails the probe with
	// probes.ReasonProtocol before any of it is read. The message needs 2
	// bytes; the rest leaves room for fields a newer server may add.
	MaxResponseMessageBytes = 1 << 10
	// MaxResponseHeaderBytes bounds the response's header and trailer
	// fields together (HPACK-decoded, as HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE
	// counts them); past it the probe fails with probes.ReasonProtocol.
	MaxResponseHeaderBytes = 16 << 10
	// MaxServiceBytes bounds Config.Service.
	MaxServiceBytes = 1 << 10
)

// frameHeaderLen is the length of a gRPC message prefix: a compressed-flag
// byte and a 4-byte big-endian length.
const frameHeaderLen = 5

// ServingStatus is the status field of a grpc.health.v1.HealthCheckResponse.
type ServingStatus int32

// The serving statuses of health.proto. A server may send other values
// (an enum is open in proto3); the prober reads them as not serving.
const (
	Unknown        ServingStatus = 0
	Serving        ServingStatus = 1
	NotServing     ServingStatus = 2
	ServiceUnknown ServingStatus = 3 // used by Watch only, but a server may answer it to Check
)

// String returns the name health.proto gives s, e.g. "NOT_SERVING", or
// "ServingStatus(7)" for a value it does not define.
func (s ServingStatus) String() string {
	switch s {
	case Unknown:
		return "UNKNOWN"
	case Serving:
		return "SERVING"
	case NotServing:
		return "NOT_SERVING"
	case ServiceUnknown:
		return "SERVICE_UNKNOWN"
	}
	return "ServingStatus(" + strconv.FormatInt(int64(s), 10) + ")"
}

// Code is a gRPC status code, as the grpc-status trailer carries it.
type Code uint32

// The gRPC status codes the prober tells apart (see Probe); the others
// are named by String.
const (
	OK              Code = 0
	NotFound        Code = 5
	Unimplemented   Code = 12
	Unauthenticated Code = 16
)

// String returns the code's name in gRPC's spelling, e.g. "NOT_FOUND", or
// "Code(42)" for a code gRPC does not define.
func (c Code) String() string {
	names := [...]string{
		"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
		"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
		"FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
		"INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
	}
	if int(c) < len(names) {
		return names[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// parseCode reads a grpc-status value: a decimal number, nothing else.
func parseCode(s string) (Code, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, protocolErrorf("grpc-status %q is not a number", cut(s, 32))
	}
	return Code(n), nil
}

// appendRequest appends the body of the Check call: one uncompressed gRPC
// message holding HealthCheckRequest{service}. An empty service is the
// empty message, as a protobuf encoder writes it.
func appendRequest(dst []byte, service string) []byte {
	msgLen := 0
	if service != "" {
		msgLen = 1 + varintLen(uint64(len(service))) + len(service)
	}
	dst = append(dst, 0) // not compressed
	dst = binary.BigEndian.AppendUint32(dst, uint32(msgLen))
	if service != "" {
		dst = append(dst, 1<<3|wireBytes) // field 1 (service), length-delimited
		dst = binary.AppendUvarint(dst, uint64(len(service)))
		dst = append(dst, service...)
	}
	return dst
}

func varintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// readMessage reads the one gRPC message of a response body into buf
// (whose capacity must be at least MaxResponseMessageBytes) and returns it.
// It checks the prefix before reading the message: a compressed message
// or a length over MaxResponseMessageBytes fails without reading further.
// It returns errNoMessage when the body ends before any byte.
func readMessage(r io.Reader, buf []byte) ([]byte, error) {
	var hdr [frameHeaderLen]byte
	switch n, err := readFull(r, hdr[:]); {
	case n == 0 && err == io.EOF:
		return nil, errNoMessage
	case err == io.EOF:
		return nil, protocolErrorf("the response ends within a message prefix (%d of 5 bytes)", n)
	case err != nil:
		return nil, err
	}
	switch hdr[0] {
	case 0:
	case 1:
		// The request has no grpc-accept-encoding: a server may not
		// compress, and the prober would have nothing to decompress with.
		return nil, protocolErrorf("the response message is compressed, though the request accepted no compression")
	default:
		return nil, protocolErrorf("the response message has an invalid compressed flag %d", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxResponseMessageBytes {
		return nil, protocolErrorf("the response message declares %d bytes, more than %d", n, MaxResponseMessageBytes)
	}
	msg := buf[:n]
	if _, err := readFull(r, msg); err == io.EOF {
		return nil, protocolErrorf("the response ends within a message of %d bytes", n)
	} else if err != nil {
		return nil, err
	}
	return msg, nil
}

// readFull is io.ReadFull without its translation of errors: io.EOF means
// the body ended cleanly (HTTP/2's END_STREAM), whereas net/http reports
// a connection lost mid-body as io.ErrUnexpectedEOF, a reset.
func readFull(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil && n < len(buf) {
			return n, err
		}
	}
	return n, nil
}

// errNoMessage is readMessage's error for a body without a message.
var errNoMessage = protocolErrorf("the response has no message")

// Protobuf wire types (protobuf's encoding guide).
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// field is one protobuf field of a message being decoded.
type field struct {
	num      uint64 // field number, at least 1
	wireType uint8
	varint   uint64 // the value of a varint field
	bytes    []byte // the value of a length-delimited field (within the message)
}

var (
	errTruncated     = errors.New("truncated protobuf message")
	errVarintOverlow = errors.New("protobuf varint overflows 64 bits")
)

// nextField decodes the field at the start of b and returns it and the
// bytes after it. Fixed-size values are skipped; groups (wire types 3 and 4,
// deprecated, never in health.proto) and field number 0 are errors.
func nextField(b []byte) (field, []byte, error) {
	tag, b, err := uvarint(b)
	if err != nil {
		return field{}, nil, err
	}
	f := field{num: tag >> 3, wireType: uint8(tag & 7)}
	if f.num == 0 || f.num > 1<<29-1 {
		return field{}, nil, fmt.Errorf("invalid protobuf field number %d", f.num)
	}
	switch f.wireType {
	case wireVarint:
		f.varint, b, err = uvarint(b)
		return f, b, err
	case wireFixed64, wireFixed32:
		n := 8
		if f.wireType == wireFixed32 {
			n = 4
		}
		if len(b) < n {
			return field{}, nil, errTruncated
		}
		return f, b[n:], nil
	case wireBytes:
		var n uint64
		if n, b, err = uvarint(b); err != nil {
			return field{}, nil, err
		}
		if n > uint64(len(b)) {
			return field{}, nil, errTruncated
		}
		f.bytes = b[:n]
		return f, b[n:], nil
	}
	return field{}, nil, fmt.Errorf("unsupported protobuf wire type %d in field %d", f.wireType, f.num)
}

// uvarint decodes a varint of at most 10 bytes at the start of b.
func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	switch {
	case n > 0:
		return v, b[n:], nil
	case n == 0:
		return 0, nil, errTruncated
	default:
		return 0, nil, errVarintOverlow
	}
}

// parseResponse decodes HealthCheckResponse{ServingStatus status = 1}. As
// protobuf decoders do, it skips unknown fields, reads a status field of
// another wire type as unknown, and keeps the last status of several; a
// message without one is UNKNOWN, the enum's zero value.
func parseResponse(b []byte) (ServingStatus, error) {
	status := Unknown
	for len(b) > 0 {
		var (
			f   field
			err error
		)
		if f, b, err = nextField(b); err != nil {
			return 0, fmt.Errorf("decoding HealthCheckResponse: %w", err)
		}
		if f.num == 1 && f.wireType == wireVarint {
			// An enum is an int32 on the wire, sign-extended to 64 bits
			// when negative: the low 32 bits are its value.
			status = ServingStatus(int32(f.varint))
		}
	}
	return status, nil
}
