package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PodLister lists the pods a budget selects, with only what a count reads:
// name, namespace, UID, deletion timestamp, controller reference, node and
// phase.
type PodLister interface {
	SelectedPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error)
}

// DefaultPodPageSize is how many pods one page of a StreamingPods list asks
// for.
const DefaultPodPageSize = 250

// StreamingPods lists pods from the API server page by page and decodes
// each pod as it streams in, keeping only what a count reads. A count's
// memory then grows with the number of selected pods by about 1.5 KiB
// each (a corev1.Pod value is 1,240 bytes empty, plus its names), and not
// with what their owners put in them (a tenant's pod
// can carry a megabyte of environment): at most one pod's JSON is held at
// a time. A whole PodList, as a client's List returns it, holds every pod
// in full, twice (the response and the decoded objects).
type StreamingPods struct {
	// REST is a client of the core API group, version v1.
	REST rest.Interface
	// PageSize defaults to DefaultPodPageSize.
	PageSize int64
}

// NewStreamingPods makes a StreamingPods from the controller's
// configuration and HTTP client (shared with its other clients).
func NewStreamingPods(cfg *rest.Config, httpClient *http.Client) (*StreamingPods, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("making the client that lists pods: %w", err)
	}
	return &StreamingPods{REST: rc}, nil
}

// SelectedPods implements PodLister.
func (s *StreamingPods) SelectedPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	limit := s.PageSize
	if limit <= 0 {
		limit = DefaultPodPageSize
	}
	var out []corev1.Pod
	next := ""
	for {
		req := s.REST.Get().Namespace(namespace).Resource("pods").
			Param("labelSelector", selector.String()).Param("limit", strconv.FormatInt(limit, 10)).
			SetHeader("Accept", "application/json")
		if next != "" {
			req = req.Param("continue", next)
		}
		body, err := req.Stream(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		next, err = decodePodPage(body, func(p *corev1.Pod) { out = append(out, *p) })
		_ = body.Close()
		if err != nil {
			return nil, fmt.Errorf("reading the list of pods: %w", err)
		}
		if next == "" {
			return out, nil
		}
	}
}

// podRecord is what a count reads of a pod; the decoder skips the rest
// without keeping it.
type podRecord struct {
	Metadata struct {
		Name              string                  `json:"name"`
		Namespace         string                  `json:"namespace"`
		UID               types.UID               `json:"uid"`
		DeletionTimestamp *metav1.Time            `json:"deletionTimestamp"`
		OwnerReferences   []metav1.OwnerReference `json:"ownerReferences"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase corev1.PodPhase `json:"phase"`
	} `json:"status"`
}

// decodePodPage reads one page of a PodList in JSON from r, calling add
// with each pod trimmed, and returns the page's continue token.
func decodePodPage(r io.Reader, add func(*corev1.Pod)) (string, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return "", err
	}
	next := ""
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", err
		}
		switch tok {
		case "metadata":
			var lm metav1.ListMeta
			if err := dec.Decode(&lm); err != nil {
				return "", fmt.Errorf("metadata: %w", err)
			}
			next = lm.Continue
		case "items":
			if err := decodePods(dec, add); err != nil {
				return "", err
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return "", fmt.Errorf("%v: %w", tok, err)
			}
		}
	}
	return next, expectDelim(dec, '}')
}

func decodePods(dec *json.Decoder, add func(*corev1.Pod)) error {
	if tok, err := dec.Token(); err != nil || tok == nil {
		return err // "items": null
	} else if tok != json.Delim('[') {
		return fmt.Errorf("items: got %v, want an array", tok)
	}
	for dec.More() {
		var rec podRecord
		if err := dec.Decode(&rec); err != nil {
			return fmt.Errorf("items: %w", err)
		}
		add(rec.pod())
	}
	return expectDelim(dec, ']')
}

// pod is the record as a Pod, with the controller reference only.
func (rec *podRecord) pod() *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID = rec.Metadata.Name, rec.Metadata.Namespace, rec.Metadata.UID
	p.DeletionTimestamp = rec.Metadata.DeletionTimestamp
	for _, ref := range rec.Metadata.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			p.OwnerReferences = []metav1.OwnerReference{ref}
			break
		}
	}
	p.Spec.NodeName = rec.Spec.NodeName
	p.Status.Phase = rec.Status.Phase
	return p
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("got %v, want %v", tok, want)
	}
	return nil
}

// readerPods lists through a client.Reader and trims afterwards: whole
// pods in memory during the list. For tests without an API server.
type readerPods struct{ reader client.Reader }

func (r readerPods) SelectedPods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.reader.List(ctx, list, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, err
	}
	out := make([]corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, *trimPod(&list.Items[i]))
	}
	return out, nil
}

func trimPod(p *corev1.Pod) *corev1.Pod {
	rec := podRecord{}
	rec.Metadata.Name, rec.Metadata.Namespace, rec.Metadata.UID = p.Name, p.Namespace, p.UID
	rec.Metadata.DeletionTimestamp = p.DeletionTimestamp
	rec.Metadata.OwnerReferences = p.OwnerReferences
	rec.Spec.NodeName = p.Spec.NodeName
	rec.Status.Phase = p.Status.Phase
	return rec.pod()
}
