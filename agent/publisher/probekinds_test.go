package publisher

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes/mysql"
	"github.com/swh-dev/swh/probes/redis"
)

// selfSigned returns a PEM certificate and its PEM key.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "swh test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// TestDatabaseProbeConfigs: a Redis or MySQL probe's configuration, from
// its spec and a Secret holding every key (as one shared with other
// clients does), is one the library accepts in every TLS mode; the keys
// land where they belong, and a missing required key fails with reason
// secret.
func TestDatabaseProbeConfigs(t *testing.T) {
	certPEM, keyPEM := selfSigned(t)
	full := map[string][]byte{"user": []byte("probe"), "password": []byte("pw"), "caCert": certPEM, "clientCert": certPEM, "clientKey": keyPEM}
	factory := func(data map[string][]byte) *proberFactory {
		r := &secretReader{}
		r.set(returns(data, nil))
		return newProberFactory(newSecretCache(r, time.Minute, secretBounds{}, logr.Discard(), nil))
	}
	modes := []swhv1alpha1.DatabaseTLSMode{swhv1alpha1.DatabaseTLSDisable, swhv1alpha1.DatabaseTLSRequire, swhv1alpha1.DatabaseTLSVerifyCA, swhv1alpha1.DatabaseTLSVerifyFull}
	for _, mode := range modes {
		t.Run("Redis "+string(mode), func(t *testing.T) {
			spec := &swhv1alpha1.RedisProbe{TargetPort: intstr.FromInt32(6379), AuthSecretName: "cache", TLSMode: mode, Role: swhv1alpha1.RedisRoleMaster}
			cfg, _, failed := factory(full).redisConfig(context.Background(), "ns", testOwner, spec)
			if failed != nil {
				t.Fatalf("failed: %+v", failed)
			}
			if _, err := redis.New(cfg); err != nil {
				t.Errorf("redis.New refuses the configuration: %v", err)
			}
			if cfg.User != "probe" || cfg.Password != "pw" || cfg.Role != redis.RoleMaster || string(cfg.TLSMode) != string(mode) {
				t.Errorf("config %+v", cfg)
			}
		})
		t.Run("MySQL "+string(mode), func(t *testing.T) {
			spec := &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromInt32(3306), AuthSecretName: "sql", TLSMode: mode, Query: "SELECT 1"}
			cfg, _, failed := factory(full).mySQLConfig(context.Background(), "ns", testOwner, spec)
			if failed != nil {
				t.Fatalf("failed: %+v", failed)
			}
			if _, err := mysql.New(cfg); err != nil {
				t.Errorf("mysql.New refuses the configuration: %v", err)
			}
			if cfg.User != "probe" || cfg.Password != "pw" || len(cfg.CACert) == 0 || string(cfg.TLSMode) != string(mode) {
				t.Errorf("config %+v", cfg)
			}
		})
	}

	// Required keys: none for Redis (a server without a password may need
	// the Secret's CA), MySQL's user.
	redisSpec := &swhv1alpha1.RedisProbe{TargetPort: intstr.FromInt32(6379), AuthSecretName: "cache", TLSMode: swhv1alpha1.DatabaseTLSVerifyCA}
	if cfg, _, failed := factory(map[string][]byte{"caCert": certPEM}).redisConfig(context.Background(), "ns", testOwner, redisSpec); failed != nil || cfg.Password != "" || len(cfg.CACert) == 0 {
		t.Errorf("a Redis Secret with a CA only: %+v, %+v", cfg, failed)
	}
	redisSpec.TLSMode = ""
	if cfg, _, failed := factory(map[string][]byte{"password": []byte("pw")}).redisConfig(context.Background(), "ns", testOwner, redisSpec); failed != nil || cfg.User != "" || cfg.TLSMode != redis.TLSDisable {
		t.Errorf("a Redis Secret with a password only: %+v, %+v", cfg, failed)
	}
	mysqlSpec := &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromInt32(3306), AuthSecretName: "sql"}
	if _, _, failed := factory(map[string][]byte{"password": []byte("pw")}).mySQLConfig(context.Background(), "ns", testOwner, mysqlSpec); failed == nil || failed.Reason != ReasonSecret {
		t.Errorf("a MySQL Secret without user: %+v, want reason secret", failed)
	}
	// Without a Secret: no login for Redis, root for MySQL.
	if cfg, _, failed := factory(nil).mySQLConfig(context.Background(), "ns", testOwner, &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromInt32(3306)}); failed != nil || cfg.User != "root" || cfg.TLSMode != mysql.TLSDisable {
		t.Errorf("MySQL without a Secret: %+v, %+v", cfg, failed)
	}
}

// TestTCPConfig: text and bytes both reach the library as bytes, TLS as
// its fields.
func TestTCPConfig(t *testing.T) {
	spec := &swhv1alpha1.TCPProbe{
		TargetPort: intstr.FromInt32(25),
		TLS:        &swhv1alpha1.ProbeTLS{ServerName: "mail.example.test", InsecureSkipTLSVerify: true},
		Steps: []swhv1alpha1.TCPStep{
			{Expect: &swhv1alpha1.ProbeExpect{Regexp: "^220 "}},
			{Send: "EHLO x\r\n", Expect: &swhv1alpha1.ProbeExpect{Text: "250 "}},
			{SendBytes: []byte{0, 1}, Expect: &swhv1alpha1.ProbeExpect{Bytes: []byte{2, 3}}},
		},
	}
	cfg := tcpConfig(spec)
	if !cfg.TLS || cfg.ServerName != "mail.example.test" || !cfg.InsecureSkipVerify || len(cfg.Steps) != 3 {
		t.Fatalf("config %+v", cfg)
	}
	steps := cfg.Steps
	if steps[0].Send != nil || steps[0].Expect.Regexp != "^220 " ||
		string(steps[1].Send) != "EHLO x\r\n" || string(steps[1].Expect.Literal) != "250 " ||
		string(steps[2].Send) != "\x00\x01" || string(steps[2].Expect.Literal) != "\x02\x03" {
		t.Errorf("steps %+v", steps)
	}
}
