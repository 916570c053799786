package disruption

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// DefaultReservationTimeout is how long a reservation counts when its pod
// is neither terminating nor gone: kube-apiserver's DeletionTimeout for a
// PodDisruptionBudget's disruptedPods.
const DefaultReservationTimeout = 2 * time.Minute

// maxListedUnavailable bounds status.disruption.unavailable and messages.
const maxListedUnavailable = 10

// Liveness says whether a node's published verdicts can be trusted.
type Liveness interface {
	// NodeProblem returns why the endpoints of the node do not count ("" when
	// they do): the node is not Ready, or its agent is not alive.
	NodeProblem(node string) string
}

// Inputs are what one evaluation of a budget reads.
type Inputs struct {
	// Resource carries the budget, the ports and the reservations.
	Resource *swhv1alpha1.ServiceWithHealthchecks
	// Pods are the pods the resource selects in its namespace.
	Pods []corev1.Pod
	// Slices are the agents' EndpointSlices of the resource.
	Slices []discoveryv1.EndpointSlice
	// Expected is the number of pods the budget is counted over.
	Expected int32
	// ExpectedProblem says why Expected could not be counted ("" when it
	// could): the budget then allows no disruption.
	ExpectedProblem string
	// Liveness judges nodes; nil trusts every node.
	Liveness Liveness
	// Now and ReservationTimeout decide which reservations still count.
	Now                time.Time
	ReservationTimeout time.Duration
}

// Evaluation is a budget counted at one instant.
type Evaluation struct {
	Expected, Healthy, Desired, Allowed int32
	// Available holds the UIDs of the pods that count as available.
	Available map[types.UID]bool
	// Kept holds the UIDs of pods a floor keeps serving although they do
	// not pass: not available, yet never evicted as unhealthy (they serve
	// while the port is short of passing pods).
	Kept map[types.UID]bool
	// Unavailable says why each other selected pod does not count, in pod
	// name order.
	Unavailable []swhv1alpha1.UnavailablePod
	// Reservations are the resource's reservations that still count.
	Reservations []swhv1alpha1.DisruptionReservation
	// Ports are the ports the budget requires, for messages.
	Ports []string
	// Problem is Inputs.ExpectedProblem: Desired is unknown and nothing is
	// allowed.
	Problem string
}

// Evaluate counts the budget of in.Resource, which must have one.
func Evaluate(in Inputs) Evaluation {
	budget := in.Resource.Spec.DisruptionBudget
	ports := budgetPorts(in.Resource)
	ready := verdicts(in.Slices)
	kept := keptPods(in.Slices)
	live := liveReservations(in)
	reserved := make(map[types.UID]bool, len(live))
	for _, r := range live {
		reserved[r.UID] = true
	}
	ev := Evaluation{Expected: in.Expected, Available: map[types.UID]bool{}, Kept: kept, Reservations: live, Ports: ports}
	pods := append([]corev1.Pod(nil), in.Pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	for i := range pods {
		pod := &pods[i]
		if terminal(pod) {
			continue
		}
		reason := podProblem(pod, ports, ready, reserved, in.Liveness)
		if reason == "" {
			ev.Available[pod.UID] = true
			ev.Healthy++
			continue
		}
		ev.Unavailable = append(ev.Unavailable, swhv1alpha1.UnavailablePod{Pod: pod.Name, Reason: reason})
	}
	ev.Desired = desiredHealthy(budget, in.Expected)
	if in.ExpectedProblem != "" {
		ev.Problem = in.ExpectedProblem
		return ev
	}
	if ev.Healthy > ev.Desired {
		ev.Allowed = ev.Healthy - ev.Desired
	}
	return ev
}

// podProblem returns why pod does not count as available, or "".
func podProblem(pod *corev1.Pod, ports []string, ready map[endpointKey]bool, reserved map[types.UID]bool, liveness Liveness) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "terminating"
	case reserved[pod.UID]:
		return "its eviction was allowed"
	case pod.Spec.NodeName == "":
		return "not scheduled"
	}
	if liveness != nil {
		if p := liveness.NodeProblem(pod.Spec.NodeName); p != "" {
			return p
		}
	}
	var failing []string
	for _, port := range ports {
		if !ready[endpointKey{port: port, pod: pod.UID, node: pod.Spec.NodeName}] {
			failing = append(failing, portLabel(port))
		}
	}
	if len(failing) > 0 {
		return "not ready on " + strings.Join(failing, ", ")
	}
	return ""
}

func portLabel(name string) string {
	if name == "" {
		return "its port"
	}
	return "port " + name
}

// terminal pods have ended: they are neither expected nor disrupted.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// budgetPorts returns the port names the budget requires, every port when
// it names none.
func budgetPorts(swh *swhv1alpha1.ServiceWithHealthchecks) []string {
	if b := swh.Spec.DisruptionBudget; b != nil && len(b.Ports) > 0 {
		return append([]string(nil), b.Ports...)
	}
	ports := make([]string, 0, len(swh.Spec.Ports))
	for _, p := range swh.Spec.Ports {
		ports = append(ports, p.Name)
	}
	return ports
}

