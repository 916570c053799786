package handback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/endpoints"
)

// builtinManagedBy is kube-controller-manager's EndpointSlice controller's
// endpointslice.kubernetes.io/managed-by value.
const builtinManagedBy = "endpointslice-controller.k8s.io"

// stuckGrace is how long past its grace period a terminating controller
// pod is waited for: one on an unreachable node stays Terminating forever,
// and stopped acting when its node was lost.
const stuckGrace = 30 * time.Second

// Options configure Run.
type Options struct {
	// Controller is the controller's Deployment, scaled to zero first;
	// nothing is scaled when its name is empty.
	Controller types.NamespacedName
	// WebhookConfiguration is the eviction guard's, deleted first (no
	// replica will answer it, and it fails closed); none when empty.
	WebhookConfiguration string
	// Timeout bounds each of the two waits: the controller's pods going,
	// and the built-in slices of every Service listing its pods
	// (2 minutes when 0).
	Timeout time.Duration
	// Poll is how often a wait reads again (500 ms when 0).
	Poll time.Duration
	// Log receives one line per step.
	Log io.Writer
}

// target is a resource whose Service is being given back.
type target struct {
	swh     *swhv1alpha1.ServiceWithHealthchecks
	covered bool
}

// Run hands every resource's Service back (see the package doc). It can
// run again after a failure and finishes what the previous run left: a
// Service already given its selector, or already plain but still carrying
// the agents' slices. A Service whose built-in slices do not cover the
// agents' within the timeout keeps the agents' slices and fails the run.
func Run(ctx context.Context, c client.Client, opts Options) error {
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := removeGuard(ctx, c, opts); err != nil {
		return err
	}
	if opts.Controller.Name != "" {
		if err := stopController(ctx, c, opts); err != nil {
			return err
		}
	}
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing the ServiceWithHealthchecks: %w", err)
	}
	// 1. Selectors first, owner and label kept: the agents keep their
	// slices current while kube-controller-manager publishes its own.
	var targets []*target
	for i := range list.Items {
		swh := &list.Items[i]
		ok, err := select_(ctx, c, swh, opts)
		if err != nil {
			return err
		}
		if ok {
			targets = append(targets, &target{swh: swh})
		}
	}
	// 2. One wait for every Service: the built-in controller works on all
	// of them at once.
	waitErr := wait(ctx, opts, "the built-in slices of every Service to list its pods", func() (bool, error) {
		done := true
		for _, t := range targets {
			if t.covered {
				continue
			}
			missing, err := missingPods(ctx, c, t.swh)
			if err != nil {
				return false, err
			}
			t.covered = len(missing) == 0
			done = done && t.covered
		}
		return done, nil
	})
	// 3. The agents fenced (their admission policy refuses slices of a
	// namespace without the registry), the Services made plain, the
	// agents' slices of the covered ones deleted, the grants deleted.
	var errs []error
	if err := deleteNamed(ctx, c, &corev1.ConfigMapList{}, access.ServicesConfigMap, opts); err != nil {
		return err
	}
	for _, t := range targets {
		if err := release(ctx, c, t.swh); err != nil {
			errs = append(errs, err)
			continue
		}
		if !t.covered {
			missing, _ := missingPods(ctx, c, t.swh)
			errs = append(errs, fmt.Errorf("the Service %s/%s: pods the built-in controller does not publish ready yet, by port: %v; the agents' slices are kept (run the hand-back again)",
				t.swh.Namespace, t.swh.Name, missing))
			continue
		}
		n, err := deleteAgentSlices(ctx, c, t.swh)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(opts.Log, "Service %s/%s handed back: selector %v, no owner, no swh label; %d slices of the agents deleted\n",
			t.swh.Namespace, t.swh.Name, t.swh.Spec.Selector, n)
	}
	for _, l := range []client.ObjectList{&rbacv1.RoleBindingList{}, &rbacv1.RoleList{}} {
		if err := deleteNamed(ctx, c, l, access.SecretsGrant, opts); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 && waitErr != nil {
		errs = append(errs, waitErr)
	}
	return errors.Join(errs...)
}

// removeGuard deletes the eviction guard's webhook configuration: it fails
// closed, and no controller replica will be left to answer it.
func removeGuard(ctx context.Context, c client.Client, opts Options) error {
	if opts.WebhookConfiguration == "" {
		return nil
	}
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: opts.WebhookConfiguration}}
	if err := c.Delete(ctx, config); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the eviction guard's webhook configuration %s: %w", opts.WebhookConfiguration, err)
	}
	fmt.Fprintf(opts.Log, "eviction guard %s removed\n", opts.WebhookConfiguration)
	return nil
}

// stopController scales the controller to zero and waits for its pods to
// be gone.
func stopController(ctx context.Context, c client.Client, opts Options) error {
	dep := &appsv1.Deployment{}
	if err := c.Get(ctx, opts.Controller, dep); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading the controller's Deployment %s: %w", opts.Controller, err)
	}
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 0}}
	if err := c.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale)); err != nil {
		return fmt.Errorf("scaling the controller %s to zero: %w", opts.Controller, err)
	}
	fmt.Fprintf(opts.Log, "controller %s scaled to zero\n", opts.Controller)
	selector, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return fmt.Errorf("the selector of %s: %w", opts.Controller, err)
	}
	// Every pod gone, terminating ones included: a replica keeps acting
	// through its preStop pause and until it has stopped. One terminating
	// well past its grace period is on a lost node: not waited for.
	return wait(ctx, opts, "the controller's pods to be gone", func() (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(opts.Controller.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if !stuck(&p, time.Now()) {
				return false, nil
			}
		}
		return true, nil
	})
}

