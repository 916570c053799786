package probes

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// testServer is an httptest server on a given loopback address, with
// handlers for every case the tests need.
type testServer struct {
	*httptest.Server
	target Target

	mu       sync.Mutex
	requests []*http.Request // as received by /echo
	written  map[string]int  // bytes written by the endless handlers, once they stop
	sni      []string
}

func newTestServer(t *testing.T, network, host string, tlsCert *tls.Certificate) *testServer {
	t.Helper()
	s := &testServer{written: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		fmt.Fprintf(w, "status %d\x00 from the test server\n", code)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Clone(context.Background()))
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // until the prober hangs up
	})
	mux.HandleFunc("/slow-body", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	endless := func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 32<<10)
		total := 0
		for {
			n, err := w.Write(chunk)
			total += n
			if err != nil {
				break
			}
		}
		s.mu.Lock()
		s.written[r.URL.Path] = total
		s.mu.Unlock()
	}
	mux.HandleFunc("/endless", endless)
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(1<<30))
		endless(w, r)
	})

	s.Server = httptest.NewUnstartedServer(mux)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // failed handshakes are expected
	s.Listener.Close()
	s.Listener = listen(t, network, host)
	if tlsCert != nil {
		s.TLS = &tls.Config{
			Certificates: []tls.Certificate{*tlsCert},
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				s.mu.Lock()
				s.sni = append(s.sni, hello.ServerName)
				s.mu.Unlock()
				return nil, nil
			},
		}
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	s.target = targetOf(t, s.Listener)
	return s
}

func (s *testServer) lastRequest(t *testing.T) *http.Request {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.requests) == 0 {
		t.Fatal("the server saw no request")
	}
	return s.requests[len(s.requests)-1]
}

func newHTTP(t *testing.T, cfg HTTPConfig) *HTTPProber {
	t.Helper()
	p, err := NewHTTP(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHTTPStatusCodes(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			srv := newTestServer(t, lb.network, lb.host, nil)
			for _, tc := range []struct {
				expected []string
				method   string
				code     int
				want     Reason
			}{
				{nil, "", 200, ReasonOK},
				{nil, "", 204, ReasonOK},
				{nil, "", 301, ReasonOK}, // a redirect proves the server is up
				{nil, "", 399, ReasonOK},
				{nil, "", 400, ReasonHTTPStatus},
				{nil, "", 404, ReasonHTTPStatus},
				{nil, "", 503, ReasonHTTPStatus},
				{nil, "HEAD", 503, ReasonHTTPStatus},
				{nil, "HEAD", 200, ReasonOK},
				{[]string{"200"}, "", 200, ReasonOK},
				{[]string{"200"}, "", 204, ReasonHTTPStatus},
				{[]string{"200"}, "", 302, ReasonHTTPStatus},
				{[]string{"200-299", "418"}, "", 418, ReasonOK},
				{[]string{"500-599"}, "", 503, ReasonOK},
				{[]string{"500-599"}, "", 200, ReasonHTTPStatus},
			} {
				name := fmt.Sprintf("%v %s %d", tc.expected, tc.method, tc.code)
				p := newHTTP(t, HTTPConfig{Path: fmt.Sprintf("/status/%d", tc.code), Method: tc.method, ExpectedStatusCodes: tc.expected})
				res := p.Probe(ctxTimeout(t, 5*time.Second), srv.target)
				if res.Reason != tc.want {
					t.Errorf("%s: got %v, want %s", name, res, tc.want)
					continue
				}
				var se *StatusError
				if tc.want == ReasonHTTPStatus && (!errors.As(res.Err, &se) || se.Code != tc.code) {
					t.Errorf("%s: Err = %#v, want a StatusError for %d", name, res.Err, tc.code)
				}
			}
		})
	}
}

func TestHTTPFailureMessage(t *testing.T) {
	srv := newTestServer(t, "tcp4", "127.0.0.1", nil)
	res := newHTTP(t, HTTPConfig{Path: "/status/503"}).Probe(ctxTimeout(t, 5*time.Second), srv.target)
	want := "HTTP 503 Service Unavailable, expected 200-399: status 503  from the test server"
	if res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
}

