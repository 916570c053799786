package access

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// kindOps says how to bring one kind of managed object in line.
type kindOps[T client.Object] struct {
	kind  string
	empty func() T
	// sync makes have carry want's content and reports whether it changed
	// anything, and whether have must be replaced instead (a field an
	// update cannot change differs).
	sync func(have, want T) (changed, replace bool)
}

var configMapOps = kindOps[*corev1.ConfigMap]{
	kind:  "ConfigMap",
	empty: func() *corev1.ConfigMap { return &corev1.ConfigMap{} },
	sync: func(have, want *corev1.ConfigMap) (bool, bool) {
		// Someone made it immutable: only a new one can change.
		if have.Immutable != nil && *have.Immutable {
			return true, true
		}
		changed := syncMeta(have, want)
		if !maps.Equal(have.Data, want.Data) || len(have.BinaryData) > 0 {
			have.Data, have.BinaryData = want.Data, nil
			changed = true
		}
		return changed, false
	},
}

var roleOps = kindOps[*rbacv1.Role]{
	kind:  "Role",
	empty: func() *rbacv1.Role { return &rbacv1.Role{} },
	sync: func(have, want *rbacv1.Role) (bool, bool) {
		changed := syncMeta(have, want)
		if !equality.Semantic.DeepEqual(have.Rules, want.Rules) {
			have.Rules = want.Rules
			changed = true
		}
		return changed, false
	},
}

var roleBindingOps = kindOps[*rbacv1.RoleBinding]{
	kind:  "RoleBinding",
	empty: func() *rbacv1.RoleBinding { return &rbacv1.RoleBinding{} },
	sync: func(have, want *rbacv1.RoleBinding) (bool, bool) {
		if have.RoleRef != want.RoleRef {
			return true, true // immutable
		}
		changed := syncMeta(have, want)
		if !equality.Semantic.DeepEqual(have.Subjects, want.Subjects) {
			have.Subjects = want.Subjects
			changed = true
		}
		return changed, false
	},
}

// syncMeta puts back the label, owner references and (none) finalizers of
// a managed object; other labels and annotations are left alone.
func syncMeta(have, want client.Object) bool {
	changed := false
	if have.GetLabels()[LabelManagedBy] != ManagedBy {
		labels := maps.Clone(have.GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelManagedBy] = ManagedBy
		have.SetLabels(labels)
		changed = true
	}
	if !equality.Semantic.DeepEqual(have.GetOwnerReferences(), want.GetOwnerReferences()) {
		have.SetOwnerReferences(want.GetOwnerReferences())
		changed = true
	}
	if len(have.GetFinalizers()) > 0 {
		// A finalizer someone added would keep the object, and what it
		// grants, after the controller deletes it.
		have.SetFinalizers(nil)
		changed = true
	}
	return changed
}

// retriable: the cache was behind (a conflict, or an object it does not hold
// because it lost the label).
func retriable(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }

// ensure creates or updates the object named like want to match it, and
// reports whether a write succeeded (a failed one keeps its retries'
// backoff instead of the write gap). The first read is the cache's; a retry reads
// the API server.
func ensure[T client.Object](ctx context.Context, r *Reconciler, ops kindOps[T], want T) (bool, error) {
	key := client.ObjectKeyFromObject(want)
	var reader client.Reader = r.Client
	wrote := false
	err := retry.OnError(retry.DefaultRetry, retriable, func() error {
		have := ops.empty()
		err := reader.Get(ctx, key, have)
		reader = r.APIReader
		if apierrors.IsNotFound(err) {
			err := r.create(ctx, ops.kind, want)
			wrote = wrote || err == nil
			return err
		}
		if err != nil {
			return err
		}
		before := describe(have)
		changed, replace := ops.sync(have, want)
		switch {
		case replace:
			// A finalizer would keep the old one after the deletion, and
			// the create would never succeed.
			if err := r.delete(ctx, ops.kind, have, "replaced: a field an update cannot change differs"); err != nil {
				return err
			}
			err := r.create(ctx, ops.kind, want)
			wrote = wrote || err == nil
			return err
		case changed:
			err := r.Client.Update(ctx, have)
			r.Metrics.write(ops.kind, err)
			if err != nil {
				return err
			}
			wrote = true
			log.FromContext(ctx).Info("updated "+ops.kind, "object", key.Name, "content", describeChange(before, describe(want)))
		}
		return nil
	})
	if err != nil {
		return wrote, fmt.Errorf("writing %s %s: %w", ops.kind, key, err)
	}
	return wrote, nil
}

