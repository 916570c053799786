package postgresql

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"

	"github.com/swh-dev/swh/probes"
)

// Bounds on what one PostgreSQL probe reads from its server. lib/pq trusts
// the server: it allocates whatever length a message header claims, reads a
// malformed error up to a NUL however far away, stores every parameter the
// server reports and computes as many SCRAM iterations as it is told. The
// prober checks every message before pq sees it, so that a hostile or
// broken server costs the probe a bounded amount of memory and CPU. The
// package documentation states them; they are not exported, so that tuning
// one is no API change.
const (
	// maxMessageBytes bounds one message from the server (its claimed
	// length included). PostgreSQL's own errors and notices stay under
	// 30,000 bytes (libpq's MAX_ERRLEN); a probe query's row should be far
	// smaller.
	maxMessageBytes = 64 << 10
	// maxResponseBytes bounds everything the server sends in one probe,
	// login included. A login takes about 1 KiB; a probe query should
	// return one small row.
	maxResponseBytes = 256 << 10
	// maxSCRAMIterations bounds the SCRAM-SHA-256 iteration count a server
	// may ask for (PostgreSQL's default is 4096): each costs the prober two
	// HMACs, and pq cannot be interrupted while it computes them.
	maxSCRAMIterations = 100_000

	// maxAuthMessage bounds an authentication request: a SASL mechanism
	// list or challenge, an MD5 salt, all small.
	maxAuthMessage = 8 << 10
	// maxPlainTextError bounds the plain-text error a postmaster that
	// cannot start a backend sends instead of an ErrorResponse ("Ecould not
	// fork new process..."), read by pq up to a NUL.
	maxPlainTextError = 1 << 10
	// pqMaxErrlen is lib/pq's (and libpq's) MAX_ERRLEN: an ErrorResponse
	// claiming more is read as plain text.
	pqMaxErrlen = 30_000
)

// Authentication request codes of the protocol (message 'R').
const (
	authCleartextPassword = 3
	authSASLContinue      = 11
)

// streamError is a message the prober refused to hand to pq.
type streamError struct {
	reason probes.Reason
	msg    string
}

func (e *streamError) Error() string { return e.msg }

// pgStream checks the server's side of a PostgreSQL connection, message by
// message, before lib/pq reads it. It sits above TLS. Each read is checked
// before any of it is handed on, and a refusal fails that read and every
// later one: pq may have been given the first bytes of a refused message
// (a header split across reads), but never its last byte, and so never the
// whole message. pq reads a header and a body each with io.ReadFull before
// acting on them, so it never allocates for a refused length nor acts on a
// refused request (sending a password, say). The refusal is kept for the
// probe's result.
type pgStream struct {
	net.Conn
	// cleartextOK lets a request for the password in clear text through.
	cleartextOK bool

	header  [5]byte
	hdrLen  int    // bytes of the current header seen; 5 while in a body
	left    int    // body bytes of the current message still to come
	auth    []byte // the body of an authentication request, to check it
	authBuf [64]byte
	plain   int  // >= 0 while in a plain-text error: its bytes so far
	inPlain bool // reading a plain-text error, up to a NUL
	ended   bool // after a plain-text error pq reads nothing more
	total   int
	first   bool // the next message is the server's first

	refused atomic.Pointer[streamError]
}

func newPGStream(c net.Conn, cleartextOK bool) *pgStream {
	return &pgStream{Conn: c, cleartextOK: cleartextOK, first: true}
}

// Read passes on what the server sent once every message in it is checked.
func (s *pgStream) Read(b []byte) (int, error) {
	if err := s.refused.Load(); err != nil {
		return 0, err
	}
	n, err := s.Conn.Read(b)
	if serr := s.scan(b[:n]); serr != nil {
		s.refused.Store(serr)
		return 0, serr
	}
	return n, err
}

// refusal returns the message the stream refused, if any.
func (s *pgStream) refusal() *streamError { return s.refused.Load() }

