package probes

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestHTTPExpectBody(t *testing.T) {
	srv := newTestServer(t, "tcp4", "127.0.0.1", nil)
	// A chunked body whose text comes after 2 KiB of padding.
	late := rawHTTPServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + strings.Repeat(" ", 2048) + "\r\n7\r\nhealthy\r\n0\r\n\r\n"))
	})
	// Bodies that stop coming: a match so far passes, a mismatch is one,
	// a body cut short of its length is not.
	stalls := func(body string) Target {
		return rawHTTPServer(t, func(c net.Conn) {
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n"))
			time.Sleep(time.Second)
		})
	}
	cut := rawHTTPServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"status\": "))
	})
	for _, tc := range []struct {
		name   string
		target Target
		cfg    HTTPConfig
		want   Reason
		in     string
	}{
		{"literal", srv.target, HTTPConfig{Path: "/status/200", ExpectBody: expectText("from the test server")}, ReasonOK, "HTTP 200 OK, body matches"},
		{"regexp", srv.target, HTTPConfig{Path: "/status/200", ExpectBody: expectRegexp(`^status 2\d\d\x00`)}, ReasonOK, ""},
		{"no match", srv.target, HTTPConfig{Path: "/status/200", ExpectBody: expectText("healthy")}, ReasonBodyMismatch,
			`HTTP 200 OK: body: expected "healthy", not found in 33 bytes (searched the whole body): got "status 200\x00 from the test server\n"`},
		{"status first", srv.target, HTTPConfig{Path: "/status/503", ExpectBody: expectText("status")}, ReasonHTTPStatus, "HTTP 503"},
		{"past the default 1 KiB", late, HTTPConfig{ExpectBody: expectText("healthy")}, ReasonBodyMismatch, "searched the first 1024 bytes"},
		{"within a larger window", late, HTTPConfig{ExpectBody: expectText("healthy"), ExpectBodyBytes: 4096}, ReasonOK, ""},
		{"endless body", srv.target, HTTPConfig{Path: "/endless", ExpectBody: expectText("x"), ExpectBodyBytes: MaxExpectBodyBytes}, ReasonBodyMismatch, "searched the first 65536 bytes"},
		{"body that never comes", srv.target, HTTPConfig{Path: "/slow-body", ExpectBody: expectText("x")}, ReasonTimeout, ""},
		{"a match, then a stall", stalls(`{"status": "ok"`), HTTPConfig{ExpectBody: expectText(`"ok"`)}, ReasonOK, ""},
		{"a mismatch, then a stall", stalls(`{"status": "down"`), HTTPConfig{ExpectBody: expectText(`"ok"`)}, ReasonBodyMismatch, "nothing more of the body arrived before the deadline"},
		{"a body cut short", cut, HTTPConfig{ExpectBody: expectText(`"ok"`)}, ReasonReset, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := newHTTP(t, tc.cfg).Probe(ctxTimeout(t, 500*time.Millisecond), tc.target)
			status := Failure
			if tc.want == ReasonOK {
				status = Success
			}
			wantReason(t, res, status, tc.want)
			if !strings.Contains(res.Message, tc.in) {
				t.Errorf("message %q does not contain %q", res.Message, tc.in)
			}
		})
	}
}

func TestHTTPExpectBodyConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
		in   string
	}{
		{"HEAD", HTTPConfig{Method: "HEAD", ExpectBody: expectText("ok")}, "needs method GET"},
		{"window too large", HTTPConfig{ExpectBody: expectText("ok"), ExpectBodyBytes: MaxExpectBodyBytes + 1}, "out of range"},
		{"negative window", HTTPConfig{ExpectBody: expectText("ok"), ExpectBodyBytes: -1}, "out of range"},
		{"bad regexp", HTTPConfig{ExpectBody: expectRegexp("a**")}, "ExpectBody: regexp"},
		{"empty", HTTPConfig{ExpectBody: &Expect{}}, "set Literal or Regexp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewHTTP(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("NewHTTP: %v, want an error containing %q", err, tc.in)
			}
		})
	}
}
