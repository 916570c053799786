package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadManifests decodes every object of a multi-document YAML file.
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the manifests (run make generate): %w", err)
	}
	defer func() { _ = f.Close() }()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue // an empty document
		}
		objs = append(objs, u)
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("%s holds no object", path)
	}
	return objs, nil
}

// ChartManifests reads deploy/manifests/swh.yaml, the chart rendered with
// its defaults into swh-system.
func ChartManifests() ([]*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return ReadManifests(filepath.Join(root, "deploy", "manifests", "swh.yaml"))
}

// OfKind returns the objects of the given kinds, in their order.
func OfKind(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// ApplyManifests server-side applies objs as fieldOwner, forcing ownership.
func ApplyManifests(ctx context.Context, c client.Client, fieldOwner string, objs []*unstructured.Unstructured) error {
	var errs []error
	for _, o := range objs {
		err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner(fieldOwner), client.ForceOwnership)
		if err != nil {
			errs = append(errs, fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}
