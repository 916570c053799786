package postgresql

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/swh-dev/swh/probes"
)

// chunkConn hands out data in the given chunk sizes, then io.EOF.
type chunkConn struct {
	net.Conn
	data   []byte
	chunks []int
}

func (c *chunkConn) Read(b []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.chunks) > 0 {
		n, c.chunks = min(c.chunks[0], n), c.chunks[1:]
	}
	n = copy(b, c.data[:max(n, 1)])
	c.data = c.data[n:]
	return n, nil
}

// feed reads data through a pgStream in the given chunks, as pq would
// (through a 4 KiB buffer), and returns what was handed on and the refusal.
func feed(data []byte, chunks []int, cleartextOK bool) ([]byte, *streamError) {
	s := newPGStream(&chunkConn{data: data, chunks: chunks}, cleartextOK)
	var passed []byte
	buf := make([]byte, 4096)
	for {
		n, err := s.Read(buf)
		passed = append(passed, buf[:n]...)
		if err != nil {
			return passed, s.refusal()
		}
	}
}

func verdict(e *streamError) string {
	if e == nil {
		return "accepted"
	}
	return string(e.reason) + ": " + e.msg
}

// checkPassed parses what the stream handed on, independently of the
// stream, and fails if it holds a complete message the stream must refuse.
func checkPassed(t *testing.T, passed []byte, cleartextOK bool) {
	t.Helper()
	first := true
	for len(passed) >= 5 {
		typ, length := passed[0], int(binary.BigEndian.Uint32(passed[1:5]))
		if first && typ != 'R' && typ != 'E' && typ != 'N' && typ != 'v' {
			t.Fatalf("a first message of type %q was handed on", typ)
		}
		first = false
		if typ == 'E' && (length < 8 || length-4 > pqMaxErrlen) {
			if !printable(passed[1:5]) {
				t.Fatalf("an error claiming %d bytes was handed on", length)
			}
			if i := bytes.IndexByte(passed[5:], 0); i >= maxPlainTextError || (i < 0 && len(passed)-5 > maxPlainTextError) {
				t.Fatalf("a plain-text error of more than %d bytes was handed on", maxPlainTextError)
			}
			return // pq stops at its NUL
		}
		limit := maxMessageBytes
		if typ == 'R' {
			limit = maxAuthMessage
		}
		if length < 4 || length > limit {
			t.Fatalf("a complete %q header claiming %d bytes was handed on", typ, length)
		}
		if len(passed) < 1+length {
			return // the rest of the message was not handed on
		}
		body := passed[5 : 1+length]
		if typ == 'R' && len(body) >= 4 {
			switch binary.BigEndian.Uint32(body) {
			case authCleartextPassword:
				if !cleartextOK {
					t.Fatal("a cleartext password request was handed on")
				}
			case authSASLContinue:
				if n, ok := scramIterations(body[4:]); ok && n > maxSCRAMIterations {
					t.Fatalf("a request for %d SCRAM iterations was handed on", n)
				}
			}
		}
		passed = passed[1+length:]
	}
}

func authRequest(code uint32, rest string) []byte {
	return pgMessage('R', append(binary.BigEndian.AppendUint32(nil, code), rest...))
}

