package mysql

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"fmt"

	"github.com/swh-dev/swh/probes"
)

// Bounds on what one MySQL probe reads from its server. go-sql-driver/mysql
// trusts the server: it allocates whatever length a packet header claims
// (up to 16 MiB, and joins continued packets without limit), and as many
// column descriptions as a result set's header announces (up to 2^64). The
// prober checks every packet before the driver sees it, so that a hostile or
// broken server costs the probe a bounded amount of memory. The package
// documentation states them; they are not exported, so that tuning one is no
// API change.
const (
	// maxPacketBytes bounds one packet from the server (its 4-byte header
	// excluded). A health query answers one small row; MySQL's own errors
	// stay under 600 bytes.
	maxPacketBytes = 64 << 10
	// maxResponseBytes bounds everything the server sends in one probe,
	// login included (TLS records excluded: what the prober counts is
	// what the driver reads). A login takes well under 1 KiB.
	maxResponseBytes = 256 << 10
	// maxLoginPacketBytes bounds a packet of the login: the greeting, an
	// authentication request, an RSA public key, an error. All are small.
	maxLoginPacketBytes = 8 << 10
	// maxColumns bounds the column count of a result set, which the
	// driver allocates before any column arrives (MySQL allows 4096
	// columns in a table).
	maxColumns = 4096
)

// The protocol's constants the prober reads.
const (
	protocolV10       = 10         // the greeting's protocol version
	capClientSSL      = 0x00000800 // CLIENT_SSL
	capDeprecateEOF   = 0x01000000 // CLIENT_DEPRECATE_EOF
	pktOK             = 0x00
	pktAuthMoreData   = 0x01
	pktLocalInfile    = 0xfb
	pktEOF            = 0xfe // also an authentication switch request during the login
	pktERR            = 0xff
	sha2FastAuthOK    = 3  // caching_sha2_password: the fast path succeeded, OK follows
	sha2FullAuth      = 4  // caching_sha2_password: "perform full authentication"
	packetPrefixBytes = 24 // enough of a packet for an OK packet's fields up to its status
)

// streamError is a packet the prober refused to hand to the driver.
type streamError struct {
	reason probes.Reason
	msg    string
}

func (e *streamError) Error() string { return e.msg }

func protocolError(format string, args ...any) *streamError {
	return &streamError{probes.ReasonProtocol, fmt.Sprintf(format, args...)}
}

// phase is where the server's side of the conversation is: what the next
// packet is, as the driver will read it. The driver reads the server's
// packets in order, so the phase follows from the packets alone, given a
// model of the driver's login (see login): where the driver would stop
// reading, the parser goes on as if each packet began a command's response,
// the strictest phase, which a server that stops talking never reaches.
type phase uint8

const (
	phaseGreeting   phase = iota // the server's first packet
	phaseAwaitTLS                // after the greeting, before TLS: nothing may come
	phaseLogin                   // the result of the handshake response or of a method switch
	phaseLoginKey                // caching_sha2_password's public key
	phaseLoginFinal              // the login's last packet: OK or ERR
	phaseHeader                  // a command's response: OK, ERR or a column count
	phaseColumns                 // column definitions
	phaseColumnsEOF              // the EOF after them (without CLIENT_DEPRECATE_EOF)
	phaseRows                    // rows, up to an EOF (or OK) or an ERR
)

func (ph phase) login() bool { return ph >= phaseLogin && ph <= phaseLoginFinal }

// parser follows the server's packets, byte by byte as they arrive, and
// refuses the first one the driver must not see. It does no I/O (the fuzz
// targets drive it directly). It may rewrite the sequence number of a
// packet in the bytes it scans: see shiftSeq.
type parser struct {
	// passwordOK lets a request for the password itself through: in
	// clear text, or encrypted with a key the server supplies.
	passwordOK bool
	// expectTLS: the prober negotiates TLS after the greeting.
	expectTLS bool
	// shiftSeq lowers the sequence number of each login packet by one.
	// Over TLS the prober sent a packet (the TLS request) that the driver
	// does not know of, so the server counts one more than it.
	shiftSeq bool

	phase        phase
	header       [4]byte
	hdrLen       int    // bytes of the current header seen; 4 while in a body
	left         int    // body bytes of the current packet still to come
	body         []byte // the login packet being read, whole
	length       int    // of the current packet
	prefix       [packetPrefixBytes]byte
	prefixLen    int
	total        int
	columnsLeft  uint64
	deprecateEOF bool // the client asked for CLIENT_DEPRECATE_EOF

	// From the greeting.
	serverCaps uint32
	plugin     string // the authentication method the driver uses
	switched   bool   // the server switched methods once (the driver allows no second)
}

