package publisher

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// Publisher probes the pods of one node and publishes their EndpointSlices.
// It is a controller-runtime reconciler of ServiceWithHealthchecks keys.
// New builds one; SetupWithManager registers it.
type Publisher struct {
	// client reads from the manager's cache (pods and slices of this node
	// only) and writes slices.
	client client.Client
	// reader reads from the API server, for slices the cache does not hold.
	reader client.Reader
	// recorder emits events on the resources.
	recorder events.EventRecorder
	// metrics may be nil.
	metrics *Metrics
	// nodeName is the exact name of this node's Node object.
	nodeName string
	// skipNameValidation is Options.SkipNameValidation, for SetupWithManager.
	skipNameValidation bool

	// takenSliceNames are slice names a create found held by another slice.
	takenSliceNames *takenNames
	// written holds the agent's own slice writes until its cache shows them.
	written   *writtenSlices
	scheduler *probes.Scheduler[targetKey]
	// targets holds every probe target of the node and its verdict.
	targets *targetTable
	// probers builds a target's prober from its probe spec.
	probers *proberFactory
	// toldCount numbers the news told (numbered).
	toldCount atomic.Uint64
	// told holds what was published when news were last told.
	told toldPublications
	// verdictFlips carries verdict flips to the controller's queue.
	verdictFlips *flipQueue
	// gateWritten holds readiness gate writes the cache may not show yet.
	gateWritten gateMemory
	// holds are the exclusive ports' Leases the node holds.
	holds leaseHolds
	// kept remembers which resources' FailingStatic news were told.
	kept keptNews
}

// notify asks for a reconcile of a resource after a verdict flipped.
func (p *Publisher) notify(key types.NamespacedName) { p.verdictFlips.add(key) }

// notifyNow asks for it at once, the round of results complete.
func (p *Publisher) notifyNow(key types.NamespacedName) { p.verdictFlips.addNow(key) }

// Reconcile brings the targets of one resource in line with its spec and
// the pods of the node, then writes the slices that changed: read what
// the resource, its Service, the node, the pods and the slices are; sync
// the probe targets; turn the probes' state into verdicts per pod and
// port; keep lagging replicas under a port's floor (lagfloor.go); let one
// pod of the cluster at most pass each exclusive port (exclusive.go); plan and write the slices, then free the exclusive
// ports' Leases the node no longer publishes from; emit, in one place, the
// events the stages returned; sync the readiness gates.
func (p *Publisher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	view, err := p.read(ctx, req.NamespacedName)
	if err != nil || view == nil {
		return ctrl.Result{}, err
	}
	targetsErr := p.syncTargets(targetSet{
		resource: req.NamespacedName, swh: view.swh, pods: view.pods, grouping: view.grouping,
		portNames: view.portNames, existing: view.existing,
		adopted: func() []discoveryv1.EndpointSlice { return p.adoptedSlices(ctx, view.swh) },
	})
	evs := p.tlsConflictEvents(view.swh)
	verdicts, why := p.verdicts(view)
	lookAgain := p.lagFloor(ctx, view, verdicts, why)
	lookAgain = sooner(lookAgain, p.portFloor(ctx, view, verdicts, why))
	held := p.exclusive(ctx, view, verdicts, why)
	if lookAgain > 0 && (held.requeue == 0 || lookAgain < held.requeue) {
		held.requeue = lookAgain
	}
	published, publishErr := p.publishHeld(ctx, view, verdicts, why, held.validUntil)
	// Not bounded by a Lease's validity: they run on after the write.
	p.closeSessions(ctx, view.swh, view.closings)
	if publishErr == nil {
		// Only once the slices no longer publish the node's pod there.
		publishErr = p.release(ctx, held.release)
	}
	if publishErr == nil {
		evs = append(evs, p.kept.events(req.NamespacedName, why, p.nodeName)...)
	}
	p.emit(ctx, view.swh, slices.Concat(evs, held.events, published))
	// The gates do not wait on the slices: a refused slice write must not
	// hold a rollout's pods back.
	if err := errors.Join(publishErr, p.syncGates(ctx, view)); err != nil {
		p.renewDespite(req.NamespacedName, held.requeue)
		return ctrl.Result{}, errors.Join(err, targetsErr)
	}
	if targetsErr != nil {
		p.renewDespite(req.NamespacedName, held.requeue)
	}
	// The targets that could start are published; the others are retried.
	return ctrl.Result{RequeueAfter: held.requeue}, targetsErr
}

// renewDespite schedules the reconcile a held Lease needs (its renewal, a
// handover to check) when the reconcile fails: the controller's backoff,
// which then replaces RequeueAfter, grows past any Lease's duration.
func (p *Publisher) renewDespite(key types.NamespacedName, after time.Duration) {
	if after > 0 {
		time.AfterFunc(after, func() { p.notify(key) })
	}
}

// publishHeld is publish, bounded by the validity of the exclusive ports'
// Leases it publishes from (none: validUntil is zero): a write that would
// land after the node may have lost a Lease is abandoned.
func (p *Publisher) publishHeld(ctx context.Context, view *resourceView, verdicts []endpoints.PodVerdicts, why notReadyReasons, validUntil time.Time) ([]event, error) {
	if validUntil.IsZero() {
		return p.publish(ctx, view, verdicts, why)
	}
	bounded, cancel := context.WithDeadline(ctx, validUntil)
	defer cancel()
	return p.publish(bounded, view, verdicts, why)
}

// forget stops a resource's targets and drops everything the publisher
// keeps about it: its targets and their verdicts, the slice names found
// taken, what was published when its news were last told. Both ways out of a reconcile with nothing
// to publish (the resource gone, its Service not there or not its own) end
// here, so that none keeps what the other drops.
func (p *Publisher) forget(key types.NamespacedName) {
	p.removeTargets(key, nil)
	p.takenSliceNames.forget(key)
	p.written.forget(key)
	p.told.forget(key)
	p.holds.forget(key.Namespace, key.Name)
	p.kept.forget(key)
}
