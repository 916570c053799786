package deploy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// TestAgentPolicySliceMetadata acts with the token of an agent pod on
// node-1: a slice must go with its Service, so the agent may set no
// finalizer and no owner reference but the one to its registered
// Service, and on an update may change no metadata but its own labels and
// annotation. Its endpoints may only name pods of the slice's namespace.
// The writes the agent makes pass.
func TestAgentPolicySliceMetadata(t *testing.T) {
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := controlPlane.Client
	ns := controlPlane.CleanNamespace(t)
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if err := admin.Create(ctx, web); err != nil {
		t.Fatal(err)
	}
	registry := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: servicesConfigMap, Labels: registryLabels()},
		Data: map[string]string{"web": string(web.UID)}}
	if err := admin.Create(ctx, registry); err != nil {
		t.Fatal(err)
	}
	agent, err := client.New(bearer(agentToken(ctx, t, "node-1", "swh-agent-node-1-")), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := admin.Get(ctx, client.ObjectKey{Name: "node-1"}, node); err != nil {
		t.Fatal(err)
	}
	nodeOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}

	// The agent's own slice, as it creates it; a label another admission
	// step might add on create does not stop it.
	mine := agentSlice(web, "web-http-node-1", "node-1", "node-1", "10.244.1.1")
	mine.Labels["added-by-a-mutating-webhook"] = "yes"
	harness.Eventually(t, 30*time.Second, "node-1's agent creates its slice of web", func() error {
		return agent.Create(ctx, mine.DeepCopy())
	})
	// An administrator's finalizer, which the agent's updates keep.
	update(ctx, t, admin, mine, func(s *discoveryv1.EndpointSlice) { s.Finalizers = []string{"example.com/backup"} })
	t.Cleanup(func() {
		update(context.Background(), t, admin, mine, func(s *discoveryv1.EndpointSlice) { s.Finalizers = nil })
	})
	// What the agent changes on its slices: endpoints, its annotations,
	// the labels it copies from the Service.
	if err := tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) {
		s.Endpoints[0].Conditions.Ready = new(false)
		s.Annotations = map[string]string{swhv1alpha1.AnnotationEndpointReasons: `{"10.244.1.1":"probe failed"}`,
			corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339)}
		s.Labels[corev1.IsHeadlessService] = ""
	}); err != nil {
		t.Fatalf("the agent's own update: %v", err)
	}

	withEndpoint := func(name string, ref corev1.ObjectReference) *discoveryv1.EndpointSlice {
		s := agentSlice(web, name, "node-1", "node-1", "10.244.1.9")
		s.Endpoints[0].TargetRef = &ref
		return s
	}
	for _, tc := range []struct {
		name  string
		write func() error
		want  string
		or    string // what the other policy says when both refuse
	}{{
		name: "create a slice with a finalizer",
		write: func() error {
			s := agentSlice(web, "web-http-x1", "node-1", "node-1", "10.244.1.9")
			s.Finalizers = []string{"example.com/keep"}
			return agent.Create(ctx, s)
		},
		want: "EndpointSlice " + ns + "/web-http-x1: the agent of node node-1 may not set finalizers (example.com/keep): a slice goes with its Service",
	}, {
		name: "create a slice also owned by its Node",
		write: func() error {
			s := agentSlice(web, "web-http-x2", "node-1", "node-1", "10.244.1.9")
			s.OwnerReferences = append(s.OwnerReferences, nodeOwner)
			return agent.Create(ctx, s)
		},
		want: "EndpointSlice " + ns + "/web-http-x2: owner reference to Node node-1: the agent of node 'node-1' may set only the owner reference to Service " + ns + "/web",
	}, {
		name: "add a finalizer to its slice",
		write: func() error {
			return tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) { s.Finalizers = append(s.Finalizers, "example.com/keep") })
		},
		want: "EndpointSlice " + ns + "/web-http-node-1: the agent of node node-1 may not change finalizers from [example.com/backup] to [example.com/backup, example.com/keep]",
	}, {
		name: "remove the administrator's finalizer",
		write: func() error {
			return tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) { s.Finalizers = nil })
		},
		want: "may not change finalizers from [example.com/backup] to []",
	}, {
		name: "add an owner reference to its Node and rewrite an address",
		write: func() error {
			return tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) {
				s.OwnerReferences = append(s.OwnerReferences, nodeOwner)
				s.Endpoints[0].Addresses = []string{"10.244.1.66"}
			})
		},
		want: "EndpointSlice " + ns + "/web-http-node-1: owner reference to Node node-1: the agent of node 'node-1' may set only the owner reference to Service " + ns + "/web",
	}, {
		name: "change a label not its own",
		write: func() error {
			return tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) { s.Labels["added-by-a-mutating-webhook"] = "no" })
		},
		want: "EndpointSlice " + ns + "/web-http-node-1: the agent of node node-1 may not change label added-by-a-mutating-webhook",
	}, {
		name: "add an annotation not its own",
		write: func() error {
			return tryUpdate(ctx, agent, mine, func(s *discoveryv1.EndpointSlice) { s.Annotations["example.com/note"] = "x" })
		},
		want: "EndpointSlice " + ns + "/web-http-node-1: the agent of node node-1 may not change annotation example.com/note",
	}, {
		name: "name a pod of another namespace",
		write: func() error {
			return agent.Create(ctx, withEndpoint("web-http-x3", corev1.ObjectReference{Kind: "Pod", Namespace: "kube-system", Name: "coredns-0"}))
		},
		want: "EndpointSlice " + ns + "/web-http-x3: endpoint 10.244.1.9 names Pod kube-system/coredns-0: the agent of node node-1 publishes only pods of namespace " + ns,
	}, {
		name: "name something other than a pod",
		write: func() error {
			return agent.Create(ctx, withEndpoint("web-http-x4", corev1.ObjectReference{Kind: "Node", Name: "node-2"}))
		},
		want: "EndpointSlice " + ns + "/web-http-x4: endpoint 10.244.1.9 names Node /node-2: the agent of node node-1 publishes only pods of namespace " + ns,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if statusCode(err) != http.StatusForbidden {
				t.Fatalf("not refused with 403 (%d): %v", statusCode(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) && (tc.or == "" || !strings.Contains(err.Error(), tc.or)) {
				t.Errorf("refused with\n\t%v\nwhich does not say\n\t%s", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
	// A pod of its namespace passes (which node the pod is on, CEL cannot
	// tell: docs/security.md).
	if err := agent.Create(ctx, withEndpoint("web-http-x5", corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-0"})); err != nil {
		t.Errorf("an endpoint naming a pod of the slice's namespace: %v", err)
	}
}

// tryUpdate reads s back (a copy) and writes it with change applied.
func tryUpdate(ctx context.Context, c client.Client, s *discoveryv1.EndpointSlice, change func(*discoveryv1.EndpointSlice)) error {
	cp := s.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return err
	}
	change(cp)
	return c.Update(ctx, cp)
}

// update is tryUpdate that fails the test on an error.
func update(ctx context.Context, t *testing.T, c client.Client, s *discoveryv1.EndpointSlice, change func(*discoveryv1.EndpointSlice)) {
	t.Helper()
	if err := tryUpdate(ctx, c, s, change); err != nil {
		t.Fatal(err)
	}
}
