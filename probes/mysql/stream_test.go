package mysql

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// feed scans data through a parser in the given chunk sizes (the rest in
// one chunk), as the driver reads it, and returns the bytes handed on and
// the refusal.
func feed(p *parser, data []byte, chunks []int) ([]byte, *streamError) {
	data = bytes.Clone(data) // the parser renumbers in place
	var passed []byte
	for len(data) > 0 {
		n := len(data)
		if len(chunks) > 0 {
			n, chunks = max(1, min(chunks[0], n)), chunks[1:]
		}
		if err := p.scan(data[:n]); err != nil {
			return passed, err
		}
		passed = append(passed, data[:n]...)
		data = data[n:]
	}
	return passed, nil
}

func verdict(e *streamError) string {
	if e == nil {
		return "accepted"
	}
	return string(e.reason) + ": " + e.msg
}

func packets(first byte, bodies ...[]byte) []byte {
	var out []byte
	for i, b := range bodies {
		out = append(out, packet(first+byte(i), b)...)
	}
	return out
}

// Conversations of a server, packet by packet.
var (
	greetingNative = (&myBackend{}).greeting()
	greetingSHA2   = (&myBackend{plugin: "caching_sha2_password"}).greeting()
	greetingTLS    = (&myBackend{tls: &tls.Config{}}).greeting()
	columnPacket   = (&myBackend{column: &myColumn{0x08, text("1")}}).result()[1]
	rsaKeyPEM      = func() []byte {
		key, err := rsa.GenerateKey(rand.Reader, 1024) // only parsed
		if err != nil {
			panic(err)
		}
		der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
		if err != nil {
			panic(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}()
	eofOK = []byte{pktEOF, 0, 0, 2, 0, 0, 0}
)

func TestParser(t *testing.T) {
	login := func(g []byte, more ...[]byte) []byte {
		return append(packet(0, g), packets(2, more...)...)
	}
	okLogin := login(greetingNative, okPacket)
	result := func(deprecateEOF bool, rows ...[]byte) []byte {
		bodies := [][]byte{{1}, columnPacket}
		if !deprecateEOF {
			bodies = append(bodies, []byte{pktEOF, 0, 0, 2, 0})
		}
		bodies = append(bodies, rows...)
		if deprecateEOF {
			return packets(1, append(bodies, eofOK)...)
		}
		return packets(1, append(bodies, []byte{pktEOF, 0, 0, 2, 0})...)
	}
	big := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name       string
		data       []byte
		passwordOK bool
		oldEOF     bool
		want       string // "accepted", or the start of the refusal
	}{
		{"login and one row", append(okLogin, result(true, []byte("\x011"))...), false, false, "accepted"},
		{"login and rows with EOF packets", append(okLogin, result(false, []byte("\x011"), []byte("\xfb"))...), false, true, "accepted"},
		{"NULL first column (0xfb) in a row", append(okLogin, result(true, []byte("\xfb"))...), false, false, "accepted"},
		{"OK, then more results", append(okLogin, append(packet(1, []byte{0, 0, 0, 0x0a, 0, 0, 0}), result(true)[4:]...)...), false, false, "accepted"},
		{"error greeting", packet(0, errPacket(1040, "08004", "Too many connections")), false, false, "accepted"},
		{"error after the login", login(greetingNative, errPacket(1045, "28000", "denied")), false, false, "accepted"},
		{"fast caching_sha2_password", login(greetingSHA2, []byte{1, 3}, okPacket), false, false, "accepted"},
		{"full caching_sha2_password, refused", login(greetingSHA2, []byte{1, 4}), false, false, "auth: the server asked for the password encrypted"},
		{"full caching_sha2_password, allowed", login(greetingSHA2, []byte{1, 4}, append([]byte{1}, rsaKeyPEM...), okPacket), true, false, "accepted"},
		{"full caching_sha2_password, bad key", login(greetingSHA2, []byte{1, 4}, []byte("\x01garbage")), true, false, "protocol: the server's public key"},
		{"switch to cleartext, refused", login(greetingNative, []byte("\xfemysql_clear_password\x00")), false, false, "auth: the server asked for the password in clear text (mysql_clear_password)"},
		{"switch to cleartext, allowed", login(greetingNative, []byte("\xfemysql_clear_password\x00"), okPacket), true, false, "accepted"},
		{"switch to sha256_password, refused", login(greetingNative, []byte("\xfesha256_password\x00")), false, false, "auth: the server asked for the password encrypted"},
		{"switch to PAM, refused", login(greetingNative, []byte("\xfedialog\x00")), false, false, "auth: the server asked for the password in clear text (dialog)"},
		{"switch to native", login(greetingNative, append(append([]byte("\xfemysql_native_password\x00"), scramble...), 0), okPacket), false, false, "accepted"},
		{"greeting junk", []byte("220 smtp.example.test ESMTP\r\n"), false, false, "protocol: the server's first bytes \"220 \""},
		{"greeting of protocol 9", packet(0, append([]byte{9}, greetingNative[1:]...)), false, false, "protocol: the server greeted with protocol version 9"},
		{"empty greeting", packet(0, nil), false, false, "protocol: the server's first bytes"},
		{"login packet of 9 KiB", login(greetingNative, big(9<<10)), false, false, "protocol: the server sent a packet of 9216 bytes; the limit is 8192"},
		{"empty packet", append(okLogin, packet(1, nil)...), false, false, "protocol: the server sent an empty packet"},
		{"row of 65 KiB", append(okLogin, append(result(true)[:len(result(true))-len(packet(3, eofOK))], packet(3, big(65<<10))...)...), false, false, "protocol: the server sent a packet of 66560 bytes; the limit is 65536"},
		{"4097 columns", append(okLogin, packet(1, []byte{0xfc, 0x01, 0x10})...), false, false, "protocol: the server announced a result of 4097 columns"},
		{"4096 columns", append(okLogin, packet(1, []byte{0xfc, 0x00, 0x10})...), false, false, "accepted"},
		{"no columns", append(okLogin, packet(1, []byte{0xfc, 0, 0})...), false, false, "protocol: the server sent a malformed result set header"},
		{"truncated column count", append(okLogin, packet(1, []byte{0xfd, 1})...), false, false, "protocol: the server sent a malformed result set header"},
		{"LOCAL INFILE", append(okLogin, packet(1, []byte("\xfb/etc/passwd"))...), false, false, "protocol: the server asked for a local file"},
		{"truncated OK", login(greetingNative, []byte{0, 0xfe, 1}), false, false, "protocol: the server sent a malformed OK packet"},
		{"truncated EOF", append(okLogin, packets(1, []byte{1}, columnPacket, []byte{pktEOF, 0})...), false, false, "protocol: the server sent a malformed EOF packet"},
		{"too much", append(okLogin, bytes.Repeat(packet(1, big(60<<10)), 5)...), false, false, "protocol: the server sent more than 262144 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want string
			for _, chunks := range [][]int{nil, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {3, 5, 7, 2}, {4096}} {
				p := &parser{passwordOK: tc.passwordOK, deprecateEOF: !tc.oldEOF}
				_, err := feed(p, tc.data, chunks)
				got := verdict(err)
				if !strings.HasPrefix(got, tc.want) {
					t.Fatalf("chunks %v: %s, want %s", chunks, got, tc.want)
				}
				if want == "" {
					want = got
				} else if got != want {
					t.Errorf("chunks %v: %s, but %s with other chunks", chunks, got, want)
				}
			}
		})
	}
}

