package v1alpha1

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationEndpointReasons is the annotation an agent sets on its
// EndpointSlices that hold endpoints not passing: a JSON object of
// EndpointReasons, keyed by pod name, saying why each such pod is not ready
// (or not serving, or terminating) on the slice's port. It is absent when
// every endpoint of the slice passes.
//
// It is written with the slice, only when a pod's reason or probe changes,
// never because a probe ran or its message changed: at steady state it
// costs no write, and a thousand pods failing at once cost the slice writes
// their verdicts cost anyway. Message and Since are those of when the
// reason began.
const AnnotationEndpointReasons = "network.swh.dev/endpoint-reasons"

// MaxReasonMessageBytes bounds EndpointReason.Message: with a pod name (at
// most 253 bytes) an entry stays under 700 bytes.
const MaxReasonMessageBytes = 256

// MaxEndpointReasonsBytes bounds the annotation, half the API server's
// 256 KiB for all of an object's annotations. A slice may hold 1000
// endpoints: when their entries exceed it, the agent shortens the messages
// to 64 bytes, then drops them, then omits the entries of the pods that
// sort last by name (a reader then knows a pod is not ready from the
// slice's conditions, not why).
const MaxEndpointReasonsBytes = 128 << 10

// EndpointReasons maps pod names to why each is not ready on a slice's port.
// +kubebuilder:object:generate=false
type EndpointReasons map[string]EndpointReason

// EndpointReason says why one pod is not ready on one port.
// +kubebuilder:object:generate=false
type EndpointReason struct {
	// Reason is machine-readable: a probe failure reason of the probes
	// module, or one of the Reason constants of this package.
	Reason string `json:"reason"`
	// Probe is the index, in spec.healthcheck.probes, of the probe the
	// reason is about; nil when it is about no probe.
	Probe *int32 `json:"probe,omitempty"`
	// Message is for people, at most MaxReasonMessageBytes.
	Message string `json:"message"`
	// Since is when the reason began, to the second.
	Since metav1.Time `json:"since"`
}

// SameReason reports whether r and o say the same thing: the same reason
// about the same probe (messages and times aside).
func (r EndpointReason) SameReason(o EndpointReason) bool {
	switch {
	case r.Reason != o.Reason:
		return false
	case r.Probe == nil || o.Probe == nil:
		return r.Probe == nil && o.Probe == nil
	}
	return *r.Probe == *o.Probe
}

// TruncateReasonMessage cuts message to MaxReasonMessageBytes, on a UTF-8
// boundary, marking the cut with "…".
func TruncateReasonMessage(message string) string {
	return TruncateMessage(message, MaxReasonMessageBytes)
}

// MaxEventNoteBytes is the API server's limit on the note of an
// events.k8s.io Event: a longer one is refused and the event lost. The
// controller and the agent cut their notes with TruncateMessage to it.
const MaxEventNoteBytes = 1024

// TruncateMessage cuts message to limit bytes (at least 4), on a UTF-8
// boundary, marking the cut with "…".
func TruncateMessage(message string, limit int) string {
	if len(message) <= limit {
		return message
	}
	const ellipsis = "…"
	cut := max(limit, len(ellipsis)) - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + ellipsis
}

// EndpointReasonsOf decodes the AnnotationEndpointReasons of a slice's
// annotations; none when it is absent.
func EndpointReasonsOf(annotations map[string]string) (EndpointReasons, error) {
	raw, ok := annotations[AnnotationEndpointReasons]
	if !ok || raw == "" {
		return nil, nil
	}
	var out EndpointReasons
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		return nil, fmt.Errorf("annotation %s: %w", AnnotationEndpointReasons, err)
	}
	return out, nil
}

// Encode returns the annotation value of r ("" when r is empty). The
// encoding is stable: map keys are sorted.
func (r EndpointReasons) Encode() (string, error) {
	if len(r) == 0 {
		return "", nil
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	// Messages quote servers' answers: <, > and & stay one byte each.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return "", fmt.Errorf("encoding endpoint reasons: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// EncodeBounded encodes reasons within limit bytes: whole if they fit,
// else with messages cut to 64 bytes, else without messages, else without
// the entries of the pods that sort last.
func (reasons EndpointReasons) EncodeBounded(limit int) (string, error) {
	for _, messageLimit := range []int{-1, 64, 0} {
		shortened := reasons
		if messageLimit >= 0 {
			shortened = make(EndpointReasons, len(reasons))
			for pod, r := range reasons {
				r.Message = ""
				if messageLimit > 0 {
					r.Message = TruncateMessage(reasons[pod].Message, messageLimit)
				}
				shortened[pod] = r
			}
		}
		value, err := shortened.Encode()
		if err != nil || len(value) <= limit {
			return value, err
		}
		reasons = shortened
	}
	// Messages are gone: keep the pods that sort first, each entry's size
	// measured alone (plus a comma) against what is left.
	kept := EndpointReasons{}
	size := len("{}")
	for _, pod := range slices.Sorted(maps.Keys(reasons)) {
		entry, err := EndpointReasons{pod: reasons[pod]}.Encode()
		if err != nil {
			return "", err
		}
		if size+len(entry)-len("{}")+1 > limit {
			break
		}
		size += len(entry) - len("{}") + 1
		kept[pod] = reasons[pod]
	}
	return kept.Encode()
}
