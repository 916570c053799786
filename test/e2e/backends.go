package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swh-dev/swh/test/harness"
)

// Backend is a server listening on a pod's address inside the pod's
// namespace. Every answer names the pod, so a client knows where its
// request landed.
type Backend interface {
	Close() error
}

// HTTPBackend answers every path with the pod's name: 200 while healthy,
// 503 once failed (a broken application, probes and traffic alike).
type HTTPBackend struct {
	pod    string
	failed atomic.Bool
	srv    *http.Server
	done   chan struct{}
}

// ServeHTTP answers with the pod's name.
func (b *HTTPBackend) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Connection", "close")
	if b.failed.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = fmt.Fprintln(w, b.pod)
}

// SetFailed makes the backend answer 503 (true) or 200 (false).
func (b *HTTPBackend) SetFailed(failed bool) { b.failed.Store(failed) }

// Close stops the server.
func (b *HTTPBackend) Close() error {
	err := b.srv.Close()
	<-b.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// StartHTTP serves HTTP on the pod's address and port.
func (p *Pod) StartHTTP(port int) (*HTTPBackend, error) {
	l, err := p.NS.Listen(net.JoinHostPort(p.IP, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	b := &HTTPBackend{pod: p.Name, done: make(chan struct{})}
	b.srv = &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
	go func() { defer close(b.done); _ = b.srv.Serve(l) }()
	return b, nil
}

// BannerBackend is an SMTP-like TCP server: it greets every connection with
// "220 <pod>" and closes it.
type BannerBackend struct {
	l  net.Listener
	wg sync.WaitGroup
}

// StartBanner serves the banner on the pod's address and port.
func (p *Pod) StartBanner(port int) (*BannerBackend, error) {
	l, err := p.NS.Listen(net.JoinHostPort(p.IP, strconv.Itoa(port)))
	if err != nil {
		return nil, err
	}
	b := &BannerBackend{l: l}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = fmt.Fprintf(conn, "220 %s\r\n", p.Name)
			_ = conn.Close()
		}
	}()
	return b, nil
}

// Close stops accepting.
func (b *BannerBackend) Close() error {
	err := b.l.Close()
	b.wg.Wait()
	return err
}

// StartPostgres starts a PostgreSQL primary inside the pod's namespace.
func (p *Pod) StartPostgres(ctx context.Context) (*harness.Postgres, error) {
	return harness.StartPostgres(ctx, harness.PostgresOptions{Addr: p.IP, Within: p.NS.Do})
}

// StartReplica starts a streaming replica of primary inside the pod's
// namespace.
func (p *Pod) StartReplica(ctx context.Context, primary *harness.Postgres) (*harness.Postgres, error) {
	return primary.StartReplicaWithin(ctx, p.IP, 5432, p.NS.Do)
}
