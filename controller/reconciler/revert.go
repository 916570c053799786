package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// The API server's limits on an event's note and action.
const (
	maxNoteBytes   = 1024
	maxActionBytes = 128
)

// revertDrift puts back the fields of d.patch with a JSON merge patch: null
// removes a field whoever owns it (server-side apply cannot remove what
// another field manager owns), and the API server defaults it again. The
// resource version guards it: a Service that changed since the cache saw
// it is a conflict, never overwritten.
func (r *Reconciler) revertDrift(ctx context.Context, svc *corev1.Service, d drift) (*corev1.Service, error) {
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": svc.ResourceVersion},
		"spec":     d.patch,
	})
	if err != nil {
		return nil, fmt.Errorf("encoding the patch of Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	patched := svc.DeepCopy()
	if err := r.Client.Patch(ctx, patched, client.RawPatch(types.MergePatchType, body), client.FieldOwner(r.FieldOwner)); err != nil {
		r.Metrics.serviceWrite(writeResult(err))
		return nil, fmt.Errorf("putting back Service %s/%s (%s): %w", svc.Namespace, svc.Name, d, err)
	}
	r.Metrics.serviceWrite("ok")
	return patched, nil
}

// reportRevert counts, logs and tells on the resource what was put back.
// The fields are in the action too: the event recorder folds events of the
// same action into the first one's note.
func (r *Reconciler) reportRevert(ctx context.Context, swh *swhv1alpha1.ServiceWithHealthchecks, d drift) {
	r.Metrics.reverted(d.fields)
	log.FromContext(ctx).Info("put back what someone else changed on the child Service", "changes", d.String())
	r.Recorder.Eventf(swh, nil, corev1.EventTypeWarning, ReasonServiceDriftReverted, cut("RevertService:"+strings.Join(d.fields, ","), maxActionBytes),
		"%s", eventNote("put back the child Service, changed by someone else: "+d.String()))
}

// writeResult is the result label of a failed write.
func writeResult(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden"
	}
	return "error"
}

// eventNote cuts a note to what the API server accepts (a longer one is
// refused and the event lost).
func eventNote(note string) string { return cut(note, maxNoteBytes) }

func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const mark = "…"
	n := limit - len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}
