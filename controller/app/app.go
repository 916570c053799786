// Package app assembles swh-controller: a controller-runtime manager with
// leader election, health endpoints, metrics and the reconcilers (the
// resources' Services, node health, the agents' access, exclusive ports). The binary
// and the tests both start the controller through Run.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/controller/disruption"
	"github.com/swh-dev/swh/controller/exclusive"
	"github.com/swh-dev/swh/controller/nodehealth"
	"github.com/swh-dev/swh/controller/reconciler"
	"github.com/swh-dev/swh/controller/webhookcert"
	"github.com/swh-dev/swh/endpoints"
)

// FieldOwner is the controller's field manager on the child Services.
const FieldOwner = "swh-controller"

// Options configure the controller.
type Options struct {
	// MetricsAddr serves /metrics; "0" disables it.
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz; "0" disables it.
	HealthAddr string
	// LeaderElection makes only one replica act at a time.
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; required with LeaderElection
	// when not running in a cluster.
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease; defaults to "swh-controller".
	LeaderElectionID string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election;
	// zero values take controller-runtime's defaults.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
	// Registry receives the metrics; controller-runtime's registry when nil.
	Registry metrics.RegistererGatherer
	// SkipNameValidation lets one process run several controllers (tests).
	SkipNameValidation bool
	// AgentServiceAccount is the agents' ServiceAccount, which the
	// controller grants get on the Secrets the probes name, namespace by
	// namespace; empty, it grants none.
	AgentServiceAccount types.NamespacedName
	// WebhookPort serves the eviction guard (HTTPS, on every replica);
	// 0 disables the webhook server (the disruption status is still kept).
	WebhookPort int
	// WebhookHost is the address the webhook server binds; all by default.
	WebhookHost string
	// WebhookCertDir holds tls.crt and tls.key for the webhook server
	// (cert-manager's Secret, mounted), unless WebhookCert is set.
	WebhookCertDir string
	// WebhookCert, when set, makes the controller keep the webhook's
	// certificate itself: a CA and a certificate in a Secret, the CA
	// injected into the webhook configuration, both rotated
	// (webhookcert); the server then serves from the Secret.
	WebhookCert *webhookcert.Options
	// ReservationTimeout defaults to disruption.DefaultReservationTimeout.
	ReservationTimeout time.Duration
	// EvictionWebhookTimeout is the eviction webhook's timeoutSeconds
	// (disruption.DefaultWebhookTimeout when 0): the guard bounds each
	// decision inside it.
	EvictionWebhookTimeout time.Duration
}

// NewScheme returns the types the controller reads and writes.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding swh types: %w", err)
	}
	return scheme, nil
}

