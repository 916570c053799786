package probes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes/internal/testca"
	"github.com/swh-dev/swh/probes/internal/testnet"
)

// Every test talks to 127.0.0.1 or [::1] only, and must leave no goroutine
// behind.
func TestMain(m *testing.M) {
	if os.Getenv(acceptorEnv) != "" {
		runAcceptor()
		return
	}
	goleak.VerifyTestMain(m)
}

// acceptorEnv makes the test binary a TCP server that accepts and closes
// connections on loopback, for benchmarks that must not count the server's
// CPU as the prober's.
const acceptorEnv = "SWH_PROBES_TEST_ACCEPTOR"

func runAcceptor() {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr())
	for range runtime.GOMAXPROCS(0) {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes away
}

// startAcceptor runs runAcceptor in a child process and returns its address.
func startAcceptor(t testing.TB) Target {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), acceptorEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return TargetFrom(ap)
}

// loopbacks are the addresses the tests may use.
var loopbacks = []struct{ name, network, host string }{
	{"ipv4", "tcp4", "127.0.0.1"},
	{"ipv6", "tcp6", "::1"},
}

// ca is a throw-away certificate authority (testca, shared by the
// module's tests).
type ca = testca.CA

func newCA(t testing.TB, name string) *ca { return testca.New(t, name) }

// readAll reads c until EOF or an error (a reset counts as the end) and
// returns how many bytes came.
func readAll(c net.Conn) int {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := io.Copy(io.Discard, c)
	return int(n)
}

func netAddrPort(a net.Addr) (netip.AddrPort, error) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%v is not a TCP address", a)
	}
	return tcp.AddrPort(), nil
}

func wantReason(t testing.TB, got Result, status Status, reason Reason) {
	t.Helper()
	if got.Status != status || got.Reason != reason {
		t.Fatalf("got %v, want %s (%s)", got, status, reason)
	}
	if got.Message == "" {
		t.Errorf("result has no message: %#v", got)
	}
	if (got.Err == nil) != (status == Success) {
		t.Errorf("Err = %v for a %s", got.Err, status)
	}
}

// The loopback servers the tests probe (see testnet).
func listen(t testing.TB, network, host string) net.Listener { return testnet.Listen(t, network, host) }
func targetOf(t testing.TB, l net.Listener) Target           { return TargetFrom(testnet.AddrPort(t, l)) }
func refusedTarget(t testing.TB, network, host string) Target {
	return TargetFrom(testnet.Refused(t, network, host))
}
func silentListener(t testing.TB, network, host string) Target {
	return TargetFrom(testnet.Silent(t, network, host))
}
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) { testnet.Serve(t, l, handle) }
func ctxTimeout(t testing.TB, d time.Duration) context.Context  { return testnet.Context(t, d) }
