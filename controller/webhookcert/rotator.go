package webhookcert

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Defaults of Options.
const (
	DefaultCAValidity    = 10 * 365 * 24 * time.Hour
	DefaultCertValidity  = 365 * 24 * time.Hour
	DefaultCheckInterval = 10 * time.Second
	DefaultSettle        = 20 * time.Second
)

// retryAfterError is how soon a pass that failed runs again.
const retryAfterError = 2 * time.Second

// Options configure a Rotator.
type Options struct {
	// Secret holds the CA and the serving certificate; the Rotator
	// creates it.
	Secret types.NamespacedName
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose
	// webhooks get the CA bundle; the Rotator never creates it.
	WebhookConfiguration string
	// Hosts are the names the serving certificate is for: the Service's
	// DNS names, or IP addresses.
	Hosts []string
	// CAValidity and CertValidity default to DefaultCAValidity and
	// DefaultCertValidity; each is renewed two thirds through its life.
	CAValidity, CertValidity time.Duration
	// CheckInterval is how often the Secret and the configuration are
	// read (DefaultCheckInterval when 0): how soon a bundle someone else
	// changed is put back, and how late another replica may load a new
	// certificate.
	CheckInterval time.Duration
	// Settle is how long the API server must have trusted a new CA before
	// a certificate of it is served (DefaultSettle when 0): it reads the
	// configuration through an informer.
	Settle time.Duration
}

// Rotator keeps the certificate and serves it; see the package doc.
type Rotator struct {
	client client.Client
	reader client.Reader
	opts   Options
	set    settings

	serving atomic.Pointer[tls.Certificate]
	// servingPEM is the certificate and key serving holds.
	servingPEM []byte
	// trustedCA and trustedSince: the fingerprint of the CA the
	// configuration was last seen to trust, and since when.
	trustedCA    [sha256.Size]byte
	trustedSince time.Time
	// lastPass is when a pass last succeeded (UnixNano), for Ready.
	lastPass atomic.Int64
	// loggedMissing: the missing configuration was logged once.
	loggedMissing bool
}

// New returns a Rotator that writes with c and reads from the API server
// with reader (uncached: the Secret is read by name, rarely).
func New(c client.Client, reader client.Reader, opts Options) (*Rotator, error) {
	if opts.Secret.Name == "" || opts.Secret.Namespace == "" {
		return nil, errors.New("webhookcert: the Secret needs a namespace and a name")
	}
	if opts.WebhookConfiguration == "" {
		return nil, errors.New("webhookcert: no webhook configuration")
	}
	if len(opts.Hosts) == 0 {
		return nil, errors.New("webhookcert: no hosts for the serving certificate")
	}
	orDefault := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	opts.CAValidity = orDefault(opts.CAValidity, DefaultCAValidity)
	opts.CertValidity = orDefault(opts.CertValidity, DefaultCertValidity)
	opts.CheckInterval = orDefault(opts.CheckInterval, DefaultCheckInterval)
	opts.Settle = orDefault(opts.Settle, DefaultSettle)
	return &Rotator{client: c, reader: reader, opts: opts, set: settings{
		caName: opts.Secret.Name + "-ca", hosts: opts.Hosts,
		caValidity: opts.CAValidity, certValidity: opts.CertValidity,
		// Every replica loads a new certificate within a check interval of
		// its issuance, and a pass of its own may come late by one more.
		settle: opts.Settle, reload: opts.Settle + 2*opts.CheckInterval,
	}}, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica serves the webhook.
func (*Rotator) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: a pass now, then whenever one is due.
func (r *Rotator) Start(ctx context.Context) error {
	for {
		passCtx, cancel := context.WithTimeout(ctx, r.opts.CheckInterval)
		next, err := r.pass(passCtx)
		cancel()
		if err == nil {
			r.lastPass.Store(time.Now().UnixNano())
		}
		if err != nil {
			log.FromContext(ctx).Error(err, "keeping the webhook certificate failed; retrying", "secret", r.opts.Secret.String())
			next = retryAfterError
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}

// GetCertificate serves the certificate: the webhook server's tls.Config
// hook.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("no webhook certificate yet")
}

// Ready is a readiness check: ready once a certificate is served, and
// while passes succeed. A replica whose passes fail may miss a new
// certificate, and the old CA goes reload after one is issued: unready
// before then, the API server stops calling it.
func (r *Rotator) Ready(*http.Request) error {
	if r.serving.Load() == nil {
		return fmt.Errorf("no webhook certificate loaded from the Secret %s yet", r.opts.Secret)
	}
	if last := time.Unix(0, r.lastPass.Load()); time.Since(last) > r.set.settle+r.opts.CheckInterval {
		return fmt.Errorf("the webhook certificate was last checked %s ago", time.Since(last).Round(time.Second))
	}
	return nil
}

// pass reads, decides, writes and loads once; it returns when the next
// pass is due.
func (r *Rotator) pass(ctx context.Context) (time.Duration, error) {
	now := time.Now()
	// The configuration first: a bundle injected after it was read makes
	// this pass's injection conflict, one injected before is from a Secret
	// at least as new as the one read next, so no pass puts back an older
	// bundle.
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.reader.Get(ctx, client.ObjectKey{Name: r.opts.WebhookConfiguration}, config); apierrors.IsNotFound(err) {
		config = nil
	} else if err != nil {
		return 0, fmt.Errorf("reading the ValidatingWebhookConfiguration %s: %w", r.opts.WebhookConfiguration, err)
	}
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, r.opts.Secret, secret); apierrors.IsNotFound(err) {
		secret = nil
	} else if err != nil {
		return 0, fmt.Errorf("reading the Secret %s: %w", r.opts.Secret, err)
	}
	var data map[string][]byte
	if secret != nil {
		data = secret.Data
	}
	r.observeTrust(now, data, config)

	in := planInput{now: now, data: data, trustedSince: r.trustedSince, settings: r.set}
	if config != nil {
		for _, wh := range config.Webhooks {
			in.injected = append(in.injected, parseCerts(wh.ClientConfig.CABundle)...)
		}
	} else if !r.loggedMissing {
		log.FromContext(ctx).Info("the webhook configuration does not exist (yet): nothing to inject the CA into", "configuration", r.opts.WebhookConfiguration)
		r.loggedMissing = true
	}
	d, err := plan(in)
	if err != nil {
		return 0, err
	}
	if d.data == nil && secret != nil && config != nil && !metav1.IsControlledBy(secret, config) && len(secret.OwnerReferences) == 0 {
		// Made before the configuration existed: owned by it now, so that
		// it goes with it.
		d.data, d.why = secret.Data, "owned by the webhook configuration"
	}
	if d.data != nil {
		if err := r.writeSecret(ctx, secret, config, d.data); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				return 100 * time.Millisecond, nil // another replica wrote: read again
			}
			return 0, err
		}
		log.FromContext(ctx).Info("webhook certificate written", "secret", r.opts.Secret.String(), "what", d.why)
		data = d.data
	}
	if config != nil {
		if err := r.inject(ctx, config, data[KeyCABundle]); err != nil {
			if apierrors.IsConflict(err) {
				return 100 * time.Millisecond, nil
			}
			return 0, err
		}
	}
	if err := r.load(data); err != nil {
		return 0, err
	}
	next := r.opts.CheckInterval
	if !d.wakeAt.IsZero() {
		next = min(next, max(time.Until(d.wakeAt), 100*time.Millisecond))
	}
	return next, nil
}

