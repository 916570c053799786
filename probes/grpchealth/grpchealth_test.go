package grpchealth

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

// TestProbeAnswers runs the prober against fake servers answering each
// outcome of a Check call, and checks the reason and the message.
func TestProbeAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(http.ResponseWriter, *request)
		service string
		reason  probes.Reason
		message string // the message, after "on <addr>: "
	}{
		{"SERVING", answerServing(Serving), "foo", probes.ReasonOK, "SERVING"},
		{"SERVING, server as a whole", answerServing(Serving), "", probes.ReasonOK, "SERVING"},
		{"NOT_SERVING", answerServing(NotServing), "foo", probes.ReasonGRPCNotServing, "NOT_SERVING"},
		{"UNKNOWN", answerServing(Unknown), "foo", probes.ReasonGRPCNotServing, "UNKNOWN"},
		{"an undefined serving status", answerServing(7), "foo", probes.ReasonGRPCNotServing, "ServingStatus(7)"},
		{"SERVICE_UNKNOWN", answerServing(ServiceUnknown), "foo", probes.ReasonGRPCServiceUnknown, "SERVICE_UNKNOWN"},
		{"empty message: UNKNOWN", answerMessage(frame(0, nil), "0", ""), "foo", probes.ReasonGRPCNotServing, "UNKNOWN"},
		{"unknown fields skipped", answerMessage(frame(0, []byte{
			0x10, 0x96, 0x01, // field 2, varint 150
			0x1a, 0x03, 'a', 'b', 'c', // field 3, bytes
			0x25, 1, 2, 3, 4, // field 4, fixed32
			0x08, 0x01, // status SERVING
			0x29, 1, 2, 3, 4, 5, 6, 7, 8, // field 5, fixed64
		}), "0", ""), "foo", probes.ReasonOK, "SERVING"},
		{"NOT_FOUND, trailers-only", answerTrailersOnly("5", "unknown service"), "foo",
			probes.ReasonGRPCServiceUnknown, "status NOT_FOUND (5): unknown service"},
		{"UNIMPLEMENTED, trailers-only", answerTrailersOnly("12", "unknown service grpc.health.v1.Health"), "",
			probes.ReasonGRPCUnimplemented, "status UNIMPLEMENTED (12): unknown service grpc.health.v1.Health"},
		{"UNAUTHENTICATED", answerTrailersOnly("16", "no token"), "foo", probes.ReasonAuth, "status UNAUTHENTICATED (16): no token"},
		{"UNAVAILABLE in trailers, percent-encoded", answerMessage(nil, "14", "shutting%20down: 100%25 %zz"), "foo",
			probes.ReasonGRPCStatus, "status UNAVAILABLE (14): shutting down: 100% %zz"},
		{"undefined code", answerTrailersOnly("42", ""), "foo", probes.ReasonGRPCStatus, "status 42"},
		{"OK without a message", answerTrailersOnly("0", ""), "foo", probes.ReasonProtocol, "status OK without a HealthCheckResponse"},
		{"no grpc-status", answerMessage(responseFrame(Serving), "", ""), "foo", probes.ReasonProtocol, "0 grpc-status fields"},
		{"grpc-status not a number", answerTrailersOnly("zero", ""), "foo", probes.ReasonProtocol, `grpc-status "zero" is not a number`},
		{"compressed message", answerMessage(frame(1, []byte{8, 1}), "0", ""), "foo", probes.ReasonProtocol, "compressed"},
		{"two messages", answerMessage(append(responseFrame(Serving), responseFrame(Serving)...), "0", ""), "foo",
			probes.ReasonProtocol, "more than one message"},
		{"truncated prefix", answerMessage([]byte{0, 0, 0}, "0", ""), "foo", probes.ReasonProtocol, "within a message prefix"},
		{"truncated message", answerMessage(frame(0, []byte{8, 1})[:6], "0", ""), "foo", probes.ReasonProtocol, "within a message of 2 bytes"},
		{"message too long", answerMessage(frame(0, make([]byte, MaxResponseMessageBytes+1)), "0", ""), "foo",
			probes.ReasonProtocol, "declares 1025 bytes, more than 1024"},
		{"malformed message", answerMessage(frame(0, []byte{0x08}), "0", ""), "foo", probes.ReasonProtocol, "truncated protobuf message"},
		{"wrong content type", func(w http.ResponseWriter, _ *request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>hello</html>")
		}, "foo", probes.ReasonProtocol, `not a gRPC response: HTTP/2.0 200, content type "text/html"`},
		{"HTTP 503", func(w http.ResponseWriter, _ *request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, "foo", probes.ReasonProtocol, `not a gRPC response: HTTP/2.0 503, content type "application/grpc"`},
		{"content type with +proto", func(w http.ResponseWriter, r *request) {
			answerServing(Serving)(w, r)
			w.Header().Set("Content-Type", "application/grpc+proto")
		}, "foo", probes.ReasonOK, "SERVING"},
		{"content type +json", func(w http.ResponseWriter, r *request) {
			w.Header().Set("Content-Type", "application/grpc+json")
			w.Header().Set("Grpc-Status", "0")
		}, "foo", probes.ReasonProtocol, `content type "application/grpc+json"`},
		{"server resets the stream", func(w http.ResponseWriter, _ *request) {
			panic(http.ErrAbortHandler)
		}, "foo", probes.ReasonReset, "stream error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, nil, tc.answer)
			p := newProber(t, Config{Service: tc.service})
			res := p.Probe(ctxTimeout(t, 5*time.Second), srv.Target)
			status := probes.Failure
			if tc.reason == probes.ReasonOK {
				status = probes.Success
			}
			wantReason(t, res, status, tc.reason)
			subject := `gRPC health of service "foo" on ` + srv.Target.Addr() + ": "
			if tc.service == "" {
				subject = "gRPC health of the server on " + srv.Target.Addr() + ": "
			}
			if !strings.HasPrefix(res.Message, subject) || !strings.Contains(res.Message[len(subject):], tc.message) {
				t.Errorf("message %q, want %q followed by %q", res.Message, subject, tc.message)
			}
			if seen := srv.requests(); len(seen) != 1 || seen[0].Service != tc.service || seen[0].BodyErr != nil {
				t.Errorf("the server saw %+v, want one request for %q", seen, tc.service)
			}
		})
	}
}

