package deploy_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/swh-dev/swh/test/harness"
)

// guard is the eviction guard's part of one rendering of the chart.
type guard struct {
	service *corev1.Service
	webhook *admissionregistrationv1.ValidatingWebhookConfiguration
	deploy  *appsv1.Deployment
}

// guardOf decodes the guard's objects of a rendering of release
// (fullname "<release>-swh"), failing the test when one is missing.
func guardOf(t *testing.T, objs []*unstructured.Unstructured, release string) guard {
	t.Helper()
	fullname := release + "-swh"
	g := guard{service: &corev1.Service{}, webhook: &admissionregistrationv1.ValidatingWebhookConfiguration{}, deploy: &appsv1.Deployment{}}
	fromUnstructured(t, find(t, objs, "Service", fullname+"-webhook").Object, g.service)
	fromUnstructured(t, find(t, objs, "ValidatingWebhookConfiguration", fullname+"-eviction-guard").Object, g.webhook)
	fromUnstructured(t, find(t, objs, "Deployment", fullname+"-controller").Object, g.deploy)
	return g
}

// TestEvictionGuardChart renders the chart in a namespace of its own and
// checks the eviction guard end to end on paper: no certificate is
// rendered, the controller is told to keep one in the Secret for the
// Service's DNS names and inject its CA into the webhook configuration, the
// Service reaches the controller's webhook port, the webhook watches
// pods/eviction everywhere but the release namespace and kube-system; then
// the API server accepts it all (server-side dry-run, no warning). Needs
// bin/helm.
func TestEvictionGuardChart(t *testing.T) {
	const ns = "swh-guard"
	objs := renderChart(t, "other", ns, "createNamespace=true")
	g := guardOf(t, objs, "other")

	// No key material is rendered: the controller keeps it.
	if left := harness.OfKind(objs, "Secret"); len(left) > 0 {
		t.Errorf("the chart renders the Secret %s; the certificate must not be in the manifests", left[0].GetName())
	}
	if len(g.webhook.Webhooks) != 1 {
		t.Fatalf("%d webhooks, want 1", len(g.webhook.Webhooks))
	}
	wh := g.webhook.Webhooks[0]
	if len(wh.ClientConfig.CABundle) > 0 {
		t.Error("the chart renders a caBundle; the controller injects it")
	}

	// The webhook itself.
	svc := wh.ClientConfig.Service
	if svc == nil || svc.Name != "other-swh-webhook" || svc.Namespace != ns || svc.Path == nil || *svc.Path != "/validate-eviction" ||
		svc.Port == nil || *svc.Port != 443 || wh.ClientConfig.URL != nil {
		t.Errorf("clientConfig %+v, want the Service other-swh-webhook.%s:443/validate-eviction", wh.ClientConfig, ns)
	}
	wantRules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"},
			Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
	}}
	if !reflect.DeepEqual(wh.Rules, wantRules) {
		t.Errorf("rules %+v, want CREATE of pods/eviction only", wh.Rules)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"sideEffects", deref(wh.SideEffects), admissionregistrationv1.SideEffectClassNoneOnDryRun},
		{"failurePolicy", deref(wh.FailurePolicy), admissionregistrationv1.Fail},
		{"timeoutSeconds", deref(wh.TimeoutSeconds), int32(5)},
		{"matchPolicy", deref(wh.MatchPolicy), admissionregistrationv1.Equivalent},
		{"admissionReviewVersions", wh.AdmissionReviewVersions, []string{"v1"}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if wh.NamespaceSelector == nil {
		t.Fatal("no namespaceSelector: the guard would stand in the way of its own replicas' evictions")
	}
	sel, err := metav1.LabelSelectorAsSelector(wh.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{ns: false, "kube-system": false, "default": true, "shop": true} {
		if got := sel.Matches(labels.Set{corev1.LabelMetadataName: name}); got != want {
			t.Errorf("the webhook guards namespace %s: %v, want %v", name, got, want)
		}
	}

	// The Service reaches the webhook port of the controller's pods, which
	// keep and serve the certificate for its names.
	if !labels.SelectorFromSet(g.service.Spec.Selector).Matches(labels.Set(g.deploy.Spec.Template.Labels)) || len(g.service.Spec.Selector) == 0 {
		t.Errorf("the webhook Service selects %v, not the controller's pods %v", g.service.Spec.Selector, g.deploy.Spec.Template.Labels)
	}
	if len(g.service.Spec.Ports) != 1 || g.service.Spec.Ports[0].Port != 443 || g.service.Spec.Ports[0].Name == "" ||
		g.service.Spec.Ports[0].TargetPort != intstr.FromString("webhook") {
		t.Errorf("webhook Service ports %+v, want one named port 443 to the container port webhook", g.service.Spec.Ports)
	}
	ctr := g.deploy.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" && p.ContainerPort == 9443 }) {
		t.Errorf("controller ports %+v lack webhook: 9443", ctr.Ports)
	}
	for _, want := range []string{"--webhook-port=9443", "--webhook-cert-secret=swh-guard/other-swh-webhook",
		"--webhook-configuration=other-swh-eviction-guard",
		"--webhook-cert-hosts=other-swh-webhook,other-swh-webhook.swh-guard,other-swh-webhook.swh-guard.svc,other-swh-webhook.swh-guard.svc.cluster.local"} {
		if !slices.Contains(ctr.Args, want) {
			t.Errorf("controller args %v lack %s", ctr.Args, want)
		}
	}
	if ctr.Lifecycle == nil || ctr.Lifecycle.PreStop == nil || ctr.Lifecycle.PreStop.Sleep == nil || ctr.Lifecycle.PreStop.Sleep.Seconds < 1 {
		t.Errorf("controller lifecycle %+v: want a preStop pause, so that the API server stops calling a stopping replica", ctr.Lifecycle)
	}
	if len(ctr.VolumeMounts) > 0 || len(g.deploy.Spec.Template.Spec.Volumes) > 0 {
		t.Errorf("the controller mounts %+v: it reads its certificate from the API server", ctr.VolumeMounts)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, w := warningClient(t)
	if err := apply(ctx, c, harness.OfKind(objs, "Namespace"), false); err != nil {
		t.Fatalf("applying the Namespace: %v", err)
	}
	var rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			rest = append(rest, o)
		}
	}
	if err := apply(ctx, c, rest, true); err != nil {
		t.Fatalf("server-side dry-run:\n%v", err)
	}
	if len(w.seen) > 0 {
		t.Errorf("the API server warned:\n%s", strings.Join(w.seen, "\n"))
	}
}

