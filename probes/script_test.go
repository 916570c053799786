package probes

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// lineServer answers on loopback as a line-based server does: it sends
// greeting, then answers each line it reads with reply(line); an empty
// answer closes the connection. tlsCert, when set, makes it speak TLS first.
func lineServer(t *testing.T, tlsCert *tls.Certificate, greeting string, reply func(line string) string) Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			conn := c
			if tlsCert != nil {
				tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*tlsCert}})
				if err := tc.Handshake(); err != nil {
					return
				}
				conn = tc
			}
			if greeting != "" {
				if _, err := conn.Write([]byte(greeting)); err != nil {
					return
				}
			}
			r := bufio.NewReader(conn)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				answer := reply(strings.TrimRight(line, "\r\n"))
				if answer == "" {
					return
				}
				if _, err := conn.Write([]byte(answer)); err != nil {
					return
				}
			}
		}()
	})
	return targetOf(t, l)
}

// smtp is a mail server's greeting and EHLO answer.
func smtp(line string) string {
	if strings.HasPrefix(line, "EHLO ") {
		return "250-mail.example.test\r\n250-PIPELINING\r\n250 SIZE 10240000\r\n"
	}
	return "500 unknown command\r\n"
}

func expectText(s string) *Expect         { return &Expect{Literal: []byte(s)} }
func expectRegexp(s string) *Expect       { return &Expect{Regexp: s} }
func send(s string) Step                  { return Step{Send: []byte(s)} }
func sendExpect(s string, e *Expect) Step { return Step{Send: []byte(s), Expect: e} }

func TestTCPScript(t *testing.T) {
	good := newCA(t, "good CA")
	other := newCA(t, "other CA")
	cert, _, _ := good.Issue(t, "mail.example.test", "127.0.0.1")

	smtpServer := lineServer(t, nil, "220 mail.example.test ESMTP\r\n", smtp)
	smtpsServer := lineServer(t, &cert, "220 mail.example.test ESMTP\r\n", smtp)
	busyServer := lineServer(t, nil, "421 too busy, try later\r\n", smtp)
	redisServer := lineServer(t, nil, "", func(line string) string {
		if line == "PING" {
			return "+PONG\r\n"
		}
		return "-ERR unknown command\r\n"
	})
	memcached := lineServer(t, nil, "", func(line string) string { return "VERSION 1.6.21\r\n" })
	closer := rawTCPServerNow(t, func(c net.Conn) { _, _ = c.Write([]byte("22")) })
	// A server that greets with half a line and waits.
	halfLine := lineServer(t, nil, "22", smtp)
	endless := rawTCPServerNow(t, func(c net.Conn) { stream(c, 64<<20) })
	// A mail server that greets, then hangs on EHLO.
	hangsOnEHLO := lineServer(t, nil, "220 mail.example.test ESMTP\r\n", func(string) string {
		time.Sleep(time.Second)
		return ""
	})
	// A plain server that closes on the ClientHello.
	closesOnHello := rawTCPServer(t, func(net.Conn) {})
	silent := silentListener(t, "tcp4", "127.0.0.1")

	smtpSteps := []Step{
		{Expect: expectRegexp(`^220[ -]`)},
		sendExpect("EHLO swh.example.test\r\n", expectRegexp(`(?m)^250 `)),
	}
	for _, tc := range []struct {
		name   string
		target Target
		cfg    TCPConfig
		want   Reason
		in     string // in the message
	}{
		{"SMTP banner and EHLO", smtpServer, TCPConfig{Steps: smtpSteps}, ReasonOK, "2 steps as expected"},
		{"SMTP refusing with 421", busyServer, TCPConfig{Steps: smtpSteps}, ReasonExpectMismatch, `step 1: expected regexp "^220[ -]", not found in 25 bytes (nothing more arrived before the deadline): got "421 too busy`},
		{"Redis PING", redisServer, TCPConfig{Steps: []Step{sendExpect("PING\r\n", expectText("+PONG"))}}, ReasonOK, "1 steps"},
		{"Redis wrong answer", redisServer, TCPConfig{Steps: []Step{sendExpect("HELLO\r\n", expectText("+PONG"))}}, ReasonExpectMismatch, `got "-ERR unknown command\r\n"`},
		{"memcached version", memcached, TCPConfig{Steps: []Step{sendExpect("version\r\n", expectRegexp(`^VERSION \d+\.`))}}, ReasonOK, ""},
		{"bytes", redisServer, TCPConfig{Steps: []Step{{Send: []byte{'P', 'I', 'N', 'G', '\r', '\n'}, Expect: &Expect{Literal: []byte{'+', 'P'}}}}}, ReasonOK, ""},
		{"send only", redisServer, TCPConfig{Steps: []Step{send("PING\r\n")}}, ReasonOK, ""},
		{"server closes before a match", closer, TCPConfig{Steps: []Step{{Expect: expectText("220 ")}}}, ReasonExpectMismatch, "the server closed the connection"},
		{"half a line, then nothing", halfLine, TCPConfig{Steps: []Step{{Expect: expectText("220")}}}, ReasonExpectMismatch, "nothing more arrived before the deadline"},
		{"silent server", silent, TCPConfig{Steps: []Step{{Expect: expectText("220")}}}, ReasonTimeout, ""},
		{"endless stream", endless, TCPConfig{Steps: []Step{{Expect: expectText("220")}}}, ReasonExpectMismatch, "no match within 16384 bytes"},
		{"refused", refusedTarget(t, "tcp4", "127.0.0.1"), TCPConfig{Steps: smtpSteps}, ReasonRefused, ""},
		// What step 1 left over is not an answer to step 2.
		{"hangs after the banner", hangsOnEHLO, TCPConfig{Steps: []Step{{Expect: expectText("220")}, sendExpect("EHLO x\r\n", expectText("250"))}}, ReasonTimeout, "step 2"},
		{"TLS to a server that closes on the hello", closesOnHello, TCPConfig{TLS: true, InsecureSkipVerify: true}, ReasonTLS, ""},
		{"TLS first", smtpsServer, TCPConfig{TLS: true, CACert: good.PEM, ServerName: "mail.example.test", Steps: smtpSteps}, ReasonOK, "TLS 1.3, 2 steps"},
		{"TLS verifying the IP", smtpsServer, TCPConfig{TLS: true, CACert: good.PEM, Steps: smtpSteps}, ReasonOK, ""},
		{"TLS handshake only", smtpsServer, TCPConfig{TLS: true, CACert: good.PEM}, ReasonOK, "TLS 1.3"},
		{"TLS wrong CA", smtpsServer, TCPConfig{TLS: true, CACert: other.PEM, Steps: smtpSteps}, ReasonTLS, ""},
		{"TLS wrong name", smtpsServer, TCPConfig{TLS: true, CACert: good.PEM, ServerName: "other.example.test"}, ReasonTLS, ""},
		{"TLS insecure", smtpsServer, TCPConfig{TLS: true, InsecureSkipVerify: true, ServerName: "other.example.test", Steps: smtpSteps}, ReasonOK, ""},
		{"TLS to a plain server", smtpServer, TCPConfig{TLS: true, InsecureSkipVerify: true}, ReasonTLS, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewTCP(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			res := p.Probe(ctxTimeout(t, 500*time.Millisecond), tc.target)
			status := Failure
			if tc.want == ReasonOK {
				status = Success
			}
			wantReason(t, res, status, tc.want)
			if !strings.Contains(res.Message, tc.in) {
				t.Errorf("message %q does not contain %q", res.Message, tc.in)
			}
			if len(res.Message) > MaxMessageBytes {
				t.Errorf("message of %d bytes", len(res.Message))
			}
		})
	}
}

