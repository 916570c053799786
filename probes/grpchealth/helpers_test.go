package grpchealth

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/internal/testca"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// Every test talks to 127.0.0.1 or [::1] only, and must leave no goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ca is a throw-away certificate authority (testca, shared by the
// module's tests).
type ca = testca.CA

func newCA(t testing.TB, name string) *ca { return testca.New(t, name) }

// The loopback servers the tests probe (see testnet).
func listen(t testing.TB, network, host string) net.Listener { return testnet.Listen(t, network, host) }
func targetOf(t testing.TB, l net.Listener) probes.Target {
	return probes.TargetFrom(testnet.AddrPort(t, l))
}
func refusedTarget(t testing.TB) probes.Target {
	return probes.TargetFrom(testnet.Refused(t, "tcp4", "127.0.0.1"))
}
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) { testnet.Serve(t, l, handle) }
func ctxTimeout(t testing.TB, d time.Duration) context.Context  { return testnet.Context(t, d) }

// dialerFunc is a probes.Dialer made of a function.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

func newProber(t testing.TB, cfg Config) *Prober {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return p
}

func wantReason(t testing.TB, got probes.Result, status probes.Status, reason probes.Reason) {
	t.Helper()
	if got.Status != status || got.Reason != reason {
		t.Fatalf("got %v, want %s (%s)", got, status, reason)
	}
	if got.Message == "" {
		t.Errorf("result has no message: %#v", got)
	}
	if (got.Err == nil) != (status == probes.Success) {
		t.Errorf("Err = %v for a %s", got.Err, status)
	}
}

// parseRequestFrame decodes a request body: one uncompressed gRPC message
// holding a HealthCheckRequest, and nothing else.
func parseRequestFrame(body []byte) (string, error) {
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return "", fmt.Errorf("bad request frame % .16x", body)
	}
	return parseRequest(body[5:])
}

// parseRequest decodes HealthCheckRequest{string service = 1}: the
// server's side, for the fake servers and the encoder's tests.
func parseRequest(b []byte) (string, error) {
	service := ""
	for len(b) > 0 {
		var (
			f   field
			err error
		)
		if f, b, err = nextField(b); err != nil {
			return "", fmt.Errorf("decoding HealthCheckRequest: %w", err)
		}
		if f.num == 1 && f.wireType == wireBytes {
			if !utf8.Valid(f.bytes) {
				return "", errors.New("decoding HealthCheckRequest: service is not UTF-8")
			}
			service = string(f.bytes)
		}
	}
	return service, nil
}

// responseFrame is a gRPC message holding HealthCheckResponse{status}.
func responseFrame(status ServingStatus) []byte {
	msg := binary.AppendUvarint([]byte{1<<3 | wireVarint}, uint64(int64(status)))
	return frame(0, msg)
}

// frame is a gRPC message with its 5-byte prefix.
func frame(flag byte, msg []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(msg))), msg...)
}

// request is what a fake server saw of one call.
type request struct {
	Method, Path, Proto, Host string
	ServerName                string // the TLS SNI, "" without TLS
	Header                    http.Header
	Service                   string
	BodyErr                   error
}

// fakeServer is a gRPC health server made of net/http's HTTP/2 server
// (h2c, or TLS when tlsConfig is not nil); answer writes each response.
type fakeServer struct {
	Target probes.Target
	mu     sync.Mutex
	seen   []request
}

func startFake(t testing.TB, tlsConfig *tls.Config, answer func(w http.ResponseWriter, r *request)) *fakeServer {
	t.Helper()
	return startFakeOn(t, listen(t, "tcp4", "127.0.0.1"), tlsConfig, answer)
}

// startFakeOn is startFake on a listener of the caller's.
func startFakeOn(t testing.TB, l net.Listener, tlsConfig *tls.Config, answer func(w http.ResponseWriter, r *request)) *fakeServer {
	t.Helper()
	fs := &fakeServer{Target: targetOf(t, l)}
	protocols := new(http.Protocols)
	if tlsConfig == nil {
		protocols.SetUnencryptedHTTP2(true)
	} else {
		protocols.SetHTTP2(true)
	}
	srv := &http.Server{
		Protocols: protocols,
		TLSConfig: tlsConfig.Clone(), // ServeTLS adds its NextProtos to it
		ErrorLog:  log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			req := request{Method: r.Method, Path: r.URL.Path, Proto: r.Proto, Host: r.Host, Header: r.Header.Clone()}
			if r.TLS != nil {
				req.ServerName = r.TLS.ServerName
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
			if req.BodyErr = err; err == nil {
				req.Service, req.BodyErr = parseRequestFrame(body)
			}
			fs.mu.Lock()
			fs.seen = append(fs.seen, req)
			fs.mu.Unlock()
			answer(w, &req)
		}),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if tlsConfig != nil {
			_ = srv.ServeTLS(l, "", "")
		} else {
			_ = srv.Serve(l)
		}
	}()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return fs
}

// requests returns what the server saw so far.
func (fs *fakeServer) requests() []request {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return append([]request(nil), fs.seen...)
}

// Answers of the fake servers.

// answerServing answers status in a message, then grpc-status 0.
func answerServing(status ServingStatus) func(http.ResponseWriter, *request) {
	return answerMessage(responseFrame(status), "0", "")
}

// answerMessage answers body as the response's data, then the trailers
// grpc-status (if not empty) and grpc-message.
func answerMessage(body []byte, code, message string) func(http.ResponseWriter, *request) {
	return func(w http.ResponseWriter, _ *request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		if code != "" {
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", code)
		}
		if message != "" {
			w.Header().Set(http.TrailerPrefix+"Grpc-Message", message)
		}
	}
}

// answerTrailersOnly answers a status without a message, in the only
// header block.
func answerTrailersOnly(code, message string) func(http.ResponseWriter, *request) {
	return func(w http.ResponseWriter, _ *request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", code)
		if message != "" {
			w.Header().Set("Grpc-Message", message)
		}
		w.WriteHeader(http.StatusOK)
	}
}
