package publisher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
	"github.com/swh-dev/swh/probes/postgresql"
)

// Reasons the agent adds to the probes library's.
const (
	// ReasonConfig: the probe's configuration cannot make a prober (a CA
	// bundle that does not parse, say).
	ReasonConfig probes.Reason = "config"
	// ReasonSecret: the credentials Secret cannot be read (and none was
	// before for the resource), the agent may no longer read it, it does
	// not fit in the agent's bounds, or one of its keys is missing or
	// invalid.
	ReasonSecret probes.Reason = "secret"
	// ReasonNoPort: the probe's named targetPort names no port of the pod.
	ReasonNoPort probes.Reason = "no-port"
)

// Keys of the credentials Secret of PostgreSQL, Redis and MySQL probes
// (any type: a generic Secret works), those of the original product's
// Secrets.
const (
	secretUser       = "user"
	secretPassword   = "password"
	secretTLSMode    = "tlsMode"
	secretCACert     = "caCert"
	secretClientCert = "clientCert"
	secretClientKey  = "clientKey"
)

// proberFactory turns probe specs into probers. Database credentials are
// read from their Secret when a probe needs them and kept in a cache, so
// the agent never lists or watches Secrets.
type proberFactory struct {
	secrets *secretCache
	// userAgent is the HTTP probes' default User-Agent; the probes
	// module's own when empty.
	userAgent string
}

func newProberFactory(secrets *secretCache) *proberFactory {
	return &proberFactory{secrets: secrets}
}