// NewManager builds the manager with the reconciler registered.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	if opts.LeaderElectionID == "" {
		opts.LeaderElectionID = "swh-controller"
	}
	registry := opts.Registry
	if registry == nil {
		registry = metrics.Registry
	}
	agentSlices := labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy})
	byObject := access.CacheByObject()
	// Only the agents' slices: the cluster's other slices are none of the
	// controller's business and would fill its memory.
	byObject[&discoveryv1.EndpointSlice{}] = cache.ByObject{Label: agentSlices}
	// Nodes, typed (the node health controller) and metadata-only (the
	// reconciler): only what they read.
	byObject[&corev1.Node{}] = cache.ByObject{Transform: trimNode}
	// The exclusive ports' Leases, never the cluster's others.
	exclusiveLeases, err := labels.NewRequirement(swhv1alpha1.LabelExclusiveLease, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("building the Lease selector: %w", err)
	}
	byObject[&coordinationv1.Lease{}] = cache.ByObject{Label: labels.NewSelector().Add(*exclusiveLeases)}
	if opts.AgentServiceAccount.Name != "" {
		// The agents' pods, whose readiness says a node's verdicts are
		// current (the eviction guard); never the cluster's other pods.
		byObject[&corev1.Pod{}] = cache.ByObject{Namespaces: map[string]cache.Config{opts.AgentServiceAccount.Namespace: {}}}
	}
	mgrOpts := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress:  opts.HealthAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		LeaderElectionID:        opts.LeaderElectionID,
		// The next leader starts at once instead of waiting for the lease.
		LeaderElectionReleaseOnCancel: true,
		// ConfigMaps, Roles and RoleBindings: only the access reconciler's.
		Cache: cache.Options{ByObject: byObject},
	}
	// rotator keeps the certificate when WebhookCert is set; the server's
	// TLS hook reads it once the manager that gives it clients exists.
	var rotator *webhookcert.Rotator
	if opts.WebhookPort != 0 {
		serverOpts := webhook.Options{Host: opts.WebhookHost, Port: opts.WebhookPort, CertDir: opts.WebhookCertDir}
		if opts.WebhookCert != nil {
			serverOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) {
				c.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return rotator.GetCertificate(h) }
			}}
		}
		mgrOpts.WebhookServer = webhook.NewServer(serverOpts)
	}
	if opts.SkipNameValidation {
		mgrOpts.Controller.SkipNameValidation = &opts.SkipNameValidation
	}
	if opts.LeaseDuration > 0 {
		mgrOpts.LeaseDuration = &opts.LeaseDuration
	}
	if opts.RenewDeadline > 0 {
		mgrOpts.RenewDeadline = &opts.RenewDeadline
	}
	if opts.RetryPeriod > 0 {
		mgrOpts.RetryPeriod = &opts.RetryPeriod
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	m, err := reconciler.NewMetrics(registry)
	if err != nil {
		return nil, err
	}
	r := &reconciler.Reconciler{
		Client:     mgr.GetClient(),
		APIReader:  mgr.GetAPIReader(),
		Recorder:   mgr.GetEventRecorder(FieldOwner),
		FieldOwner: FieldOwner,
		Metrics:    m,
	}
	if err := r.SetupWithManager(mgr, reconciler.SetupOptions{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}); err != nil {
		return nil, fmt.Errorf("registering the reconciler: %w", err)
	}
	stale := &reconciler.StaleSlices{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(FieldOwner), Metrics: m,
	}
	if err := stale.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the stale slice collector: %w", err)
	}
	x := &exclusive.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(FieldOwner),
		SkipNameValidation: opts.SkipNameValidation}
	if err := x.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the exclusive ports' reconciler: %w", err)
	}
	nm, err := nodehealth.NewMetrics(registry)
	if err != nil {
		return nil, err
	}
	w := &nodehealth.Withdrawer{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder(FieldOwner), Metrics: nm}
	if err := w.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the node health controller: %w", err)
	}
	am, err := access.NewMetrics(registry)
	if err != nil {
		return nil, err
	}
	a := &access.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		AgentServiceAccount: opts.AgentServiceAccount, Metrics: am,
	}
	if err := a.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the access reconciler: %w", err)
	}
	if err := setupGuard(mgr, opts, registry); err != nil {
		return nil, err
	}
	if opts.WebhookPort != 0 && opts.WebhookCert != nil {
		if rotator, err = webhookcert.New(mgr.GetClient(), mgr.GetAPIReader(), *opts.WebhookCert); err != nil {
			return nil, err
		}
		if err := mgr.Add(rotator); err != nil {
			return nil, fmt.Errorf("adding the webhook certificate rotator: %w", err)
		}
		if err := mgr.AddReadyzCheck("webhook-certificate", rotator.Ready); err != nil {
			return nil, fmt.Errorf("adding the webhook certificate's readiness check: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
	// Ready once the caches have synced: before that, a reconcile would
	// see no slices and write an empty status.
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		if !mgr.GetCache().WaitForCacheSync(req.Context()) {
			return errors.New("caches not synced")
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("adding the readiness check: %w", err)
	}
	return mgr, nil
}

// setupGuard registers the eviction guard's webhook (every replica) and
// the disruption status reconciler (the leader).
func setupGuard(mgr ctrl.Manager, opts Options, registry metrics.RegistererGatherer) error {
	// The selected pods, streamed and trimmed: a tenant's pods can be big,
	// and every count of every replica lists them.
	pods, err := disruption.NewStreamingPods(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	sources := disruption.Sources{
		Cache: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scales: mgr.GetClient(), Pods: pods,
		Agent: opts.AgentServiceAccount, ReservationTimeout: opts.ReservationTimeout,
	}
	sr := &disruption.StatusReconciler{Sources: sources, Client: mgr.GetClient()}
	if err := sr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("registering the disruption status reconciler: %w", err)
	}
	if opts.WebhookPort == 0 {
		return nil
	}
	dm, err := disruption.NewMetrics(registry)
	if err != nil {
		return err
	}
	// Every replica answers evictions from its cache: start the informers
	// the guard reads at once rather than at the first eviction, which would
	// wait for them (the controllers that would start them run on the leader
	// only).
	warm := []client.Object{&swhv1alpha1.ServiceWithHealthchecks{}, &discoveryv1.EndpointSlice{}, &corev1.Node{}}
	if opts.AgentServiceAccount.Name != "" {
		warm = append(warm, &corev1.Pod{})
	}
	informers := &warmInformers{cache: mgr.GetCache(), objects: warm}
	if err := mgr.Add(informers); err != nil {
		return fmt.Errorf("adding the guard's informers: %w", err)
	}
	// Not ready before they have synced: the guard would answer every
	// eviction of the cluster with a 429 after waiting for them.
	if err := mgr.AddReadyzCheck("guard-informers", func(*http.Request) error {
		if !informers.synced.Load() {
			return errors.New("the eviction guard's informers have not synced")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding the guard's readiness check: %w", err)
	}
	guard := &disruption.Guard{Sources: sources, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(FieldOwner), Metrics: dm,
		WebhookTimeout: opts.EvictionWebhookTimeout}
	server := mgr.GetWebhookServer()
	server.Register(disruption.Path, &webhook.Admission{Handler: guard})
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	return nil
}

// warmInformers starts informers on every replica, leader or not, and says
// when they have synced.
type warmInformers struct {
	cache   cache.Cache
	objects []client.Object
	synced  atomic.Bool
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*warmInformers) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (w *warmInformers) Start(ctx context.Context) error {
	for _, obj := range w.objects {
		if _, err := w.cache.GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("starting the informer of %T: %w", obj, err)
		}
	}
	if w.cache.WaitForCacheSync(ctx) {
		w.synced.Store(true)
	}
	<-ctx.Done()
	return nil
}

// Run starts the controller and blocks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	mgr, err := NewManager(cfg, opts)
	if err != nil {
		return err
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}
