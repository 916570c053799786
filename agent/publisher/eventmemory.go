package publisher

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/probes"
)

// eventMemory remembers what the agent has reported, so that a change is
// reported once and a report is never lost in the recorder. Its zero value
// is ready to use.
type eventMemory struct {
	mu sync.Mutex
	// endpoints holds, per resource, pod and port name, the state last
	// reported.
	endpoints map[types.NamespacedName]map[types.UID]map[string]reported
	// misconfig holds the reason and message last reported per target.
	misconfig map[targetKey]string
	// collisions holds, per resource, the collisions reported.
	collisions map[types.NamespacedName]map[string]bool
	series     map[string]*seriesState
	swept      time.Time
}

// reported is the state of an endpoint an event told.
type reported struct {
	ready bool
	code  string // the cause's, when not ready
}

// podNews is what to report about one pod.
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

// endpointNews compares the published endpoints of a resource (before and
// now, from its slices; why for the ones not ready now) with what was
// reported, records the news and returns it. Pods no longer published are
// forgotten.
func (b *eventMemory) endpointNews(resource types.NamespacedName, before, now map[podPort]publishedPort, why notReadyReasons) []podNews {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.endpoints == nil {
		b.endpoints = map[types.NamespacedName]map[types.UID]map[string]reported{}
	}
	old := b.endpoints[resource]
	book := make(map[types.UID]map[string]reported, len(old))
	byPod := map[types.UID]*podNews{}
	var order []types.UID
	for key, ep := range now {
		view := endpointView{ready: ep.ready}
		if !ep.ready {
			view.why = why[key.uid][key.port]
			if view.why.reason == "" {
				view.why = cause{kind: causeFailure, reason: "not-passing", text: "not passing"}
			}
		}
		var was *bool
		if prev, ok := before[key]; ok {
			was = &prev.ready
		}
		var rec *reported
		if r, ok := old[key.uid][key.port]; ok {
			rec = &r
		}
		report, keep := decide(was, rec, view)
		if keep == nil {
			keep = rec
		}
		if book[key.uid] == nil {
			book[key.uid] = map[string]reported{}
		}
		book[key.uid][key.port] = *keep
		if !report {
			continue
		}
		n := byPod[key.uid]
		if n == nil {
			n = &podNews{pod: podRef{key.uid, key.pod}}
			byPod[key.uid] = n
			order = append(order, key.uid)
		}
		if ep.ready {
			n.ready = append(n.ready, ep.port)
		} else {
			n.notReady = append(n.notReady, portCause{ep.port, view.why})
		}
	}
	b.endpoints[resource] = book
	out := make([]podNews, 0, len(order))
	for _, uid := range order {
		out = append(out, *byPod[uid])
	}
	return out
}

// endpointView is an endpoint as published now.
type endpointView struct {
	ready bool
	why   cause // when not ready
}

// decide says whether an endpoint's state is news, and what to record as
// reported (nil: keep the record). was is its readiness published before
// this reconcile (nil: not published), rec what was last reported (nil:
// nothing since the agent started).
//
// News are a change of readiness, and a new reason for a port that stays
// not ready. Not news: a new endpoint in its start state (no verdict yet,
// or a pod not Ready yet on a port no probe checks: the first verdict
// follows); an endpoint the agent finds as it starts (its predecessor
// reported it); a port going back to waiting for successThreshold passes.
func decide(was *bool, rec *reported, now endpointView) (news bool, keep *reported) {
	cur := &reported{ready: now.ready}
	if !now.ready {
		cur.code = now.why.code()
	}
	changed := was == nil || *was != now.ready
	switch {
	case now.ready:
		return changed || (rec != nil && !rec.ready), cur
	case changed:
		start := now.why.kind != causeFailure || now.why.reason == codePodNotReady
		return was != nil || !start, cur
	case rec == nil:
		return false, cur
	case now.why.kind == causeStart:
		return false, nil
	default:
		return rec.ready || rec.code != cur.code, cur
	}
}

// forgetResource drops what was reported about a resource.
func (b *eventMemory) forgetResource(resource types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.endpoints, resource)
	delete(b.collisions, resource)
	for key := range b.misconfig {
		if key.Resource == resource {
			delete(b.misconfig, key)
		}
	}
}