func (s *pgStream) scan(b []byte) *streamError {
	if s.total += len(b); s.total > maxResponseBytes {
		return &streamError{probes.ReasonProtocol, fmt.Sprintf("the server sent more than %d bytes in one probe (a probe query should return one small row)", maxResponseBytes)}
	}
	for len(b) > 0 {
		switch {
		case s.ended:
			// pq has the error and stops reading: whatever follows
			// is not parsed, only counted.
			return nil
		case s.inPlain:
			i := bytes.IndexByte(b, 0)
			if i < 0 {
				i = len(b) - 1
			} else {
				s.inPlain, s.ended = false, true
			}
			if s.plain += i + 1; s.plain > maxPlainTextError {
				return &streamError{probes.ReasonProtocol, fmt.Sprintf("the server's plain-text error runs past %d bytes: not a PostgreSQL server?", maxPlainTextError)}
			}
			b = b[i+1:]
		case s.hdrLen < len(s.header):
			k := copy(s.header[s.hdrLen:], b)
			s.hdrLen += k
			b = b[k:]
			if s.hdrLen < len(s.header) {
				return nil
			}
			if err := s.startMessage(); err != nil {
				return err
			}
		default:
			k := min(len(b), s.left)
			if s.auth != nil {
				s.auth = append(s.auth, b[:k]...)
			}
			s.left -= k
			b = b[k:]
		}
		if s.hdrLen == len(s.header) && s.left == 0 && !s.inPlain {
			if err := s.endMessage(); err != nil {
				return err
			}
		}
	}
	return nil
}

// startMessage checks a message's header.
func (s *pgStream) startMessage() *streamError {
	typ := s.header[0]
	length := int64(binary.BigEndian.Uint32(s.header[1:]))
	first := s.first
	s.first = false
	if first && typ != 'R' && typ != 'E' && typ != 'N' && typ != 'v' {
		// An authentication request, an error or a protocol
		// negotiation comes first; "HTTP/1.1 400" or an SMTP greeting
		// would read as a message of a gigabyte.
		return &streamError{probes.ReasonProtocol, fmt.Sprintf("the server's first message starts with %q: not a PostgreSQL server?", s.header[:])}
	}
	if typ == 'E' && (length < 8 || length-4 > pqMaxErrlen) {
		if !printable(s.header[1:]) {
			return &streamError{probes.ReasonProtocol, fmt.Sprintf("the server sent an error message of %d bytes; the limit is %d", length, pqMaxErrlen)}
		}
		// Text where the length should be: pq reads it as a plain-text
		// error up to a NUL.
		s.inPlain, s.plain, s.hdrLen = true, 0, 0
		return nil
	}
	limit := int64(maxMessageBytes)
	if typ == 'R' {
		limit = maxAuthMessage
	}
	if length < 4 || length > limit {
		return &streamError{probes.ReasonProtocol, fmt.Sprintf("the server sent a %q message of %d bytes; the limit is %d", typ, length, limit)}
	}
	s.left = int(length) - 4
	s.auth = nil
	if typ == 'R' {
		s.auth = s.authBuf[:0]
	}
	return nil
}

// endMessage checks a complete message, before pq sees its last byte.
func (s *pgStream) endMessage() *streamError {
	s.hdrLen = 0
	if s.auth == nil {
		return nil
	}
	body := s.auth
	s.auth = nil
	if len(body) < 4 {
		return &streamError{probes.ReasonProtocol, "the server sent a truncated authentication request"}
	}
	switch binary.BigEndian.Uint32(body) {
	case authCleartextPassword:
		if !s.cleartextOK {
			return &streamError{probes.ReasonAuth, "the server asked for the password in clear text over a connection whose server is not verified; " +
				"the prober refused to send it (verify the server with TLS, or allow cleartext passwords explicitly)"}
		}
	case authSASLContinue:
		if n, ok := scramIterations(body[4:]); ok && n > maxSCRAMIterations {
			return &streamError{probes.ReasonAuth, fmt.Sprintf("the server asked for %d SCRAM iterations; the prober computes at most %d", n, maxSCRAMIterations)}
		}
	}
	return nil
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// scramIterations reads i= from a SCRAM server-first-message
// ("r=nonce,s=salt,i=4096"); ok is false when it is not a number (pq then
// refuses the message itself).
func scramIterations(msg []byte) (int64, bool) {
	for field := range bytes.SplitSeq(msg, []byte{','}) {
		if v, found := bytes.CutPrefix(field, []byte("i=")); found {
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}
