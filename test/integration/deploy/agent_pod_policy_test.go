package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// patchStatus sends a strategic merge patch of pods/status, as the agent
// writes its readiness gate condition.
func patchStatus(ctx context.Context, c client.Client, ns, name string, patch map[string]any, opts ...client.SubResourcePatchOption) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = ns, name
	return c.Status().Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, data), opts...)
}

// conditionPatch sets one pod condition.
func conditionPatch(condType, status string) map[string]any {
	return map[string]any{"status": map[string]any{"conditions": []any{map[string]any{
		"type": condType, "status": status, "reason": "Test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
	}}}}
}

// TestAgentPolicyPodConditions acts with the token of an agent pod on
// node-1 and checks that it may write our readiness gate condition on its
// own node's pods, and nothing else of any pod's status.
func TestAgentPolicyPodConditions(t *testing.T) {
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := controlPlane.CleanNamespace(t)
	agent, err := client.New(bearer(agentToken(ctx, t, "node-1", "swh-agent-node-1-")), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	agentToken(ctx, t, "node-2", "swh-agent-node-2-")
	unbound, err := client.New(bearer(unboundToken(ctx, t)), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	for name, node := range map[string]string{"mine": "node-1", "theirs": "node-2"} {
		if _, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: ns, Name: name, Node: node, IPs: []string{"10.244.1.7"}}); err != nil {
			t.Fatal(err)
		}
	}
	gate := swhv1alpha1.ReadinessGateConditionType("web")

	// The agent's own write passes: our condition, its node's pod, with
	// the resourceVersion as the agent sends it. Then the policy is
	// enforced once a write to node-2's pod is refused: a dry run, since
	// the API server may let the first tries through before its policy
	// informers have the new policy, and a real write would change the pod.
	if err := patchStatus(ctx, agent, ns, "mine", conditionPatch(gate, "False")); err != nil {
		t.Fatalf("node-1's agent writing %s on its pod: %v", gate, err)
	}
	harness.Eventually(t, 30*time.Second, "the pod conditions policy enforced", func() error {
		err := patchStatus(ctx, agent, ns, "theirs", conditionPatch(gate, "True"), client.DryRunAll)
		if statusCode(err) != http.StatusForbidden {
			return fmt.Errorf("node-1's agent writing node-2's pod: not refused with 403: %v", err)
		}
		return nil
	})
	mine := &corev1.Pod{}
	if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mine"}, mine); err != nil {
		t.Fatal(err)
	}
	withRV := conditionPatch(gate, "True")
	withRV["metadata"] = map[string]any{"resourceVersion": mine.ResourceVersion}
	if err := patchStatus(ctx, agent, ns, "mine", withRV); err != nil {
		t.Fatalf("node-1's agent setting %s True on its pod: %v", gate, err)
	}

	for _, tc := range []struct {
		name  string
		write func() error
		want  string
	}{{
		name:  "our condition on node-2's pod",
		write: func() error { return patchStatus(ctx, agent, ns, "theirs", conditionPatch(gate, "True")) },
		want:  "the agent of node node-1 may not write the status of pod " + ns + "/theirs: it is on node 'node-2'",
	}, {
		name: "kubelet's Ready condition of its own node's pod",
		write: func() error {
			return patchStatus(ctx, agent, ns, "mine", conditionPatch(string(corev1.PodReady), "False"))
		},
		want: "pod " + ns + "/mine: the agent of node node-1 may not change condition Ready: it writes only the conditions probes.network.swh.dev/*",
	}, {
		name:  "a condition of someone else's",
		write: func() error { return patchStatus(ctx, agent, ns, "mine", conditionPatch("example.com/ready", "True")) },
		want:  "may not change condition example.com/ready",
	}, {
		name: "our condition and kubelet's ContainersReady at once",
		write: func() error {
			p := conditionPatch(gate, "False")
			p["status"].(map[string]any)["conditions"] = append(p["status"].(map[string]any)["conditions"].([]any),
				map[string]any{"type": corev1.ContainersReady, "status": "False"})
			return patchStatus(ctx, agent, ns, "mine", p)
		},
		want: "may not change condition ContainersReady",
	}, {
		name: "another status field",
		write: func() error {
			return patchStatus(ctx, agent, ns, "mine", map[string]any{"status": map[string]any{"message": "drained"}})
		},
		want: "pod " + ns + "/mine: the agent of node node-1 may not change status.message",
	}, {
		name: "a label, through pods/status",
		write: func() error {
			return patchStatus(ctx, agent, ns, "mine", map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "api"}}})
		},
		want: "may not change metadata.labels",
	}, {
		name:  "with a token not bound to a pod",
		write: func() error { return patchStatus(ctx, unbound, ns, "mine", conditionPatch(gate, "True")) },
		want:  "the agent's credentials name no node",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("answered %v, want 403 saying %s", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}

	// Nothing above changed the pods but our condition.
	for _, name := range []string{"mine", "theirs"} {
		p := &corev1.Pod{}
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, c := range p.Status.Conditions {
			got[string(c.Type)] = string(c.Status)
		}
		want := map[string]string{"PodScheduled": "True", "Initialized": "True", "ContainersReady": "True", "Ready": "True"}
		if name == "mine" {
			want[gate] = "True"
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || p.Status.Message != "" || len(p.Labels) != 0 {
			t.Errorf("pod %s: conditions %v, message %q, labels %v; want %v and nothing else", name, got, p.Status.Message, p.Labels, want)
		}
	}
}
