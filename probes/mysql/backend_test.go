package mysql

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/swh-dev/swh/probes"
)

// myBackend is a minimal MySQL server: just enough of the protocol to
// exercise the client side of the prober (the greeting, TLS, the
// handshake response, password methods, one text query, errors) on
// loopback. Tests against a real MariaDB server live in the test module.
type myBackend struct {
	tls         *tls.Config     // nil: no CLIENT_SSL in the greeting
	plugin      string          // the greeting's method; mysql_native_password by default
	password    string          // "" accepts anyone without checking
	switchTo    string          // ask for this method after the handshake response
	fullAuth    *rsa.PrivateKey // caching_sha2_password: ask for full authentication, with this key (without TLS)
	greetingErr uint16          // an error instead of the greeting (1040: too many connections)
	loginErr    uint16          // an error instead of the login's OK (1049: no such database)
	oldEOF      bool            // no CLIENT_DEPRECATE_EOF: EOF packets after columns and rows
	column      *myColumn       // the result of any query; nil: an OK packet
	rows        int             // rows of the result; 1 when 0
	queryErr    uint16          // an error in answer to the query
	stall       bool            // never answer the query

	mu           sync.Mutex
	conns        int
	user, db     string
	attrs        map[string]string
	query        string
	sni          string
	peer         []*x509.Certificate // client certificates of the last TLS session
	sentPassword string              // the password the client sent itself (clear, or decrypted)
	ended        string              // how the last session ended
}

// myColumn is a one-column result: a type and a value in text format.
type myColumn struct {
	typ   byte // 0x01 TINY, 0x08 LONGLONG, 0x05 DOUBLE, 0xf6 NEWDECIMAL, 0xfd VAR_STRING, 0x10 BIT
	value *string
}

func text(s string) *string { return &s }

// Capabilities of the greeting.
const (
	capLongPassword   = 0x1 // CLIENT_MYSQL to the driver: not MariaDB
	capConnectWithDB  = 0x8
	capProtocol41     = 0x200
	capTransactions   = 0x2000
	capSecureConn     = 0x8000
	capMultiResults   = 0x20000
	capPluginAuth     = 0x80000
	capConnectAttrs   = 0x100000
	capPluginAuthLenc = 0x200000
)

var scramble = []byte("0123456789abcdefghij") // 20 bytes