// TestEvictionGuardValues: failurePolicy and timeoutSeconds reach the
// webhook, the schema refuses what the API server would, and
// enabled=false leaves no trace of the guard and turns its server off.
func TestEvictionGuardValues(t *testing.T) {
	g := guardOf(t, renderChart(t, "other", "swh-guard", "controller.evictionGuard.failurePolicy=Ignore,controller.evictionGuard.timeoutSeconds=10"), "other")
	if wh := g.webhook.Webhooks[0]; deref(wh.FailurePolicy) != admissionregistrationv1.Ignore || deref(wh.TimeoutSeconds) != int32(10) {
		t.Errorf("failurePolicy %v, timeoutSeconds %v: want Ignore and 10 from the values", deref(wh.FailurePolicy), deref(wh.TimeoutSeconds))
	}
	// The guard bounds its decisions inside the webhook's timeout: it is
	// told the timeout the API server waits for it.
	for _, tt := range []struct{ set, arg string }{
		{"", "--eviction-webhook-timeout=5s"},
		{"controller.evictionGuard.timeoutSeconds=2", "--eviction-webhook-timeout=2s"},
		{"controller.evictionGuard.timeoutSeconds=30", "--eviction-webhook-timeout=30s"},
	} {
		args := guardOf(t, renderChart(t, "other", "swh-guard", tt.set), "other").deploy.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, tt.arg) {
			t.Errorf("--set %q: controller args %v, want %s", tt.set, args, tt.arg)
		}
	}
	for _, set := range []string{"controller.evictionGuard.failurePolicy=Sometimes", "controller.evictionGuard.timeoutSeconds=31",
		"controller.evictionGuard.timeoutSeconds=0", "controller.evictionGuard.enable=true"} {
		if _, err := helmTemplate(t, "other", "swh-guard", set); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("--set %s: %v, want the values schema to refuse it", set, err)
		}
	}

	off := renderChart(t, "other", "swh-guard", "controller.evictionGuard.enabled=false")
	if left := harness.OfKind(off, "ValidatingWebhookConfiguration", "Secret"); len(left) > 0 {
		t.Errorf("evictionGuard.enabled=false still renders %s %s", left[0].GetKind(), left[0].GetName())
	}
	for _, svc := range harness.OfKind(off, "Service") {
		if strings.HasSuffix(svc.GetName(), "-webhook") {
			t.Errorf("evictionGuard.enabled=false still renders the Service %s", svc.GetName())
		}
	}
	deploy := &appsv1.Deployment{}
	fromUnstructured(t, find(t, off, "Deployment", "other-swh-controller").Object, deploy)
	ctr := deploy.Spec.Template.Spec.Containers[0]
	if !slices.Contains(ctr.Args, "--webhook-port=0") || slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-dir") }) {
		t.Errorf("controller args %v: want --webhook-port=0 and no certificate folder", ctr.Args)
	}
	if len(ctr.VolumeMounts) > 0 || len(deploy.Spec.Template.Spec.Volumes) > 0 || slices.ContainsFunc(ctr.Ports, func(p corev1.ContainerPort) bool { return p.Name == "webhook" }) {
		t.Errorf("with the guard off the controller still has mounts %v, volumes %v or ports %v", ctr.VolumeMounts, deploy.Spec.Template.Spec.Volumes, ctr.Ports)
	}
}