// rawTCPServerNow runs script on every connection at once, without
// waiting for the client to send anything.
func rawTCPServerNow(t *testing.T, script func(c net.Conn)) Target {
	t.Helper()
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) {
		go func() {
			defer c.Close()
			script(c)
		}()
	})
	return targetOf(t, l)
}

// TestTCPScriptHostile checks that a server streaming without end, or
// dripping bytes, costs one probe a bounded amount of memory and time.
func TestTCPScriptHostile(t *testing.T) {
	const deadline = 500 * time.Millisecond
	for _, tc := range []struct {
		name   string
		script func(c net.Conn)
		want   Reason
	}{
		{"64 MiB without a match", func(c net.Conn) { stream(c, 64<<20) }, ReasonExpectMismatch},
		{"a byte every 20 ms", func(c net.Conn) {
			for range 1000 {
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}, ReasonExpectMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := rawTCPServerNow(t, tc.script)
			p, err := NewTCP(TCPConfig{Steps: []Step{{Expect: expectRegexp(`^220 .*ESMTP`)}}})
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			res := p.Probe(ctxTimeout(t, deadline), target)
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			wantReason(t, res, Failure, tc.want)
			if allocated > 1<<20 {
				t.Errorf("the probe allocated %d bytes", allocated)
			}
			if res.Latency > deadline+time.Second {
				t.Errorf("the probe took %v with a %v deadline", res.Latency, deadline)
			}
		})
	}
}

