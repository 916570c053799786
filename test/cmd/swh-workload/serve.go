package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// config is what the flags set.
type config struct {
	pod           string
	http, tcp     []string
	failFile      string
	failing       bool
	passAfter     time.Duration
	shutdownDelay time.Duration
	drainTimeout  time.Duration
}

// tcpIdle bounds how long a banner connection stays open for a client that
// neither reads nor closes.
const tcpIdle = 10 * time.Second

// serve listens on every address, then serves until ctx ends (SIGTERM), keeps
// serving for the shutdown delay (a terminating pod still answers), and
// closes gracefully.
func serve(ctx context.Context, cfg config, logw io.Writer) error {
	passAt := time.Now().Add(cfg.passAfter)
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	listen := func(kind, addr string) (net.Listener, error) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%s %s: %w", kind, addr, err)
		}
		listeners = append(listeners, l)
		// The actual address: tests listen on port 0 and read it here.
		fmt.Fprintf(logw, "swh-workload: pod %s %s %s\n", cfg.pod, kind, l.Addr())
		return l, nil
	}

	var servers []*http.Server
	errs := make(chan error, len(cfg.http)+len(cfg.tcp))
	for _, addr := range cfg.http {
		l, err := listen("http", addr)
		if err != nil {
			return err
		}
		b := &backend{pod: cfg.pod, failFile: cfg.failFile, port: strconv.Itoa(l.Addr().(*net.TCPAddr).Port), passAt: passAt}
		b.failing.Store(cfg.failing)
		srv := &http.Server{Handler: b, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
	}
	var banners sync.WaitGroup
	var tcpListeners []net.Listener
	for _, addr := range cfg.tcp {
		l, err := listen("tcp", addr)
		if err != nil {
			for _, srv := range servers {
				_ = srv.Close()
			}
			return err
		}
		tcpListeners = append(tcpListeners, l)
		banners.Add(1)
		go func() {
			defer banners.Done()
			acceptBanners(l, cfg.pod, &banners)
		}()
	}

	select {
	case err := <-errs:
		closeAll()
		return err
	case <-ctx.Done():
	}
	fmt.Fprintf(logw, "swh-workload: pod %s terminating: serving %s more, then draining\n", cfg.pod, cfg.shutdownDelay)
	time.Sleep(cfg.shutdownDelay)

	drain, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	for _, l := range tcpListeners {
		_ = l.Close()
	}
	var firstErr error
	for _, srv := range servers {
		if err := srv.Shutdown(drain); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("draining HTTP: %w", err)
		}
	}
	done := make(chan struct{})
	go func() { banners.Wait(); close(done) }()
	select {
	case <-done:
	case <-drain.Done():
		if firstErr == nil {
			firstErr = errors.New("draining TCP: open connections outlived the drain timeout")
		}
	}
	fmt.Fprintf(logw, "swh-workload: pod %s stopped\n", cfg.pod)
	return firstErr
}

// acceptBanners greets every connection with "220 <pod>\n" and closes it
// when the client does (or after tcpIdle).
func acceptBanners(l net.Listener, pod string, conns *sync.WaitGroup) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(tcpIdle))
			if _, err := io.WriteString(c, "220 "+pod+"\n"); err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, c)
		}()
	}
}

// backend is one HTTP port: GET anything answers the pod's name, /healthz
// answers ok; both 503 while the port is failing. POST /fail and
// POST /recover switch this port's own failing mode; POST /fail?for=AGENT
// fails only the health checks whose User-Agent starts with AGENT (one
// prober sees the failure, clients and other probers do not); GET /checks
// lists the last health checks answered.
type backend struct {
	pod, failFile, port string
	failing             atomic.Bool
	failFor             atomic.Pointer[string]
	// passAt: until then the port fails (-pass-after).
	passAt time.Time
	checks checkLog
}

// checkLog keeps the last health checks a port answered, so that a test
// can tell when each prober (by User-Agent) saw a failure: GET /checks
// lists them, one "UNIXNANO STATUS USER-AGENT" line each, oldest first.
type checkLog struct {
	mu    sync.Mutex
	lines []string
}

const checkLogSize = 256

func (c *checkLog) add(status int, userAgent string) {
	if len(userAgent) > 64 {
		userAgent = userAgent[:64]
	}
	line := fmt.Sprintf("%d %d %q", time.Now().UnixNano(), status, userAgent)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) == checkLogSize {
		c.lines = append(c.lines[:0], c.lines[1:]...)
	}
	c.lines = append(c.lines, line)
}

func (c *checkLog) write(w io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		fmt.Fprintln(w, l)
	}
}

func (b *backend) isFailing() bool {
	if b.failing.Load() || time.Now().Before(b.passAt) {
		return true
	}
	for _, path := range []string{b.failFile, b.failFile + "." + b.port} {
		if _, err := os.Stat(path); err == nil {
			return true
		}
	}
	return false
}

func (b *backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/fail" && r.URL.Query().Get("for") != "":
		prober := r.URL.Query().Get("for")
		b.failFor.Store(&prober)
		fmt.Fprintf(w, "%s failing for %s\n", b.pod, prober)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/fail":
		b.failing.Store(true)
		fmt.Fprintf(w, "%s failing\n", b.pod)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/recover":
		b.failing.Store(false)
		b.failFor.Store(nil)
		fmt.Fprintf(w, "%s recovered\n", b.pod)
		return
	case r.URL.Path == "/checks":
		b.checks.write(w)
		return
	}
	failing := b.isFailing()
	if prober := b.failFor.Load(); prober != nil && r.URL.Path == "/healthz" && strings.HasPrefix(r.UserAgent(), *prober) {
		failing = true
	}
	status := http.StatusOK
	if failing {
		status = http.StatusServiceUnavailable
		w.WriteHeader(status)
	}
	if r.URL.Path == "/healthz" {
		b.checks.add(status, r.UserAgent())
	}
	switch {
	case r.URL.Path == "/healthz" && failing:
		io.WriteString(w, "failing\n")
	case r.URL.Path == "/healthz":
		io.WriteString(w, "ok\n")
	case failing:
		fmt.Fprintf(w, "%s failing\n", b.pod)
	default:
		fmt.Fprintf(w, "%s\n", b.pod)
	}
}