func TestHTTPRedirectNotFollowed(t *testing.T) {
	elsewhere := newTestServer(t, "tcp4", "127.0.0.1", nil)
	mux := http.NewServeMux()
	mux.Handle("/", http.RedirectHandler(elsewhere.URL+"/echo", http.StatusFound))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	target := targetOf(t, srv.Listener)

	res := newHTTP(t, HTTPConfig{}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantReason(t, res, Success, ReasonOK)
	if res.Message != "HTTP 302 Found" {
		t.Errorf("message %q", res.Message)
	}

	res = newHTTP(t, HTTPConfig{ExpectedStatusCodes: []string{"200-299"}}).Probe(ctxTimeout(t, 5*time.Second), target)
	wantReason(t, res, Failure, ReasonHTTPStatus)
	if !strings.Contains(res.Message, elsewhere.URL+"/echo") {
		t.Errorf("the message does not show the Location: %q", res.Message)
	}

	elsewhere.mu.Lock()
	defer elsewhere.mu.Unlock()
	if len(elsewhere.requests) != 0 {
		t.Errorf("the redirect was followed")
	}
}

func TestHTTPRequest(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			srv := newTestServer(t, lb.network, lb.host, nil)
			probe := func(cfg HTTPConfig) *http.Request {
				t.Helper()
				res := newHTTP(t, cfg).Probe(ctxTimeout(t, 5*time.Second), srv.target)
				wantReason(t, res, Success, ReasonOK)
				return srv.lastRequest(t)
			}

			r := probe(HTTPConfig{Path: "/echo"})
			if r.Method != "GET" || r.RequestURI != "/echo" || r.Proto != "HTTP/1.1" {
				t.Errorf("request line %s %s %s", r.Method, r.RequestURI, r.Proto)
			}
			if r.Host != srv.target.Addr() {
				t.Errorf("default Host %q, want %q", r.Host, srv.target.Addr())
			}
			if !r.Close {
				t.Error("no Connection: close")
			}
			if ua := r.Header.Get("User-Agent"); !strings.HasPrefix(ua, "swh-probe/") {
				t.Errorf("User-Agent %q", ua)
			}
			if r.Header.Get("Accept") != "*/*" || r.Header.Get("Accept-Encoding") != "" {
				t.Errorf("Accept %q, Accept-Encoding %q", r.Header.Get("Accept"), r.Header.Get("Accept-Encoding"))
			}

			r = probe(HTTPConfig{
				Path:   "echo?probe=1&x=%2F",
				Method: "head",
				Host:   "app.example.test:8080",
				Headers: []Header{
					{Name: "User-Agent", Value: "custom/1"},
					{Name: "x-token", Value: "a"},
					{Name: "X-Token", Value: "b"},
				},
			})
			if r.Method != "HEAD" || r.RequestURI != "/echo?probe=1&x=%2F" {
				t.Errorf("request line %s %s", r.Method, r.RequestURI)
			}
			if r.Host != "app.example.test:8080" {
				t.Errorf("Host %q", r.Host)
			}
			if r.Header.Get("User-Agent") != "custom/1" || strings.Join(r.Header.Values("X-Token"), ",") != "a,b" {
				t.Errorf("headers %v", r.Header)
			}

			// A program that knows its version (the agent) sets the default;
			// a User-Agent among the headers still wins.
			r = probe(HTTPConfig{Path: "/echo", UserAgent: "swh-probe/v9.8.7"})
			if ua := r.Header.Get("User-Agent"); ua != "swh-probe/v9.8.7" {
				t.Errorf("User-Agent %q, want UserAgent's swh-probe/v9.8.7", ua)
			}
			r = probe(HTTPConfig{Path: "/echo", UserAgent: "swh-probe/v9.8.7", Headers: []Header{{Name: "user-agent", Value: "custom/2"}}})
			if ua := r.Header.Get("User-Agent"); ua != "custom/2" {
				t.Errorf("User-Agent %q, want the header's custom/2", ua)
			}

			r = probe(HTTPConfig{Path: "/echo", Headers: []Header{{Name: "host", Value: "[::1]"}}})
			if r.Host != "[::1]" {
				t.Errorf("Host from Headers %q", r.Host)
			}
			r = probe(HTTPConfig{Path: "/echo", Host: "::1"})
			if r.Host != "[::1]" {
				t.Errorf("bare IPv6 Host %q, want it bracketed", r.Host)
			}
		})
	}
}