// specOf identifies a probe's configuration: a changed spec restarts its
// targets, an unchanged one keeps them running.
func specOf(hc *swhv1alpha1.Healthcheck, p *swhv1alpha1.Probe) string {
	data, _ := json.Marshal(struct {
		Period, Delay int32
		Probe         *swhv1alpha1.Probe
		Fast          *int32 `json:",omitempty"`
		Down          *int32 `json:",omitempty"`
	}{hc.PeriodSeconds, hc.InitialDelaySeconds, p, hc.FastPeriodSeconds, hc.DownPeriodSeconds})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// failing returns a prober that always fails with reason and message.
func failing(reason probes.Reason, message string) probes.Prober {
	return probes.ProberFunc(func(context.Context, probes.Target) probes.Result {
		return probes.Result{Status: probes.Failure, Reason: reason, Message: message}
	})
}

// build returns the prober of one probe of the resource with UID owner in
// namespace ns: the credentials it reads are that resource's.
func (f *proberFactory) build(ns string, owner types.UID, p *swhv1alpha1.Probe) probes.Prober {
	switch {
	case p.TCP != nil:
		pr, err := probes.NewTCP(tcpConfig(p.TCP))
		if err != nil {
			return failing(ReasonConfig, fmt.Sprintf("TCP probe: %v", err))
		}
		return pr
	case p.HTTP != nil:
		pr, err := probes.NewHTTP(f.httpConfig(p.HTTP))
		if err != nil {
			return failing(ReasonConfig, fmt.Sprintf("HTTP probe: %v", err))
		}
		return pr
	case p.PostgreSQL != nil:
		return f.postgreSQL(ns, owner, p.PostgreSQL)
	case p.GRPC != nil:
		return f.grpc(p.GRPC)
	case p.Redis != nil:
		return f.redis(ns, owner, p.Redis)
	case p.MySQL != nil:
		return f.mySQL(ns, owner, p.MySQL)
	}
	return failing(ReasonConfig, fmt.Sprintf("probe mode %q has no configuration", p.Mode))
}

func (f *proberFactory) httpConfig(h *swhv1alpha1.HTTPProbe) probes.HTTPConfig {
	cfg := probes.HTTPConfig{
		Scheme:              strings.ToLower(string(h.Scheme)),
		Method:              h.Method,
		Path:                h.Path,
		Host:                h.Host,
		ExpectedStatusCodes: h.ExpectedStatusCodes,
		InsecureSkipVerify:  h.InsecureSkipTLSVerify,
		UserAgent:           f.userAgent,
	}
	if h.CACert != "" {
		cfg.CACert = []byte(h.CACert)
	}
	for _, hdr := range h.HTTPHeaders {
		cfg.Headers = append(cfg.Headers, probes.Header{Name: hdr.Name, Value: hdr.Value})
	}
	if b := h.ExpectBody; b != nil {
		cfg.ExpectBody = &probes.Expect{Literal: []byte(b.Text), Regexp: b.Regexp}
		cfg.ExpectBodyBytes = int(b.WithinBytes)
	}
	return cfg
}

// postgreSQL returns a prober that resolves its configuration at probe
// time and rebuilds the library prober when it changes, so a Secret created
// or rotated after the resource takes effect without a restart.
func (f *proberFactory) postgreSQL(ns string, owner types.UID, spec *swhv1alpha1.PostgreSQLProbe) probes.Prober {
	return rebuilding("PostgreSQL", func(ctx context.Context) (func() (probes.Prober, error), [sha256.Size]byte, *probes.Result) {
		cfg, fingerprint, failed := f.postgreSQLConfig(ctx, ns, owner, spec)
		return func() (probes.Prober, error) { return postgresql.New(cfg) }, fingerprint, failed
	})
}

// rebuilding returns a prober that resolves its configuration at each
// probe (resolve) and builds the library prober again only when the
// configuration's fingerprint changed: a Secret read from the cache costs
// a map lookup, a new prober parses certificates.
func rebuilding(kind string, resolve func(ctx context.Context) (build func() (probes.Prober, error), fingerprint [sha256.Size]byte, failed *probes.Result)) probes.Prober {
	var mu sync.Mutex
	var current probes.Prober
	var currentFor [sha256.Size]byte
	return probes.ProberFunc(func(ctx context.Context, target probes.Target) probes.Result {
		build, fingerprint, failed := resolve(ctx)
		if failed != nil {
			return *failed
		}
		mu.Lock()
		if current == nil || currentFor != fingerprint {
			pr, err := build()
			if err != nil {
				mu.Unlock()
				return probes.Result{Status: probes.Failure, Reason: ReasonConfig, Message: fmt.Sprintf("%s probe: %v", kind, err), Err: err}
			}
			current, currentFor = pr, fingerprint
		}
		pr := current
		mu.Unlock()
		return pr.Probe(ctx, target)
	})
}

// postgreSQLConfig resolves a probe's configuration. The credentials come
// from the Secret; the TLS mode from the spec, else from the Secret's
// tlsMode key (the original product's manifests keep it there), else
// disable. The spec is fixed for a prober, so the Secret's fingerprint
// (zero without one) identifies the configuration. failed is set when the
// probe cannot run.
func (f *proberFactory) postgreSQLConfig(ctx context.Context, ns string, owner types.UID, spec *swhv1alpha1.PostgreSQLProbe) (cfg postgresql.Config, fingerprint [sha256.Size]byte, failed *probes.Result) {
	cfg = postgresql.Config{
		DBName:                 spec.DBName,
		Query:                  spec.Query,
		User:                   "postgres",
		AllowCleartextPassword: spec.InsecureAllowCleartextPassword,
	}
	if lag := spec.MaxReplicationLag; lag != nil {
		cfg.MaxReplicationLag = &postgresql.ReplicationLag{}
		if lag.Bytes != nil {
			cfg.MaxReplicationLag.Bytes = *lag.Bytes
		}
		if lag.Seconds != nil {
			cfg.MaxReplicationLag.Time = time.Duration(*lag.Seconds) * time.Second
		}
	}
	creds, failed := f.credentials(ctx, ns, owner, spec.AuthSecretName, string(spec.TLSMode), secretUser)
	if failed != nil {
		return cfg, fingerprint, failed
	}
	if creds.data != nil {
		cfg.User = string(creds.data.values[secretUser])
		cfg.Password = string(creds.data.values[secretPassword])
		cfg.CACert, cfg.ClientCert, cfg.ClientKey = creds.data.values[secretCACert], creds.data.values[secretClientCert], creds.data.values[secretClientKey]
	}
	cfg.SSLMode = postgresql.SSLMode(creds.tlsMode)
	return cfg, creds.fingerprint, nil
}

// credentials are what a database probe reads from its Secret.
type credentials struct {
	data        *secretData // nil without a Secret
	tlsMode     string      // the spec's, else the Secret's, else disable
	fingerprint [sha256.Size]byte
}

// credentials reads the Secret name (none when empty) for a probe of the
// resource with UID owner, with the key required that must be set (none
// when empty), and
// resolves the TLS mode: specMode, else the Secret's tlsMode key (the
// original product's manifests keep it there), else disable. failed is
// set when the probe cannot run.
func (f *proberFactory) credentials(ctx context.Context, ns string, owner types.UID, name, specMode, required string) (credentials, *probes.Result) {
	c := credentials{tlsMode: specMode}
	if name != "" {
		key := types.NamespacedName{Namespace: ns, Name: name}
		data, err := f.secrets.get(ctx, key, owner)
		if err != nil {
			return c, &probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: err.Error(), Err: err}
		}
		if data.oversize != "" {
			return c, &probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: data.oversize}
		}
		if v, ok := data.values[required]; required != "" && (!ok || len(v) == 0) {
			msg := fmt.Sprintf("Secret %s has no %q key", key, required)
			return c, &probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: msg}
		}
		if secretMode, ok := tlsModeIn(data); ok {
			if !validTLSMode(secretMode) {
				// %.40q: the value is the user's and may be long.
				msg := fmt.Sprintf("Secret %s: key %q is %.40q, not one of disable, require, verify-ca, verify-full", key, secretTLSMode, secretMode)
				return c, &probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: msg}
			}
			if c.tlsMode == "" {
				c.tlsMode = secretMode
			}
		}
		c.data, c.fingerprint = data, data.fingerprint
	}
	if c.tlsMode == "" {
		c.tlsMode = string(postgresql.SSLDisable)
	}
	return c, nil
}