// TestRendersAreIdentical: GitOps tools render the chart on every sync
// (helm template); two renderings of the same values must be the same, or
// each sync would change what is installed (a new CA under a fail-closed
// webhook stalls drains). Needs bin/helm.
func TestRendersAreIdentical(t *testing.T) {
	for _, set := range []string{"", "controller.evictionGuard.certificate.source=cert-manager",
		"prometheusRule.enabled=true,serviceMonitor.enabled=true,grafanaDashboard.enabled=true,createNamespace=true"} {
		first, second := renderChart(t, "same", "swh-same", set), renderChart(t, "same", "swh-same", set)
		if !reflect.DeepEqual(first, second) {
			for i := range first {
				if i < len(second) && !reflect.DeepEqual(first[i], second[i]) {
					t.Errorf("--set %q: two renderings differ in %s %s", set, first[i].GetKind(), first[i].GetName())
				}
			}
			t.Errorf("--set %q: two renderings differ", set)
		}
	}
}

// TestEvictionGuardCertManager: with certificate.source cert-manager the
// chart asks cert-manager for the Secret (from its own self-signed CA, or
// from a given issuer), has the cainjector fill the caBundle, and the
// replicas serve the mounted Secret. Needs bin/helm.
func TestEvictionGuardCertManager(t *testing.T) {
	const ns = "swh-guard"
	objs := renderChart(t, "other", ns, "controller.evictionGuard.certificate.source=cert-manager")
	g := guardOf(t, objs, "other")
	if got := g.webhook.Annotations["cert-manager.io/inject-ca-from"]; got != ns+"/other-swh-webhook" {
		t.Errorf("inject-ca-from %q, want %s/other-swh-webhook", got, ns)
	}
	cert := find(t, objs, "Certificate", "other-swh-webhook")
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	issuer, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	if secretName != "other-swh-webhook" || !slices.Contains(dnsNames, "other-swh-webhook.swh-guard.svc") || issuer != "other-swh-webhook-ca" {
		t.Errorf("Certificate: secret %q, names %v, issuer %q; want other-swh-webhook, the Service's names, the chart's CA", secretName, dnsNames, issuer)
	}
	find(t, objs, "Issuer", "other-swh-webhook-ca")
	find(t, objs, "Certificate", "other-swh-webhook-ca")
	ctr := g.deploy.Spec.Template.Spec.Containers[0]
	if !slices.Contains(ctr.Args, "--webhook-cert-dir=/etc/swh/webhook") || slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, "--webhook-cert-secret") }) {
		t.Errorf("controller args %v: want the mounted certificate, not one the controller keeps", ctr.Args)
	}
	mounted := ""
	for _, m := range ctr.VolumeMounts {
		if m.MountPath == "/etc/swh/webhook" && m.ReadOnly {
			mounted = m.Name
		}
	}
	if !slices.ContainsFunc(g.deploy.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == mounted && v.Secret != nil && v.Secret.SecretName == "other-swh-webhook"
	}) {
		t.Errorf("the controller does not mount the Secret other-swh-webhook read-only at /etc/swh/webhook: mounts %+v, volumes %+v",
			ctr.VolumeMounts, g.deploy.Spec.Template.Spec.Volumes)
	}

	// A given issuer: the chart makes no CA of its own.
	objs = renderChart(t, "other", ns, "controller.evictionGuard.certificate.source=cert-manager,"+
		"controller.evictionGuard.certificate.certManager.issuerRef.name=corp,controller.evictionGuard.certificate.certManager.issuerRef.kind=ClusterIssuer")
	cert = find(t, objs, "Certificate", "other-swh-webhook")
	kind, _, _ := unstructured.NestedString(cert.Object, "spec", "issuerRef", "kind")
	issuer, _, _ = unstructured.NestedString(cert.Object, "spec", "issuerRef", "name")
	if kind != "ClusterIssuer" || issuer != "corp" || len(harness.OfKind(objs, "Issuer")) > 0 {
		t.Errorf("issuerRef %s/%s and %d Issuers: want ClusterIssuer corp and no Issuer of the chart's", kind, issuer, len(harness.OfKind(objs, "Issuer")))
	}
	for _, set := range []string{"controller.evictionGuard.certificate.source=helm",
		"controller.evictionGuard.certificate.source=cert-manager,controller.evictionGuard.certificate.certManager.issuerRef.kind=ClusterIssuer"} {
		if _, err := helmTemplate(t, "other", ns, set); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("--set %s: %v, want the values schema to refuse it", set, err)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
