package disruption_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	controllerapp "github.com/swh-dev/swh/controller/app"
	"github.com/swh-dev/swh/controller/disruption"
	"github.com/swh-dev/swh/controller/webhookcert"
	"github.com/swh-dev/swh/test/harness"
)

// TestGuardAnswersThroughCertificateRotation runs a guard replica that
// keeps its own certificate (webhookcert), with lifetimes of seconds, behind
// a webhook configuration that starts with no caBundle, and asks the API
// server for dry-run evictions every 50 ms while the serving certificate is
// renewed several times and the CA once: every eviction must be answered by
// the guard (none may fail for want of a trusted certificate), and the
// rotation must end with the old CA out of the bundle.
func TestGuardAnswersThroughCertificateRotation(t *testing.T) {
	k := newKafka(t, budgetMaxUnavailable(1))
	ctx := context.Background()
	secretKey := types.NamespacedName{Namespace: k.ns, Name: "rotation-webhook"}
	const configName = "swh-rotation-guard"

	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	target := fmt.Sprintf("https://127.0.0.1:%d%s", port, disruption.Path)
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: configName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "rotation-guard.network.swh.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &target},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			// Only this test's namespace: the rest of the suite never waits
			// for this replica.
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: k.ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
			}},
		}},
	}
	if err := controlPlane.Client.Create(ctx, config); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), config) })

	// The replica stands by for a Lease held by nobody that runs, for an
	// hour: it serves the webhook (every replica does) and never leads, so
	// it neither reconciles nor joins the suite's own election (taking the
	// suite's Lease and then stopping would leave the other tests without
	// a leader for a while).
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "swh-rotation-standby-" + k.ns},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("nobody"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now},
	}
	if err := controlPlane.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), lease) })
	cfg := rest.CopyConfig(controlPlane.Config)
	cfg.QPS, cfg.Burst = 50, 100
	mgr, err := controllerapp.NewManager(cfg, controllerapp.Options{
		MetricsAddr: "0", HealthAddr: "0", Registry: prometheus.NewRegistry(), SkipNameValidation: true,
		LeaderElection: true, LeaderElectionNamespace: "default", LeaderElectionID: lease.Name,
		WebhookHost: "127.0.0.1", WebhookPort: port, ReservationTimeout: reservationTimeout,
		WebhookCert: &webhookcert.Options{
			Secret: secretKey, WebhookConfiguration: configName, Hosts: []string{"127.0.0.1"},
			CAValidity: 45 * time.Second, CertValidity: 12 * time.Second,
			CheckInterval: time.Second, Settle: 2 * time.Second,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := harness.RunManager(context.Background(), mgr)
	// The configuration goes first: a stopped server behind it would
	// refuse this namespace's evictions.
	t.Cleanup(func() {
		_ = controlPlane.Client.Delete(context.Background(), config)
		_ = stop()
	})

	// The first certificate: made, injected, served.
	harness.Eventually(t, 30*time.Second, "the guard answering with its own certificate", func() error {
		return evict(ctx, k.ns, brokerName(0), true)
	})
	secret := &corev1.Secret{}
	if err := controlPlane.Client.Get(ctx, secretKey, secret); err != nil {
		t.Fatal(err)
	}
	if len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].Name != configName {
		t.Errorf("the Secret's owners %+v, want the webhook configuration (it goes with it)", secret.OwnerReferences)
	}
	firstCA := bundleOf(t, secret)[0]

	// Evictions and the Secret's history until the CA has been replaced
	// and the old one dropped.
	var (
		answered, failed int
		failures         []string
		leaves           = map[[32]byte]bool{}
		sawTwoCAs        bool
		done             bool
	)
	deadline := time.Now().Add(2 * time.Minute)
	for !done && time.Now().Before(deadline) {
		if err := evict(ctx, k.ns, brokerName(0), true); err != nil {
			failed++
			if len(failures) < 5 {
				failures = append(failures, err.Error())
			}
		} else {
			answered++
		}
		if err := controlPlane.Client.Get(ctx, secretKey, secret); err != nil {
			t.Fatal(err)
		}
		leaves[sha256.Sum256(secret.Data[webhookcert.KeyCert])] = true
		bundle := bundleOf(t, secret)
		sawTwoCAs = sawTwoCAs || len(bundle) == 2
		done = sawTwoCAs && len(bundle) == 1 && !bundle[0].Equal(firstCA)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d dry-run evictions answered, %d failed; %d serving certificates", answered, failed, len(leaves))
	if !done {
		t.Errorf("the CA was not replaced and the old one dropped within two minutes (saw two CAs: %v)", sawTwoCAs)
	}
	if len(leaves) < 4 {
		t.Errorf("%d serving certificates, want several renewals", len(leaves))
	}
	if failed > 0 {
		t.Errorf("%d evictions were not answered by the guard during the rotation: %s", failed, strings.Join(failures, "; "))
	}
	if answered < 200 {
		t.Errorf("only %d evictions answered; the rotation went untested", answered)
	}

	// A bundle someone else changed is put back.
	fresh := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := controlPlane.Client.Get(ctx, types.NamespacedName{Name: configName}, fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Webhooks[0].ClientConfig.CABundle = nil
	if err := controlPlane.Client.Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the caBundle injected again", func() error {
		got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := controlPlane.Client.Get(ctx, types.NamespacedName{Name: configName}, got); err != nil {
			return err
		}
		if len(got.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Errorf("no caBundle")
		}
		return evict(ctx, k.ns, brokerName(0), true)
	})
}

// bundleOf parses the Secret's CA bundle.
func bundleOf(t *testing.T, s *corev1.Secret) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := s.Data[webhookcert.KeyCABundle]
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("the Secret %s holds no CA", s.Name)
	}
	return out
}