func TestTCPScriptConfigErrors(t *testing.T) {
	ca := newCA(t, "CA")
	long := bytes.Repeat([]byte("x"), MaxSendBytes+1)
	for _, tc := range []struct {
		name string
		cfg  TCPConfig
		in   string
	}{
		{"empty step", TCPConfig{Steps: []Step{{}}}, "step 1 has neither Send nor Expect"},
		{"too many steps", TCPConfig{Steps: make([]Step, MaxScriptSteps+1)}, "at most 16"},
		{"long send", TCPConfig{Steps: []Step{{Send: long}}}, "at most 4096"},
		{"both patterns", TCPConfig{Steps: []Step{{Expect: &Expect{Literal: []byte("a"), Regexp: "a"}}}}, "not both"},
		{"no pattern", TCPConfig{Steps: []Step{{Expect: &Expect{}}}}, "set Literal or Regexp"},
		{"bad regexp", TCPConfig{Steps: []Step{{Expect: expectRegexp("(")}}}, "step 1: expect: regexp"},
		{"long pattern", TCPConfig{Steps: []Step{{Expect: expectRegexp(strings.Repeat("a", MaxExpectPatternBytes+1))}}}, "longer than"},
		{"large program", TCPConfig{Steps: []Step{{Expect: expectRegexp("(?:[a-z]?){500}z")}}}, "instructions, more than 256"},
		{"CA without TLS", TCPConfig{CACert: ca.PEM}, "need TLS"},
		{"CA and insecure", TCPConfig{TLS: true, CACert: ca.PEM, InsecureSkipVerify: true}, "mutually exclusive"},
		{"CA not PEM", TCPConfig{TLS: true, CACert: []byte("nope")}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewTCP(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("NewTCP: %v, want an error containing %q", err, tc.in)
			}
		})
	}
}

// chunkReader hands out its data at most size bytes per Read.
type chunkReader struct {
	data []byte
	size int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.size)], r.data)
	r.data = r.data[n:]
	return n, nil
}

// FuzzExpectSplit checks that an expect finds a match whether the bytes
// arrive as large reads or one byte at a time: a literal matches exactly
// when it is in the first MaxExpectBytes, and leaves what follows it; a
// regular expression that matches those bytes as a whole matches however
// they are split (it may match earlier, on a part: "$" is the end of what
// has arrived); nothing kept exceeds MaxExpectBytes.
func FuzzExpectSplit(f *testing.F) {
	f.Add([]byte("220 mail ESMTP\r\n"), []byte("220"), "^220 ")
	f.Add([]byte("+PONG\r\n"), []byte("PONG"), `\+PONG`)
	f.Add(bytes.Repeat([]byte("a"), MaxExpectBytes+10), []byte("b"), "b$")
	f.Add(bytes.Repeat([]byte("ab"), 3000), []byte("ba"), "(?s)b.{2000}a")
	f.Fuzz(func(t *testing.T, data, literal []byte, re string) {
		window := data[:min(len(data), MaxExpectBytes)]
		ctx := ctxTimeout(t, time.Second)
		readers := func() []io.Reader {
			return []io.Reader{&chunkReader{data: data, size: 1 << 20}, &chunkReader{data: data, size: 1}}
		}
		if len(literal) > 0 && len(literal) <= MaxExpectPatternBytes {
			m, err := compileExpect(Expect{Literal: literal})
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(window, literal)
			for _, r := range readers() {
				budget := regexpSearchBudget
				left, err := expectFrom(ctx, r, nil, m, 1, &budget)
				if (err == nil) != (i >= 0) {
					t.Fatalf("expectFrom: %v; pattern at %d of the first %d bytes", err, i, len(window))
				}
				if err == nil && !bytes.HasPrefix(data[i+len(literal):], left) {
					t.Fatalf("left %q, which does not follow the match", left)
				}
				if len(left) > MaxExpectBytes {
					t.Fatalf("kept %d bytes", len(left))
				}
			}
		}
		m, err := compileExpect(Expect{Regexp: re})
		if err != nil {
			return
		}
		whole := m.end(window) >= 0
		for _, r := range readers() {
			budget := regexpSearchBudget
			left, err := expectFrom(ctx, r, nil, m, 1, &budget)
			if whole && err != nil {
				t.Fatalf("%q matches the bytes as a whole, not as they arrive: %v", re, err)
			}
			if len(left) > MaxExpectBytes {
				t.Fatalf("kept %d bytes", len(left))
			}
		}
	})
}

// TestTCPScriptLineByLine: an answer written line by line, past the
// regular expressions' search budget, is matched when the server pauses,
// not at the deadline.
func TestTCPScriptLineByLine(t *testing.T) {
	target := rawTCPServerNow(t, func(c net.Conn) {
		for i := range 60 {
			if _, err := fmt.Fprintf(c, "250-line %02d %s\r\n", i, strings.Repeat("x", 38)); err != nil {
				return
			}
			time.Sleep(time.Millisecond)
		}
		_, _ = c.Write([]byte("250 OK\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c) // waits for the next command, or the close
	})
	p, err := NewTCP(TCPConfig{Steps: []Step{{Expect: expectRegexp(`(?m)^250 OK\r$`)}}})
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 3 * time.Second
	res := p.Probe(ctxTimeout(t, deadline), target)
	wantReason(t, res, Success, ReasonOK)
	if res.Latency > deadline/2 {
		t.Errorf("matched after %v: the search waited for the deadline (%v)", res.Latency, deadline)
	}
}
