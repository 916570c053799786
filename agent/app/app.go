// Package app assembles swh-agent: a controller-runtime manager whose caches
// hold only what concerns its node (its pods, its slices, its Node), health
// endpoints, metrics and the publisher. The binary and the tests both start
// agents through NewManager.
package app

import (
	"errors"
	"fmt"
	"net/http"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/swh-dev/swh/agent/publisher"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// Options configure an agent.
type Options struct {
	// NodeName is the exact name of the agent's Node; required.
	NodeName string
	// MetricsAddr serves /metrics; "0" disables it.
	MetricsAddr string
	// ServeHistory serves the targets' history on the metrics address
	// (publisher.HistoryPath), for kubectl swh history: pod names and
	// probe reasons of every namespace, to whoever reaches that port.
	ServeHistory bool
	// HealthAddr serves /healthz and /readyz; "0" disables it.
	HealthAddr string
	// Registry receives the metrics; controller-runtime's registry when nil.
	Registry metrics.RegistererGatherer
	// Publisher tunes coalescing, probe concurrency and Secret reuse.
	Publisher publisher.Options
}

// NewManager builds an agent's manager with the publisher registered.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	if opts.NodeName == "" {
		return nil, errors.New("the node name is required (the downward API's spec.nodeName)")
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding core types: %w", err)
	}
	if err := swhv1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("adding swh types: %w", err)
	}
	childServices, err := labels.NewRequirement(swhv1alpha1.LabelService, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("building the Service selector: %w", err)
	}
	exclusiveLeases, err := labels.NewRequirement(swhv1alpha1.LabelExclusiveLease, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("building the Lease selector: %w", err)
	}
	ownSlices := labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy,
		endpoints.DefaultNodeLabel: endpoints.NodeLabelValue(opts.NodeName),
	})
	registry := opts.Registry
	if registry == nil {
		registry = metrics.Registry
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: opts.MetricsAddr},
		HealthProbeBindAddress: opts.HealthAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// The agent's memory must not grow with the rest of the cluster.
			&corev1.Pod{}:                {Field: fields.OneTermEqualSelector("spec.nodeName", opts.NodeName)},
			&corev1.Node{}:               {Field: fields.OneTermEqualSelector("metadata.name", opts.NodeName)},
			&discoveryv1.EndpointSlice{}: {Label: ownSlices},
			&corev1.Service{}:            {Label: labels.NewSelector().Add(*childServices)},
			// The exclusive ports' Leases only, never the cluster's others.
			&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*exclusiveLeases)},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	m, err := publisher.NewMetrics(registry)
	if err != nil {
		return nil, err
	}
	p, err := publisher.New(opts.NodeName, opts.Publisher, publisher.Deps{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("swh-agent"),
		Metrics:   m,
		Logger:    mgr.GetLogger(),
	})
	if err != nil {
		return nil, err
	}
	if err := p.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("registering the publisher: %w", err)
	}
	if opts.ServeHistory && opts.MetricsAddr != "0" {
		if err := mgr.AddMetricsServerExtraHandler(publisher.HistoryPath, p.HistoryHandler()); err != nil {
			return nil, fmt.Errorf("serving the targets' history: %w", err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding the health check: %w", err)
	}
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
