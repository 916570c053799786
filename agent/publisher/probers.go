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

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// Reasons the agent adds to the probes library's.
const (
	// ReasonConfig: the probe's configuration cannot make a prober (a CA
	// bundle that does not parse, say).
	ReasonConfig probes.Reason = "config"
	// ReasonSecret: the credentials Secret or one of its keys is missing.
	ReasonSecret probes.Reason = "secret"
	// ReasonNoPort: the probe's named targetPort names no port of the pod.
	ReasonNoPort probes.Reason = "no-port"
)

// Keys of the PostgreSQL credentials Secret (any type: a generic Secret works).
const (
	secretUser       = "user"
	secretPassword   = "password"
	secretCACert     = "caCert"
	secretClientCert = "clientCert"
	secretClientKey  = "clientKey"
)

// proberFactory turns probe specs into probers. PostgreSQL credentials are
// read from their Secret when a probe needs them and kept for a short time,
// so the agent never lists or watches Secrets.
type proberFactory struct {
	reader    client.Reader
	secretTTL time.Duration

	mu      sync.Mutex
	secrets map[types.NamespacedName]cachedSecret
}

type cachedSecret struct {
	data    map[string][]byte
	err     error
	fetched time.Time
}

func newProberFactory(reader client.Reader, secretTTL time.Duration) *proberFactory {
	return &proberFactory{reader: reader, secretTTL: secretTTL, secrets: map[types.NamespacedName]cachedSecret{}}
}

// specOf identifies a probe's configuration: a changed spec restarts its
// targets, an unchanged one keeps them running.
func specOf(hc *swhv1alpha1.Healthcheck, p *swhv1alpha1.Probe) string {
	data, _ := json.Marshal(struct {
		Period, Delay int32
		Probe         *swhv1alpha1.Probe
	}{hc.PeriodSeconds, hc.InitialDelaySeconds, p})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// failing returns a prober that always fails with reason and message.
func failing(reason probes.Reason, message string) probes.Prober {
	return probes.ProberFunc(func(context.Context, probes.Target) probes.Result {
		return probes.Result{Status: probes.Failure, Reason: reason, Message: message}
	})
}

// build returns the prober of one probe of a resource in namespace ns.
func (f *proberFactory) build(ns string, p *swhv1alpha1.Probe) probes.Prober {
	switch {
	case p.TCP != nil:
		pr, err := probes.NewTCP(probes.TCPConfig{})
		if err != nil {
			return failing(ReasonConfig, err.Error())
		}
		return pr
	case p.HTTP != nil:
		h := p.HTTP
		cfg := probes.HTTPConfig{
			Scheme:              strings.ToLower(string(h.Scheme)),
			Method:              h.Method,
			Path:                h.Path,
			Host:                h.Host,
			ExpectedStatusCodes: h.ExpectedStatusCodes,
			InsecureSkipVerify:  h.InsecureSkipTLSVerify,
		}
		if h.CACert != "" {
			cfg.CACert = []byte(h.CACert)
		}
		for _, hdr := range h.HTTPHeaders {
			cfg.Headers = append(cfg.Headers, probes.Header{Name: hdr.Name, Value: hdr.Value})
		}
		pr, err := probes.NewHTTP(cfg)
		if err != nil {
			return failing(ReasonConfig, fmt.Sprintf("HTTP probe: %v", err))
		}
		return pr
	case p.PostgreSQL != nil:
		return f.postgreSQL(ns, p.PostgreSQL)
	}
	return failing(ReasonConfig, fmt.Sprintf("probe mode %q has no configuration", p.Mode))
}

// postgreSQL returns a prober that reads its credentials at probe time and
// rebuilds the library prober when they change, so a Secret created or
// rotated after the resource takes effect without a restart.
func (f *proberFactory) postgreSQL(ns string, spec *swhv1alpha1.PostgreSQLProbe) probes.Prober {
	var mu sync.Mutex
	var current probes.Prober
	var currentFor string
	return probes.ProberFunc(func(ctx context.Context, target probes.Target) probes.Result {
		cfg := probes.PostgreSQLConfig{
			DBName:  spec.DBName,
			Query:   spec.Query,
			SSLMode: string(spec.TLSMode),
			User:    "postgres",
		}
		if cfg.SSLMode == "" {
			cfg.SSLMode = probes.SSLDisable
		}
		if spec.AuthSecretName != "" {
			data, err := f.secret(ctx, types.NamespacedName{Namespace: ns, Name: spec.AuthSecretName})
			if err != nil {
				return probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: err.Error(), Err: err}
			}
			user, ok := data[secretUser]
			if !ok || len(user) == 0 {
				msg := fmt.Sprintf("Secret %s/%s has no %q key", ns, spec.AuthSecretName, secretUser)
				return probes.Result{Status: probes.Failure, Reason: ReasonSecret, Message: msg}
			}
			cfg.User = string(user)
			cfg.Password = string(data[secretPassword])
			cfg.CACert, cfg.ClientCert, cfg.ClientKey = data[secretCACert], data[secretClientCert], data[secretClientKey]
		}
		// The fingerprint covers the credentials without keeping them in
		// clear in one more place.
		sum := sha256.Sum256([]byte(strings.Join([]string{cfg.User, cfg.Password, string(cfg.CACert), string(cfg.ClientCert), string(cfg.ClientKey)}, "\x00")))
		fingerprint := string(sum[:])
		mu.Lock()
		if current == nil || currentFor != fingerprint {
			pr, err := probes.NewPostgreSQL(cfg)
			if err != nil {
				mu.Unlock()
				return probes.Result{Status: probes.Failure, Reason: ReasonConfig, Message: fmt.Sprintf("PostgreSQL probe: %v", err), Err: err}
			}
			current, currentFor = pr, fingerprint
		}
		pr := current
		mu.Unlock()
		return pr.Probe(ctx, target)
	})
}

// secret returns a Secret's data, read at most once per TTL.
func (f *proberFactory) secret(ctx context.Context, key types.NamespacedName) (map[string][]byte, error) {
	f.mu.Lock()
	c, ok := f.secrets[key]
	f.mu.Unlock()
	if ok && time.Since(c.fetched) < f.secretTTL {
		return c.data, c.err
	}
	s := &corev1.Secret{}
	err := f.reader.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		err = fmt.Errorf("Secret %s not found", key)
	case err != nil:
		err = fmt.Errorf("reading Secret %s: %w", key, err)
	}
	c = cachedSecret{data: s.Data, err: err, fetched: time.Now()}
	f.mu.Lock()
	f.secrets[key] = c
	f.mu.Unlock()
	return c.data, c.err
}
