package deploy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

// nodeNameExtra is the user-info extra kube-apiserver sets from a token
// bound to a pod: the name of the pod's node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// agentToken creates node (when missing) and a pod on it (named from the
// prefix pod) running as the agent's ServiceAccount in the release
// namespace, as the DaemonSet's pod would be, and returns a token bound to
// that pod, from the TokenRequest API as kubelet asks for the projected
// token.
func agentToken(ctx context.Context, t *testing.T, node, pod string) string {
	t.Helper()
	c := controlPlane.Client
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{}); err != nil {
		if _, err := harness.CreateNode(ctx, c, harness.NodeOptions{Name: node}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: pod},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: agentSA,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "registry.invalid/swh/agent:test",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
			// The test requests the token itself, as kubelet would.
			AutomountServiceAccountToken: new(false),
		},
	}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("creating the agent's pod: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0))
	})
	token, err := harness.ServiceAccountToken(ctx, c, namespace, agentSA, p, time.Hour)
	if err != nil {
		t.Fatalf("a token bound to the agent's pod: %v", err)
	}
	return token
}

// bearer returns a configuration that authenticates with token alone: no
// client certificate, no impersonation.
func bearer(token string) *rest.Config {
	return harness.TokenConfig(controlPlane.Config, token)
}

// TestAgentTokenNamesItsNode checks what the admission policies rely on: a
// token bound to the agent's pod authenticates as the agent's
// ServiceAccount with the pod's node in its user info.
func TestAgentTokenNamesItsNode(t *testing.T) {
	installRBAC(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	token := agentToken(ctx, t, "token-node", "swh-agent-token-")
	cs, err := kubernetes.NewForConfig(bearer(token))
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview as the agent's token: %v", err)
	}
	info := review.Status.UserInfo
	user, _ := serviceAccountUser(agentSA)
	if info.Username != user {
		t.Errorf("the token authenticates as %q, want %q", info.Username, user)
	}
	if got := info.Extra[nodeNameExtra]; len(got) != 1 || got[0] != "token-node" {
		t.Errorf("user info extra %s = %v, want [token-node]; all extras: %v", nodeNameExtra, got, fmt.Sprint(info.Extra))
	}
	t.Logf("user info of a token bound to a pod on token-node: %+v", info)
}
