package publisher

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/swh-dev/swh/agent/internal/version"
	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// maxRetryDelay caps the backoff of a resource whose writes keep failing.
const maxRetryDelay = 30 * time.Second

// Options configure a Publisher.
type Options struct {
	// Coalesce is how long verdict changes wait to be written together;
	// 30 ms when zero. Pod and resource changes are not delayed.
	Coalesce time.Duration
	// MaxConcurrentProbes bounds the probes in flight; the probes
	// module's default when zero.
	MaxConcurrentProbes int
	// SecretTTL is how long PostgreSQL credentials are reused before the
	// Secret is read again (in the background: probes keep the credentials
	// they have, even while reads fail); 30 s when zero.
	SecretTTL time.Duration
	// SkipNameValidation lets one process run several agents (tests).
	SkipNameValidation bool
	// UserAgent is sent by HTTP probes whose headers have none;
	// "swh-probe/<the agent's version>" when empty.
	UserAgent string
}

// SetupWithManager creates the probe scheduler, registers it with the
// manager and the publisher's controller with its watches.
func (p *Publisher) SetupWithManager(mgr ctrl.Manager, opts Options) error {
	if opts.Coalesce == 0 {
		opts.Coalesce = 30 * time.Millisecond
	}
	if opts.SecretTTL == 0 {
		opts.SecretTTL = 30 * time.Second
	}
	p.state = newState()
	p.taken = newTakenNames()
	p.reader = mgr.GetAPIReader()
	secrets := newSecretCache(mgr.GetAPIReader(), opts.SecretTTL, mgr.GetLogger().WithName("secrets"), p.Metrics)
	secrets.onTLSModeChange = p.secretTLSModeChanged
	p.factory = newProberFactory(secrets)
	p.factory.userAgent = opts.UserAgent
	if p.factory.userAgent == "" {
		p.factory.userAgent = version.UserAgent()
	}
	// The publisher places each job itself (see phaseOf): no random jitter.
	sched, err := probes.NewScheduler(probes.SchedulerOptions[targetKey]{OnResult: p.onResult, MaxConcurrent: opts.MaxConcurrentProbes, NoJitter: true})
	if err != nil {
		return fmt.Errorf("creating the probe scheduler: %w", err)
	}
	p.scheduler = sched
	if err := mgr.Add(manager.RunnableFunc(sched.Run)); err != nil {
		return fmt.Errorf("adding the probe scheduler: %w", err)
	}

	// Verdict flips come from probe goroutines. They go straight into the
	// controller's queue, delayed by the coalescing window (repeats of one
	// resource merge there). Adding to a workqueue never blocks, so a probe
	// goroutine cannot stall the scheduler, even after the controller has
	// stopped; before the source starts no target exists, so nothing is lost.
	var (
		queueMu sync.Mutex
		queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	)
	flips := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		queueMu.Lock()
		defer queueMu.Unlock()
		queue = q
		return nil
	})
	p.notify = func(key types.NamespacedName) {
		queueMu.Lock()
		q := queue
		queueMu.Unlock()
		if q != nil {
			q.AddAfter(reconcile.Request{NamespacedName: key}, opts.Coalesce)
		}
	}
	bySliceOwner := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[discoveryv1.LabelServiceName]
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
	if opts.SkipNameValidation {
		copts.SkipNameValidation = &opts.SkipNameValidation
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("publisher").
		For(&swhv1alpha1.ServiceWithHealthchecks{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(p.resourcesSelecting)).
		Watches(&discoveryv1.EndpointSlice{}, bySliceOwner).
		Watches(&corev1.Service{}, sameName).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(p.allResources)).
		WatchesRawSource(flips).
		WithOptions(copts).
		Complete(p)
}

// resourcesSelecting maps a pod to the resources of its namespace whose
// selector matches it (for an update, controller-runtime maps the old and
// the new pod, so a pod leaving a selector is seen too).
func (p *Publisher) resourcesSelecting(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := p.Client.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
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
	if err := p.Client.List(ctx, list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing resources for a node event")
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}