// clientCapabilities records the capabilities of the client's handshake
// response: they say whether an EOF packet follows column definitions.
func (p *parser) clientCapabilities(caps uint32) { p.deprecateEOF = caps&capDeprecateEOF != 0 }

// serverTLS reports whether the greeting offers TLS.
func (p *parser) serverTLS() bool { return p.serverCaps&capClientSSL != 0 }

// startTLS moves on to the login once the TLS handshake is done.
func (p *parser) startTLS() {
	if p.phase == phaseAwaitTLS {
		p.phase = phaseLogin
	}
}

// scan checks b, the next bytes from the server, and returns the refusal
// of the first packet the driver must not see. A refusal comes before the
// last byte of that packet has been scanned, so the driver, which acts on
// whole packets only, never acts on it.
func (p *parser) scan(b []byte) *streamError {
	if p.total += len(b); p.total > maxResponseBytes {
		return protocolError("the server sent more than %d bytes in one probe (a probe query should return one small row)", maxResponseBytes)
	}
	for len(b) > 0 {
		switch {
		case p.phase == phaseAwaitTLS:
			// Bytes sent in clear before TLS would be read as if
			// they came over it: an attacker's injection.
			return protocolError("the server sent data after its greeting, before the TLS handshake")
		case p.hdrLen < len(p.header):
			k := copy(p.header[p.hdrLen:], b)
			if p.shiftSeq && p.phase.login() && p.hdrLen <= 3 && 3 < p.hdrLen+k {
				b[3-p.hdrLen]--
				p.header[3]--
			}
			p.hdrLen += k
			b = b[k:]
			if p.hdrLen < len(p.header) {
				return nil
			}
			if err := p.startPacket(); err != nil {
				return err
			}
		default:
			k := min(len(b), p.left)
			if p.body != nil {
				p.body = append(p.body, b[:k]...)
			} else if p.prefixLen < len(p.prefix) {
				p.prefixLen += copy(p.prefix[p.prefixLen:], b[:k])
			}
			p.left -= k
			b = b[k:]
		}
		if p.hdrLen == len(p.header) && p.left == 0 {
			if err := p.endPacket(); err != nil {
				return err
			}
		}
	}
	return nil
}

// startPacket checks a packet's header.
func (p *parser) startPacket() *streamError {
	length := int(p.header[0]) | int(p.header[1])<<8 | int(p.header[2])<<16
	login := p.phase == phaseGreeting || p.phase.login()
	limit := maxPacketBytes
	if login {
		limit = maxLoginPacketBytes
	}
	switch {
	case p.phase == phaseGreeting && (length == 0 || length > limit):
		// "HTTP/1.1 400", an SMTP or a Redis greeting read as a
		// header claim megabytes.
		return protocolError("the server's first bytes %q are no MySQL greeting: not a MySQL server?", p.header[:])
	case length == 0:
		// Only the end of a packet of 16 MiB or more, which the
		// prober never accepts, has no body.
		return protocolError("the server sent an empty packet")
	case length > limit:
		return protocolError("the server sent a packet of %d bytes; the limit is %d", length, limit)
	}
	p.left, p.length = length, length
	p.prefixLen = 0
	p.body = nil
	if login {
		p.body = make([]byte, 0, length)
	}
	return nil
}

// endPacket checks a complete packet, before the driver sees its last
// byte, and moves on to the phase of the next one.
func (p *parser) endPacket() *streamError {
	p.hdrLen = 0
	body := p.body
	p.body = nil
	first := p.prefix[0]
	if body != nil {
		first = body[0]
	}
	switch p.phase {
	case phaseGreeting:
		return p.greeting(body)
	case phaseLogin, phaseLoginKey, phaseLoginFinal:
		return p.login(body)
	case phaseHeader:
		switch first {
		case pktOK:
			// Done, or more results follow: either way the next
			// packet the driver reads is a header again.
			if !okLayout(p.prefix[:p.prefixLen], p.length) {
				return malformed("OK")
			}
		case pktERR:
		case pktLocalInfile:
			// The driver would look the file name up in its
			// process-wide registry of readable files.
			return protocolError("the server asked for a local file (LOAD DATA LOCAL INFILE); the prober sends none")
		default:
			n, ok := lengthEncoded(p.prefix[:p.prefixLen])
			if !ok || n == 0 {
				return protocolError("the server sent a malformed result set header")
			}
			if n > maxColumns {
				return protocolError("the server announced a result of %d columns; the limit is %d", n, maxColumns)
			}
			p.columnsLeft, p.phase = n, phaseColumns
		}
	case phaseColumns:
		if p.columnsLeft--; p.columnsLeft == 0 {
			p.phase = phaseRows
			if !p.deprecateEOF {
				p.phase = phaseColumnsEOF
			}
		}
	case phaseColumnsEOF:
		p.phase = phaseRows // the driver skips this packet, whatever it is
	case phaseRows:
		// The driver ends the rows at any packet starting with 0xfe
		// (the 16 MiB string it could also begin is out of bounds).
		switch {
		case first == pktEOF && p.deprecateEOF && !okLayout(p.prefix[:p.prefixLen], p.length),
			first == pktEOF && !p.deprecateEOF && p.length < 5:
			return malformed("EOF")
		case first == pktEOF || first == pktERR:
			p.phase = phaseHeader
		}
	}
	return nil
}