func (b *myBackend) start(t testing.TB) probes.Target {
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

// myConn reads and writes packets, numbering them.
type myConn struct {
	c   net.Conn
	r   io.Reader // unbuffered: the TLS handshake follows the TLS request
	seq byte
}

func (m *myConn) read() ([]byte, error) {
	var head [4]byte
	if _, err := io.ReadFull(m.r, head[:]); err != nil {
		return nil, err
	}
	n := int(head[0]) | int(head[1])<<8 | int(head[2])<<16
	if head[3] != m.seq {
		return nil, fmt.Errorf("sequence %d, want %d", head[3], m.seq)
	}
	m.seq++
	body := make([]byte, n)
	_, err := io.ReadFull(m.r, body)
	return body, err
}

func (m *myConn) write(bodies ...[]byte) {
	var out []byte
	for _, body := range bodies {
		out = append(out, byte(len(body)), byte(len(body)>>8), byte(len(body)>>16), m.seq)
		out = append(out, body...)
		m.seq++
	}
	_, _ = m.c.Write(out)
}

func errPacket(number uint16, state, msg string) []byte {
	return fmt.Appendf(binary.LittleEndian.AppendUint16([]byte{0xff}, number), "#%s%s", state, msg)
}

var okPacket = []byte{0, 0, 0, 2, 0, 0, 0} // no rows, no id, autocommit, no warnings

func (b *myBackend) greeting() []byte {
	caps := uint32(capLongPassword | capConnectWithDB | capProtocol41 | capTransactions | capSecureConn |
		capMultiResults | capPluginAuth | capConnectAttrs | capPluginAuthLenc)
	if !b.oldEOF {
		caps |= capDeprecateEOF
	}
	if b.tls != nil {
		caps |= capClientSSL
	}
	plugin := b.plugin
	if plugin == "" {
		plugin = "mysql_native_password"
	}
	g := append([]byte{protocolV10}, "8.0.99-fake\x00"...)
	g = binary.LittleEndian.AppendUint32(g, 42)
	g = append(g, scramble[:8]...)
	g = append(g, 0)
	g = binary.LittleEndian.AppendUint16(g, uint16(caps))
	g = append(g, 45)                          // utf8mb4_general_ci
	g = binary.LittleEndian.AppendUint16(g, 2) // autocommit
	g = binary.LittleEndian.AppendUint16(g, uint16(caps>>16))
	g = append(g, 21)
	g = append(g, make([]byte, 10)...)
	g = append(g, scramble[8:]...)
	g = append(g, 0)
	return append(g, plugin+"\x00"...)
}

func (b *myBackend) session(c net.Conn) string {
	m := &myConn{c: c, r: c}
	if b.greetingErr != 0 {
		m.write(errPacket(b.greetingErr, "08004", "refused by the test server"))
		return "greeting error"
	}
	m.write(b.greeting())
	resp, err := m.read()
	if err != nil {
		return "no handshake response: " + err.Error()
	}
	if len(resp) == 32 && binary.LittleEndian.Uint32(resp)&capClientSSL != 0 && b.tls != nil {
		tc := tls.Server(c, b.tls)
		if err := tc.Handshake(); err != nil {
			return "tls: " + err.Error()
		}
		state := tc.ConnectionState()
		b.mu.Lock()
		b.sni, b.peer = state.ServerName, state.PeerCertificates
		b.mu.Unlock()
		m.c, m.r = tc, tc
		if resp, err = m.read(); err != nil {
			return "no handshake response over TLS: " + err.Error()
		}
		if binary.LittleEndian.Uint32(resp)&capClientSSL == 0 {
			return "handshake response without CLIENT_SSL over TLS"
		}
	}
	auth, err := b.parseResponse(resp)
	if err != nil {
		return "malformed handshake response: " + err.Error()
	}
	if ended := b.authenticate(m, auth); ended != "" {
		return ended
	}
	if b.loginErr != 0 {
		m.write(errPacket(b.loginErr, "42000", "refused by the test server"))
		return "login error"
	}
	m.write(okPacket)

	for {
		m.seq = 0
		cmd, err := m.read()
		switch {
		case errors.Is(err, io.EOF):
			return "eof"
		case err != nil:
			return "error: " + err.Error()
		case len(cmd) > 0 && cmd[0] == 0x01:
			return "quit"
		case len(cmd) == 0 || cmd[0] != 0x03:
			return fmt.Sprintf("unexpected command %x", cmd)
		}
		b.mu.Lock()
		b.query = string(cmd[1:])
		b.mu.Unlock()
		switch {
		case b.stall:
			continue
		case b.queryErr != 0:
			m.write(errPacket(b.queryErr, "HY000", "query failed in the test server"))
		case b.column == nil:
			m.write(okPacket)
		default:
			m.write(b.result()...)
		}
	}
}

// parseResponse reads the handshake response and returns its
// authentication data.
func (b *myBackend) parseResponse(resp []byte) ([]byte, error) {
	if len(resp) < 32 {
		return nil, errors.New("short")
	}
	caps := binary.LittleEndian.Uint32(resp)
	rest := resp[32:]
	user, rest, ok := bytes.Cut(rest, []byte{0})
	if !ok || len(rest) == 0 {
		return nil, errors.New("no user")
	}
	n := int(rest[0]) // lenenc, short
	if len(rest) < 1+n {
		return nil, errors.New("short authentication data")
	}
	auth := rest[1 : 1+n]
	rest = rest[1+n:]
	var db []byte
	if caps&capConnectWithDB != 0 {
		db, rest, _ = bytes.Cut(rest, []byte{0})
	}
	if caps&capPluginAuth != 0 {
		_, rest, _ = bytes.Cut(rest, []byte{0})
	}
	attrs := map[string]string{}
	if caps&capConnectAttrs != 0 && len(rest) > 0 {
		rest = rest[1:] // total length, short
		for len(rest) > 0 {
			var k, v []byte
			k, rest = lenencString(rest)
			v, rest = lenencString(rest)
			attrs[string(k)] = string(v)
		}
	}
	b.mu.Lock()
	b.user, b.db, b.attrs = string(user), string(db), attrs
	b.mu.Unlock()
	return auth, nil
}

func lenencString(b []byte) ([]byte, []byte) {
	if len(b) == 0 || int(b[0]) > len(b)-1 {
		return nil, nil
	}
	return b[1 : 1+int(b[0])], b[1+int(b[0]):]
}

// authenticate runs the authentication exchange; it returns how the session
// ended when it did.
func (b *myBackend) authenticate(m *myConn, auth []byte) string {
	denied := func() string {
		m.write(errPacket(1045, "28000", "Access denied for user (using password: YES)"))
		return "access denied"
	}
	switch {
	case b.switchTo != "":
		m.write(append(append([]byte{pktEOF}, b.switchTo+"\x00"...), append(scramble, 0)...))
		got, err := m.read()
		if err != nil {
			return "no password"
		}
		if b.switchTo == "mysql_clear_password" {
			b.setPassword(string(bytes.TrimSuffix(got, []byte{0})))
			if !bytes.Equal(got, []byte(b.password+"\x00")) {
				return denied()
			}
		}
	case b.fullAuth != nil:
		m.write([]byte{pktAuthMoreData, sha2FullAuth})
		req, err := m.read()
		if err != nil {
			return "no password"
		}
		// As MySQL: over TLS the client sends the password as it is, and
		// a request for the key reads as a wrong password.
		if len(req) == 1 && req[0] == 2 && b.tls == nil { // the public key, please
			der, _ := x509.MarshalPKIXPublicKey(&b.fullAuth.PublicKey)
			m.write(append([]byte{pktAuthMoreData}, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...))
			if req, err = m.read(); err != nil {
				return "no password"
			}
			plain, err := rsa.DecryptOAEP(sha1.New(), nil, b.fullAuth, req, nil)
			if err != nil {
				return "undecipherable password"
			}
			for i := range plain {
				plain[i] ^= scramble[i%len(scramble)]
			}
			req = plain
		}
		b.setPassword(string(bytes.TrimSuffix(req, []byte{0})))
		if string(req) != b.password+"\x00" {
			return denied()
		}
	case b.password != "" && !bytes.Equal(auth, nativeScramble(scramble, b.password)):
		return denied()
	}
	return ""
}

func (b *myBackend) setPassword(p string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sentPassword = p
}

// nativeScramble is mysql_native_password's proof:
// SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password))).
func nativeScramble(scramble []byte, password string) []byte {
	h1 := sha1.Sum([]byte(password))
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(scramble[:20])
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// result returns the packets of a one-column result set.
func (b *myBackend) result() [][]byte {
	def := []byte{}
	for _, s := range []string{"def", "", "", "", "c", ""} {
		def = append(append(def, byte(len(s))), s...)
	}
	def = append(def, 0x0c)
	def = binary.LittleEndian.AppendUint16(def, 33)
	def = binary.LittleEndian.AppendUint32(def, 64)
	def = append(def, b.column.typ, 0, 0, 0, 0, 0)
	eof := []byte{pktEOF, 0, 0, 2, 0}
	out := [][]byte{{1}, def}
	if b.oldEOF {
		out = append(out, eof)
	}
	row := []byte{0xfb}
	if v := b.column.value; v != nil {
		row = append([]byte{byte(len(*v))}, *v...)
	}
	for range max(b.rows, 1) {
		out = append(out, row)
	}
	if !b.oldEOF {
		eof = []byte{pktEOF, 0, 0, 2, 0, 0, 0}
	}
	return append(out, eof)
}

func (b *myBackend) snapshot() (conns int, user, db, query, password, ended string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns, b.user, b.db, b.query, b.sentPassword, b.ended
}
