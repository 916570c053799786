package redis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Bounds on what one probe reads from its server. A Redis client library
// allocates whatever a reply claims: a bulk string of a terabyte, an array
// of two billion elements, arrays nested as deep as the stack goes. The
// prober's reader checks every claim before it allocates or recurses, so
// that a hostile or broken server costs a probe a bounded amount of memory
// and CPU; the first breach ends the probe with probes.ReasonProtocol and a
// message naming the bound.
const (
	// MaxLineBytes bounds a line, its CRLF left out: a simple string, an
	// error, an integer, or the header of a bulk string or an array.
	// Redis's own errors stay under 200 bytes (an unknown command's echoes
	// at most 128 bytes of its arguments).
	MaxLineBytes = 512
	// MaxBulkBytes bounds one bulk string. The largest the probe expects
	// is INFO replication: about 1 KiB on a replica, and 70 bytes more per
	// replica on a master.
	MaxBulkBytes = 64 << 10
	// MaxArrayElements bounds the elements of one array. ROLE answers
	// three or five; a master's list of replicas has one per replica, so
	// a master with more replicas than that fails a probe that sends ROLE
	// (one with Role or MaxReplicationLag set).
	MaxArrayElements = 64
	// MaxNesting bounds how deep arrays nest: ROLE on a master is an
	// array holding the list of replicas, an array of arrays.
	MaxNesting = 3
	// MaxValues bounds the values of all answers of one probe, every
	// element of every array counted: width and depth alone would allow
	// 64×64×64. ROLE on a master with 64 replicas holds 3 + 64×4.
	MaxValues = 1024
	// MaxResponseBytes bounds everything the server sends in one probe:
	// the answers to AUTH, PING or ROLE and INFO replication, a few KiB.
	MaxResponseBytes = 128 << 10
)

// readBufferBytes is the reader's buffer: a line must fit in it, so that a
// line past MaxLineBytes is found within it.
const readBufferBytes = 1024

// The RESP2 types the reader knows, by their first byte.
const (
	typeSimple  = '+'
	typeError   = '-'
	typeInteger = ':'
	typeBulk    = '$'
	typeArray   = '*'
)

// value is one RESP2 value: a simple string, an error, an integer, a bulk
// string or an array, any of the last two possibly null.
type value struct {
	typ   byte
	null  bool    // a null bulk string ($-1) or null array (*-1)
	str   string  // simple string, error text, bulk string
	num   int64   // integer
	elems []value // array
}

// text returns the string of a simple or bulk string, and whether v is one.
func (v value) text() (string, bool) {
	if (v.typ == typeSimple || v.typ == typeBulk) && !v.null {
		return v.str, true
	}
	return "", false
}

// describe names v's type for messages.
func (v value) describe() string {
	switch {
	case v.null:
		return "a null"
	case v.typ == typeSimple:
		return "a simple string"
	case v.typ == typeError:
		return "an error"
	case v.typ == typeInteger:
		return "an integer"
	case v.typ == typeBulk:
		return "a bulk string"
	case v.typ == typeArray:
		return fmt.Sprintf("an array of %d", len(v.elems))
	}
	return fmt.Sprintf("type %q", v.typ)
}

// protocolError is an answer the prober refused: malformed, or past one of
// its bounds. It is classified as probes.ReasonProtocol.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return e.msg }

func protocolErrorf(format string, args ...any) error {
	return &protocolError{fmt.Sprintf(format, args...)}
}

// budget bounds the bytes read from r to MaxResponseBytes (or less, for
// tests): past them, Read fails with a protocolError.
type budget struct {
	r    io.Reader
	left int
}

func (b *budget) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, protocolErrorf("the server sent more than MaxResponseBytes (%d) in one probe", MaxResponseBytes)
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	return n, err
}

// respReader reads RESP2 values under the bounds above. It is a pure
// function of the bytes it reads, so that it can be fuzzed.
type respReader struct {
	budget budget
	br     *bufio.Reader
	values int // values read or claimed so far, for MaxValues
}

func newRESPReader(r io.Reader) *respReader {
	rr := &respReader{budget: budget{r: r, left: MaxResponseBytes}}
	rr.br = bufio.NewReaderSize(&rr.budget, readBufferBytes)
	return rr
}

// readValue reads one value.
func (r *respReader) readValue() (value, error) {
	if r.values++; r.values > MaxValues {
		return value{}, protocolErrorf("the server sent more than MaxValues (%d) values in one probe", MaxValues)
	}
	return r.read(1)
}