// TestParserTLS: nothing may come between the greeting and TLS; over TLS,
// the login's packets are renumbered one lower, commands' are not.
func TestParserTLS(t *testing.T) {
	p := &parser{expectTLS: true}
	if _, err := feed(p, append(packet(0, greetingTLS), packet(1, okPacket)...), nil); err == nil || !strings.Contains(err.msg, "before the TLS handshake") {
		t.Fatalf("bytes before TLS: %s", verdict(err))
	}

	p = &parser{expectTLS: true}
	if _, err := feed(p, packet(0, greetingTLS), nil); err != nil || p.phase != phaseAwaitTLS || !p.serverTLS() {
		t.Fatalf("greeting: %s, phase %d, TLS offered %v", verdict(err), p.phase, p.serverTLS())
	}
	p.shiftSeq = true
	p.startTLS()
	// The server numbers from the TLS request (1): its switch is 3, the
	// driver's answer 4, its OK 5.
	server := packet(3, append(append([]byte("\xfemysql_native_password\x00"), scramble...), 0))
	server = append(server, packet(5, okPacket)...)
	server = append(server, packets(1, []byte{1}, columnPacket, []byte("\x011"), eofOK)...)
	passed, err := feed(p, server, []int{2, 3, 1, 9})
	if err != nil {
		t.Fatal(verdict(err))
	}
	var seqs []byte
	for b := passed; len(b) >= 4; {
		n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
		seqs = append(seqs, b[3])
		b = b[4+n:]
	}
	if want := []byte{2, 4, 1, 2, 3, 4}; !bytes.Equal(seqs, want) {
		t.Errorf("sequence numbers %v, want %v", seqs, want)
	}
}

