package handback

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/controller/access"
	"github.com/swh-dev/swh/endpoints"
)

// builtinManagedBy is kube-controller-manager's EndpointSlice controller's
// endpointslice.kubernetes.io/managed-by value.
const builtinManagedBy = "endpointslice-controller.k8s.io"

// Options configure Run.
type Options struct {
	// Controller is the controller's Deployment, scaled to zero first;
	// nothing is scaled when its name is empty.
	Controller types.NamespacedName
	// Timeout bounds each wait: the controller's pods going, and the
	// built-in slices of each Service listing its pods (2 minutes when 0).
	Timeout time.Duration
	// Poll is how often a wait reads again (500 ms when 0).
	Poll time.Duration
	// Log receives one line per step.
	Log io.Writer
}

// Run hands every resource's Service back (see the package doc). A Service
// whose built-in slices do not cover the agents' within the timeout keeps
// the agents' slices (both sets then serve, the agents' frozen) and is
// reported in the error; the others are handed back all the same.
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
	if opts.Controller.Name != "" {
		if err := stopController(ctx, c, opts); err != nil {
			return err
		}
	}
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing the ServiceWithHealthchecks: %w", err)
	}
	// Every Service first, then the waits: the built-in controller works
	// on all of them at once.
	var given []*swhv1alpha1.ServiceWithHealthchecks
	for i := range list.Items {
		swh := &list.Items[i]
		ok, err := giveBack(ctx, c, swh)
		if err != nil {
			return err
		}
		if ok {
			given = append(given, swh)
			fmt.Fprintf(opts.Log, "Service %s/%s: selector %v, no owner, no swh label\n", swh.Namespace, swh.Name, swh.Spec.Selector)
		}
	}
	var errs []error
	for _, swh := range given {
		if err := dropAgentSlices(ctx, c, swh, opts); err != nil {
			errs = append(errs, err)
		}
	}
	if err := deleteRegistry(ctx, c, opts); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	// through its preStop pause and until it has stopped.
	return wait(ctx, opts, "the controller's pods to be gone", func() (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(opts.Controller.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
			return false, err
		}
		return len(pods.Items) == 0, nil
	})
}

// giveBack patches the resource's Service into a plain one; false when
// there is nothing to give back.
func giveBack(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks) (bool, error) {
	svc := &corev1.Service{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: swh.Namespace, Name: swh.Name}, svc); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("reading Service %s/%s: %w", swh.Namespace, swh.Name, err)
	}
	plain, ok := handedBack(svc, swh)
	if !ok {
		return false, nil
	}
	// Under the Service's resourceVersion: decided on what was read.
	if err := c.Patch(ctx, plain, client.MergeFromWithOptions(svc, client.MergeFromWithOptimisticLock{})); err != nil {
		return false, fmt.Errorf("handing Service %s/%s back: %w", swh.Namespace, swh.Name, err)
	}
	return true, nil
}

// dropAgentSlices waits until the built-in slices cover the agents' and
// deletes the agents'.
func dropAgentSlices(ctx context.Context, c client.Client, swh *swhv1alpha1.ServiceWithHealthchecks, opts Options) error {
	var agents discoveryv1.EndpointSliceList
	var missing map[string][]string
	err := wait(ctx, opts, fmt.Sprintf("the built-in slices of %s/%s", swh.Namespace, swh.Name), func() (bool, error) {
		if err := c.List(ctx, &agents, client.InNamespace(swh.Namespace), client.MatchingLabels{
			discoveryv1.LabelServiceName: swh.Name, discoveryv1.LabelManagedBy: endpoints.DefaultManagedBy}); err != nil {
			return false, err
		}
		var builtin discoveryv1.EndpointSliceList
		if err := c.List(ctx, &builtin, client.InNamespace(swh.Namespace), client.MatchingLabels{
			discoveryv1.LabelServiceName: swh.Name, discoveryv1.LabelManagedBy: builtinManagedBy}); err != nil {
			return false, err
		}
		var err error
		missing, err = uncovered(agents.Items, builtin.Items)
		return len(missing) == 0, err
	})
	if err != nil {
		return fmt.Errorf("%w; pods not yet published ready by the built-in controller, by port: %v (the agents' slices of %s/%s are kept)",
			err, missing, swh.Namespace, swh.Name)
	}
	for i := range agents.Items {
		s := &agents.Items[i]
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the agents' slice %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	fmt.Fprintf(opts.Log, "Service %s/%s: the built-in slices list its pods; %d slices of the agents deleted\n", swh.Namespace, swh.Name, len(agents.Items))
	return nil
}

// deleteRegistry deletes what package access keeps in every namespace.
func deleteRegistry(ctx context.Context, c client.Client, opts Options) error {
	managed := client.MatchingLabels{access.LabelManagedBy: access.ManagedBy}
	var deleted []string
	lists := []struct {
		list client.ObjectList
		name string
	}{
		{&corev1.ConfigMapList{}, access.ServicesConfigMap},
		{&rbacv1.RoleList{}, access.SecretsGrant},
		{&rbacv1.RoleBindingList{}, access.SecretsGrant},
	}
	for _, l := range lists {
		if err := c.List(ctx, l.list, managed); err != nil {
			return fmt.Errorf("listing the agents' registry objects: %w", err)
		}
		items, err := metaItems(l.list)
		if err != nil {
			return err
		}
		for _, obj := range items {
			if obj.GetName() != l.name {
				continue
			}
			if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
			}
			deleted = append(deleted, fmt.Sprintf("%T %s/%s", obj, obj.GetNamespace(), obj.GetName()))
		}
	}
	fmt.Fprintf(opts.Log, "deleted the agents' registry objects: %v\n", deleted)
	return nil
}

// wait polls done until it is true, fails, or the timeout passes.
func wait(ctx context.Context, opts Options, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(opts.Timeout)
	for {
		ok, err := done()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not done after %s", what, opts.Timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(opts.Poll):
		}
	}
}