func TestHTTPS(t *testing.T) {
	good := newCA(t, "good CA")
	other := newCA(t, "other CA")
	cert, _, _ := good.Issue(t, "app.example.test", "127.0.0.1", "::1")
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			srv := newTestServer(t, lb.network, lb.host, &cert)
			for _, tc := range []struct {
				name    string
				cfg     HTTPConfig
				want    Reason
				wantSNI string
			}{
				{"CA and Host", HTTPConfig{CACert: good.PEM, Host: "app.example.test"}, ReasonOK, "app.example.test"},
				{"CA and Host with port", HTTPConfig{CACert: good.PEM, Host: "app.example.test:443"}, ReasonOK, "app.example.test"},
				{"CA and the IP", HTTPConfig{CACert: good.PEM}, ReasonOK, ""},
				{"wrong CA", HTTPConfig{CACert: other.PEM, Host: "app.example.test"}, ReasonTLS, "app.example.test"},
				{"system roots", HTTPConfig{Host: "app.example.test"}, ReasonTLS, "app.example.test"},
				{"name not in the certificate", HTTPConfig{CACert: good.PEM, Host: "other.example.test"}, ReasonTLS, "other.example.test"},
				{"insecure", HTTPConfig{InsecureSkipVerify: true, Host: "other.example.test"}, ReasonOK, "other.example.test"},
			} {
				tc.cfg.Scheme = "HTTPS"
				tc.cfg.Path = "/status/200"
				res := newHTTP(t, tc.cfg).Probe(ctxTimeout(t, 5*time.Second), srv.target)
				if res.Reason != tc.want {
					t.Errorf("%s: got %v, want %s", tc.name, res, tc.want)
				}
				srv.mu.Lock()
				sni := srv.sni[len(srv.sni)-1]
				srv.mu.Unlock()
				if sni != tc.wantSNI {
					t.Errorf("%s: SNI %q, want %q", tc.name, sni, tc.wantSNI)
				}
			}

			// Plain HTTP to the TLS port: Go's server answers 400.
			res := newHTTP(t, HTTPConfig{}).Probe(ctxTimeout(t, 5*time.Second), srv.target)
			wantReason(t, res, Failure, ReasonHTTPStatus)
		})
	}

	// HTTPS to a plain HTTP port.
	plain := newTestServer(t, "tcp4", "127.0.0.1", nil)
	res := newHTTP(t, HTTPConfig{Scheme: "https", CACert: good.PEM}).Probe(ctxTimeout(t, 5*time.Second), plain.target)
	wantReason(t, res, Failure, ReasonTLS)
}

func TestHTTPTimeouts(t *testing.T) {
	srv := newTestServer(t, "tcp4", "127.0.0.1", nil)
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		path   string
		target Target
	}{
		{"accepts and never answers", "/", silentListener(t, "tcp4", "127.0.0.1")},
		{"handler hangs", "/hang", srv.target},
		{"body stalls", "/slow-body", srv.target},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := newHTTP(t, HTTPConfig{Path: tc.path}).Probe(ctxTimeout(t, timeout), tc.target)
			wantReason(t, res, Failure, ReasonTimeout)
			if res.Latency < timeout/2 || res.Latency > timeout+5*time.Second {
				t.Errorf("latency %v for a %v deadline", res.Latency, timeout)
			}
		})
	}
}

