package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Path is where the webhook server serves the guard.
const Path = "/validate-eviction"

// DefaultWebhookTimeout is the webhook's timeoutSeconds in the chart's
// default values: how long the API server waits for the guard's answer.
const DefaultWebhookTimeout = 5 * time.Second

// DecisionBound is how long the guard gives one decision when the API
// server waits webhookTimeout for its answer: three fifths of it (3 s of
// the default 5 s), the rest left for the round trip and a loaded process.
// An answer the API server never gets is a failure (failurePolicy Fail:
// HTTP 500, which kubectl drain does not retry; Ignore: an unguarded
// eviction), an answer of 429 is retried.
func DecisionBound(webhookTimeout time.Duration) time.Duration {
	if webhookTimeout <= 0 {
		webhookTimeout = DefaultWebhookTimeout
	}
	return webhookTimeout * 3 / 5
}

// maxReservations is the CRD's bound on status.disruption.reservations.
const maxReservations = 2000

// Guard decides evictions. It is an admission.Handler for pods/eviction.
type Guard struct {
	Sources
	// Client writes the resources' status.
	Client client.Client
	// Recorder emits events on the resources (never for a dry run).
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *Metrics
	// WebhookTimeout is the webhook's timeoutSeconds (DefaultWebhookTimeout
	// when 0): a decision is bounded at DecisionBound of it.
	WebhookTimeout time.Duration
	// Now defaults to time.Now.
	Now func() time.Time
}

var _ admission.Handler = (*Guard)(nil)

// Handle implements admission.Handler.
func (g *Guard) Handle(ctx context.Context, req admission.Request) admission.Response {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, g.decisionTimeout())
	defer cancel()
	d, err := g.handle(ctx, req)
	if err != nil {
		log.FromContext(ctx).Error(err, "eviction guard could not decide", "pod", req.Namespace+"/"+req.Name)
		d = decision{outcome: outcomeError, message: fmt.Sprintf("the eviction guard could not decide, retry: %v", err)}
	}
	g.Metrics.observe(d.outcome, time.Since(start))
	if d.outcome == outcomeAllowed || d.outcome == outcomeIgnored {
		return admission.Allowed(d.message)
	}
	return tooManyRequests(d.message)
}

type outcome string

const (
	outcomeAllowed outcome = "allowed" // a budget allowed it (or already had)
	outcomeIgnored outcome = "ignored" // no budget covers the pod, or no disruption
	outcomeDenied  outcome = "denied"
	outcomeError   outcome = "error" // answered 429 too: retried
)

type decision struct {
	outcome outcome
	message string
}

func (g *Guard) handle(ctx context.Context, req admission.Request) (decision, error) {
	if req.Operation != admissionv1.Create || req.SubResource != "eviction" {
		return decision{outcome: outcomeIgnored}, nil
	}
	dryRun, err := isDryRun(req)
	if err != nil {
		return decision{}, err
	}
	// Most evictions are none of ours: answer them from the cache, before
	// reading the pod from the API server.
	budgeted, err := g.budgetsIn(ctx, req.Namespace)
	if err != nil || len(budgeted) == 0 {
		return decision{outcome: outcomeIgnored}, err
	}
	pod := &corev1.Pod{}
	if err := g.APIReader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return decision{outcome: outcomeIgnored}, nil // the API server answers 404
		}
		return decision{}, fmt.Errorf("reading pod %s/%s: %w", req.Namespace, req.Name, err)
	}
	// kube-apiserver deletes these without asking a PodDisruptionBudget:
	// they disrupt nothing more than they already do.
	if terminal(pod) || pod.Status.Phase == corev1.PodPending || pod.DeletionTimestamp != nil {
		return decision{outcome: outcomeIgnored}, nil
	}
	var guarding []swhv1alpha1.ServiceWithHealthchecks
	for _, swh := range budgeted {
		if labels.SelectorFromSet(swh.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			guarding = append(guarding, swh)
		}
	}
	if len(guarding) == 0 {
		return decision{outcome: outcomeIgnored}, nil
	}
	var allowed []decided
	for i := range guarding {
		d, err := g.decide(ctx, &guarding[i], pod, dryRun)
		if err != nil {
			g.releaseLater(ctx, allowed)
			return decision{}, err
		}
		if d.outcome != outcomeAllowed {
			// One budget says no: give back what the others took.
			g.releaseLater(ctx, allowed)
			if !dryRun {
				g.event(d, pod)
			}
			return d.decision, nil
		}
		allowed = append(allowed, d)
	}
	if !dryRun {
		for _, d := range allowed {
			g.event(d, pod)
		}
	}
	return decision{outcome: outcomeAllowed}, nil
}

