package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/swh-dev/swh/agent/internal/version"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// maxRetryDelay caps the backoff of a resource whose writes keep failing.
const maxRetryDelay = 30 * time.Second

// Options configure a Publisher.
type Options struct {
	// Coalesce is how long verdict changes wait to be written together at
	// most; 30 ms when zero. The wait ends earlier when every target of
	// the resource has reported for the round of the change (rounds.go).
	// Pod and resource changes are not delayed.
	Coalesce time.Duration
	// FailClosed withdraws every failing target, as before fail static:
	// no hold keeps an endpoint whose failures point at the checker
	// (failstatic.go).
	FailClosed bool
	// CoalesceWholeWindow makes verdict changes always wait out Coalesce,
	// as before rounds ended it: one write per mass failure either way,
	// later.
	CoalesceWholeWindow bool
	// MaxConcurrentProbes bounds the probes in flight; the probes
	// module's default when zero.
	MaxConcurrentProbes int
	// MaxConcurrentProbesPerNamespace bounds the probes in flight of the
	// resources of one namespace, so that one tenant's probes hanging
	// against backends that never answer cannot hold every slot of the
	// node: its own due probes wait, the other namespaces' run on time.
	// A quarter of MaxConcurrentProbes when zero.
	MaxConcurrentProbesPerNamespace int
	// SecretTTL is how long database credentials are reused before the
	// Secret is read again (in the background: probes keep the credentials
	// they have, even while reads fail); 30 s when zero.
	SecretTTL time.Duration
	// SecretCacheBytes bounds what the agent keeps of credentials Secrets,
	// in total, and SecretCacheNamespaceBytes of one namespace's: past a
	// bound a Secret is not kept and its probes fail with reason secret.
	// DefaultSecretCacheBytes and DefaultSecretCacheNamespaceBytes when
	// zero.
	SecretCacheBytes, SecretCacheNamespaceBytes int64
	// SkipNameValidation lets one process run several agents (tests).
	SkipNameValidation bool
	// UserAgent is sent by HTTP probes whose headers have none;
	// "swh-probe/<the agent's version>" when empty.
	UserAgent string
}

// Deps are what a Publisher reads, writes and reports through. Metrics
// and Logger are optional; the others are required.
type Deps struct {
	// Client reads from a cache (the resources, their Services, the
	// node's pods and slices, its Node) and writes slices.
	Client client.Client
	// APIReader reads from the API server: Secrets, and the slices the
	// cache does not hold (a holder of a taken name, the built-in
	// controller's slices of an adopted Service).
	APIReader client.Reader
	// Recorder emits events on the resources.
	Recorder events.EventRecorder
	// Metrics counts probes and writes; nil counts nothing.
	Metrics *Metrics
	// Logger logs what happens outside a reconcile (Secret reads); the
	// zero Logger discards.
	Logger logr.Logger
}

// New builds the Publisher of node nodeName (the exact name of its Node
// object): its probe scheduler, its target state and its probers. It
// probes nothing until SetupWithManager registers it and the manager runs.
func New(nodeName string, opts Options, deps Deps) (*Publisher, error) {
	var problems []error
	if nodeName == "" {
		problems = append(problems, errors.New("the node name is required"))
	}
	if deps.Client == nil {
		problems = append(problems, errors.New("Deps.Client is required"))
	}
	if deps.APIReader == nil {
		problems = append(problems, errors.New("Deps.APIReader is required"))
	}
	if deps.Recorder == nil {
		problems = append(problems, errors.New("Deps.Recorder is required"))
	}
	if opts.Coalesce < 0 {
		problems = append(problems, fmt.Errorf("Options.Coalesce %s is negative", opts.Coalesce))
	}
	if opts.SecretTTL < 0 {
		problems = append(problems, fmt.Errorf("Options.SecretTTL %s is negative", opts.SecretTTL))
	}
	schedOpts, err := schedulerOptions(opts)
	if err != nil {
		problems = append(problems, err)
	}
	if opts.SecretCacheBytes < 0 {
		problems = append(problems, fmt.Errorf("Options.SecretCacheBytes %d is negative", opts.SecretCacheBytes))
	}
	if opts.SecretCacheNamespaceBytes < 0 {
		problems = append(problems, fmt.Errorf("Options.SecretCacheNamespaceBytes %d is negative", opts.SecretCacheNamespaceBytes))
	}
	bounds := secretBounds{Total: opts.SecretCacheBytes, Namespace: opts.SecretCacheNamespaceBytes}.withDefaults()
	if bounds.Namespace > bounds.Total {
		problems = append(problems, fmt.Errorf("Options.SecretCacheNamespaceBytes %d exceeds Options.SecretCacheBytes %d: one namespace could take every Secret's room", bounds.Namespace, bounds.Total))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, fmt.Errorf("building the publisher: %w", err)
	}
	if opts.Coalesce == 0 {
		opts.Coalesce = 30 * time.Millisecond
	}
	if opts.SecretTTL == 0 {
		opts.SecretTTL = 30 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = version.UserAgent()
	}
	p := &Publisher{
		client:             deps.Client,
		reader:             deps.APIReader,
		recorder:           deps.Recorder,
		metrics:            deps.Metrics,
		nodeName:           nodeName,
		skipNameValidation: opts.SkipNameValidation,
		targets:            newTargetTable(opts.FailClosed),
		takenSliceNames:    newTakenNames(),
		written:            newWrittenSlices(),
		verdictFlips:       &flipQueue{delay: opts.Coalesce, wholeWindow: opts.CoalesceWholeWindow},
	}
	secrets := newSecretCache(deps.APIReader, opts.SecretTTL, bounds, deps.Logger.WithName("secrets"), deps.Metrics)
	secrets.onTLSModeChange = p.secretTLSModeChanged
	p.probers = newProberFactory(secrets)
	p.probers.userAgent = opts.UserAgent
	schedOpts.OnResult = p.onResult
	sched, err := probes.NewScheduler(schedOpts)
	if err != nil {
		return nil, fmt.Errorf("building the publisher: the probe scheduler: %w", err)
	}
	p.scheduler = sched
	p.metrics.watchTable(p.targets)
	return p, nil
}