var streamCases = []struct {
	name        string
	data        []byte
	cleartextOK bool
	want        probes.Reason // "" when the stream must accept everything
}{
	{"a login", bytes.Join([][]byte{authRequest(5, "salt"), authOK, pgMessage('S', []byte("TimeZone\x00UTC\x00")), keyData, readyForQ}, nil), false, ""},
	{"cleartext refused", bytes.Join([][]byte{pgMessage('N', []byte("Mhi\x00\x00")), authRequest(authCleartextPassword, ""), authOK}, nil), false, probes.ReasonAuth},
	{"cleartext allowed", bytes.Join([][]byte{authRequest(authCleartextPassword, ""), authOK, readyForQ}, nil), true, ""},
	{"SCRAM iterations", bytes.Join([][]byte{authRequest(10, "SCRAM-SHA-256\x00\x00"), authRequest(authSASLContinue, "r=abc,s=c2FsdA==,i=100001")}, nil), false, probes.ReasonAuth},
	{"SCRAM at the limit", bytes.Join([][]byte{authRequest(10, "SCRAM-SHA-256\x00\x00"), authRequest(authSASLContinue, "r=abc,s=c2FsdA==,i=100000")}, nil), false, ""},
	{"oversize row", bytes.Join([][]byte{authOK, readyForQ, pgHeader('D', maxMessageBytes+1), []byte("xx")}, nil), false, probes.ReasonProtocol},
	{"message at the limit", bytes.Join([][]byte{authOK, pgMessage('D', make([]byte, maxMessageBytes-4))}, nil), false, ""},
	{"oversize auth request", append(pgHeader('R', maxAuthMessage+1), 0, 0, 0, 10), false, probes.ReasonProtocol},
	{"plain-text error", []byte("Ecould not fork new process for connection: out of memory\n\x00trailing bytes"), false, ""},
	{"error claiming a gigabyte", append(pgHeader('E', 1<<30), "SFATAL\x00"...), false, probes.ReasonProtocol},
	{"not PostgreSQL", []byte("220 smtp.example.test ESMTP\r\n"), false, probes.ReasonProtocol},
	{"truncated auth request", pgMessage('R', []byte{0, 0}), false, probes.ReasonProtocol},
}

// TestPGStreamSplitAnywhere feeds every case whole, split at every offset,
// and one byte at a time: the verdict never depends on how the bytes
// arrive, and what is handed on never holds a complete refused message.
func TestPGStreamSplitAnywhere(t *testing.T) {
	for _, tc := range streamCases {
		t.Run(tc.name, func(t *testing.T) {
			passed, refused := feed(tc.data, nil, tc.cleartextOK)
			if got := verdict(refused); (tc.want == "") != (refused == nil) || (refused != nil && refused.reason != tc.want) {
				t.Fatalf("whole: %s, want %q", got, tc.want)
			}
			if refused == nil && !bytes.Equal(passed, tc.data) {
				t.Fatalf("whole: %d of %d bytes handed on", len(passed), len(tc.data))
			}
			checkPassed(t, passed, tc.cleartextOK)
			want := verdict(refused)
			splits := [][]int{}
			for k := 1; k < len(tc.data) && k < 200; k++ {
				splits = append(splits, []int{k})
			}
			ones := make([]int, min(len(tc.data), 2000))
			for i := range ones {
				ones[i] = 1
			}
			splits = append(splits, ones)
			for _, chunks := range splits {
				passed, refused := feed(tc.data, chunks, tc.cleartextOK)
				if got := verdict(refused); got != want {
					t.Fatalf("chunks %v…: %s, want %s", chunks[:min(3, len(chunks))], got, want)
				}
				if !bytes.HasPrefix(tc.data, passed) {
					t.Fatalf("chunks %v…: handed on bytes that were not sent", chunks[:min(3, len(chunks))])
				}
				checkPassed(t, passed, tc.cleartextOK)
			}
		})
	}
}

// FuzzPGStream checks the same invariants on any input and chunking.
func FuzzPGStream(f *testing.F) {
	for _, tc := range streamCases {
		f.Add(tc.data, []byte{3, 1, 7}, tc.cleartextOK)
	}
	f.Fuzz(func(t *testing.T, data, splits []byte, cleartextOK bool) {
		if len(data) > maxResponseBytes {
			return // the total cap counts whole reads: verdicts may differ by chunking
		}
		_, whole := feed(data, nil, cleartextOK)
		chunks := make([]int, len(splits))
		for i, b := range splits {
			chunks[i] = int(b) + 1
		}
		passed, refused := feed(data, chunks, cleartextOK)
		if verdict(refused) != verdict(whole) {
			t.Fatalf("chunked: %s; whole: %s", verdict(refused), verdict(whole))
		}
		if !bytes.HasPrefix(data, passed) {
			t.Fatal("handed on bytes that were not sent")
		}
		checkPassed(t, passed, cleartextOK)
	})
}