// releaseLater gives back the reservations of an eviction another budget
// refused, after the answer: the answer must reach the API server within
// the webhook's timeout, and a reservation left behind only expires.
func (g *Guard) releaseLater(ctx context.Context, ds []decided) {
	for _, d := range ds {
		if d.key == nil {
			continue
		}
		go func(k reservationKey) {
			if err := g.release(context.WithoutCancel(ctx), k); err != nil {
				log.FromContext(ctx).Error(err, "releasing a reservation; it expires by itself", "resource", k.resource)
			}
		}(*d.key)
	}
}

// budgetsIn returns the resources of ns with a budget, by name.
func (g *Guard) budgetsIn(ctx context.Context, ns string) ([]swhv1alpha1.ServiceWithHealthchecks, error) {
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := g.Cache.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("listing the resources of namespace %s: %w", ns, err)
	}
	var out []swhv1alpha1.ServiceWithHealthchecks
	for _, swh := range list.Items {
		if swh.Spec.DisruptionBudget != nil && len(swh.Spec.Selector) > 0 {
			out = append(out, swh)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// isDryRun: kubectl drain --dry-run=server puts dryRun in the Eviction's
// deleteOptions only, which the request's dryRun does not reflect.
func isDryRun(req admission.Request) (bool, error) {
	if req.DryRun != nil && *req.DryRun {
		return true, nil
	}
	if len(req.Object.Raw) == 0 {
		return false, nil
	}
	ev := &policyv1.Eviction{}
	if err := json.Unmarshal(req.Object.Raw, ev); err != nil {
		return false, fmt.Errorf("decoding the Eviction: %w", err)
	}
	return ev.DeleteOptions != nil && len(ev.DeleteOptions.DryRun) > 0, nil
}

// tooManyRequests is the denial kubectl drain retries: code 429 with the
// TooManyRequests reason, as kube-apiserver's own budget denial.
func tooManyRequests(message string) admission.Response {
	return admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusTooManyRequests,
			Reason:  metav1.StatusReasonTooManyRequests,
			Message: message,
			// No retryAfterSeconds, like kube-apiserver's own budget
			// denial: the API server would turn it into a Retry-After
			// header, which client-go obeys by retrying the eviction itself
			// (ten times), holding the caller's request for a minute.
			// kubectl drain retries a 429 every 5 s on its own.
			Details: &metav1.StatusDetails{
				Causes: []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: message}},
			},
		},
	}}
}

// denialMessage explains a denial: the resource, its budget, the counts and
// the pods that do not count.
func denialMessage(swh *swhv1alpha1.ServiceWithHealthchecks, pod *corev1.Pod, ev Evaluation) string {
	if ev.Problem != "" {
		return fmt.Sprintf("Cannot evict pod %s: the disruption budget of ServiceWithHealthchecks %s/%s (%s) cannot be counted, and allows nothing until it can: %s",
			pod.Name, swh.Namespace, swh.Name, Describe(swh), ev.Problem)
	}
	return fmt.Sprintf("Cannot evict pod %s as it would violate the disruption budget of ServiceWithHealthchecks %s/%s (%s): it needs %d of %d pods passing their probes and %d do; not counted: %s",
		pod.Name, swh.Namespace, swh.Name, Describe(swh), ev.Desired, ev.Expected, ev.Healthy, ev.unavailableList())
}
