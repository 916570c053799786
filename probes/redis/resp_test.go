package redis

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// readAll reads every value of data, up to the first error.
func readAll(data []byte) ([]value, error) {
	r := newRESPReader(bytes.NewReader(data))
	var out []value
	for {
		v, err := r.readValue()
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
}

func arr(elems ...value) value { return value{typ: typeArray, elems: append([]value{}, elems...)} }
func num(n int64) value        { return value{typ: typeInteger, num: n} }
func str(s string) value       { return value{typ: typeBulk, str: s} }

// nested returns depth arrays, each holding the next, around ":1".
func nested(depth int) string {
	return strings.Repeat("*1\r\n", depth) + ":1\r\n"
}

// TestReadValue reads one value of every type, and refuses malformed ones
// and those past a bound with a protocolError naming the problem.
func TestReadValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want value
		err  string // a protocolError holding this; "" for none
	}{
		{"simple string", "+OK\r\n", value{typ: typeSimple, str: "OK"}, ""},
		{"empty simple string", "+\r\n", value{typ: typeSimple}, ""},
		{"error", "-ERR boom\r\n", value{typ: typeError, str: "ERR boom"}, ""},
		{"zero", ":0\r\n", num(0), ""},
		{"negative", ":-42\r\n", num(-42), ""},
		{"largest integer", ":9223372036854775807\r\n", num(9223372036854775807), ""},
		{"smallest integer", ":-9223372036854775808\r\n", num(-9223372036854775808), ""},
		{"bulk string", "$5\r\nhello\r\n", str("hello"), ""},
		{"empty bulk string", "$0\r\n\r\n", str(""), ""},
		{"bulk string holding CRLF", "$3\r\na\r\n\r\n", str("a\r\n"), ""},
		{"null bulk string", "$-1\r\n", value{typ: typeBulk, null: true}, ""},
		{"empty array", "*0\r\n", arr(), ""},
		{"null array", "*-1\r\n", value{typ: typeArray, null: true}, ""},
		{"array", "*3\r\n:1\r\n$1\r\nx\r\n+y\r\n", arr(num(1), str("x"), value{typ: typeSimple, str: "y"}), ""},
		{"nested to MaxNesting", nested(MaxNesting), arr(arr(arr(num(1)))), ""},
		{"line of MaxLineBytes", "+" + strings.Repeat("x", MaxLineBytes-1) + "\r\n", value{typ: typeSimple, str: strings.Repeat("x", MaxLineBytes-1)}, ""},
		{"bulk string of MaxBulkBytes", bulk(strings.Repeat("i", MaxBulkBytes)), str(strings.Repeat("i", MaxBulkBytes)), ""},
		{"array of MaxArrayElements", "*64\r\n" + strings.Repeat(":7\r\n", MaxArrayElements), arr(repeatValue(num(7), MaxArrayElements)...), ""},

		{"line without CR", "+OK\n", value{}, "LF without CR"},
		{"empty line", "\r\n", value{}, "empty line"},
		{"RESP3 map", "%1\r\n+a\r\n+b\r\n", value{}, "unknown type '%'"},
		{"RESP3 null", "_\r\n", value{}, "unknown type '_'"},
		{"HTTP", "HTTP/1.1 400 Bad Request\r\n", value{}, "unknown type 'H'"},
		{"integer with letters", ":12a\r\n", value{}, "integer belongs"},
		{"empty integer", ":\r\n", value{}, "integer belongs"},
		{"integer with plus", ":+1\r\n", value{}, "integer belongs"},
		{"integer with space", ": 1\r\n", value{}, "integer belongs"},
		{"lone minus", ":-\r\n", value{}, "integer belongs"},
		{"twenty digits", ":12345678901234567890\r\n", value{}, "integer belongs"},
		{"integer past int64", ":9223372036854775808\r\n", value{}, "out of range"},
		{"bulk length -2", "$-2\r\n", value{}, "length -2"},
		{"bulk string past MaxBulkBytes", "$65537\r\n", value{}, "MaxBulkBytes (65536)"},
		{"bulk string of a terabyte", "$1099511627776\r\n", value{}, "MaxBulkBytes"},
		{"bulk string longer than said", "$3\r\nabcde\r\n", value{}, "not followed by CRLF"},
		{"array length -2", "*-2\r\n", value{}, "length -2"},
		{"array past MaxArrayElements", "*65\r\n", value{}, "MaxArrayElements (64)"},
		{"array of 2^31 elements", "*2147483648\r\n", value{}, "MaxArrayElements"},
		{"nested past MaxNesting", nested(MaxNesting + 1), value{}, "MaxNesting (3)"},
		{"line past MaxLineBytes", "+" + strings.Repeat("x", MaxLineBytes) + "\r\n", value{}, "MaxLineBytes (512)"},
		{"endless line", strings.Repeat("+", 5000), value{}, "MaxLineBytes"},
		{"64 arrays of 64", "*64\r\n" + strings.Repeat("*64\r\n"+strings.Repeat(":1\r\n", 64), 64), value{}, "MaxValues (1024)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newRESPReader(strings.NewReader(tc.in)).readValue()
			if tc.err == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("got %+v, want %+v", got, tc.want)
				}
				return
			}
			var pe *protocolError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %+v, %v; want a protocol error holding %q", got, err, tc.err)
			}
		})
	}
}

