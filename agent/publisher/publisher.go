package publisher

import (
	"context"
	"errors"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	scheduler       *probes.Scheduler[targetKey]
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
}

// notify asks for a reconcile of a resource after a verdict flipped.
func (p *Publisher) notify(key types.NamespacedName) { p.verdictFlips.add(key) }

// Reconcile brings the targets of one resource in line with its spec and
// the pods of the node, then writes the slices that changed: read what
// the resource, its Service, the node, the pods and the slices are; sync
// the probe targets; turn the probes' state into verdicts per pod and
// port; plan and write the slices; emit, in one place, the events the
// stages returned; sync the readiness gates.
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
	published, publishErr := p.publish(ctx, view, verdicts, why)
	p.emit(ctx, view.swh, append(evs, published...))
	// The gates do not wait on the slices: a refused slice write must not
	// hold a rollout's pods back.
	if err := errors.Join(publishErr, p.syncGates(ctx, view)); err != nil {
		return ctrl.Result{}, errors.Join(err, targetsErr)
	}
	// The targets that could start are published; the others are retried.
	return ctrl.Result{}, targetsErr
}

// forget stops a resource's targets and drops everything the publisher
// keeps about it: its targets and their verdicts, the slice names found
// taken, what was published when its news were last told. Both ways out of a reconcile with nothing
// to publish (the resource gone, its Service not there or not its own) end
// here, so that none keeps what the other drops.
func (p *Publisher) forget(key types.NamespacedName) {
	p.removeTargets(key, nil)
	p.takenSliceNames.forget(key)
	p.told.forget(key)
}