// endpointKey is a pod's endpoints on one port published by one node's
// agent.
type endpointKey struct {
	port string
	pod  types.UID
	node string
}

// verdicts says, for each pod, port and node, whether every endpoint that
// node's agent publishes for the pod there passes: serving (the probes'
// verdict, which publishNotReadyAddresses leaves alone, unlike ready), not
// terminating, and not kept by a floor (floorKept). An endpoint counts only in a slice labelled as its own
// node's (the admission policy lets an agent write only those, with its own
// nodeName), and podProblem reads only the pod's own node's: another node's
// agent can name any pod in its slices, and must neither vouch for nor veto
// it, nor can a slice left by a pod's previous node.
func verdicts(slices []discoveryv1.EndpointSlice) map[endpointKey]bool {
	out := map[endpointKey]bool{}
	// endpoints.Read keeps only the entries of the node each slice is
	// labelled for, and combines a pod's entries (one per family): the
	// default options are valid, so it returns no error.
	published, _ := endpoints.Read(slices, endpoints.Options{})
	kept := floorKept(slices)
	for _, p := range published {
		if p.Pod == nil || p.Pod.Kind != "Pod" {
			continue
		}
		passing := p.Available() && !keptByFloor(kept, p)
		k := endpointKey{port: p.Port, pod: p.Pod.UID, node: p.Node}
		if prev, seen := out[k]; seen {
			passing = passing && prev
		}
		out[k] = passing
	}
	return out
}

// liveReservations drops the reservations that no longer count: expired,
// or whose pod is terminating, gone or replaced by a pod of the same name.
func liveReservations(in Inputs) []swhv1alpha1.DisruptionReservation {
	st := in.Resource.Status.Disruption
	if st == nil {
		return nil
	}
	timeout := in.ReservationTimeout
	if timeout <= 0 {
		timeout = DefaultReservationTimeout
	}
	pods := make(map[string]*corev1.Pod, len(in.Pods))
	for i := range in.Pods {
		pods[in.Pods[i].Name] = &in.Pods[i]
	}
	var out []swhv1alpha1.DisruptionReservation
	for _, r := range st.Reservations {
		pod := pods[r.Pod]
		if pod == nil || pod.UID != r.UID || pod.DeletionTimestamp != nil || terminal(pod) {
			continue
		}
		if !r.Time.Add(timeout).After(in.Now) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// desiredHealthy is how many pods the budget wants available, rounding
// percentages up as kube's disruption controller does.
func desiredHealthy(b *swhv1alpha1.DisruptionBudget, expected int32) int32 {
	if b == nil {
		return 0
	}
	if b.MinAvailable != nil {
		return scaled(*b.MinAvailable, expected)
	}
	if b.MaxUnavailable != nil {
		if d := expected - scaled(*b.MaxUnavailable, expected); d > 0 {
			return d
		}
	}
	return 0
}

// scaled resolves an int or a percentage (validated by the CRD) of total.
func scaled(v intstr.IntOrString, total int32) int32 {
	if v.Type == intstr.Int {
		return v.IntVal
	}
	var pct float64
	if _, err := fmt.Sscanf(v.StrVal, "%f%%", &pct); err != nil {
		return total // unparseable: the strictest reading
	}
	return int32(math.Ceil(pct * float64(total) / 100))
}

// Status is the status block the evaluation describes.
func (ev Evaluation) Status(generation int64) *swhv1alpha1.DisruptionStatus {
	st := &swhv1alpha1.DisruptionStatus{
		ObservedGeneration: generation,
		ExpectedPods:       ev.Expected,
		CurrentHealthy:     ev.Healthy,
		DesiredHealthy:     ev.Desired,
		DisruptionsAllowed: ev.Allowed,
		Reservations:       ev.Reservations,
	}
	if n := len(ev.Unavailable); n > 0 {
		st.Unavailable = ev.Unavailable[:min(n, maxListedUnavailable)]
	}
	return st
}

// Describe names the budget in messages: "maxUnavailable 1 on port client".
func Describe(swh *swhv1alpha1.ServiceWithHealthchecks) string {
	b := swh.Spec.DisruptionBudget
	var limit string
	switch {
	case b == nil:
		return "no disruption budget"
	case b.MinAvailable != nil:
		limit = "minAvailable " + b.MinAvailable.String()
	case b.MaxUnavailable != nil:
		limit = "maxUnavailable " + b.MaxUnavailable.String()
	}
	ports := budgetPorts(swh)
	if len(ports) == 1 && ports[0] == "" {
		return limit
	}
	return limit + " on port " + strings.Join(ports, ", ")
}

// unavailableList formats the first pods that do not count.
func (ev Evaluation) unavailableList() string {
	if len(ev.Unavailable) == 0 {
		return "none"
	}
	parts := make([]string, 0, maxListedUnavailable)
	for i, u := range ev.Unavailable {
		if i == maxListedUnavailable {
			parts = append(parts, fmt.Sprintf("and %d more", len(ev.Unavailable)-i))
			break
		}
		parts = append(parts, u.Pod+" ("+u.Reason+")")
	}
	return strings.Join(parts, ", ")
}