// namespaceShare is the part of the probe slots one namespace may hold by
// default: four namespaces whose probes all hang fill a node's slots.
const namespaceShare = 4

// schedulerOptions are the probe scheduler's options but OnResult: the
// probes of one namespace are one group (see syncTargets), bounded to
// MaxConcurrentProbesPerNamespace.
func schedulerOptions(opts Options) (probes.SchedulerOptions[targetKey], error) {
	total, perNamespace := opts.MaxConcurrentProbes, opts.MaxConcurrentProbesPerNamespace
	switch {
	case total < 0:
		return probes.SchedulerOptions[targetKey]{}, fmt.Errorf("Options.MaxConcurrentProbes %d is negative", total)
	case total == 0:
		total = probes.DefaultMaxConcurrent
	}
	switch {
	case perNamespace < 0:
		return probes.SchedulerOptions[targetKey]{}, fmt.Errorf("Options.MaxConcurrentProbesPerNamespace %d is negative", perNamespace)
	case perNamespace > total:
		return probes.SchedulerOptions[targetKey]{}, fmt.Errorf("Options.MaxConcurrentProbesPerNamespace %d exceeds Options.MaxConcurrentProbes (%d)", perNamespace, total)
	case perNamespace == 0:
		perNamespace = max(1, total/namespaceShare)
	}
	// The publisher places each job itself (see phaseOf): no random jitter.
	return probes.SchedulerOptions[targetKey]{MaxConcurrent: total, MaxConcurrentPerGroup: perNamespace, NoJitter: true}, nil
}

// SetupWithManager registers the publisher with the manager: its probe
// scheduler as a runnable, and its controller with its watches.
func (p *Publisher) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(p.scheduler.Run)); err != nil {
		return fmt.Errorf("adding the probe scheduler: %w", err)
	}
	bySliceOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	byLeaseOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[swhv1alpha1.LabelExclusiveLease]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
	})
	sameName := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	})
	// A refused write (an admission policy, a registry not written yet) is
	// retried with backoff; capped at maxRetryDelay rather than
	// controller-runtime's 1000 s, so a slice refused for a while is
	// written soon after the refusal ends even when nothing else changes.
	copts := controller.Options{MaxConcurrentReconciles: 4, RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)}
	if p.skipNameValidation {
		copts.SkipNameValidation = &p.skipNameValidation
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("publisher").
		For(&swhv1alpha1.ServiceWithHealthchecks{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(p.resourcesSelecting)).
		Watches(&discoveryv1.EndpointSlice{}, bySliceOwner).
		Watches(&corev1.Service{}, sameName).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(p.allResources)).
		Watches(&coordinationv1.Lease{}, byLeaseOwner).
		WatchesRawSource(p.verdictFlips.source()).
		WithOptions(copts).
		Complete(p)
}

// resourcesSelecting maps a pod to the resources of its namespace whose
// selector matches it (for an update, controller-runtime maps the old and
// the new pod, so a pod leaving a selector is seen too).
func (p *Publisher) resourcesSelecting(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := p.client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources for a pod event")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		sel := list.Items[i].Spec.Selector
		if len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(obj.GetLabels())) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// allResources maps a change of the node (its zone) to every resource.
func (p *Publisher) allResources(ctx context.Context, _ client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := p.client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources for a node event")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}
