package webhookcert

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// backdate is how far before its issuance a certificate is valid: clocks
// of the API servers may be behind the controller's.
const backdate = time.Minute

// The Secret's keys: kubernetes.io/tls's two and the CA's.
const (
	KeyCABundle = "ca.crt"
	KeyCAKey    = "ca.key"
	KeyCert     = "tls.crt"
	KeyKey      = "tls.key"
)

// issued is a certificate with its key, and their PEM forms.
type issued struct {
	cert            *x509.Certificate
	key             crypto.Signer
	certPEM, keyPEM []byte
}

// newCA makes a self-signed CA valid from now (backdated) for validity.
func newCA(now time.Time, name string, validity time.Duration) (*issued, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, nil, nil)
}

// newLeaf makes a serving certificate for hosts (DNS names or IP
// addresses) signed by ca, valid for validity but never past the CA.
func newLeaf(now time.Time, ca *issued, hosts []string, validity time.Duration) (*issued, error) {
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0]},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return sign(tmpl, ca.cert, ca.key)
}

// sign makes a key and a certificate from tmpl, signed by parent (itself
// when nil).
func sign(tmpl, parent *x509.Certificate, parentKey crypto.Signer) (*issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &issued{
		cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// parseCerts parses every CERTIFICATE block of data; nil when one does
// not parse.
func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil
		}
		out = append(out, c)
	}
}

// parsePair parses a certificate and its key, checking that they belong
// together.
func parsePair(certPEM, keyPEM []byte) (*issued, error) {
	certs := parseCerts(certPEM)
	if len(certs) == 0 {
		return nil, errors.New("no certificate")
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("no key")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		if parsed, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			return nil, fmt.Errorf("parsing the key: %w", err)
		}
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, errors.New("the key cannot sign")
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, errors.New("the key does not match the certificate")
	}
	return &issued{cert: certs[0], key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// encodeBundle is the PEM of certs, in order.
func encodeBundle(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// servesHosts says whether cert names exactly hosts.
func servesHosts(cert *x509.Certificate, hosts []string) bool {
	var names []string
	names = append(names, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	want := slices.Clone(hosts)
	for i, h := range want {
		if ip := net.ParseIP(h); ip != nil {
			want[i] = ip.String()
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	return slices.Equal(names, want)
}

// signedBy says whether ca signed cert.
func signedBy(cert, ca *x509.Certificate) bool {
	return cert.CheckSignatureFrom(ca) == nil
}

// issuedAt is when a certificate of this package was made.
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(backdate) }

// renewDue says whether two thirds of c's life have passed at now.
func renewDue(now time.Time, c *x509.Certificate) bool {
	start := issuedAt(c)
	return !now.Before(start.Add(c.NotAfter.Sub(start) * 2 / 3))
}