// observeTrust notes since when the configuration trusts the Secret's CA.
// A missing configuration trusts anything: no API server calls the webhook.
func (r *Rotator) observeTrust(now time.Time, data map[string][]byte, config *admissionregistrationv1.ValidatingWebhookConfiguration) {
	bundle := parseCerts(data[KeyCABundle])
	if len(bundle) == 0 {
		r.trustedSince = time.Time{}
		return
	}
	ca := sha256.Sum256(bundle[0].Raw)
	trusted := true
	if config != nil {
		for _, wh := range config.Webhooks {
			trusted = trusted && containsRaw(parseCerts(wh.ClientConfig.CABundle), bundle[0].Raw)
		}
	}
	switch {
	case !trusted:
		r.trustedSince = time.Time{}
	case ca != r.trustedCA || r.trustedSince.IsZero():
		r.trustedCA, r.trustedSince = ca, now
	}
}

func containsRaw(bundle []*x509.Certificate, raw []byte) bool {
	for _, c := range bundle {
		if bytes.Equal(c.Raw, raw) {
			return true
		}
	}
	return false
}

// writeSecret creates the Secret, owned by the webhook configuration so
// that it goes with it, or updates it under its resourceVersion.
func (r *Rotator) writeSecret(ctx context.Context, secret *corev1.Secret, config *admissionregistrationv1.ValidatingWebhookConfiguration, data map[string][]byte) error {
	if secret == nil {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.opts.Secret.Namespace, Name: r.opts.Secret.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "swh-controller"}},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}
		if config != nil {
			secret.OwnerReferences = []metav1.OwnerReference{ownerOf(config)}
		}
		if err := r.client.Create(ctx, secret); err != nil {
			return fmt.Errorf("creating the Secret %s: %w", r.opts.Secret, err)
		}
		return nil
	}
	secret.Data = data
	if config != nil && len(secret.OwnerReferences) == 0 {
		secret.OwnerReferences = []metav1.OwnerReference{ownerOf(config)}
	}
	if err := r.client.Update(ctx, secret); err != nil {
		return fmt.Errorf("updating the Secret %s: %w", r.opts.Secret, err)
	}
	return nil
}

// ownerOf is an owner reference to the webhook configuration (not a
// controller reference: the garbage collector alone acts on it).
func ownerOf(config *admissionregistrationv1.ValidatingWebhookConfiguration) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration",
		Name: config.Name, UID: config.UID}
}

// inject sets bundle as the caBundle of every webhook of config.
func (r *Rotator) inject(ctx context.Context, config *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) error {
	changed := false
	for i := range config.Webhooks {
		if !bytes.Equal(config.Webhooks[i].ClientConfig.CABundle, bundle) {
			config.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.client.Update(ctx, config); err != nil {
		return fmt.Errorf("injecting the CA bundle into %s: %w", config.Name, err)
	}
	log.FromContext(ctx).Info("webhook CA bundle injected", "configuration", config.Name, "cas", len(parseCerts(bundle)))
	return nil
}

// load serves the Secret's certificate when it changed.
func (r *Rotator) load(data map[string][]byte) error {
	pemBytes := append(append([]byte{}, data[KeyCert]...), data[KeyKey]...)
	if r.serving.Load() != nil && bytes.Equal(pemBytes, r.servingPEM) {
		return nil
	}
	cert, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return fmt.Errorf("loading the webhook certificate of %s: %w", r.opts.Secret, err)
	}
	r.serving.Store(&cert)
	r.servingPEM = pemBytes
	return nil
}