// stuck says whether a pod has been terminating for stuckGrace past its
// grace period.
func stuck(p *corev1.Pod, now time.Time) bool {
	if p.DeletionTimestamp == nil {
		return false
	}
	// The deletion timestamp is the time the grace period ends.
	return now.After(p.DeletionTimestamp.Add(stuckGrace))
}

// select_ gives the resource's Service the resource's selector, keeping
// it the resource's; true when the Service is to be handed back: it was
// the resource's, or a previous run gave it back without finishing (it
// selects pods and still has the agents' slices).
func select_(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks, opts Options) (bool, error) {
	key := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	handBack := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc := &corev1.Service{}
		if err := c.Get(ctx, key, svc); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading Service %s: %w", key, err)
		}
		selected, ok := withSelector(svc, swh)
		if !ok {
			if len(svc.Spec.Selector) == 0 || metav1.IsControlledBy(svc, swh) {
				return nil
			}
			n, err := agentSlices(ctx, c, swh)
			handBack = err == nil && len(n.Items) > 0
			return err
		}
		handBack = true
		if selected == nil {
			return nil // selects the pods already
		}
		// Under the Service's resourceVersion: decided on what was read.
		return c.Patch(ctx, selected, client.MergeFromWithOptions(svc, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return false, fmt.Errorf("giving Service %s its selector: %w", key, err)
	}
	if handBack {
		fmt.Fprintf(opts.Log, "Service %s selects %v\n", key, swh.Spec.Selector)
	}
	return handBack, nil
}

// release makes the resource's Service plain: no owner reference to it,
// no swh label.
func release(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks) error {
	key := types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		svc := &corev1.Service{}
		if err := c.Get(ctx, key, svc); err != nil {
			return client.IgnoreNotFound(err)
		}
		plain, ok := handedBack(svc, swh)
		if !ok {
			return nil
		}
		if err := c.Patch(ctx, plain, client.MergeFromWithOptions(svc, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("handing Service %s back: %w", key, err)
		}
		return nil
	})
}

// missingPods lists, per port, the pods that will keep receiving traffic
// after the hand-back (not terminating, Ready) and that the agents publish
// ready but the built-in slices do not yet.
func missingPods(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks) (map[string][]string, error) {
	agents, err := agentSlices(ctx, c, swh)
	if err != nil {
		return nil, err
	}
	var builtin discoveryv1.EndpointSliceList
	if err := c.List(ctx, &builtin, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name, discoveryv1.LabelManagedBy: builtinManagedBy}); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(swh.Namespace), client.MatchingLabels(swh.Spec.Selector)); err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			live[p.Name] = true
		}
	}
	return uncovered(agents.Items, builtin.Items, live)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func agentSlices(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks) (*discoveryv1.EndpointSliceList, error) {
	list := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, list, client.InNamespace(swh.Namespace), client.MatchingLabels{
		discoveryv1.LabelServiceName: swh.Name, discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy}); err != nil {
		return nil, fmt.Errorf("listing the agents' slices of %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	return list, nil
}

// deleteAgentSlices deletes the agents' slices of the resource's Service.
func deleteAgentSlices(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks) (int, error) {
	list, err := agentSlices(ctx, c, swh)
	if err != nil {
		return 0, err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			return i, fmt.Errorf("deleting the agents' slice %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return len(list.Items), nil
}

// deleteNamed deletes, in every namespace, the objects of list's kind
// that package access keeps under name.
func deleteNamed(ctx context.Context, c client.Client, list client.ObjectList, name string, opts Options) error {
	if err := c.List(ctx, list, client.MatchingLabels{access.LabelManagedBy: access.ManagedBy}); err != nil {
		return fmt.Errorf("listing the agents' registry objects: %w", err)
	}
	items, err := metaItems(list)
	if err != nil {
		return err
	}
	deleted := 0
	for _, obj := range items {
		if obj.GetName() != name {
			continue
		}
		if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
		}
		deleted++
	}
	fmt.Fprintf(opts.Log, "deleted %d of the agents' %s %s\n", deleted, fmt.Sprintf("%T", list), name)
	return nil
}

// wait polls done (apimachinery's wait) until it is true, fails, or the
// timeout passes.
func wait(ctx context.Context, opts Options, what string, done func() (bool, error)) error {
	err := kwait.PollUntilContextTimeout(ctx, opts.Poll, opts.Timeout, true, func(context.Context) (bool, error) { return done() })
	switch {
	case err == nil:
		return nil
	case kwait.Interrupted(err) && ctx.Err() == nil:
		return fmt.Errorf("waiting for %s: not done after %s", what, opts.Timeout)
	default:
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
}
