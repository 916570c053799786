package crd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// docsExamples is where the documentation's manifests live; docs/examples.md
// promises they apply as they are.
const docsExamples = "../../../docs/examples"

// documentSeparator splits a multi-document YAML stream.
var documentSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// TestDocsExamplesApply server-side applies every document of every
// docs/examples/*.yaml, as `kubectl apply --server-side -f` would, into a
// namespace of its own: the CRD's schema and CEL rules, and the API server's
// own validation of Secrets, must accept each one as written.
func TestDocsExamplesApply(t *testing.T) {
	cp := controlPlane
	files, err := filepath.Glob(filepath.Join(docsExamples, "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("want at least 4 manifests in docs/examples, found %d (%v)", len(files), err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			ns := cp.TestNamespace(t)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			resources := 0
			for i, doc := range documentSeparator.Split(string(data), -1) {
				if len(bytes.TrimSpace(stripComments([]byte(doc)))) == 0 {
					continue
				}
				obj := decode(t, []byte(doc))
				if obj.GetNamespace() != "" {
					t.Fatalf("document %d (%s %s) sets metadata.namespace: examples apply to the current namespace", i, obj.GetKind(), obj.GetName())
				}
				obj.SetNamespace(ns)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				err := cp.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("docs-examples"))
				cancel()
				if err != nil {
					t.Fatalf("document %d (%s %s) rejected: %v", i, obj.GetKind(), obj.GetName(), err)
				}
				if obj.GetKind() != "ServiceWithHealthchecks" {
					continue
				}
				resources++
				typed := &swhv1alpha1.ServiceWithHealthchecks{}
				if err := cp.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: obj.GetName()}, typed); err != nil {
					t.Fatalf("reading %s back: %v", obj.GetName(), err)
				}
			}
			if resources == 0 {
				t.Errorf("%s holds no ServiceWithHealthchecks", file)
			}
		})
	}
}

// stripComments drops YAML comment lines, so a document of comments only
// counts as empty.
func stripComments(doc []byte) []byte {
	var out bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return out.Bytes()
}
