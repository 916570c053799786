package postgresql

import (
	"bufio"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/swh-dev/swh/probes"
)

// pgBackend is a minimal PostgreSQL server: just enough of protocol 3.0 to
// exercise the client side of the prober (TLS negotiation, the startup
// packet, password authentication, one simple query, errors) on loopback.
// Tests against a real PostgreSQL server live in the test module.
type pgBackend struct {
	tls        *tls.Config // nil: answer 'N' to SSLRequest
	password   string      // "" accepts anyone without authentication
	md5        bool        // ask for the password with MD5 instead of in clear text
	fatal      string      // SQLSTATE of a FATAL error sent right after startup
	column     *pgColumn   // the result of any query; nil: no columns
	queryError string      // SQLSTATE of an error sent in answer to the query
	stall      bool        // never answer the query

	mu      sync.Mutex
	conns   int
	startup map[string]string // parameters of the last startup packet
	sni     string
	peer    []*x509.Certificate // client certificates of the last TLS session
	query   string
	ended   string // how the last session ended
}

// pgColumn is a one-column result: a type and a value in text format.
type pgColumn struct {
	oid   uint32 // 16 bool, 23 int4, 25 text, 1700 numeric
	value *string
}

func text(s string) *string { return &s }

func (b *pgBackend) start(t *testing.T) probes.Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	var wg sync.WaitGroup
	serve(t, l, func(c net.Conn) {
		b.mu.Lock()
		b.conns++
		b.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			ended := b.session(c)
			b.mu.Lock()
			b.ended = ended
			b.mu.Unlock()
		}()
	})
	t.Cleanup(wg.Wait)
	return targetOf(t, l)
}

func (b *pgBackend) session(c net.Conn) string {
	var conn net.Conn = c
	r := bufio.NewReader(conn)
	code, body, err := readStartup(r)
	if err != nil {
		return "error: " + err.Error()
	}
	if code == 80877103 { // SSLRequest
		if b.tls == nil {
			_, _ = conn.Write([]byte{'N'})
		} else {
			_, _ = conn.Write([]byte{'S'})
			tc := tls.Server(c, b.tls)
			if err := tc.Handshake(); err != nil {
				return "tls: " + err.Error()
			}
			state := tc.ConnectionState()
			b.mu.Lock()
			b.sni, b.peer = state.ServerName, state.PeerCertificates
			b.mu.Unlock()
			conn = tc
			r = bufio.NewReader(conn)
		}
		if code, body, err = readStartup(r); err != nil {
			return "error: " + err.Error()
		}
	}
	if code != 196608 {
		return fmt.Sprintf("protocol %d", code)
	}
	params := map[string]string{}
	for fields := splitCStrings(body); len(fields) >= 2; fields = fields[2:] {
		params[fields[0]] = fields[1]
	}
	b.mu.Lock()
	b.startup = params
	b.mu.Unlock()

	w := bufio.NewWriter(conn)
	defer w.Flush()
	if b.password != "" {
		want := b.password
		if b.md5 {
			salt := []byte{1, 2, 3, 4}
			writeMsg(w, 'R', append(binary.BigEndian.AppendUint32(nil, 5), salt...))
			want = "md5" + md5Hex(md5Hex(b.password+params["user"])+string(salt))
		} else {
			writeMsg(w, 'R', binary.BigEndian.AppendUint32(nil, 3)) // cleartext password
		}
		w.Flush()
		typ, msg, err := readMsg(r)
		if err != nil || typ != 'p' {
			return "no password"
		}
		if got := splitCStrings(msg); len(got) != 1 || got[0] != want {
			writeError(w, "FATAL", "28P01", "password authentication failed")
			return "wrong password"
		}
	}
	if b.fatal != "" {
		writeError(w, "FATAL", b.fatal, "refused by the test backend")
		return "fatal"
	}
	writeMsg(w, 'R', binary.BigEndian.AppendUint32(nil, 0)) // AuthenticationOk
	writeMsg(w, 'K', binary.BigEndian.AppendUint64(nil, 42))
	writeMsg(w, 'Z', []byte{'I'})
	w.Flush()

	for {
		typ, msg, err := readMsg(r)
		switch {
		case errors.Is(err, io.EOF):
			return "eof"
		case err != nil:
			return "error: " + err.Error()
		case typ == 'X':
			return "terminate"
		case typ != 'Q':
			return fmt.Sprintf("unexpected message %q", typ)
		}
		b.mu.Lock()
		b.query = splitCStrings(msg)[0]
		b.mu.Unlock()
		switch {
		case b.stall:
			continue
		case b.queryError != "":
			writeError(w, "ERROR", b.queryError, "query failed in the test backend")
		case b.column != nil:
			desc := binary.BigEndian.AppendUint16(nil, 1)
			desc = append(desc, "col\x00"...)
			desc = binary.BigEndian.AppendUint32(desc, 0)
			desc = binary.BigEndian.AppendUint16(desc, 0)
			desc = binary.BigEndian.AppendUint32(desc, b.column.oid)
			desc = binary.BigEndian.AppendUint16(desc, 0xffff)
			desc = binary.BigEndian.AppendUint32(desc, 0xffffffff)
			desc = binary.BigEndian.AppendUint16(desc, 0)
			writeMsg(w, 'T', desc)
			row := binary.BigEndian.AppendUint16(nil, 1)
			if b.column.value == nil {
				row = binary.BigEndian.AppendUint32(row, 0xffffffff)
			} else {
				row = binary.BigEndian.AppendUint32(row, uint32(len(*b.column.value)))
				row = append(row, *b.column.value...)
			}
			writeMsg(w, 'D', row)
			writeMsg(w, 'C', []byte("SELECT 1\x00"))
		default:
			writeMsg(w, 'C', []byte("SET\x00"))
		}
		writeMsg(w, 'Z', []byte{'I'})
		w.Flush()
	}
}

func readStartup(r *bufio.Reader) (uint32, []byte, error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n < 8 || n > 10000 {
		return 0, nil, fmt.Errorf("startup length %d", n)
	}
	body := make([]byte, n-8)
	_, err := io.ReadFull(r, body)
	return binary.BigEndian.Uint32(head[4:]), body, err
}

func readMsg(r *bufio.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 1<<20 {
		return 0, nil, fmt.Errorf("message length %d", n)
	}
	body := make([]byte, n-4)
	_, err := io.ReadFull(r, body)
	return head[0], body, err
}

func writeMsg(w *bufio.Writer, typ byte, body []byte) {
	_ = w.WriteByte(typ)
	_, _ = w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)))
	_, _ = w.Write(body)
}

func writeError(w *bufio.Writer, severity, code, msg string) {
	body := fmt.Sprintf("S%s\x00V%s\x00C%s\x00M%s\x00\x00", severity, severity, code, msg)
	writeMsg(w, 'E', []byte(body))
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// splitCStrings splits NUL-terminated strings, up to the first empty one.
func splitCStrings(b []byte) []string {
	var out []string
	for _, s := range strings.Split(string(b), "\x00") {
		if s == "" {
			break
		}
		out = append(out, s)
	}
	return out
}

func (b *pgBackend) snapshot() (conns int, startup map[string]string, query, ended string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns, b.startup, b.query, b.ended
}
