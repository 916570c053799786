package publisher

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// planOptions make the reasons annotation part of what Plan compares.
func planOptions() endpoints.Options {
	return endpoints.Options{OwnedAnnotations: []string{swhv1alpha1.AnnotationEndpointReasons}}
}

// publish builds the desired slices, with their reasons, plans the writes
// against the existing ones and makes them; once they are made, it returns
// the events that tell the slices' news (see endpointNews and
// collisionEvents) since they were last told (toldPublications).
func (p *Publisher) publish(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons) ([]event, error) {
	desired, err := endpoints.Build(view.service, endpoints.NodeFrom(view.node), verdicts, endpoints.Options{})
	if err != nil {
		return nil, fmt.Errorf("building the slices of %s: %w", view.key, err)
	}
	if err := annotateReasons(desired, view.existing, why, time.Now()); err != nil {
		return nil, fmt.Errorf("the reasons of %s: %w", view.key, err)
	}
	scope := endpoints.Scope{Namespace: view.key.Namespace, Service: view.key.Name, Node: p.nodeName}
	changes, err := endpoints.Plan(scope, view.existing, desired, planOptions())
	if err != nil {
		return nil, fmt.Errorf("planning the slices of %s: %w", view.key, err)
	}
	own := ownedBy(view.key, view.existing)
	before, told := p.told.get(view.key, view.swh.UID)
	if !told {
		// Nothing told yet (an agent just started): what is published was
		// told by its predecessor, and is the start of the news even if
		// this pass's write fails after landing in part.
		before = publicationOf(view.swh.UID, own)
		p.told.set(view.key, before)
	}
	changedAt, hadChange := p.targets.takeChanged(view.key)
	if !changes.Empty() {
		trigger := time.Now()
		if hadChange {
			trigger = changedAt
		}
		if err := p.write(ctx, view.key, changes, trigger); err != nil {
			if hadChange {
				// The retry's writes carry the same trigger and delay.
				p.targets.restoreChanged(view.key, changedAt)
			}
			return nil, err
		}
		if hadChange {
			p.metrics.observeDelay(time.Since(changedAt))
		}
	}
	after := publicationOf(view.swh.UID, desired)
	after.names = publishedNames(own, changes)
	p.told.set(view.key, after)
	view.closings = p.sessionClosings(view, before.states, after.states)
	return append(p.collisionEvents(view.swh, before, changes), p.endpointEvents(view.swh, before.states, after.states, why)...), nil
}

// publishedNames are the names of the slices once a plan is made: those
// existing, and those it created, but those it deleted.
func publishedNames(existing []discoveryv1.EndpointSlice, changes endpoints.Changes) map[string]bool {
	names := map[string]bool{}
	for i := range existing {
		names[existing[i].Name] = true
	}
	for i := range changes.Create {
		names[changes.Create[i].Name] = true
	}
	for i := range changes.Delete {
		delete(names, changes.Delete[i].Name)
	}
	return names
}

// write applies the plan: creates, then updates, then deletes, so traffic
// moves to new slices before old ones go; when a create fails, nothing is
// deleted (the slice it replaces keeps its traffic: after a restart, a
// slice published under another name because its own is taken is planned
// back under its own until the create finds it taken). A conflict or a
// name taken in the meantime returns an error: the requeue plans again
// from fresh data, with the holder of a taken name read in (see
// withHolders).
func (p *Publisher) write(ctx context.Context, resource types.NamespacedName, changes endpoints.Changes, trigger time.Time) error {
	stamp := trigger.UTC().Format(time.RFC3339)
	var errs []error
	for i := range changes.Create {
		s := &changes.Create[i]
		setAnnotation(s, corev1.EndpointsLastChangeTriggerTime, stamp)
		err := retry(ctx, func() error { return p.client.Create(ctx, s) })
		p.metrics.sliceWrite("create", err)
		if apierrors.IsAlreadyExists(err) {
			p.takenSliceNames.add(resource, s.Name)
		}
		p.written.after(resource, s, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("creating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	createFailed := len(errs) > 0
	for i := range changes.Update {
		s := &changes.Update[i]
		setAnnotation(s, corev1.EndpointsLastChangeTriggerTime, stamp)
		err := retry(ctx, func() error { return p.client.Update(ctx, s) })
		p.metrics.sliceWrite("update", err)
		p.written.after(resource, s, err)
		if err != nil {
			errs = append(errs, fmt.Errorf("updating slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	deletes := changes.Delete
	if createFailed {
		deletes = nil
	}
	for i := range deletes {
		s := &deletes[i]
		err := retry(ctx, func() error {
			return p.client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion})
		})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		if err == nil {
			p.written.deleted(resource, s.Name)
		} else {
			p.written.after(resource, s, err)
		}
		p.metrics.sliceWrite("delete", err)
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting slice %s/%s: %w", s.Namespace, s.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.FromContext(ctx).V(1).Info("slice writes failed; planning again", "error", err.Error())
		return err
	}
	return nil
}

// writeBackoff spaces the eight attempts of a write: from 100 ms, growing
// by 1.6 to about 1.7 s, under 5 s in all.
var writeBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 1.6, Jitter: 0.1, Steps: 8}

// maxRetryAfter bounds the wait an answer asks for (Retry-After) before the
// next attempt.
const maxRetryAfter = time.Second

// retry runs a write again with writeBackoff while the API server fails in
// a way that may pass (timeouts, throttling, unavailability); an answer
// that asks the client to wait (Retry-After, which client-go's own retries
// also honour) is waited for, within the backoff's cap. Answers that will
// not change by retrying (a conflict, a taken name, a refusal) return at
// once: the reconcile then plans again from fresh data. Probing goes on
// meanwhile: it runs on the scheduler's goroutines, not here.
func retry(ctx context.Context, write func() error) error {
	var err error
	waited := wait.ExponentialBackoffWithContext(ctx, writeBackoff, func(ctx context.Context) (bool, error) {
		err = write()
		if err == nil || !transient(err) {
			return true, nil
		}
		if seconds, ok := apierrors.SuggestsClientDelay(err); ok && seconds > 0 {
			pause := min(time.Duration(seconds)*time.Second, maxRetryAfter)
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(pause):
			}
		}
		return false, nil
	})
	if err == nil {
		return waited // nil when the write succeeded; the context's error when it never ran
	}
	return err
}

func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

func setAnnotation(obj metav1.Object, key, value string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[key] = value
	obj.SetAnnotations(a)
}
