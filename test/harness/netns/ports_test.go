package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestSourcePorts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	first := firstSourcePort
	tests := []struct {
		name string
		// failed are the ports whose connection failed at t0.
		failed []int
		// at is when the picks happen, after t0.
		at   time.Duration
		want []int
	}{
		{name: "in turn from the first", want: []int{first, first + 1, first + 2}},
		{name: "a failed port is skipped", failed: []int{first + 1}, at: time.Second, want: []int{first, first + 2, first + 3}},
		{name: "still skipped just inside the window", failed: []int{first}, at: staleFlowWindow - time.Millisecond, want: []int{first + 1}},
		{name: "back in use once the window passed", failed: []int{first, first + 1}, at: staleFlowWindow, want: []int{first, first + 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sourcePorts
			for _, p := range tt.failed {
				s.fail(p, t0)
			}
			for i, want := range tt.want {
				if got := s.pick(t0.Add(tt.at)); got != want {
					t.Fatalf("pick %d: got %d, want %d", i, got, want)
				}
			}
		})
	}
}

func TestSourcePortsWrapAround(t *testing.T) {
	var s sourcePorts
	now := time.Unix(1000, 0)
	s.fail(firstSourcePort, now)
	span := lastSourcePort - firstSourcePort + 1
	for range span - 1 {
		if p := s.pick(now); p < firstSourcePort || p > lastSourcePort {
			t.Fatalf("port %d outside [%d, %d]", p, firstSourcePort, lastSourcePort)
		}
	}
	// The turn comes back to the first port, still held back: the next is
	// the second.
	if got := s.pick(now); got != firstSourcePort+1 {
		t.Fatalf("after a full turn: got %d, want %d", got, firstSourcePort+1)
	}
}

// TestDialContextHoldsBackFailedPorts dials real sockets inside a namespace
// of its own (loopback only; nothing leaves it).
func TestDialContextHoldsBackFailedPorts(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("creating a network namespace needs root")
		}
		t.Skip("creating a network namespace needs root")
	}
	ns, err := New("dial-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	// One server greets and closes; the other accepts and says nothing.
	greeter, err := ns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent, err := ns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	quiet := make(chan net.Conn, 8) // the silent server's connections
	t.Cleanup(func() {
		_, _ = greeter.Close(), silent.Close()
		for len(quiet) > 0 {
			_ = (<-quiet).Close()
		}
	})
	go func() {
		for {
			c, err := greeter.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello"))
			_ = c.Close()
		}
	}()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			quiet <- c
		}
	}()
	refusing, err := ns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := refusing.Addr().String()
	_ = refusing.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tests := []struct {
		name string
		// use dials and uses a connection, and returns its error.
		use      func(next func() int) (port int, err error)
		wantErr  error // nil: any error or none
		wantHeld bool
	}{
		{name: "a connection that ends cleanly", use: func(_ func() int) (int, error) {
			c, err := ns.DialContext(ctx, "tcp", greeter.Addr().String())
			if err != nil {
				return 0, err
			}
			defer func() { _ = c.Close() }()
			if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
				return 0, errors.New("no greeting")
			}
			return c.LocalAddr().(*net.TCPAddr).Port, nil
		}},
		{name: "a refused dial", wantErr: syscall.ECONNREFUSED, use: func(next func() int) (int, error) {
			port := next()
			_, err := ns.DialContext(ctx, "tcp", refused)
			return port, err
		}},
		{name: "a dial that reaches nothing", wantErr: syscall.ENETUNREACH, wantHeld: true, use: func(next func() int) (int, error) {
			port := next()
			_, err := ns.DialContext(ctx, "tcp", "192.0.2.1:80") // no route in this namespace
			return port, err
		}},
		{name: "a connection whose read fails", wantErr: os.ErrDeadlineExceeded, wantHeld: true, use: func(_ func() int) (int, error) {
			c, err := ns.DialContext(ctx, "tcp", silent.Addr().String())
			if err != nil {
				return 0, err
			}
			defer func() { _ = c.Close() }()
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err = c.Read(make([]byte, 1))
			return c.LocalAddr().(*net.TCPAddr).Port, err
		}},
	}
	next := func() int {
		ns.ports.mu.Lock()
		defer ns.ports.mu.Unlock()
		return firstSourcePort + ns.ports.next
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			port, err := tt.use(next)
			if tt.wantErr == nil && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if port < firstSourcePort || port > lastSourcePort {
				t.Fatalf("source port %d outside [%d, %d]", port, firstSourcePort, lastSourcePort)
			}
			if got := ns.SourcePortHeld(port); got != tt.wantHeld {
				t.Errorf("port %d held back: %v, want %v", port, got, tt.wantHeld)
			}
		})
	}
}
