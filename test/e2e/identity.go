package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/test/harness"
)

// tokenLifetime outlives any run of the suite.
const tokenLifetime = 2 * time.Hour

// identities are the chart's ServiceAccounts the binaries run as, so the
// suite runs with the chart's RBAC and admission policies in force.
type identities struct {
	namespace, controller, agent string
}

// installAccess applies the chart's namespace, ServiceAccounts, RBAC and
// admission policies (deploy/manifests/swh.yaml) and returns who the
// binaries are.
func installAccess(ctx context.Context, c client.Client) (identities, error) {
	objs, err := harness.ChartManifests()
	if err != nil {
		return identities{}, err
	}
	var ids identities
	for _, sa := range harness.OfKind(objs, "ServiceAccount") {
		switch {
		case strings.HasSuffix(sa.GetName(), "-controller"):
			ids.controller, ids.namespace = sa.GetName(), sa.GetNamespace()
		case strings.HasSuffix(sa.GetName(), "-agent"):
			ids.agent = sa.GetName()
		}
	}
	if ids.controller == "" || ids.agent == "" {
		return ids, errors.New("the chart's manifests hold no controller and agent ServiceAccounts")
	}
	access := harness.OfKind(objs, "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if err := harness.ApplyManifests(ctx, c, "swh-e2e", access); err != nil {
		return ids, fmt.Errorf("installing the chart's RBAC and policies: %w", err)
	}
	return ids, nil
}

// controllerKubeconfig writes a kubeconfig with a token of the
// controller's ServiceAccount and returns its path.
func (c *Cluster) controllerKubeconfig(ctx context.Context) (string, error) {
	token, err := harness.ServiceAccountToken(ctx, c.CP.Client, c.ids.namespace, c.ids.controller, nil, tokenLifetime)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "swh-controller.kubeconfig")
	return path, harness.WriteTokenKubeconfig(path, c.CP.Config, token)
}

// agentKubeconfig writes a kubeconfig with a token of the agent's
// ServiceAccount bound to the node's agent pod, as the DaemonSet's pod on
// that node would hold, and returns its path. The pod is only an API
// object: nothing runs it, but the API server reads the node off it.
func (n *Node) agentKubeconfig(ctx context.Context) (string, error) {
	c := n.c
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ids.namespace, Name: c.ids.agent + "-" + n.Name,
			Labels: map[string]string{"app.kubernetes.io/name": "swh", "app.kubernetes.io/component": "agent"}},
		// The chart's namespace enforces the restricted Pod Security level.
		Spec: corev1.PodSpec{
			NodeName: n.Name, ServiceAccountName: c.ids.agent, AutomountServiceAccountToken: new(false),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "agent", Image: "swh-agent:e2e",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: new(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	if err := c.CP.Client.Create(ctx, pod); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("creating the agent pod of %s: %w", n.Name, err)
		}
		if err := c.CP.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return "", fmt.Errorf("reading the agent pod of %s: %w", n.Name, err)
		}
	}
	token, err := harness.ServiceAccountToken(ctx, c.CP.Client, c.ids.namespace, c.ids.agent, pod, tokenLifetime)
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, fmt.Sprintf("%s-swh-agent-%d.kubeconfig", n.Name, n.agentRuns))
	return path, harness.WriteTokenKubeconfig(path, c.CP.Config, token)
}

// registrationWindow are the refusals an agent may meet, and retries,
// between a resource's creation and the controller registering its Service
// in the namespace's swh-services, or granting the agent the credentials
// Secret the resource names (docs/security.md). A grant that never came
// fails TestDatabase instead: its probes cannot pass without the Secret.
var registrationWindow = []string{
	"no params found for policy binding",
	"is not a ServiceWithHealthchecks child registered in",
	`cannot get resource \"secrets\"`,
}

// Refusals scans the logs of the controller and the agents for requests
// the API server refused (RBAC or an admission policy). It returns the
// count of refusals of the registration window and the lines of any other:
// with the chart's RBAC and policies, the binaries must need nothing more.
func (c *Cluster) Refusals() (window int, others []string) {
	for _, p := range c.procs.Procs() {
		if !strings.Contains(p.Name, "swh-") {
			continue
		}
		data, err := os.ReadFile(p.Log)
		if err != nil {
			others = append(others, fmt.Sprintf("%s: reading its log: %v", p.Name, err))
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.Contains(line, "is forbidden") && !strings.Contains(line, "denied request") {
				continue
			}
			if slices.ContainsFunc(registrationWindow, func(s string) bool { return strings.Contains(line, s) }) {
				window++
				continue
			}
			others = append(others, p.Name+": "+line)
		}
	}
	return window, others
}
