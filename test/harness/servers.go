package harness

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// TCPServer accepts connections on a fixed address and can be stopped and
// started again on it, so a backend can fail (connection refused) and
// recover. It counts connections and the bytes clients send, and greets
// each client with a banner when one is set (a mail server's "220 …").
type TCPServer struct {
	addr     string
	accepted atomic.Int64
	received atomic.Int64
	greeting atomic.Pointer[string]

	mu       sync.Mutex
	listener net.Listener
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// StartTCPServer listens on addr ("ip:port").
func StartTCPServer(addr string) (*TCPServer, error) {
	s := &TCPServer{addr: addr, conns: map[net.Conn]struct{}{}}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the address the server listens on.
func (s *TCPServer) Addr() string { return s.addr }

// Accepted returns how many connections the server has accepted.
func (s *TCPServer) Accepted() int64 { return s.accepted.Load() }

// SetGreeting makes the server send greeting to every new client as soon
// as it accepts it; "" sends nothing.
func (s *TCPServer) SetGreeting(greeting string) { s.greeting.Store(&greeting) }

// BytesReceived returns how many bytes clients have sent.
func (s *TCPServer) BytesReceived() int64 { return s.received.Load() }

// Start listens again after Stop; it does nothing while listening.
func (s *TCPServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return nil
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.addr, err)
	}
	s.listener = l
	s.wg.Add(1)
	go s.serve(l)
	return nil
}

func (s *TCPServer) serve(l net.Listener) {
	defer s.wg.Done()
	for {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if g := s.greeting.Load(); g != nil && *g != "" {
				_, _ = io.WriteString(conn, *g)
			}
			n, _ := io.Copy(io.Discard, conn)
			s.received.Add(n)
			_ = conn.Close()
			s.mu.Lock()
			delete(s.conns, conn)
			s.mu.Unlock()
		}()
	}
}

// Stop closes the listener and every open connection: new connections are
// refused until Start.
func (s *TCPServer) Stop() error {
	s.mu.Lock()
	l := s.listener
	s.listener = nil
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	var err error
	if l != nil {
		err = l.Close()
	}
	s.wg.Wait()
	if err != nil {
		return fmt.Errorf("closing the listener on %s: %w", s.addr, err)
	}
	return nil
}

// HTTPServer serves HTTP or HTTPS on a fixed address with a status code that
// a test can change, and records what the last request carried.
type HTTPServer struct {
	addr   string
	tls    *tls.Config
	status atomic.Int32
	delay  atomic.Int64
	hits   atomic.Int64
	body   atomic.Pointer[string] // nil: "<addr> answered <status>"
	// statusMu orders SetStatus with the responses: firstServed is when
	// the first response of status generation statusGen was written.
	statusMu    sync.Mutex
	statusGen   int64
	firstServed time.Time

	mu       sync.Mutex
	server   *http.Server
	done     chan struct{}
	lastHost string
	lastHdr  http.Header
}

// HTTPServerOptions configures StartHTTPServer.
type HTTPServerOptions struct {
	// Addr is "ip:port".
	Addr string
	// TLS serves HTTPS with this configuration when set.
	TLS *tls.Config
	// Status is the response code; 200 when zero.
	Status int
}

// StartHTTPServer listens on opts.Addr.
func StartHTTPServer(opts HTTPServerOptions) (*HTTPServer, error) {
	s := &HTTPServer{addr: opts.Addr, tls: opts.TLS}
	status := opts.Status
	if status == 0 {
		status = http.StatusOK
	}
	s.status.Store(int32(status))
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the address the server listens on.
func (s *HTTPServer) Addr() string { return s.addr }

// SetStatus changes the response code of later requests.
func (s *HTTPServer) SetStatus(code int) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	s.status.Store(int32(code))
	s.statusGen++
	s.firstServed = time.Time{}
}

// FirstServed returns when the first response with the status last set was
// written, the zero time if none was yet: for a probe, the moment its
// result changed.
func (s *HTTPServer) FirstServed() time.Time {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	return s.firstServed
}

// SetBody makes the server answer with body (after the status line and
// header) instead of "<addr> answered <status>".
func (s *HTTPServer) SetBody(body string) { s.body.Store(&body) }

// SetDelay makes later responses wait d before answering (a slow backend).
func (s *HTTPServer) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

// Hits returns how many requests the server has answered.
func (s *HTTPServer) Hits() int64 { return s.hits.Load() }

// LastRequest returns the Host and headers of the latest request.
func (s *HTTPServer) LastRequest() (host string, header http.Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastHost, s.lastHdr.Clone()
}

func (s *HTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.lastHost, s.lastHdr = r.Host, r.Header.Clone()
	s.mu.Unlock()
	if d := time.Duration(s.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	s.hits.Add(1)
	s.statusMu.Lock()
	code, gen := s.status.Load(), s.statusGen
	s.statusMu.Unlock()
	w.WriteHeader(int(code))
	if body := s.body.Load(); body != nil {
		_, _ = io.WriteString(w, *body)
	} else {
		_, _ = fmt.Fprintf(w, "%s answered %d\n", s.addr, code)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	s.statusMu.Lock()
	if gen == s.statusGen && s.firstServed.IsZero() {
		s.firstServed = time.Now()
	}
	s.statusMu.Unlock()
}

// Start listens again after Stop; it does nothing while listening.
func (s *HTTPServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		return nil
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.addr, err)
	}
	if s.tls != nil {
		l = tls.NewListener(l, s.tls)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	s.server, s.done = srv, done
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return nil
}

// Stop closes the listener and open connections: new requests are refused
// until Start.
func (s *HTTPServer) Stop() error {
	s.mu.Lock()
	srv, done := s.server, s.done
	s.server = nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	<-done
	if err != nil {
		return fmt.Errorf("stopping the HTTP server on %s: %w", s.addr, err)
	}
	return nil
}
