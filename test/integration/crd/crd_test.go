// Package crd_test checks the ServiceWithHealthchecks CRD inside a real
// kube-apiserver: valid manifests are accepted with their defaults applied,
// invalid ones are rejected with a message that names the offending field.
package crd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// controlPlane is shared by the tests of this package: each test works in a
// namespace of its own, and one start saves ten seconds a test.
var controlPlane *harness.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(harness.RunSuite(m, harness.SuiteOptions{Name: "CRD", Setup: func(_ context.Context, cp *harness.ControlPlane) (func(), error) {
		controlPlane = cp
		return nil, nil
	}}))
}

func decode(t *testing.T, manifest []byte) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(manifest, &obj.Object); err != nil {
		t.Fatalf("decoding manifest: %v", err)
	}
	return obj
}

func TestValidManifestsAreAccepted(t *testing.T) {
	cp := controlPlane
	ns := cp.TestNamespace(t)
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("want at least 10 valid manifests in testdata/valid, found %d (%v)", len(files), err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			obj := decode(t, data)
			obj.SetNamespace(ns)
			ctx := context.Background()
			if err := cp.Client.Create(ctx, obj); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			// The typed client must decode what the server stored.
			typed := &swhv1alpha1.ServiceWithHealthchecks{}
			if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: obj.GetName()}, typed); err != nil {
				t.Fatalf("reading back: %v", err)
			}
		})
	}
}

func TestServerAppliesDefaults(t *testing.T) {
	cp := controlPlane
	ns := cp.TestNamespace(t)
	obj := decode(t, []byte(`
apiVersion: network.swh.dev/v1alpha1
kind: ServiceWithHealthchecks
metadata: {name: defaults}
spec:
  ports: [{port: 80, floor: {minPassing: 1}}]
  selector: {app: x}
  healthcheck:
    probes:
    - {mode: HTTP, http: {targetPort: 8080}}
    - {mode: PostgreSQL, postgreSQL: {targetPort: 5432}}
    - {mode: TCP, tcp: {targetPort: http}}
`))
	obj.SetNamespace(ns)
	ctx := context.Background()
	if err := cp.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create: %v", err)
	}
	got := &swhv1alpha1.ServiceWithHealthchecks{}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
		t.Fatalf("get: %v", err)
	}
	hc := got.Spec.Healthcheck
	checks := []struct {
		field     string
		got, want any
	}{
		{"spec.type", string(got.Spec.Type), "ClusterIP"},
		{"spec.sessionAffinity", string(got.Spec.SessionAffinity), "None"},
		{"spec.ports[0].protocol", string(got.Spec.Ports[0].Protocol), "TCP"},
		{"spec.ports[0].floor.below", string(got.Spec.Ports[0].Floor.Below), "Closed"},
		{"spec.healthcheck.initialDelaySeconds", hc.InitialDelaySeconds, int32(10)},
		{"spec.healthcheck.periodSeconds", hc.PeriodSeconds, int32(10)},
		{"probes[0].timeoutSeconds", hc.Probes[0].TimeoutSeconds, int32(1)},
		{"probes[0].successThreshold", hc.Probes[0].SuccessThreshold, int32(1)},
		{"probes[0].failureThreshold", hc.Probes[0].FailureThreshold, int32(3)},
		{"probes[0].http.method", hc.Probes[0].HTTP.Method, "GET"},
		{"probes[0].http.scheme", string(hc.Probes[0].HTTP.Scheme), "HTTP"},
		{"probes[0].http.path", hc.Probes[0].HTTP.Path, "/"},
		{"probes[0].http.expectedStatusCodes", strings.Join(hc.Probes[0].HTTP.ExpectedStatusCodes, ","), "200-399"},
		{"probes[1].postgreSQL.dbName", hc.Probes[1].PostgreSQL.DBName, "postgres"},
		{"probes[1].postgreSQL.query", hc.Probes[1].PostgreSQL.Query, "SELECT 1"},
		// No default: unset, the Secret's tlsMode applies, else disable.
		{"probes[1].postgreSQL.tlsMode", string(hc.Probes[1].PostgreSQL.TLSMode), ""},
		{"probes[1].postgreSQL.insecureAllowCleartextPassword", hc.Probes[1].PostgreSQL.InsecureAllowCleartextPassword, false},
		{"probes[2].tcp.targetPort", hc.Probes[2].TCP.TargetPort.String(), "http"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want the default %v", c.field, c.got, c.want)
		}
	}
}

func TestStatusIsASubresource(t *testing.T) {
	cp := controlPlane
	ns := cp.TestNamespace(t)
	ctx := context.Background()
	obj := decode(t, []byte("apiVersion: network.swh.dev/v1alpha1\nkind: ServiceWithHealthchecks\nmetadata: {name: st}\nspec: {ports: [{port: 80}], selector: {app: x}}\n"))
	obj.SetNamespace(ns)
	if err := cp.Client.Create(ctx, obj); err != nil {
		t.Fatalf("create: %v", err)
	}
	got := &swhv1alpha1.ServiceWithHealthchecks{}
	key := client.ObjectKeyFromObject(obj)
	if err := cp.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	got.Status.Ready = "1/2"
	got.Status.ReadyEndpoints, got.Status.TotalEndpoints = 1, 2
	if err := cp.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("status update: %v", err)
	}
	// A write to the main resource must not touch status.
	got.Status.Ready = "9/9"
	got.Labels = map[string]string{"x": "y"}
	if err := cp.Client.Update(ctx, got); err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := cp.Client.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Ready != "1/2" {
		t.Errorf("status.ready = %q after a main-resource update, want 1/2 (status is not a subresource)", got.Status.Ready)
	}
	if got.Generation != 1 {
		t.Errorf("generation = %d after a label change, want 1", got.Generation)
	}
}

func TestInvalidManifestsAreRejected(t *testing.T) {
	cp := controlPlane
	ns := cp.TestNamespace(t)
	if len(invalidCases) < 25 {
		t.Fatalf("want at least 25 invalid cases, have %d", len(invalidCases))
	}
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.objectName
			if name == "" {
				name = "invalid"
			}
			manifest := "apiVersion: network.swh.dev/v1alpha1\nkind: ServiceWithHealthchecks\nmetadata:\n  name: " + name + "\nspec:\n" + indent(tc.spec)
			obj := decode(t, []byte(manifest))
			obj.SetNamespace(ns)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := cp.Client.Create(ctx, obj, client.DryRunAll)
			if err == nil {
				t.Fatalf("accepted; want a rejection naming %q", tc.field)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("rejected with %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message does not name %q:\n%v", tc.field, err)
			}
			if tc.message != "" && !strings.Contains(err.Error(), tc.message) {
				t.Errorf("message does not say %q:\n%v", tc.message, err)
			}
		})
	}
}

func indent(spec string) string {
	lines := strings.Split(strings.Trim(spec, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n") + "\n"
}