// greeting reads the server's first packet: an error (too many connections,
// a host not allowed) or the protocol 10 handshake.
func (p *parser) greeting(body []byte) *streamError {
	switch body[0] {
	case pktERR:
		p.phase = phaseHeader // the driver reads no more
		return nil
	case protocolV10:
	default:
		return protocolError("the server greeted with protocol version %d, not %d: not a MySQL server?", body[0], protocolV10)
	}
	// As the driver reads it: version, NUL, connection id (4), scramble
	// (8), filler (1), capabilities (2); then character set (1), status
	// (2), capabilities (2), scramble length (1), reserved (10),
	// scramble (13), authentication method up to a NUL or the end.
	end := bytes.IndexByte(body[1:], 0)
	pos := 1 + end + 1 + 4 + 8 + 1
	if end < 0 || len(body) < pos+2+3+2+1+10+12 {
		// The driver refuses a shorter greeting, or (without the
		// second part of the scramble, as before MySQL 4.1) reads
		// past the 8 bytes it has.
		return malformed("greeting")
	}
	p.serverCaps = uint32(binary.LittleEndian.Uint16(body[pos:]))
	pos += 2
	p.serverCaps |= uint32(binary.LittleEndian.Uint16(body[pos+3:])) << 16
	if pos += 3 + 2 + 1 + 10 + 13; pos < len(body) {
		p.plugin = cString(body[pos:])
	}
	// The driver answers with the greeting's method if it can, else
	// with mysql_native_password (with a scramble of 20 bytes).
	if !p.driverSupports(p.plugin, 20) {
		p.plugin = "mysql_native_password"
	}
	if err := p.unsupportedOverTLS(); err != nil {
		return err
	}
	p.phase = phaseLogin
	if p.expectTLS {
		p.phase = phaseAwaitTLS
	}
	return nil
}

// unsupportedOverTLS refuses sha256_password over TLS: MySQL expects the
// password as it is there, and the driver, told of no TLS, would ask for
// the server's key instead (a failed login, counted against the account).
func (p *parser) unsupportedOverTLS() *streamError {
	if p.expectTLS && p.plugin == "sha256_password" {
		return &streamError{probes.ReasonAuth, "the server asked for sha256_password over TLS, which the prober does not support: give the probe's account caching_sha2_password or mysql_native_password"}
	}
	return nil
}

// login reads a packet of the authentication exchange and moves on as the
// driver (go-sql-driver/mysql v1.10, handleAuthResult) does. Where the
// driver fails the login, the parser moves on to phaseHeader.
func (p *parser) login(body []byte) *streamError {
	ph := p.phase
	p.phase = phaseHeader // the login succeeded, or the driver gave up
	switch {
	case body[0] == pktOK:
		if !okLayout(body, len(body)) {
			return malformed("OK")
		}
	case ph == phaseLoginFinal || body[0] == pktERR:
		// The driver's last read of the login.
	case ph == phaseLoginKey:
		if body[0] == pktAuthMoreData {
			if err := checkKey(body[1:]); err != nil {
				return err
			}
			p.phase = phaseLoginFinal // the driver sends the encrypted password
		}
	case body[0] == pktAuthMoreData:
		return p.moreData(body[1:])
	case body[0] == pktEOF && !p.switched:
		// A switch to another method, once: the method's name, NUL,
		// its data.
		p.switched = true
		name, data := "mysql_old_password", 0 // a lone 0xfe
		if len(body) > 1 {
			end := bytes.IndexByte(body, 0)
			if end < 0 {
				return nil // the driver gives up
			}
			name, data = string(body[1:end]), len(bytes.TrimSuffix(body[end+1:], []byte{0}))
			if name == "mysql_native_password" && len(body[end+1:]) < 20 {
				// The driver reads a 20-byte scramble, past the end.
				return malformed("authentication switch")
			}
		}
		p.plugin = cString([]byte(name))
		if err := p.unsupportedOverTLS(); err != nil {
			return err
		}
		if how := passwordSent(name); how != "" && !p.passwordOK {
			return refusePassword(p.plugin, how)
		}
		if p.driverSupports(name, data) {
			p.phase = phaseLogin
		}
	}
	return nil
}

