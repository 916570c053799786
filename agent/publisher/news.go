package publisher

import (
	"cmp"
	"slices"
	"strconv"
	"sync"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
)

// portRef names a port of the resource in messages: by its name, or by its
// number (the endpoint's) when it has none.
type portRef struct {
	name   string
	number int32
}

// String renders `"web"` or `8080`.
func (p portRef) String() string {
	if p.name == "" && p.number != 0 {
		return strconv.Itoa(int(p.number))
	}
	return strconv.Quote(p.name)
}

// id renders `web` or `8080`, for sorting.
func (p portRef) id() string {
	if p.name == "" && p.number != 0 {
		return strconv.Itoa(int(p.number))
	}
	return p.name
}

// portCause is a port and why the pod is not ready on it.
type portCause struct {
	port portRef
	why  cause
}

type podRef struct {
	uid  types.UID
	name string
}

type podPort struct {
	uid  types.UID
	port string
}

// endpointState is what the agent's slices publish for a pod on a port.
type endpointState struct {
	pod   podRef
	port  portRef
	ready bool
	// reason is the reasons annotation's entry for a pod not ready; nil
	// when the annotation has none.
	reason *swhv1alpha1.EndpointReason
}

// podNews is what to tell about one pod.
type podNews struct {
	pod      podRef
	ready    []portRef
	notReady []portCause
}

// warning reports whether a not-ready port has failed (rather than waiting
// for a first verdict, or terminating).
func (n podNews) warning() bool {
	for _, pc := range n.notReady {
		if pc.why.kind == causeFailure {
			return true
		}
	}
	return false
}

// publishedStates reads the endpoints of the agent's slices (one port
// each) by pod and port, as endpoints.Read reads them (ready when every
// address family's entry is), with the reasons annotation's entries.
func publishedStates(list []discoveryv1.EndpointSlice) map[podPort]endpointState {
	reasons := reasonsByPort(list)
	out := map[podPort]endpointState{}
	// The default options are valid: no error.
	published, _ := endpoints.Read(list, endpoints.Options{})
	for _, p := range published {
		if p.Pod == nil {
			continue
		}
		key := podPort{uid: p.Pod.UID, port: p.Port}
		prev, seen := out[key]
		st := endpointState{pod: podRef{p.Pod.UID, p.Pod.Name}, port: portRef{name: p.Port, number: p.PortNumber}, ready: p.Ready && (prev.ready || !seen)}
		if r, ok := reasons[p.Port][p.Pod.Name]; ok && !st.ready {
			st.reason = &r
		}
		out[key] = st
	}
	return out
}

// reasonsByPort merges the reasons annotations of slices by port name; a
// slice whose annotation does not parse adds none.
func reasonsByPort(list []discoveryv1.EndpointSlice) map[string]swhv1alpha1.EndpointReasons {
	out := map[string]swhv1alpha1.EndpointReasons{}
	for i := range list {
		reasons, err := swhv1alpha1.EndpointReasonsOf(list[i].Annotations)
		if err != nil || len(reasons) == 0 {
			continue
		}
		port := slicePortName(&list[i])
		if out[port] == nil {
			out[port] = swhv1alpha1.EndpointReasons{}
		}
		for pod, r := range reasons {
			out[port][pod] = r
		}
	}
	return out
}

// endpointNews compares what the slices published when news were last told
// (toldPublications) with what they publish after this reconcile's write,
// and says per pod what is news, in pod and port order; why holds the
// current cause of each endpoint not ready.
//
// News are a change of readiness, and a new reason (the annotation's) for
// a port that stays not ready. Not news: a new endpoint in its start state
// (no verdict yet, or a pod not Ready yet on a port no probe checks: the
// first verdict follows); a port going back to waiting for successThreshold
// passes; what an agent finds published as it starts (its predecessor told
// it). News of a write that failed, perhaps after landing in part, are
// told by the next reconcile that succeeds.
func endpointNews(before, after map[podPort]endpointState, why notReadyReasons) []podNews {
	keys := make([]podPort, 0, len(after))
	for key := range after {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b podPort) int {
		return cmp.Or(cmp.Compare(after[a].pod.name, after[b].pod.name), cmp.Compare(a.uid, b.uid), cmp.Compare(a.port, b.port))
	})
	var out []podNews
	for _, key := range keys {
		now := after[key]
		was, seen := before[key]
		if len(out) == 0 || out[len(out)-1].pod != now.pod {
			out = append(out, podNews{pod: now.pod})
		}
		n := &out[len(out)-1]
		if now.ready {
			if !seen || !was.ready {
				n.ready = append(n.ready, now.port)
			}
			continue
		}
		c, ok := why[key.uid][key.port]
		if !ok || c.reason == "" {
			c = cause{kind: causeFailure, reason: "not-passing", text: "not passing"}
		}
		var news bool
		switch {
		case !seen:
			news = c.kind == causeFailure && c.reason != codePodNotReady || c.kind == causeStandby || c.kind == causeMaintenance
		case was.ready:
			news = true
		case c.kind == causeStart:
			news = false
		default:
			news = !sameReason(was.reason, now.reason)
		}
		if news {
			n.notReady = append(n.notReady, portCause{now.port, c})
		}
	}
	return slices.DeleteFunc(out, func(n podNews) bool { return len(n.ready) == 0 && len(n.notReady) == 0 })
}

// sameReason compares two annotation entries by reason and probe; a
// missing entry is no news (the annotation drops entries to stay within its
// bound, and one that does not parse has none).
func sameReason(a, b *swhv1alpha1.EndpointReason) bool {
	return a == nil || b == nil || a.SameReason(*b)
}

// publication is what a resource's slices publish on the node: the
// endpoints by pod and port, and the slices' names.
type publication struct {
	// uid is the resource's: a resource deleted and created again under
	// its name starts afresh.
	uid    types.UID
	states map[podPort]endpointState
	names  map[string]bool
}

// publicationOf reads what slices publish.
func publicationOf(uid types.UID, slices []discoveryv1.EndpointSlice) publication {
	pub := publication{uid: uid, states: publishedStates(slices), names: make(map[string]bool, len(slices))}
	for i := range slices {
		pub.names[slices[i].Name] = true
	}
	return pub
}

// toldPublications keeps, per resource, what its slices published when
// their news were last told: the start of the next news. The cache may
// not show the agent's own last write yet (a pass that finds it behind
// fails its write on a conflict), and a write that fails may land in part
// (one slice of several, an update committed before its answer timed
// out): neither must make news told twice, or never.
type toldPublications struct {
	mu sync.Mutex
	by map[types.NamespacedName]publication
}

// get returns what was told of the resource with uid; false when nothing
// was (an agent just started: its predecessor told what is published).
func (t *toldPublications) get(key types.NamespacedName, uid types.UID) (publication, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pub, ok := t.by[key]
	return pub, ok && pub.uid == uid
}

func (t *toldPublications) set(key types.NamespacedName, pub publication) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.by == nil {
		t.by = map[types.NamespacedName]publication{}
	}
	t.by[key] = pub
}

func (t *toldPublications) forget(key types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.by, key)
}
