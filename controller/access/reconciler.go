package access

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// Reconciler keeps the ConfigMap swh-services and the Role and RoleBinding
// swh-agent-secrets of one namespace (the request's; its name is unused).
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server: a write that conflicted, or an
	// object the cache does not hold because someone removed its label.
	APIReader client.Reader
	// AgentServiceAccount is the subject of the Secret grants. Empty, the
	// controller manages none (the agents then need get on the Secrets
	// from elsewhere).
	AgentServiceAccount types.NamespacedName
	// Metrics counts writes; nil counts nothing.
	Metrics *Metrics
	// GapPerService spaces a namespace's writes: after one, the next waits
	// this long per resource of the namespace. Zero means
	// DefaultGapPerService; negative, no gap.
	GapPerService time.Duration

	pace pace
	now  func() time.Time // time.Now unless a test sets it
}

// Reconcile computes both grants of a namespace from its resources. The two
// are independent: one failing does not hold back the other.
// A reconcile that comes too soon after the namespace's last write waits
// (see GapPerService) before it reads anything: the events of a mass
// creation then make one write per gap, of everything that changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ns := req.Namespace
	if wait := r.pace.wait(ns, r.clock()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	list := &swhv1alpha1.ServiceWithHealthchecksList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing the resources of namespace %s: %w", ns, err)
	}
	swhs := serving(list.Items)
	wrote, err := r.syncServices(ctx, ns, swhs)
	if r.AgentServiceAccount.Name != "" {
		wroteSecrets, secretsErr := r.syncSecrets(ctx, ns, swhs)
		wrote, err = wrote || wroteSecrets, errors.Join(err, secretsErr)
	}
	switch {
	case len(swhs) == 0:
		r.pace.forget(ns)
	case wrote:
		r.pace.wrote(ns, r.clock(), r.gap(len(swhs)))
	}
	return ctrl.Result{}, err
}

func (r *Reconciler) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// gap is the wait after a write of a namespace with n resources.
func (r *Reconciler) gap(n int) time.Duration {
	per := r.GapPerService
	switch {
	case per == 0:
		per = DefaultGapPerService
	case per < 0:
		return 0
	}
	return time.Duration(n) * per
}

// syncServices registers the child Services the controller owns, each with
// its own UID: the admission policy wants an agent's slice to be owned by
// that very Service, so a slice cannot outlive its Service and be counted
// for a later Service of the same name.
func (r *Reconciler) syncServices(ctx context.Context, ns string, swhs []*swhv1alpha1.ServiceWithHealthchecks) (bool, error) {
	if len(swhs) == 0 {
		return false, remove(ctx, r, configMapOps, ns, ServicesConfigMap)
	}
	registered := map[string]string{}
	for _, swh := range swhs {
		svc := &corev1.Service{}
		err := r.Client.Get(ctx, client.ObjectKeyFromObject(swh), svc)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading Service %s/%s: %w", ns, swh.Name, err)
		}
		if controls(swh, svc) {
			registered[swh.Name] = string(svc.UID)
		}
	}
	return ensure(ctx, r, configMapOps, desiredConfigMap(ns, swhs, registered))
}

// syncSecrets grants the agents get on the Secrets the probes name, and
// nothing when none does. It reports whether it created or updated one.
func (r *Reconciler) syncSecrets(ctx context.Context, ns string, swhs []*swhv1alpha1.ServiceWithHealthchecks) (bool, error) {
	secrets, users := secretNames(swhs)
	if len(secrets) == 0 {
		// The binding first: a Role bound to no one grants nothing.
		if err := remove(ctx, r, roleBindingOps, ns, SecretsGrant); err != nil {
			return false, err
		}
		return false, remove(ctx, r, roleOps, ns, SecretsGrant)
	}
	wroteRole, err := ensure(ctx, r, roleOps, desiredRole(ns, secrets, users))
	if err != nil {
		return wroteRole, err
	}
	wroteBinding, err := ensure(ctx, r, roleBindingOps, desiredRoleBinding(ns, r.AgentServiceAccount, users))
	return wroteRole || wroteBinding, err
}