// moreData follows an "authentication more data" packet of the login,
// whose content is data.
func (p *parser) moreData(data []byte) *streamError {
	switch {
	case p.plugin == "caching_sha2_password" && len(data) == 1 && data[0] == sha2FastAuthOK:
		p.phase = phaseLoginFinal
	case p.plugin == "caching_sha2_password" && len(data) == 1 && data[0] == sha2FullAuth && p.expectTLS:
		// Over TLS the driver (told it is on a socket, see Probe) sends
		// the password as it is, as MySQL expects there.
		if !p.passwordOK {
			return refusePassword(p.plugin, inClear)
		}
		p.phase = phaseLoginFinal
	case p.plugin == "caching_sha2_password" && len(data) == 1 && data[0] == sha2FullAuth:
		// The driver asks for the server's public key and sends the
		// password encrypted with it: without verification, the key
		// may be an attacker's.
		if !p.passwordOK {
			return refusePassword(p.plugin, byServerKey)
		}
		p.phase = phaseLoginKey
	case p.plugin == "sha256_password" && len(data) > 0:
		if !p.passwordOK { // data is the server's public key
			return refusePassword(p.plugin, byServerKey)
		}
		if err := checkKey(data); err != nil {
			return err
		}
		p.phase = phaseLoginFinal
	}
	// Otherwise the driver takes the login as done (empty data, or a
	// method without more steps), or gives up.
	return nil
}

// driverSupports reports whether the driver answers a request for an
// authentication method with data bytes of data, as its auth does with the
// prober's configuration.
func (p *parser) driverSupports(plugin string, data int) bool {
	switch plugin {
	case "caching_sha2_password", "sha256_password", "mysql_native_password":
		return true
	case "mysql_clear_password":
		return p.passwordOK
	case "client_ed25519":
		return data == 32
	}
	return false
}

// How an authentication method sends the password itself.
const (
	inClear     = "in clear text"
	byServerKey = "encrypted with a public key the server supplies, which may be anyone's"
)

// passwordSent says how an authentication method the server asks for sends
// the password itself, or "" when it sends only a proof of it.
func passwordSent(plugin string) string {
	switch plugin {
	case "mysql_clear_password", "dialog": // dialog: MariaDB's PAM method
		return inClear
	case "sha256_password":
		return byServerKey
	}
	return ""
}

func refusePassword(plugin, how string) *streamError {
	return &streamError{probes.ReasonAuth, fmt.Sprintf("the server asked for the password %s (%.40s) over a connection whose server is not verified; "+
		"the prober refused to send it (verify the server with TLS, or allow cleartext passwords explicitly)", how, plugin)}
}

func malformed(what string) *streamError {
	return protocolError("the server sent a malformed %s packet", what)
}

// okLayout reports whether an OK packet of length bytes, starting with
// prefix, holds its fields up to the status flags, which the driver reads
// without checking: the header, affected rows and last insert id
// (length-encoded integers), and the status (2 bytes).
func okLayout(prefix []byte, length int) bool {
	size := func(at int) int {
		if at >= len(prefix) {
			return 1 // the driver's size for nothing at all
		}
		switch prefix[at] {
		case 0xfc:
			return 3
		case 0xfd:
			return 4
		case 0xfe:
			return 9
		}
		return 1
	}
	n := size(1)
	return 1+n+size(1+n)+2 <= length
}

// checkKey checks the public key the server sends for
// caching_sha2_password or sha256_password as the driver reads it, which
// assumes RSA.
func checkKey(data []byte) *streamError {
	if block, _ := pem.Decode(data); block != nil {
		if key, err := x509.ParsePKIXPublicKey(block.Bytes); err == nil {
			if _, ok := key.(*rsa.PublicKey); ok {
				return nil
			}
		}
	}
	return protocolError("the server's public key is no PEM-encoded RSA key")
}

// cString returns b up to its first NUL, at most 64 bytes of it (a method
// name is short; a hostile one is only quoted).
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b[:min(len(b), 64)])
}

// lengthEncoded reads a length-encoded integer at the start of b; ok is
// false when b is too short or starts with a byte no integer starts with
// (0xfb is NULL, 0xff an error).
func lengthEncoded(b []byte) (n uint64, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	size := 0
	switch b[0] {
	case 0xfc:
		size = 2
	case 0xfd:
		size = 3
	case 0xfe:
		size = 8
	case 0xfb, 0xff:
		return 0, false
	default:
		return uint64(b[0]), true
	}
	if len(b) < 1+size {
		return 0, false
	}
	for i := size; i >= 1; i-- {
		n = n<<8 | uint64(b[i])
	}
	return n, true
}
