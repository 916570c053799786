package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountToken asks the TokenRequest API for a token of the
// ServiceAccount namespace/name, valid for expiry. With boundPod set the
// token is bound to that pod, as a projected token in the pod would be:
// the API server then puts the pod's node into the user's extra
// (authentication.kubernetes.io/node-name) and refuses the token once the
// pod is gone.
func ServiceAccountToken(ctx context.Context, c client.Client, namespace, name string, boundPod *corev1.Pod, expiry time.Duration) (string, error) {
	seconds := int64(expiry / time.Second)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}
	if boundPod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: boundPod.Name, UID: boundPod.UID,
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return "", fmt.Errorf("requesting a token of %s/%s: %w", namespace, name, err)
	}
	return req.Status.Token, nil
}

// TokenConfig is base (its server and CA) authenticating with token instead
// of base's credentials.
func TokenConfig(base *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(base)
	cfg.BearerToken = token
	return cfg
}

// WriteTokenKubeconfig writes to path a kubeconfig for base's server that
// authenticates with token.
func WriteTokenKubeconfig(path string, base *rest.Config, token string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["swh"] = &clientcmdapi.Cluster{Server: base.Host, CertificateAuthorityData: base.CAData}
	kc.AuthInfos["swh"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["swh"] = &clientcmdapi.Context{Cluster: "swh", AuthInfo: "swh"}
	kc.CurrentContext = "swh"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return fmt.Errorf("rendering a token kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the kubeconfig's folder: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