// TestLongServiceName checks that a long service name is sent whole but
// cut in messages, which keep their verdict.
func TestLongServiceName(t *testing.T) {
	service := strings.Repeat("é", MaxServiceBytes/2)
	srv := startFake(t, nil, answerServing(NotServing))
	res := newProber(t, Config{Service: service}).Probe(ctxTimeout(t, 5*time.Second), srv.Target)
	wantReason(t, res, probes.Failure, probes.ReasonGRPCNotServing)
	if want := `gRPC health of service "` + strings.Repeat("é", 62) + `…" on ` + srv.Target.Addr() + ": NOT_SERVING"; res.Message != want {
		t.Errorf("message %q, want %q", res.Message, want)
	}
	if seen := srv.requests(); len(seen) != 1 || seen[0].Service != service {
		t.Errorf("the server saw %d requests, for another service", len(seen))
	}
}

// TestProbeErrors checks the errors a caller may inspect with errors.As.
func TestProbeErrors(t *testing.T) {
	srv := startFake(t, nil, answerTrailersOnly("14", "draining"))
	res := newProber(t, Config{Service: "foo"}).Probe(ctxTimeout(t, 5*time.Second), srv.Target)
	var statusErr *StatusError
	if !errors.As(res.Err, &statusErr) || statusErr.Code != 14 || statusErr.Message != "draining" {
		t.Errorf("Err = %#v, want a *StatusError UNAVAILABLE draining", res.Err)
	}
	srv = startFake(t, nil, answerServing(NotServing))
	res = newProber(t, Config{Service: "foo"}).Probe(ctxTimeout(t, 5*time.Second), srv.Target)
	var servingErr *NotServingError
	if !errors.As(res.Err, &servingErr) || servingErr.Status != NotServing {
		t.Errorf("Err = %#v, want a *NotServingError NOT_SERVING", res.Err)
	}
}

