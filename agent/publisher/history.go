package publisher

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// historyLen is how many transitions a target remembers: enough to see a
// flap's pattern, little enough to keep for every target of a node (none
// is kept for a target that never changed).
const historyLen = 8

// transitions are a target's last changes of what is published, oldest
// first, from the agent's memory: kubectl swh history reads them from the
// agent (HistoryHandler), at no cost to the API server.
type transitions []swhv1alpha1.TargetTransition

// note records what a result changed, if anything. The table's lock is
// held.
func (h *transitions) note(t *target, o observation, now time.Time) {
	var e swhv1alpha1.TargetTransition
	switch {
	case o.flipped && t.tracker.Healthy():
		e.Event = swhv1alpha1.TransitionPublished
	case o.flipped:
		e.Event = swhv1alpha1.TransitionWithdrawn
	case o.held:
		e.Event = swhv1alpha1.TransitionKept
	case o.unheld:
		e.Event = swhv1alpha1.TransitionReleased
	case o.damped:
		if n := len(*h); n > 0 && (*h)[n-1].Event == swhv1alpha1.TransitionDamped {
			return // told once per ejection
		}
		e.Event = swhv1alpha1.TransitionDamped
	default:
		return
	}
	e.At = now.UTC()
	e.Reason = string(t.last.Reason)
	if t.damping != nil && e.Event != swhv1alpha1.TransitionPublished {
		e.Ejections = t.flaps.ejections
		if t.flaps.until.After(now) {
			until := t.flaps.until.UTC()
			e.OutUntil = &until
		}
	}
	h.add(e)
}

// add appends a transition, dropping the oldest past historyLen.
func (h *transitions) add(e swhv1alpha1.TargetTransition) {
	if len(*h) == historyLen {
		copy(*h, (*h)[1:])
		*h = (*h)[:historyLen-1]
	}
	*h = append(*h, e)
}

// history returns the transitions the targets of a resource remember,
// by pod name and probe.
func (s *targetTable) history(resource types.NamespacedName) []swhv1alpha1.TargetHistory {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []swhv1alpha1.TargetHistory
	for k, t := range s.targets {
		if k.Resource != resource {
			continue
		}
		h := swhv1alpha1.TargetHistory{Pod: t.pod, Probe: int32(k.Probe), Passing: t.published(s.clock()) || t.heldBy != nil && t.kept,
			Transitions: append([]swhv1alpha1.TargetTransition(nil), t.history...)}
		if t.damping != nil {
			h.Ejections = t.flaps.ejections
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pod != out[j].Pod {
			return out[i].Pod < out[j].Pod
		}
		return out[i].Probe < out[j].Probe
	})
	return out
}

// HistoryPath is where the agent serves the history of a resource's
// targets (HistoryHandler), on its metrics address.
const HistoryPath = "/history"

// HistoryHandler serves, for GET ?namespace=NS&name=NAME, what the node's
// targets of that resource remember (a JSON list of TargetHistory).
// kubectl swh history reads it through the API server's pod proxy. It
// holds pod names and probe reasons of any namespace, to whoever reaches
// the metrics port: the agent serves it only with --serve-history.
func (p *Publisher) HistoryHandler() http.Handler {
	// One answer at a time: each reads every target of the node under
	// the table's lock, which the probes' results wait on.
	busy := make(chan struct{}, 1)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		select {
		case busy <- struct{}{}:
			defer func() { <-busy }()
		default:
			http.Error(w, "busy: one history at a time", http.StatusTooManyRequests)
			return
		}
		key := types.NamespacedName{Namespace: r.URL.Query().Get("namespace"), Name: r.URL.Query().Get("name")}
		if key.Namespace == "" || key.Name == "" {
			http.Error(w, "namespace and name are required", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		out := p.targets.history(key)
		if out == nil {
			out = []swhv1alpha1.TargetHistory{}
		}
		if err := json.NewEncoder(w).Encode(out); err != nil {
			log.FromContext(r.Context()).V(1).Info("writing the history", "error", err.Error())
		}
	})
}
