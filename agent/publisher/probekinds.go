package publisher

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/grpchealth"
	"github.com/swh-dev/swh/probes/mysql"
	"github.com/swh-dev/swh/probes/redis"
)

// tcpConfig turns a TCP probe's steps and TLS into the library's.
func tcpConfig(spec *swhv1alpha1.TCPProbe) probes.TCPConfig {
	var cfg probes.TCPConfig
	for _, s := range spec.Steps {
		var step probes.Step
		switch {
		case s.Send != "":
			step.Send = []byte(s.Send)
		case len(s.SendBytes) > 0:
			step.Send = s.SendBytes
		}
		if e := s.Expect; e != nil {
			step.Expect = &probes.Expect{Literal: []byte(e.Text), Regexp: e.Regexp}
			if len(e.Bytes) > 0 {
				step.Expect.Literal = e.Bytes
			}
		}
		cfg.Steps = append(cfg.Steps, step)
	}
	if t := spec.TLS; t != nil {
		cfg.TLS, cfg.ServerName, cfg.InsecureSkipVerify = true, t.ServerName, t.InsecureSkipTLSVerify
		if t.CACert != "" {
			cfg.CACert = []byte(t.CACert)
		}
	}
	return cfg
}

// grpc returns the prober of a gRPC health probe.
func (f *proberFactory) grpc(spec *swhv1alpha1.GRPCProbe) probes.Prober {
	cfg := grpchealth.Config{Service: spec.Service, UserAgent: f.userAgent}
	if t := spec.TLS; t != nil {
		cfg.TLS, cfg.ServerName, cfg.InsecureSkipVerify = true, t.ServerName, t.InsecureSkipTLSVerify
		if t.CACert != "" {
			cfg.CACert = []byte(t.CACert)
		}
	}
	for _, m := range spec.Metadata {
		cfg.Metadata = append(cfg.Metadata, probes.Header{Name: m.Name, Value: m.Value})
	}
	pr, err := grpchealth.New(cfg)
	if err != nil {
		return failing(ReasonConfig, fmt.Sprintf("GRPC probe: %v", err))
	}
	return pr
}

// redis returns the prober of a Redis probe, its credentials read at
// probe time.
func (f *proberFactory) redis(ns string, owner types.UID, spec *swhv1alpha1.RedisProbe) probes.Prober {
	return rebuilding("Redis", func(ctx context.Context) (func() (probes.Prober, error), [sha256.Size]byte, *probes.Result) {
		cfg, fingerprint, failed := f.redisConfig(ctx, ns, owner, spec)
		return func() (probes.Prober, error) { return redis.New(cfg) }, fingerprint, failed
	})
}

func (f *proberFactory) redisConfig(ctx context.Context, ns string, owner types.UID, spec *swhv1alpha1.RedisProbe) (redis.Config, [sha256.Size]byte, *probes.Result) {
	cfg := redis.Config{AllowCleartextPassword: spec.InsecureAllowCleartextPassword}
	switch spec.Role {
	case swhv1alpha1.RedisRoleMaster:
		cfg.Role = redis.RoleMaster
	case swhv1alpha1.RedisRoleReplica:
		cfg.Role = redis.RoleReplica
	}
	if lag := spec.MaxReplicationLag; lag != nil {
		cfg.MaxReplicationLag = &redis.ReplicationLag{}
		if lag.Bytes != nil {
			cfg.MaxReplicationLag.Bytes = *lag.Bytes
		}
		if lag.Seconds != nil {
			cfg.MaxReplicationLag.Time = time.Duration(*lag.Seconds) * time.Second
		}
	}
	// No key is required: a server without a password may still need the
	// Secret's caCert or client certificate.
	creds, failed := f.credentials(ctx, ns, owner, spec.AuthSecretName, string(spec.TLSMode), "")
	if failed != nil {
		return cfg, creds.fingerprint, failed
	}
	cfg.TLSMode = redis.TLSMode(creds.tlsMode)
	if creds.data != nil {
		v := creds.data.values
		cfg.User, cfg.Password = string(v[secretUser]), string(v[secretPassword])
		// The library refuses certificates a mode would not use; a
		// Secret shared with other clients may hold them anyway.
		if creds.tlsMode != string(swhv1alpha1.DatabaseTLSDisable) {
			cfg.ClientCert, cfg.ClientKey = v[secretClientCert], v[secretClientKey]
		}
		if verifies(creds.tlsMode) {
			cfg.CACert = v[secretCACert]
		}
	}
	return cfg, creds.fingerprint, nil
}

// mySQL returns the prober of a MySQL probe, its credentials read at
// probe time.
func (f *proberFactory) mySQL(ns string, owner types.UID, spec *swhv1alpha1.MySQLProbe) probes.Prober {
	return rebuilding("MySQL", func(ctx context.Context) (func() (probes.Prober, error), [sha256.Size]byte, *probes.Result) {
		cfg, fingerprint, failed := f.mySQLConfig(ctx, ns, owner, spec)
		return func() (probes.Prober, error) { return mysql.New(cfg) }, fingerprint, failed
	})
}

func (f *proberFactory) mySQLConfig(ctx context.Context, ns string, owner types.UID, spec *swhv1alpha1.MySQLProbe) (mysql.Config, [sha256.Size]byte, *probes.Result) {
	cfg := mysql.Config{DBName: spec.DBName, Query: spec.Query, User: "root", AllowCleartextPassword: spec.InsecureAllowCleartextPassword}
	creds, failed := f.credentials(ctx, ns, owner, spec.AuthSecretName, string(spec.TLSMode), secretUser)
	if failed != nil {
		return cfg, creds.fingerprint, failed
	}
	cfg.TLSMode = mysql.TLSMode(creds.tlsMode)
	if creds.data != nil {
		// As PostgreSQL's: require with a caCert checks the chain.
		v := creds.data.values
		cfg.User, cfg.Password = string(v[secretUser]), string(v[secretPassword])
		cfg.CACert, cfg.ClientCert, cfg.ClientKey = v[secretCACert], v[secretClientCert], v[secretClientKey]
	}
	return cfg, creds.fingerprint, nil
}

// verifies reports whether a TLS mode verifies the server, and so uses a
// CA certificate: Redis's prober refuses one with the others.
func verifies(mode string) bool {
	return mode == string(swhv1alpha1.DatabaseTLSVerifyCA) || mode == string(swhv1alpha1.DatabaseTLSVerifyFull)
}