func TestLengthEncoded(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want uint64
		ok   bool
	}{
		{nil, 0, false}, {[]byte{0}, 0, true}, {[]byte{250}, 250, true},
		{[]byte{0xfb}, 0, false}, {[]byte{0xff}, 0, false},
		{[]byte{0xfc, 1, 2}, 0x0201, true}, {[]byte{0xfc, 1}, 0, false},
		{[]byte{0xfd, 1, 2, 3}, 0x030201, true},
		{[]byte{0xfe, 1, 2, 3, 4, 5, 6, 7, 8}, 0x0807060504030201, true}, {[]byte{0xfe, 1, 2, 3, 4, 5, 6, 7}, 0, false},
	} {
		if got, ok := lengthEncoded(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("lengthEncoded(%x) = %d, %v", tc.in, got, ok)
		}
	}
}

// appendLengthEncoded is the protocol's encoding, as the driver writes it.
func appendLengthEncoded(b []byte, n uint64) []byte {
	switch {
	case n <= 250:
		return append(b, byte(n))
	case n <= 0xffff:
		return binary.LittleEndian.AppendUint16(append(b, 0xfc), uint16(n))
	case n <= 0xffffff:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), n)
}

// FuzzParser feeds a conversation, split into chunks, to the parser: it
// never panics, gives the same verdict whatever the chunks, and what it
// hands on stays within the bounds.
func FuzzParser(f *testing.F) {
	f.Add(append(packet(0, greetingNative), packets(2, okPacket)...), []byte{1, 2, 3}, uint8(0))
	f.Add(append(append(packet(0, greetingNative), packets(2, okPacket)...), packets(1, []byte{1}, columnPacket, []byte("\x011"), eofOK)...), []byte{7}, uint8(1))
	f.Add(append(packet(0, greetingSHA2), packets(2, []byte{1, 4}, append([]byte{1}, rsaKeyPEM...), okPacket)...), []byte{}, uint8(3))
	f.Add(append(packet(0, greetingTLS), packet(1, okPacket)...), []byte{5}, uint8(4))
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"), []byte{}, uint8(0))
	f.Fuzz(func(t *testing.T, data, chunkBytes []byte, flags uint8) {
		newParser := func() *parser {
			return &parser{passwordOK: flags&1 != 0, deprecateEOF: flags&2 == 0, expectTLS: flags&4 != 0}
		}
		var chunks []int
		for _, c := range chunkBytes {
			chunks = append(chunks, int(c)+1)
		}
		whole, wholeErr := feed(newParser(), data, nil)
		passed, err := feed(newParser(), data, chunks)
		ones := make([]int, len(data))
		for i := range ones {
			ones[i] = 1
		}
		byByte, byteErr := feed(newParser(), data, ones)
		if verdict(err) != verdict(wholeErr) || verdict(err) != verdict(byteErr) {
			t.Fatalf("verdicts differ: whole %s; chunks %s; bytes %s", verdict(wholeErr), verdict(err), verdict(byteErr))
		}
		if err == nil && (!bytes.Equal(passed, whole) || !bytes.Equal(passed, byByte)) {
			t.Fatal("accepted bytes differ with the chunks")
		}
		if !bytes.HasPrefix(byByte, passed) || !bytes.HasPrefix(byByte, whole) {
			t.Fatal("the bytes handed on are not a prefix of those handed on byte by byte")
		}
		if err != nil && len(byByte) >= len(data) {
			t.Fatal("refused, yet every byte was handed on")
		}
		if len(byByte) > maxResponseBytes {
			t.Fatalf("%d bytes handed on", len(byByte))
		}
		// No complete packet handed on exceeds the bound.
		for b := byByte; len(b) >= 4; {
			n := int(b[0]) | int(b[1])<<8 | int(b[2])<<16
			if n > maxPacketBytes && len(b) >= 4+n {
				t.Fatalf("a packet of %d bytes was handed on", n)
			}
			if len(b) < 4+n {
				break
			}
			b = b[4+n:]
		}
	})
}

// FuzzLengthEncoded: lengthEncoded reads back what the protocol's encoding
// wrote, and never panics on anything else.
func FuzzLengthEncoded(f *testing.F) {
	for _, n := range []uint64{0, 250, 251, 0xffff, 0x10000, 0xffffff, 1 << 24, 1<<64 - 1} {
		f.Add(n, []byte{})
	}
	f.Add(uint64(0), []byte{0xfe, 1})
	f.Fuzz(func(t *testing.T, n uint64, raw []byte) {
		lengthEncoded(raw)
		if got, ok := lengthEncoded(appendLengthEncoded(nil, n)); !ok || got != n {
			t.Fatalf("%d reads back as %d, %v", n, got, ok)
		}
	})
}