func repeatValue(v value, n int) []value {
	out := make([]value, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestReadValueTruncated: an answer cut short is the connection's end,
// not a protocol error (probes.Classify makes it a reset).
func TestReadValueTruncated(t *testing.T) {
	for _, in := range []string{"", "+OK", "$5\r\nab", "*2\r\n:1\r\n"} {
		_, err := newRESPReader(strings.NewReader(in)).readValue()
		if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: error %v, want EOF", in, err)
		}
	}
}

// TestReadValueBudget: one reader (one probe) reads at most
// MaxResponseBytes, and refuses a bulk string that cannot fit in what is
// left before allocating it.
func TestReadValueBudget(t *testing.T) {
	chunk := bulk(strings.Repeat("b", 60_000))
	vals, err := readAll([]byte(strings.Repeat(chunk, 3)))
	if len(vals) != 2 || err == nil || !strings.Contains(err.Error(), "MaxResponseBytes") {
		t.Fatalf("read %d values, then %v; want 2, then MaxResponseBytes", len(vals), err)
	}
	// Many small values run into MaxValues first; lines (each a value)
	// past the budget are cut by the budget itself.
	vals, err = readAll([]byte(strings.Repeat("+OK\r\n", 2000)))
	if len(vals) != MaxValues || err == nil || !strings.Contains(err.Error(), "MaxValues") {
		t.Fatalf("read %d values, then %v; want %d, then MaxValues", len(vals), err, MaxValues)
	}
	long := []byte(strings.Repeat(bulk(strings.Repeat("c", 1000)), 200))
	vals, err = readAll(long)
	var pe *protocolError
	if !errors.As(err, &pe) || len(vals) > MaxResponseBytes/1000 {
		t.Fatalf("read %d values, then %v", len(vals), err)
	}
}

// appendValue encodes v as the server would.
func appendValue(b []byte, v value) []byte {
	b = append(b, v.typ)
	switch {
	case v.null:
		return append(b, "-1\r\n"...)
	case v.typ == typeSimple || v.typ == typeError:
		b = append(b, v.str...)
	case v.typ == typeInteger:
		b = strconv.AppendInt(b, v.num, 10)
	case v.typ == typeBulk:
		b = strconv.AppendInt(b, int64(len(v.str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.str...)
	case v.typ == typeArray:
		b = strconv.AppendInt(b, int64(len(v.elems)), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.elems {
			b = appendValue(b, e)
		}
		return b
	}
	return append(b, "\r\n"...)
}

// checkBounds fails t when v, read at depth, breaks a bound.
func checkBounds(t *testing.T, v value, depth int) int {
	count := 1
	switch v.typ {
	case typeSimple, typeError:
		if len(v.str) > MaxLineBytes-1 {
			t.Fatalf("a line of %d bytes", len(v.str)+1)
		}
	case typeBulk:
		if len(v.str) > MaxBulkBytes {
			t.Fatalf("a bulk string of %d bytes", len(v.str))
		}
	case typeArray:
		if depth > MaxNesting || len(v.elems) > MaxArrayElements {
			t.Fatalf("an array of %d at depth %d", len(v.elems), depth)
		}
		for _, e := range v.elems {
			count += checkBounds(t, e, depth+1)
		}
	case typeInteger:
	default:
		t.Fatalf("a value of type %q", v.typ)
	}
	return count
}

// FuzzReadReply reads whatever a server may send: the reader never panics,
// never returns a value past a bound, and what it returns encodes back to
// bytes it reads as the same value.
func FuzzReadReply(f *testing.F) {
	for _, seed := range []string{
		"+PONG\r\n", "+OK\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
		":1\r\n", "$-1\r\n", "*-1\r\n", "*0\r\n",
		masterRole(), masterRole("10.0.0.2:6379", "10.0.0.3:6379"),
		replicaRole("10.0.0.1", 6379, "connected"), replicaRole("10.0.0.1", 6379, "connecting"),
		"*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n",
		bulk(infoText("up", 0, 1, 100, 90)),
		"+PONG\r\n" + replicaRole("h", 1, "sync") + bulk(infoText("down", 1, -1, 5, 5)),
		nested(MaxNesting + 1), "$1099511627776\r\n", "*2147483648\r\n", ":12345678901234567890\r\n",
		"%1\r\n+a\r\n+b\r\n", "HTTP/1.1 400 Bad Request\r\n", "+OK\n", "$3\r\nabcde\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newRESPReader(bytes.NewReader(data))
		values := 0
		for {
			v, err := r.readValue()
			if err != nil {
				break
			}
			if values += checkBounds(t, v, 1); values > MaxValues {
				t.Fatalf("%d values read", values)
			}
			enc := appendValue(nil, v)
			again, err := newRESPReader(bytes.NewReader(enc)).readValue()
			if err != nil || !reflect.DeepEqual(again, v) {
				t.Fatalf("%+v encodes as %q, read back as %+v, %v", v, enc, again, err)
			}
		}
		if read := MaxResponseBytes - r.budget.left; read > MaxResponseBytes || read > len(data) {
			t.Fatalf("read %d bytes of %d", read, len(data))
		}
	})
}