func TestHTTPBodies(t *testing.T) {
	srv := newTestServer(t, "tcp4", "127.0.0.1", nil)
	for _, path := range []string{"/endless", "/huge"} {
		t.Run(path, func(t *testing.T) {
			res := newHTTP(t, HTTPConfig{Path: path}).Probe(ctxTimeout(t, 30*time.Second), srv.target)
			wantReason(t, res, Success, ReasonOK)
			// The handler stops when the prober resets the connection.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				srv.mu.Lock()
				n, done := srv.written[path]
				srv.mu.Unlock()
				if done {
					t.Logf("the server wrote %d bytes before the prober hung up", n)
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the server is still writing")
				}
			}
		})
	}
}

func TestHTTPConnectionErrors(t *testing.T) {
	p := newHTTP(t, HTTPConfig{})
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), refusedTarget(t, "tcp4", "127.0.0.1")), Failure, ReasonRefused)

	respond := func(answer string) Target {
		l := listen(t, "tcp4", "127.0.0.1")
		serve(t, l, func(c net.Conn) {
			buf := make([]byte, 4096)
			_, _ = c.Read(buf) // the request
			_, _ = c.Write([]byte(answer))
			c.Close()
		})
		return targetOf(t, l)
	}
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), respond("SSH-2.0-OpenSSH_9.6\r\n")), Failure, ReasonProtocol)
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), respond("")), Failure, ReasonReset)
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), respond("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")), Failure, ReasonReset)
}

func TestHTTPConfigErrors(t *testing.T) {
	ca := newCA(t, "ca")
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
	}{
		{"scheme", HTTPConfig{Scheme: "ftp"}},
		{"method", HTTPConfig{Method: "POST"}},
		{"path with //", HTTPConfig{Path: "//evil.example/x"}},
		{"path with a fragment", HTTPConfig{Path: "/a#b"}},
		{"path with a space", HTTPConfig{Path: "/a b"}},
		{"path with a newline", HTTPConfig{Path: "/a\nb"}},
		{"status codes", HTTPConfig{ExpectedStatusCodes: []string{"2xx"}}},
		{"empty status code", HTTPConfig{ExpectedStatusCodes: []string{""}}},
		{"CA over http", HTTPConfig{CACert: ca.PEM}},
		{"insecure over http", HTTPConfig{InsecureSkipVerify: true}},
		{"CA and insecure", HTTPConfig{Scheme: "https", CACert: ca.PEM, InsecureSkipVerify: true}},
		{"CA garbage", HTTPConfig{Scheme: "https", CACert: []byte("not PEM")}},
		{"header name", HTTPConfig{Headers: []Header{{Name: "Bad Name", Value: "x"}}}},
		{"empty header name", HTTPConfig{Headers: []Header{{Name: "", Value: "x"}}}},
		{"header value", HTTPConfig{Headers: []Header{{Name: "X-A", Value: "a\r\nX-Injected: 1"}}}},
		{"user agent", HTTPConfig{UserAgent: "swh-probe/1\r\nX-Injected: 1"}},
		{"Host twice", HTTPConfig{Host: "a.test", Headers: []Header{{Name: "Host", Value: "b.test"}}}},
		{"Connection header", HTTPConfig{Headers: []Header{{Name: "connection", Value: "keep-alive"}}}},
		{"Content-Length header", HTTPConfig{Headers: []Header{{Name: "Content-Length", Value: "1"}}}},
		{"host with a path", HTTPConfig{Host: "a.test/x"}},
		{"host with userinfo", HTTPConfig{Host: "user@a.test"}},
		{"host with a bad port", HTTPConfig{Host: "a.test:http"}},
		{"host with port 0", HTTPConfig{Host: "a.test:0"}},
		{"host with a space", HTTPConfig{Host: "a test"}},
		{"host with an empty name", HTTPConfig{Host: ":80"}},
	} {
		_, err := NewHTTP(tc.cfg)
		if err == nil {
			t.Errorf("%s: NewHTTP accepted %+v", tc.name, tc.cfg)
			continue
		}
		// The package is named once: errors are read in events and logs.
		if msg := err.Error(); !strings.HasPrefix(msg, "probes: http: ") || strings.Count(msg, "probes:") != 1 {
			t.Errorf("%s: NewHTTP error %q, want it to start with %q and name the package once", tc.name, msg, "probes: http: ")
		}
	}
}