// FuzzTruthy: the words and numbers of truthyText are read whatever their
// case and surrounding space, and never panic.
func FuzzTruthy(f *testing.F) {
	for _, s := range []string{"0", "1", "false", "OFF", "0.00", "-0e5", "yes", "", "NULL", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := truthyText(s)
		if truthy([]byte(s)) != got || truthy(s) != got {
			t.Fatalf("%q: string and bytes differ", s)
		}
		if isASCII(s) {
			if v := truthyText(" \t" + strings.ToUpper(s) + "\n"); v != got {
				t.Fatalf("%q is %v, upper-cased and spaced %v", s, got, v)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// FuzzProbe runs whole probes against a server that sends the fuzzer's
// bytes, through the driver: a probe always ends with a reason within its
// deadline, and the driver never panics while logging in (a panic there
// would leave the driver's watcher goroutine behind: the parser must
// refuse what would cause one). With turns, the server sends one packet
// each time the client reads, as a server answering in turn does;
// otherwise all at once.
func FuzzProbe(f *testing.F) {
	login := append(packet(0, greetingNative), packets(2, okPacket)...)
	f.Add(login, true, false)
	f.Add(append(login, packets(1, []byte{1}, columnPacket, []byte("\x010"), eofOK)...), true, false)
	f.Add(append(login, packets(1, []byte{1}, columnPacket, []byte("\x01x"), eofOK)...), false, false)
	f.Add(append(login, packets(1, []byte{0, 0, 0, 0x0a, 0, 0, 0}, []byte{1}, columnPacket, []byte("\xfb"), eofOK)...), true, false)
	// The server numbers its packets on from the client's: 2, then 4
	// after the client's 3, and so on.
	sha2 := func(key []byte) []byte {
		return append(append(append(packet(0, greetingSHA2), packet(2, []byte{1, 4})...), packet(4, append([]byte{1}, key...))...), packet(6, okPacket)...)
	}
	f.Add(sha2(rsaKeyPEM), true, true)
	f.Add(append(append(packet(0, greetingNative), packet(2, append(append([]byte("\xfemysql_native_password\x00"), scramble...), 0))...), packet(4, okPacket)...), true, false)
	f.Add(append(append(packet(0, greetingNative), packet(2, []byte("\xfemysql_clear_password\x00"))...), packet(4, okPacket)...), true, true)
	// What would make the driver panic while logging in, were it not
	// refused: a truncated OK, a short scramble, a key other than RSA.
	f.Add(append(packet(0, greetingNative), packets(2, []byte{0, 0xfc})...), true, false)
	f.Add(packet(0, greetingNative[:bytes.Index(greetingNative, scramble[:8])+8+1+2]), true, false)
	f.Add(append(packet(0, greetingNative), packets(2, []byte("\xfemysql_native_password\x00abc\x00"))...), true, false)
	f.Add(sha2(ecKeyPEM), true, true)
	f.Fuzz(func(t *testing.T, data []byte, turns, allow bool) {
		dial := dialerFunc(func(context.Context, string, string) (net.Conn, error) {
			return &scriptedConn{data: data, turns: turns}, nil
		})
		p := newMy(t, Config{Password: "pw", AllowCleartextPassword: allow, Dialer: dial})
		const timeout = 500 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		res := p.Probe(ctx, probes.Target{Host: "127.0.0.1", Port: 3306})
		if res.Status == probes.Unknown || res.Reason == "" || res.Message == "" || len(res.Message) > probes.MaxMessageBytes {
			t.Fatalf("result %#v", res)
		}
		if strings.Contains(res.Message, "while logging in") {
			t.Fatalf("the driver panicked while logging in: %s", res.Message)
		}
		if res.Latency > timeout+time.Second {
			t.Fatalf("the probe took %v", res.Latency)
		}
	})
}

// scriptedConn is a server in memory that sends data and drops what the
// client writes; then every read is io.EOF. With turns, a read returns at
// most the rest of one packet (by the packets' headers).
type scriptedConn struct {
	data  []byte
	turns bool
	left  int // bytes of the current packet not yet read
}

func (c *scriptedConn) Read(b []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if c.turns {
		if c.left == 0 && len(c.data) >= 4 {
			c.left = 4 + (int(c.data[0]) | int(c.data[1])<<8 | int(c.data[2])<<16)
		}
		if c.left > 0 {
			n = min(n, c.left)
		}
	}
	n = copy(b, c.data[:n])
	c.data = c.data[n:]
	c.left = max(0, c.left-n)
	return n, nil
}

func (c *scriptedConn) Write(b []byte) (int, error)        { return len(b), nil }
func (c *scriptedConn) Close() error                       { return nil }
func (c *scriptedConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *scriptedConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *scriptedConn) SetDeadline(t time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(t time.Time) error { return nil }
