package postgresql

// The helpers below repeat a few of package probes' test helpers: test
// files cannot be imported, and a shared helper package would have to be
// imported by probes' internal tests, a cycle.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/swh-dev/swh/probes"
)

// Every test talks to 127.0.0.1 or [::1] only, and must leave no goroutine
// behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// listen opens a listener on a loopback address, skipping the test when the
// address family is not available.
func listen(t testing.TB, network, host string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func targetOf(t testing.TB, l net.Listener) probes.Target {
	t.Helper()
	tcp, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("%v is not a TCP address", l.Addr())
	}
	return probes.TargetFrom(tcp.AddrPort())
}

// refusedTarget returns a loopback port nothing listens on.
func refusedTarget(t testing.TB, network, host string) probes.Target {
	t.Helper()
	l := listen(t, network, host)
	target := targetOf(t, l)
	l.Close()
	return target
}

// silentListener accepts connections and never writes to them, until the
// test ends.
func silentListener(t testing.TB, network, host string) probes.Target {
	t.Helper()
	l := listen(t, network, host)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
	return targetOf(t, l)
}

// serve accepts connections and hands each to handle, until the test
// ends.
func serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
}

// ctxTimeout returns a context that expires after d.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dialerFunc is a probes.Dialer made of a function.
type dialerFunc func(ctx context.Context, network, address string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

// ca is a throw-away certificate authority.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t testing.TB, name string) *ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate for names (DNS names or IP addresses),
// usable by servers and clients, and its PEM certificate and key.
func (c *ca) issue(t testing.TB, names ...string) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
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