// read reads a value inside depth-1 arrays.
func (r *respReader) read(depth int) (value, error) {
	line, err := r.line()
	if err != nil {
		return value{}, err
	}
	if len(line) == 0 {
		return value{}, protocolErrorf("the server sent an empty line where a value starts")
	}
	typ, rest := line[0], line[1:]
	switch typ {
	case typeSimple, typeError:
		return value{typ: typ, str: string(rest)}, nil
	case typeInteger:
		n, err := parseInt(rest)
		if err != nil {
			return value{}, err
		}
		return value{typ: typ, num: n}, nil
	case typeBulk:
		return r.bulk(rest)
	case typeArray:
		return r.array(rest, depth)
	}
	// RESP3 types ('_', '#', '%', '>' ...) come only after HELLO 3,
	// which the prober never sends; "HTTP/1.1" or an SMTP greeting lands
	// here too.
	return value{}, protocolErrorf("the server sent a value of unknown type %q: not a Redis server?", typ)
}

// line reads a line and returns it without its CRLF.
func (r *respReader) line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxLineBytes+2 {
		return nil, protocolErrorf("the server sent a line longer than MaxLineBytes (%d)", MaxLineBytes)
	}
	if err != nil {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, protocolErrorf("the server sent a line ending in LF without CR")
	}
	return line[:len(line)-2], nil
}

// bulk reads a bulk string whose header, after '$', is head.
func (r *respReader) bulk(head []byte) (value, error) {
	n, err := parseInt(head)
	switch {
	case err != nil:
		return value{}, err
	case n == -1:
		return value{typ: typeBulk, null: true}, nil
	case n < 0:
		return value{}, protocolErrorf("the server sent a bulk string of length %d", n)
	case n > MaxBulkBytes:
		return value{}, protocolErrorf("the server sent a bulk string of %d bytes, more than MaxBulkBytes (%d)", n, MaxBulkBytes)
	case int(n)+2 > r.br.Buffered()+r.budget.left:
		// Refused before allocating: it cannot arrive within the
		// probe's budget anyway.
		return value{}, protocolErrorf("the server sent a bulk string of %d bytes, past MaxResponseBytes (%d) for the probe", n, MaxResponseBytes)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(r.br, buf); err != nil {
		return value{}, err
	}
	if buf[n] != '\r' || buf[n+1] != '\n' {
		return value{}, protocolErrorf("the server sent a bulk string of %d bytes not followed by CRLF", n)
	}
	return value{typ: typeBulk, str: string(buf[:n])}, nil
}

// array reads an array at depth whose header, after '*', is head.
func (r *respReader) array(head []byte, depth int) (value, error) {
	n, err := parseInt(head)
	switch {
	case err != nil:
		return value{}, err
	case n == -1:
		return value{typ: typeArray, null: true}, nil
	case n < 0:
		return value{}, protocolErrorf("the server sent an array of length %d", n)
	case n > MaxArrayElements:
		return value{}, protocolErrorf("the server sent an array of %d elements, more than MaxArrayElements (%d)", n, MaxArrayElements)
	case depth > MaxNesting:
		return value{}, protocolErrorf("the server sent arrays nested deeper than MaxNesting (%d)", MaxNesting)
	}
	// Counted before they are allocated, like the bulk string's bytes.
	if r.values += int(n); r.values > MaxValues {
		return value{}, protocolErrorf("the server sent more than MaxValues (%d) values in one probe", MaxValues)
	}
	elems := make([]value, n)
	for i := range elems {
		if elems[i], err = r.read(depth + 1); err != nil {
			return value{}, err
		}
	}
	return value{typ: typeArray, elems: elems}, nil
}

// maxIntDigits is the most digits an int64 has.
const maxIntDigits = 19

// parseInt parses a RESP integer: an optional '-' and decimal digits,
// nothing else (no '+', no space), within int64.
func parseInt(b []byte) (int64, error) {
	digits := b
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > maxIntDigits {
		return 0, protocolErrorf("the server sent %q where an integer belongs", cut(b))
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, protocolErrorf("the server sent %q where an integer belongs", cut(b))
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0, protocolErrorf("the server sent an integer out of range: %q", cut(b))
	}
	return n, nil
}

// cut bounds bytes of the server quoted in a message.
func cut(b []byte) []byte {
	const n = 40
	if len(b) > n {
		return b[:n]
	}
	return b
}
