package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// lease returns a Lease of ns, labelled as an exclusive port's when
// exclusiveFor is set, held by holder ("" for none).
func lease(ns, name, exclusiveFor, holder string) *coordinationv1.Lease {
	duration := int32(15)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &duration}}
	if exclusiveFor != "" {
		l.Labels = map[string]string{swhv1alpha1.LabelExclusiveLease: exclusiveFor}
	}
	if holder != "" {
		l.Spec.HolderIdentity = &holder
	}
	return l
}

// TestLeasePolicies acts with the token of an agent pod on node-1 and as
// the controller, both granted every Lease by RBAC, and checks that the
// admission policies hold the agent to taking a free exclusive port's
// Lease, keeping and freeing its own, and the controller to those Leases
// and its own leader election's; with messages that say why.
func TestLeasePolicies(t *testing.T) {
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := controlPlane.CleanNamespace(t)
	agent, err := client.New(bearer(agentToken(ctx, t, "node-1", "swh-agent-node-1-")), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	controllerCfg, _ := impersonating(controllerSA)
	controller, err := client.New(controllerCfg, client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*coordinationv1.Lease{
		lease(ns, "swh.db.write", "db", ""),
		lease(ns, "swh.db.other", "db", "node-2"),
		lease(ns, "kube-controller-manager", "", "master-1"),
	} {
		if err := controlPlane.Client.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) *coordinationv1.Lease {
		t.Helper()
		l := &coordinationv1.Lease{}
		if err := controlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	hold := func(name, node string) error {
		l := get(name)
		l.Spec.HolderIdentity = &node
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		return agent.Update(ctx, l, client.DryRunAll)
	}
	// Enforced once the agent's take of another node's Lease is refused.
	harness.Eventually(t, 30*time.Second, "the Lease policies enforced", func() error {
		if err := hold("swh.db.other", "node-1"); statusCode(err) != http.StatusForbidden {
			return fmt.Errorf("node-1's agent taking node-2's Lease: not refused with 403: %v", err)
		}
		if err := controller.Update(ctx, get("kube-controller-manager"), client.DryRunAll); statusCode(err) != http.StatusForbidden {
			return fmt.Errorf("the controller updating kube-controller-manager's Lease: not refused with 403: %v", err)
		}
		return nil
	})

	for _, tc := range []struct {
		name  string
		write func() error
		want  string // "" when the write must pass
	}{{
		name:  "agent takes a free exclusive Lease",
		write: func() error { return hold("swh.db.write", "node-1") },
	}, {
		name: "agent holds it for a pod, then frees it",
		write: func() error {
			l := get("swh.db.write")
			node := "node-1"
			l.Spec.HolderIdentity = &node
			l.Annotations = map[string]string{swhv1alpha1.AnnotationHolderPod: "db-0"}
			if err := agent.Update(ctx, l); err != nil {
				return err
			}
			l.Spec.HolderIdentity = nil
			delete(l.Annotations, swhv1alpha1.AnnotationHolderPod)
			return agent.Update(ctx, l)
		},
	}, {
		name:  "agent takes another node's Lease",
		write: func() error { return hold("swh.db.other", "node-1") },
		want:  "the agent of node node-1 may not update Lease " + ns + "/swh.db.other: node 'node-2' holds it",
	}, {
		name:  "agent makes another node the holder",
		write: func() error { return hold("swh.db.write", "node-2") },
		want:  "may not make node 'node-2' the holder of Lease " + ns + "/swh.db.write",
	}, {
		name:  "agent updates a Lease that is not an exclusive port's",
		write: func() error { return hold("kube-controller-manager", "node-1") },
		want:  "it is not labelled network.swh.dev/exclusive-for",
	}, {
		name: "agent lengthens its Lease",
		write: func() error {
			l := get("swh.db.write")
			longer := int32(3600)
			l.Spec.LeaseDurationSeconds = &longer
			return agent.Update(ctx, l, client.DryRunAll)
		},
		want: "may not change spec.leaseDurationSeconds of Lease",
	}, {
		name: "agent relabels a Lease",
		write: func() error {
			l := get("swh.db.write")
			l.Labels[swhv1alpha1.LabelExclusiveLease] = "other"
			return agent.Update(ctx, l, client.DryRunAll)
		},
		want: "may not change labels of Lease",
	}, {
		name:  "agent creates a Lease",
		write: func() error { return agent.Create(ctx, lease(ns, "swh.db.new", "db", "node-1"), client.DryRunAll) },
		want:  "forbidden", // RBAC: update only
	}, {
		name:  "controller creates an exclusive port's Lease",
		write: func() error { return controller.Create(ctx, lease(ns, "swh.db.new", "db", ""), client.DryRunAll) },
	}, {
		name: "controller frees another node's exclusive Lease",
		write: func() error {
			l := get("swh.db.other")
			l.Spec.HolderIdentity = nil
			return controller.Update(ctx, l, client.DryRunAll)
		},
	}, {
		name:  "controller creates another Lease",
		write: func() error { return controller.Create(ctx, lease(ns, "app-leader", "", "x"), client.DryRunAll) },
		want:  "the controller may not create Lease " + ns + "/app-leader",
	}, {
		name: "controller labels a Lease to take it",
		write: func() error {
			l := get("kube-controller-manager")
			l.Labels = map[string]string{swhv1alpha1.LabelExclusiveLease: "db"}
			return controller.Update(ctx, l, client.DryRunAll)
		},
		want: "the controller may not update Lease " + ns + "/kube-controller-manager",
	}, {
		name:  "controller deletes another Lease",
		write: func() error { return controller.Delete(ctx, get("kube-controller-manager"), client.DryRunAll) },
		want:  "the controller may not delete Lease",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatal("allowed")
			case tc.want != "" && (statusCode(err) != http.StatusForbidden || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a 403 saying %q", err, tc.want)
			}
		})
	}
}
