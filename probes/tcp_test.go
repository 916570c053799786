package probes

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

func TestTCPProbe(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			p, err := NewTCP(TCPConfig{})
			if err != nil {
				t.Fatal(err)
			}

			t.Run("accepting", func(t *testing.T) {
				l := listen(t, lb.network, lb.host)
				received := make(chan int, 1)
				serve(t, l, func(c net.Conn) {
					received <- readAll(c)
					c.Close()
				})
				res := p.Probe(ctxTimeout(t, 5*time.Second), targetOf(t, l))
				wantReason(t, res, Success, ReasonOK)
				if res.Latency <= 0 {
					t.Errorf("latency %v", res.Latency)
				}
				if n := <-received; n != 0 {
					t.Errorf("the server received %d bytes, want none", n)
				}
			})

			t.Run("refused", func(t *testing.T) {
				res := p.Probe(ctxTimeout(t, 5*time.Second), refusedTarget(t, lb.network, lb.host))
				wantReason(t, res, Failure, ReasonRefused)
			})
		})
	}
}

func TestTCPProbeInvalidTarget(t *testing.T) {
	p, _ := NewTCP(TCPConfig{})
	for _, target := range []Target{
		{Host: "", Port: 80},
		{Host: "127.0.0.1", Port: 0},
		{Host: "127.0.0.1", Port: 65536},
		{Host: "[::1]", Port: 80},
		{Host: "/tmp/socket", Port: 80},
	} {
		res := p.Probe(context.Background(), target)
		wantReason(t, res, Failure, ReasonInvalidTarget)
	}
}

func TestTCPProbeCanceled(t *testing.T) {
	p, _ := NewTCP(TCPConfig{})
	l := listen(t, "tcp4", "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wantReason(t, p.Probe(ctx, targetOf(t, l)), Failure, ReasonCanceled)
}

// dialerFunc is a Dialer made of a function.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

// wrappedConn hides the concrete type of a conn, as a proxying dialer would.
type wrappedConn struct {
	net.Conn
	closed bool
}

func (c *wrappedConn) Close() error { c.closed = true; return c.Conn.Close() }

func TestTCPProbeDialer(t *testing.T) {
	l := listen(t, "tcp4", "127.0.0.1")
	serve(t, l, func(c net.Conn) { c.Close() })
	target := targetOf(t, l)

	var (
		mu       sync.Mutex
		calls    []string
		deadline time.Duration
		conns    []*wrappedConn
	)
	d := dialerFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, network+" "+address)
		if dl, ok := ctx.Deadline(); ok {
			deadline = time.Until(dl)
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		w := &wrappedConn{Conn: c}
		conns = append(conns, w)
		return w, nil
	})
	p, _ := NewTCP(TCPConfig{Dialer: d})

	// No deadline on the context: DefaultTimeout applies.
	wantReason(t, p.Probe(context.Background(), target), Success, ReasonOK)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || calls[0] != "tcp "+target.Addr() {
		t.Errorf("dialer calls %q", calls)
	}
	if deadline <= 0 || deadline > DefaultTimeout {
		t.Errorf("the dial had %v left, want at most DefaultTimeout", deadline)
	}
	if !conns[0].closed {
		t.Error("the wrapped conn was not closed")
	}
}

func TestTCPProbeDialerErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Reason
	}{
		{&net.DNSError{Err: "no such host", Name: "db.invalid", IsNotFound: true}, ReasonDNS},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("something odd")}, ReasonError},
		{context.DeadlineExceeded, ReasonTimeout},
	} {
		p, _ := NewTCP(TCPConfig{Dialer: dialerFunc(func(context.Context, string, string) (net.Conn, error) {
			return nil, tc.err
		})})
		res := p.Probe(context.Background(), Target{Host: "db.invalid", Port: 5432})
		wantReason(t, res, Failure, tc.want)
		if !errors.Is(res.Err, tc.err) {
			t.Errorf("Err = %v, want %v", res.Err, tc.err)
		}
	}
}
