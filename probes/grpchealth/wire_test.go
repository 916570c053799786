package grpchealth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"
)

// parseTimeout reads a grpc-timeout value, as a server does.
func parseTimeout(s string) (time.Duration, error) {
	units := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}
	if len(s) < 2 || len(s) > 9 {
		return 0, fmt.Errorf("grpc-timeout %q: bad length", s)
	}
	unit, ok := units[s[len(s)-1]]
	v, err := strconv.ParseUint(s[:len(s)-1], 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("grpc-timeout %q: bad value or unit", s)
	}
	return time.Duration(v) * unit, nil
}

func TestAppendRequest(t *testing.T) {
	long := strings.Repeat("s", 200) // a 2-byte length
	for _, tc := range []struct {
		service string
		want    []byte // nil: check the round trip only
	}{
		{"", []byte{0, 0, 0, 0, 0}},
		{"foo", []byte{0, 0, 0, 0, 5, 0x0a, 3, 'f', 'o', 'o'}},
		{"grpc.health.v1.Health", nil},
		{"é✓", []byte{0, 0, 0, 0, 7, 0x0a, 5, 0xc3, 0xa9, 0xe2, 0x9c, 0x93}},
		{long, append([]byte{0, 0, 0, 0, 203, 0x0a, 0xc8, 0x01}, long...)},
		{strings.Repeat("x", MaxServiceBytes), nil},
	} {
		got := appendRequest(nil, tc.service)
		if tc.want != nil && !bytes.Equal(got, tc.want) {
			t.Errorf("appendRequest(%.20q) = % x, want % x", tc.service, got, tc.want)
		}
		service, err := parseRequestFrame(got)
		if err != nil || service != tc.service {
			t.Errorf("appendRequest(%.20q) = % .20x, reads back as %.20q, %v", tc.service, got, service, err)
		}
	}
}

func TestParseResponse(t *testing.T) {
	minusOne := []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}
	for _, tc := range []struct {
		name string
		msg  []byte
		want ServingStatus
		err  string // a part of the error; "" for none
	}{
		{"empty: the zero value", nil, Unknown, ""},
		{"SERVING", []byte{0x08, 1}, Serving, ""},
		{"NOT_SERVING", []byte{0x08, 2}, NotServing, ""},
		{"SERVICE_UNKNOWN", []byte{0x08, 3}, ServiceUnknown, ""},
		{"UNKNOWN explicitly", []byte{0x08, 0}, Unknown, ""},
		{"undefined value", []byte{0x08, 0x96, 0x01}, 150, ""},
		{"negative value", minusOne, -1, ""},
		{"non-minimal varint", []byte{0x08, 0x81, 0x80, 0x00}, Serving, ""},
		{"last status wins", []byte{0x08, 2, 0x08, 1}, Serving, ""},
		{"unknown fields of every wire type", []byte{
			0x10, 0x05, // 2: varint
			0x19, 1, 2, 3, 4, 5, 6, 7, 8, // 3: fixed64
			0x22, 0x02, 0xff, 0xff, // 4: bytes
			0x2d, 1, 2, 3, 4, // 5: fixed32
			0x08, 0x01,
			0xf8, 0xff, 0xff, 0xff, 0x0f, 0x00, // field 2^29-1: varint
		}, Serving, ""},
		{"status as bytes: an unknown field", []byte{0x0a, 1, 1}, Unknown, ""},
		{"status as fixed32: an unknown field", []byte{0x08, 1, 0x0d, 2, 0, 0, 0}, Serving, ""},
		{"truncated tag", []byte{0x80}, 0, "truncated"},
		{"truncated value", []byte{0x08, 0x80}, 0, "truncated"},
		{"truncated varint field", []byte{0x10}, 0, "truncated"},
		{"truncated fixed32", []byte{0x0d, 1, 2, 3}, 0, "truncated"},
		{"truncated fixed64", []byte{0x09, 1, 2, 3, 4, 5, 6, 7}, 0, "truncated"},
		{"length past the end", []byte{0x12, 3, 1, 2}, 0, "truncated"},
		{"length of 2^64-1", []byte{0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 0, "truncated"},
		{"varint over 10 bytes", append(bytes.Repeat([]byte{0x80}, 10), 0x01), 0, "overflows"},
		{"varint over 64 bits", []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 0, "overflows"},
		{"field number 0", []byte{0x00, 0x01}, 0, "field number 0"},
		{"field number 2^29", []byte{0x80, 0x80, 0x80, 0x80, 0x10, 0x00}, 0, "field number 536870912"},
		{"start group", []byte{0x0b, 0x0c}, 0, "wire type 3"},
		{"end group", []byte{0x0c}, 0, "wire type 4"},
		{"wire type 6", []byte{0x0e}, 0, "wire type 6"},
		{"wire type 7", []byte{0x0f}, 0, "wire type 7"},
	} {
		got, err := parseResponse(tc.msg)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: parseResponse(% x) = %v, %v; want %v", tc.name, tc.msg, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: parseResponse(% x) = %v, %v; want an error with %q", tc.name, tc.msg, got, err, tc.err)
		}
	}
}

func TestReadMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    io.Reader
		want []byte
		err  string // "" for none
	}{
		{"one message", bytes.NewReader(frame(0, []byte{8, 1})), []byte{8, 1}, ""},
		{"empty message", bytes.NewReader(frame(0, nil)), []byte{}, ""},
		{"the largest message", bytes.NewReader(frame(0, make([]byte, MaxResponseMessageBytes))), make([]byte, MaxResponseMessageBytes), ""},
		{"byte by byte", iotest.OneByteReader(bytes.NewReader(frame(0, []byte{8, 1}))), []byte{8, 1}, ""},
		{"no message", bytes.NewReader(nil), nil, "no message"},
		{"4 bytes of prefix", bytes.NewReader([]byte{0, 0, 0, 0}), nil, "(4 of 5 bytes)"},
		{"compressed", bytes.NewReader(frame(1, []byte{8, 1})), nil, "compressed"},
		{"flag 2", bytes.NewReader(frame(2, []byte{8, 1})), nil, "invalid compressed flag 2"},
		// The length is refused before the message is read: the reader
		// would fail.
		{"1 GiB declared", io.MultiReader(bytes.NewReader([]byte{0, 0x40, 0, 0, 0}), iotest.ErrReader(errors.New("read past the prefix"))),
			nil, "declares 1073741824 bytes, more than 1024"},
		{"4 GiB declared", bytes.NewReader([]byte{0, 0xff, 0xff, 0xff, 0xff}), nil, "declares 4294967295 bytes"},
		{"1025 bytes declared", bytes.NewReader(frame(0, make([]byte, MaxResponseMessageBytes+1))), nil, "declares 1025 bytes"},
		{"truncated message", bytes.NewReader(frame(0, []byte{8, 1})[:6]), nil, "within a message of 2 bytes"},
		// Not the server's protocol: the connection's errors, as they are.
		{"read error", iotest.ErrReader(io.ErrClosedPipe), nil, io.ErrClosedPipe.Error()},
		{"connection lost in the prefix", io.MultiReader(bytes.NewReader([]byte{0, 0}), iotest.ErrReader(io.ErrUnexpectedEOF)), nil, "unexpected EOF"},
		{"connection lost in the message", io.MultiReader(bytes.NewReader([]byte{0, 0, 0, 0, 2, 8}), iotest.ErrReader(io.ErrUnexpectedEOF)), nil, "unexpected EOF"},
	} {
		got, err := readMessage(tc.r, make([]byte, MaxResponseMessageBytes))
		var protoErr *protocolError
		if wantProto := !strings.Contains(tc.err, "unexpected EOF") && tc.err != io.ErrClosedPipe.Error(); err != nil && errors.As(err, &protoErr) != wantProto {
			t.Errorf("%s: readMessage error %v (%T): a protocol error is %v, want %v", tc.name, err, err, !wantProto, wantProto)
		}
		switch {
		case tc.err == "" && (err != nil || !bytes.Equal(got, tc.want)):
			t.Errorf("%s: readMessage = % .16x, %v; want % .16x", tc.name, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: readMessage = % .16x, %v; want an error with %q", tc.name, got, err, tc.err)
		}
	}
}

func TestEncodeTimeout(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "1n"},
		{0, "1n"},
		{1, "1n"},
		{99_999_999, "99999999n"},
		{100_000_000, "100000u"},
		{100_000_001, "100001u"}, // rounded up
		{time.Second, "1000000u"},
		{100 * time.Second, "100000m"},
		{100 * time.Hour, "360000S"},
		{time.Duration(1<<63 - 1), "2562048H"},
	} {
		got := encodeTimeout(tc.d)
		if got != tc.want {
			t.Errorf("encodeTimeout(%v) = %q, want %q", tc.d, got, tc.want)
		}
		if back, err := parseTimeout(got); err != nil || (back < tc.d && tc.d < time.Duration(1<<63-1)) {
			t.Errorf("encodeTimeout(%v) = %q reads back as %v, %v", tc.d, got, back, err)
		}
	}
}

func TestDecodeStatusMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"a%20b%25c", "a b%c"},
		{"%e2%9c%93 done", "✓ done"},
		{"%zz %2 %", "%zz %2 %"},
		{"%ff%fe", "\uFFFD"}, // invalid UTF-8, one replacement for the run
		{strings.Repeat("%41", 300), strings.Repeat("A", maxStatusMessageBytes-3) + "…"},
	} {
		if got := decodeStatusMessage(tc.in); got != tc.want {
			t.Errorf("decodeStatusMessage(%.30q) = %.40q, want %.40q", tc.in, got, tc.want)
		}
	}
}

// errorString is an error as a fmt.Stringer.
type errorString struct{ error }