func (r *Reconciler) create(ctx context.Context, kind string, want client.Object) error {
	obj := want.DeepCopyObject().(client.Object)
	err := r.Client.Create(ctx, obj)
	r.Metrics.write(kind, err)
	if err == nil {
		log.FromContext(ctx).Info("created "+kind, "object", want.GetName(), "content", describe(want))
	}
	return err
}

// remove deletes the managed object of that name, if the cache has one. The
// first read is the cache's; a retry (a conflict clearing finalizers) reads
// the API server.
func remove[T client.Object](ctx context.Context, r *Reconciler, ops kindOps[T], ns, name string) error {
	var reader client.Reader = r.Client
	err := retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
		have := ops.empty()
		err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, have)
		reader = r.APIReader
		if err != nil || have.GetLabels()[LabelManagedBy] != ManagedBy {
			return client.IgnoreNotFound(err) // gone, or no longer ours
		}
		return r.delete(ctx, ops.kind, have, "no resource needs it")
	})
	if err != nil {
		return fmt.Errorf("deleting %s %s/%s: %w", ops.kind, ns, name, err)
	}
	return nil
}

// delete deletes exactly have (its UID), absent already being fine. It
// clears have's finalizers first: someone else's would keep the object, and
// what it grants, Terminating but in force (RBAC honours a Terminating
// binding, the admission policy reads a Terminating ConfigMap).
func (r *Reconciler) delete(ctx context.Context, kind string, have client.Object, why string) error {
	if len(have.GetFinalizers()) > 0 {
		have.SetFinalizers(nil)
		err := r.Client.Update(ctx, have)
		if apierrors.IsNotFound(err) {
			return nil // the cache was behind
		}
		r.Metrics.write(kind, err)
		if err != nil {
			return err
		}
		if !have.GetDeletionTimestamp().IsZero() {
			// Terminating already: the update without finalizers deleted it.
			log.FromContext(ctx).Info("deleted "+kind, "object", have.GetName(), "reason", why)
			return nil
		}
	}
	uid := have.GetUID()
	err := r.Client.Delete(ctx, have, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) {
		return nil // the cache was behind
	}
	r.Metrics.write(kind, err)
	if err == nil {
		log.FromContext(ctx).Info("deleted "+kind, "object", have.GetName(), "reason", why)
	}
	return err
}

// describe says what a managed object grants, for the log.
func describe(obj client.Object) any {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return registry(o.Data)
	case *rbacv1.Role:
		return o.Rules
	case *rbacv1.RoleBinding:
		return o.Subjects
	}
	return nil
}

// registry is a registry's content in the log: its size and a few names,
// not thousands of entries on every write.
type registry map[string]string

// logNames bounds the Services a registry's log line names.
const logNames = 10

func (r registry) String() string {
	names := slices.Sorted(maps.Keys(r))
	if len(names) > logNames {
		return fmt.Sprintf("%d Services: %s, …", len(names), strings.Join(names[:logNames], ", "))
	}
	return fmt.Sprintf("%d Services: %s", len(names), strings.Join(names, ", "))
}

// describeChange says what an update changed: for a registry, the Services
// added and removed (a few of each), for the other kinds the new content.
func describeChange(before, after any) any {
	old, ok1 := before.(registry)
	now, ok2 := after.(registry)
	if !ok1 || !ok2 {
		return after
	}
	var added, removed []string
	for name, uid := range now {
		if old[name] != uid {
			added = append(added, name)
		}
	}
	for name, uid := range old {
		if now[name] != uid {
			removed = append(removed, name)
		}
	}
	return fmt.Sprintf("%d Services; registered %s; unregistered %s", len(now), someNames(added), someNames(removed))
}

// someNames lists a few sorted names and how many more there are.
func someNames(names []string) string {
	slices.Sort(names)
	switch {
	case len(names) == 0:
		return "none"
	case len(names) > logNames:
		return fmt.Sprintf("%s and %d more", strings.Join(names[:logNames], ", "), len(names)-logNames)
	}
	return strings.Join(names, ", ")
}