// TestProbeRequest checks what reaches the server: the method and path,
// the gRPC header fields, the metadata, :authority and the deadline.
func TestProbeRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		authority string // "" for the target address
		userAgent string
	}{
		{"defaults", Config{}, "", "swh-probe"},
		{"metadata, user agent, authority", Config{
			Service:    "pkg.Svc",
			ServerName: "app.example.test:8443",
			UserAgent:  "swh-probe/1.2.3",
			Metadata: []probes.Header{
				{Name: "Authorization", Value: "Bearer s3cr3t"},
				{Name: "x-tenant", Value: "a"},
				{Name: "X-Tenant", Value: "b"},
			},
		}, "app.example.test:8443", "swh-probe/1.2.3"},
		{"IPv6 authority", Config{ServerName: "::1"}, "[::1]", "swh-probe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t, nil, answerServing(Serving))
			p := newProber(t, tc.cfg)
			wantReason(t, p.Probe(ctxTimeout(t, 3*time.Second), srv.Target), probes.Success, probes.ReasonOK)
			seen := srv.requests()
			if len(seen) != 1 {
				t.Fatalf("the server saw %d requests", len(seen))
			}
			r := seen[0]
			authority := tc.authority
			if authority == "" {
				authority = srv.Target.Addr()
			}
			h := r.Header
			for _, c := range []struct{ what, got, want string }{
				{"method", r.Method, "POST"},
				{"path", r.Path, "/grpc.health.v1.Health/Check"},
				{"protocol", r.Proto, "HTTP/2.0"},
				{":authority", r.Host, authority},
				{"service", r.Service, tc.cfg.Service},
				{"content-type", h.Get("Content-Type"), "application/grpc"},
				{"te", h.Get("Te"), "trailers"},
				{"user-agent", h.Get("User-Agent"), tc.userAgent},
				{"accept-encoding", h.Get("Accept-Encoding"), ""},
				{"grpc-accept-encoding", h.Get("Grpc-Accept-Encoding"), ""},
			} {
				if c.got != c.want {
					t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
				}
			}
			for _, md := range tc.cfg.Metadata {
				if got, want := strings.Join(h.Values(md.Name), ","), md.Value; !strings.Contains(got, want) {
					t.Errorf("metadata %s = %q, want it to hold %q", md.Name, got, want)
				}
			}
			// The server learns the probe's deadline, rounded up.
			timeout, err := parseTimeout(h.Get("Grpc-Timeout"))
			if err != nil || timeout <= 2*time.Second || timeout > 3*time.Second {
				t.Errorf("grpc-timeout %q (%v, %v), want a little under 3s", h.Get("Grpc-Timeout"), timeout, err)
			}
		})
	}
}

// TestProbeIPv6 probes a server on [::1]: the address is bracketed in
// :authority and dialed as such.
func TestProbeIPv6(t *testing.T) {
	srv := startFakeOn(t, listen(t, "tcp6", "::1"), nil, answerServing(Serving))
	res := newProber(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), srv.Target)
	wantReason(t, res, probes.Success, probes.ReasonOK)
	want := "[::1]:" + strconv.Itoa(srv.Target.Port)
	if seen := srv.requests(); len(seen) != 1 || seen[0].Host != want || !strings.Contains(res.Message, want) {
		t.Errorf("the server saw %+v, want one request for %s; message %q", seen, want, res.Message)
	}
}

// TestProbeConnection checks connection failures and that a probe without
// a deadline gets probes.DefaultTimeout.
func TestProbeConnection(t *testing.T) {
	p := newProber(t, Config{})
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), refusedTarget(t)), probes.Failure, probes.ReasonRefused)
	wantReason(t, p.Probe(ctxTimeout(t, 5*time.Second), probes.Target{Host: "127.0.0.1", Port: 0}),
		probes.Failure, probes.ReasonInvalidTarget)

	silent := probes.TargetFrom(silentAddr(t))
	res := p.Probe(t.Context(), silent) // no deadline: probes.DefaultTimeout
	wantReason(t, res, probes.Failure, probes.ReasonTimeout)
	if res.Latency < probes.DefaultTimeout || res.Latency > probes.DefaultTimeout+time.Second {
		t.Errorf("latency %v, want about %v", res.Latency, probes.DefaultTimeout)
	}
}

// TestProbeHTTP1Server probes servers that speak HTTP/1.1 only: net/http's
// and one that answers a canned HTTP/1.1 response to anything.
func TestProbeHTTP1Server(t *testing.T) {
	l := listen(t, "tcp4", "127.0.0.1")
	srv := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	// net/http's server answers the HTTP/2 preface with a 400 and closes
	// with the client's SETTINGS unread: the kernel resets the connection,
	// which may discard the 400 before the client reads it. Then the
	// client saw a reset, and says so.
	res := newProber(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), targetOf(t, l))
	t.Log(res)
	if res.Reason != probes.ReasonProtocol && res.Reason != probes.ReasonReset {
		t.Errorf("got %v, want a failure with reason protocol (or reset, when the 400 was lost)", res)
	}

	canned := rawServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	})
	res = newProber(t, Config{}).Probe(ctxTimeout(t, 5*time.Second), canned)
	t.Log(res)
	wantReason(t, res, probes.Failure, probes.ReasonProtocol)
}

// TestProbeConcurrent probes one server from many goroutines with one
// Prober (run with -race).
func TestProbeConcurrent(t *testing.T) {
	srv := startFake(t, nil, answerServing(Serving))
	p := newProber(t, Config{Service: "foo"})
	errs := make(chan error, 16)
	for range cap(errs) {
		go func() {
			var err error
			for range 10 {
				if res := p.Probe(ctxTimeout(t, 5*time.Second), srv.Target); !res.Passed() {
					err = errors.New(res.String())
				}
			}
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