func (e errorString) String() string { return e.Error() }

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		got  fmt.Stringer
		want string
	}{
		{OK, "OK"}, {Code(1), "CANCELLED"}, {NotFound, "NOT_FOUND"}, {Unimplemented, "UNIMPLEMENTED"},
		{Code(14), "UNAVAILABLE"}, {Unauthenticated, "UNAUTHENTICATED"}, {Code(17), "Code(17)"},
		{Unknown, "UNKNOWN"}, {Serving, "SERVING"}, {NotServing, "NOT_SERVING"},
		{ServiceUnknown, "SERVICE_UNKNOWN"}, {ServingStatus(-1), "ServingStatus(-1)"},
		{errorString{&StatusError{Code: 5, Message: "no"}}, "status NOT_FOUND (5): no"},
		{errorString{&StatusError{Code: 99}}, "status 99"},
		{errorString{&NotServingError{Status: NotServing}}, "NOT_SERVING"},
	} {
		if s := tc.got.String(); s != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.got, s, tc.want)
		}
	}
}

// FuzzParseResponse feeds the response decoder arbitrary messages: it must
// not panic, and must consume a message it accepts exactly (a status
// appended after it is the one read; one before it is overridden by its
// own).
func FuzzParseResponse(f *testing.F) {
	for _, seed := range [][]byte{
		nil, {0x08, 1}, {0x08, 2}, {0x08, 0x96, 0x01}, {0x10, 5, 0x08, 1},
		{0x19, 1, 2, 3, 4, 5, 6, 7, 8}, {0x22, 2, 0xff, 0xff}, {0x2d, 1, 2, 3, 4},
		{0x80}, {0x12, 3, 1}, {0x0b}, {0x00}, bytes.Repeat([]byte{0xff}, 11),
		{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		status, err := parseResponse(msg)
		if err != nil {
			if status != 0 {
				t.Errorf("parseResponse(% x) = %v with error %v", msg, status, err)
			}
			return
		}
		// A message that parses ends on a field boundary: a field
		// appended after it is read as such.
		if got, err := parseResponse(append(msg[:len(msg):len(msg)], 0x08, 0x03)); err != nil || got != ServiceUnknown {
			t.Errorf("parseResponse(% x + status 3) = %v, %v", msg, got, err)
		}
		if got, err := parseResponse(append([]byte{0x08, 0x7f}, msg...)); err != nil || (got != status && got != 0x7f) {
			t.Errorf("parseResponse(status 127 + % x) = %v, %v; alone it is %v", msg, got, err, status)
		}
	})
}

// FuzzReadMessage feeds the message reader arbitrary bodies: it must not
// panic, must never read past the message it returns nor past the prefix
// of a message it refuses, and must return exactly the declared bytes.
func FuzzReadMessage(f *testing.F) {
	for _, seed := range [][]byte{
		nil, {0}, {0, 0, 0, 0}, frame(0, nil), frame(0, []byte{8, 1}), frame(1, []byte{8, 1}),
		frame(7, nil), {0, 0x40, 0, 0, 0, 1}, {0, 0, 0, 4, 1, 8}, frame(0, make([]byte, MaxResponseMessageBytes)),
		append(frame(0, []byte{8, 1}), 0, 0),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := bytes.NewReader(body)
		msg, err := readMessage(r, make([]byte, MaxResponseMessageBytes))
		consumed := len(body) - r.Len()
		if err != nil {
			if msg != nil || consumed > frameHeaderLen+MaxResponseMessageBytes {
				t.Errorf("readMessage(% .16x) = % .16x, %v after %d bytes", body, msg, err, consumed)
			}
			valid := len(body) >= 5 && body[0] == 0 && int(body[1])<<24|int(body[2])<<16|int(body[3])<<8|int(body[4]) <= min(len(body)-5, MaxResponseMessageBytes)
			if valid {
				t.Errorf("readMessage(% .16x) refused a valid message: %v", body, err)
			}
			return
		}
		if consumed != 5+len(msg) || !bytes.Equal(msg, body[5:consumed]) || len(msg) > MaxResponseMessageBytes {
			t.Errorf("readMessage(% .16x) = % .16x after %d bytes", body, msg, consumed)
		}
	})
}

// FuzzAppendRequest checks that every request encodes as a server
// decodes it.
func FuzzAppendRequest(f *testing.F) {
	for _, seed := range []string{"", "foo", "grpc.health.v1.Health", "é✓", strings.Repeat("x", 300)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, service string) {
		if validService(service) != nil {
			return
		}
		if got, err := parseRequestFrame(appendRequest(nil, service)); err != nil || got != service {
			t.Errorf("appendRequest(%q) reads back as %q, %v", service, got, err)
		}
	})
}

// FuzzDecodeStatusMessage checks that a server's grpc-message always
// becomes bounded UTF-8.
func FuzzDecodeStatusMessage(f *testing.F) {
	for _, seed := range []string{"", "a%20b", "%zz%", "%ff", strings.Repeat("%e2%9c%93", 200)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := decodeStatusMessage(s)
		if len(got) > maxStatusMessageBytes || !utf8.ValidString(got) {
			t.Errorf("decodeStatusMessage(%q) = %q", s, got)
		}
	})
}