// forgetTarget drops what was reported about a target that stopped.
func (b *eventMemory) forgetTarget(key targetKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.misconfig, key)
}

// misconfigured reports whether res says that a target's probe cannot run
// for a reason or message other than the one last reported, and records it.
// Other results clear the record, so that the problem is reported again if
// it comes back.
func (b *eventMemory) misconfigured(key targetKey, res probes.Result) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !misconfigured(res.Reason) {
		delete(b.misconfig, key)
		return false
	}
	if b.misconfig == nil {
		b.misconfig = map[targetKey]string{}
	}
	said := string(res.Reason) + ": " + res.Message
	if b.misconfig[key] == said {
		return false
	}
	b.misconfig[key] = said
	return true
}

// newCollisions returns the collisions of a resource not reported yet, and
// records the current ones.
func (b *eventMemory) newCollisions(resource types.NamespacedName, collisions []endpoints.Collision) []endpoints.Collision {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.collisions == nil {
		b.collisions = map[types.NamespacedName]map[string]bool{}
	}
	old := b.collisions[resource]
	current := make(map[string]bool, len(collisions))
	var out []endpoints.Collision
	for _, c := range collisions {
		s := c.String()
		current[s] = true
		if !old[s] {
			out = append(out, c)
		}
	}
	if len(current) == 0 {
		delete(b.collisions, resource)
	} else {
		b.collisions[resource] = current
	}
	return out
}

// seriesWindow is how long the recorder may keep an event in its cache:
// it drops one 6 minutes after its last occurrence, looking every 6
// minutes.
const seriesWindow = 12 * time.Minute

// seriesState mirrors the recorder's series of one event.
type seriesState struct {
	suffix, count int
	last          time.Time
}

// seriesAction returns the action to emit an event with. The recorder
// (k8s.io/client-go/tools/events) folds an event into an isomorphic one in
// its cache (same type, reason, action, regarding and related objects, and
// reporting controller and instance; not the note): the second occurrence
// is written as a series of 2 that keeps the first one's note, and later
// ones are only counted in memory, written when the series ends (6 minutes
// after its last occurrence) or every 30 minutes. The action names what an
// event says, so a series only ever counts the same news; and after two
// occurrences of one key within seriesWindow, the action takes a suffix
// "#n" that starts a new series, so that every report reaches the API
// server when it is made. key identifies the event but for its action
// (see eventKey).
func (b *eventMemory) seriesAction(key, action string) string {
	return b.seriesActionAt(key, action, time.Now())
}

func (b *eventMemory) seriesActionAt(key, action string, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.series == nil {
		b.series = map[string]*seriesState{}
	}
	if now.Sub(b.swept) > seriesWindow {
		for k, s := range b.series {
			if now.Sub(s.last) > seriesWindow {
				delete(b.series, k)
			}
		}
		b.swept = now
	}
	full := key + "\x00" + action
	s := b.series[full]
	if s == nil || now.Sub(s.last) > seriesWindow {
		s = &seriesState{}
		b.series[full] = s
	}
	if s.count == 2 {
		s.suffix, s.count = s.suffix+1, 0
	}
	s.count++
	s.last = now
	if s.suffix == 0 {
		return action
	}
	return action + "#" + strconv.Itoa(s.suffix)
}

// eventKey identifies an event as the recorder does, but for its action:
// regarding is the resource as read (the recorder's reference to it holds
// its resourceVersion) or a reference.
func eventKey(regarding any, related *corev1.ObjectReference, eventtype, reason string) string {
	var ref corev1.ObjectReference
	switch r := regarding.(type) {
	case *swhv1alpha1.ServiceWithHealthchecks:
		ref = corev1.ObjectReference{Namespace: r.Namespace, Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion}
	case *corev1.ObjectReference:
		ref = *r
	}
	var rel corev1.ObjectReference
	if related != nil {
		rel = *related
	}
	return fmt.Sprintf("%s\x00%s\x00%+v\x00%+v", eventtype, reason, ref, rel)
}
