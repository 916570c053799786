package deploy_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/swh-dev/swh/endpoints"
	"github.com/swh-dev/swh/test/harness"
)

// servicesConfigMap is the ConfigMap in which the controller registers the
// child Services of a namespace: the param of the services policy.
const servicesConfigMap = "swh-services"

// registryLabels are the labels of the controller's swh-services; the policy
// trusts no other.
func registryLabels() map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": "swh-controller"}
}

// installAgentPolicies renders the chart's admission policies for the
// release the plain manifests install (swh in swh-system), installs them
// for real (idempotent) and waits until the API server enforces them.
func installAgentPolicies(t *testing.T) {
	t.Helper()
	policies := harness.OfKind(renderChart(t, "swh", namespace, ""), "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if len(policies) != 10 {
		t.Fatalf("the chart renders %d admission policies and bindings by default, want 5 of each", len(policies))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := apply(ctx, controlPlane.Client, policies, false); err != nil {
		t.Fatalf("installing the agent's admission policies: %v", err)
	}
	// Enforced once a dry-run as an agent with no node is refused by them.
	noNode, _ := impersonating(agentSA) // the agent's user, not its pod's token
	cs, err := kubernetes.NewForConfig(noNode)
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the admission policies enforced", func() error {
		_, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"}, AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "credentials name no node") {
			return fmt.Errorf("a dry-run create as the agent without a node: %v", err)
		}
		return nil
	})
}

// agentSlice returns an EndpointSlice of svc as the agent of node writes
// it (owned by svc), with one endpoint per address on endpointNode.
func agentSlice(svc *corev1.Service, name, node, endpointNode string, addresses ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc.Name,
			discoveryv1.LabelManagedBy:   endpoints.DefaultManagedBy,
			endpoints.DefaultNodeLabel:   endpoints.NodeLabelValue(node),
		}, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID, Controller: new(true),
		}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8080))}},
	}
	for _, a := range addresses {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: new(endpointNode),
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)}})
	}
	return s
}

// service names a Service that may not exist, for slices claiming it.
func service(ns, name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
}

// TestAgentPolicyConfinesToItsNode acts with the token of an agent pod on
// node-1 and checks every write a compromised node would try is refused,
// with a message that says why, while the writes the agent makes pass.
func TestAgentPolicyConfinesToItsNode(t *testing.T) {
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := controlPlane.Client
	ns := controlPlane.CleanNamespace(t)

	// Two child Services the controller registered, a plain one it did not,
	// and node-2's slice of one of them.
	svcs := map[string]*corev1.Service{}
	for _, name := range []string{"web", "api", "plain"} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		if err := admin.Create(ctx, svc); err != nil {
			t.Fatal(err)
		}
		svcs[name] = svc
	}
	web := svcs["web"]
	// Other writers are not the policies' business, even where no Service
	// is registered: the built-in controller's slice of a plain Service.
	builtin := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain-abcde", Labels: map[string]string{
			discoveryv1.LabelServiceName: "plain", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if err := admin.Create(ctx, builtin); err != nil {
		t.Fatalf("a slice of the built-in controller, in a namespace without %s: %v", servicesConfigMap, err)
	}
	registered := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: servicesConfigMap, Labels: registryLabels()},
		Data: map[string]string{"web": string(web.UID), "api": string(svcs["api"].UID)}}
	// A tenant's own registry, in a namespace the controller does not
	// serve: it lacks the controller's label.
	tenantNS := controlPlane.CleanNamespace(t)
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: servicesConfigMap},
		Data: map[string]string{"plain": ""}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
		StringData: map[string]string{"password": "secret"}}
	theirs := agentSlice(web, "web-http-node-2", "node-2", "node-2", "10.244.2.1")
	for _, o := range []client.Object{registered, forged, secret, theirs} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	token := agentToken(ctx, t, "node-1", "swh-agent-node-1-")
	agentToken(ctx, t, "node-2", "swh-agent-node-2-") // node-2 exists, with its own agent
	agent, err := client.New(bearer(token), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	unbound, err := client.New(bearer(unboundToken(ctx, t)), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// The agent's own writes pass: create, update, delete its node's slice.
	// The services policy reads the ConfigMap through an informer: wait.
	mine := agentSlice(web, "web-http-node-1", "node-1", "node-1", "10.244.1.1")
	harness.Eventually(t, 30*time.Second, "node-1's agent creates its slice of web", func() error {
		return agent.Create(ctx, mine.DeepCopy())
	})
	if err := agent.Get(ctx, client.ObjectKeyFromObject(mine), mine); err != nil {
		t.Fatal(err)
	}
	mine.Endpoints = append(mine.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.1.2"}, NodeName: new("node-1")})
	if err := agent.Update(ctx, mine); err != nil {
		t.Fatalf("node-1's agent updating its slice: %v", err)
	}

	for _, tc := range []struct {
		name  string
		write func(t *testing.T) error
		want  string // in the refusal's message
		// or is what the other policy says when both refuse: the API
		// server stops at the first refusal, in no fixed order.
		or   string
		code int32 // the refusal's HTTP status; 403 when 0
	}{{
		name:  "create a slice labelled for node-2",
		write: func(*testing.T) error { return agent.Create(ctx, agentSlice(web, "web-http-x", "node-2", "node-1")) },
		want:  "label network.swh.dev/node is 'node-2', not 'node-1': the agent of node node-1 writes only its own node's slices",
	}, {
		name: "create a slice of node-1 with an endpoint on node-2",
		write: func(*testing.T) error {
			return agent.Create(ctx, agentSlice(web, "web-http-x", "node-1", "node-2", "10.244.2.9"))
		},
		want: "endpoint 10.244.2.9 has nodeName 'node-2': the agent of node node-1 publishes only endpoints on node node-1",
	}, {
		name: "create a slice of a plain Service",
		write: func(*testing.T) error {
			return agent.Create(ctx, agentSlice(svcs["plain"], "plain-x", "node-1", "node-1", "10.244.1.9"))
		},
		want: "Service 'plain' (label kubernetes.io/service-name) is not a ServiceWithHealthchecks child registered in ConfigMap " + ns + "/swh-services",
	}, {
		name: "create a slice of a Service listed in a tenant's unlabelled swh-services",
		write: func(t *testing.T) error {
			// Wait until the policy sees the ConfigMap (before, the
			// answer is the 422 of a missing param).
			var err error
			harness.Eventually(t, 30*time.Second, "the policy sees the ConfigMap", func() error {
				err = agent.Create(ctx, agentSlice(service(tenantNS, "plain"), "plain-x", "node-1", "node-1", "10.244.1.9"))
				if statusCode(err) == http.StatusUnprocessableEntity {
					return err
				}
				return nil
			})
			return err
		},
		want: "ConfigMap " + tenantNS + "/swh-services is not labelled app.kubernetes.io/managed-by=swh-controller",
	}, {
		name: "create a slice of kube-dns in kube-system",
		write: func(*testing.T) error {
			return agent.Create(ctx, agentSlice(service(metav1.NamespaceSystem, "kube-dns"), "kube-dns-x", "node-1", "node-1", "10.244.1.9"))
		},
		want: "no params found for policy binding with `Deny` parameterNotFoundAction",
		code: http.StatusUnprocessableEntity, // the API server's answer for a missing param
	}, {
		name: "create a slice without the managed-by label",
		write: func(*testing.T) error {
			s := agentSlice(web, "web-http-x", "node-1", "node-1", "10.244.1.9")
			delete(s.Labels, discoveryv1.LabelManagedBy)
			return agent.Create(ctx, s)
		},
		want: "label endpointslice.kubernetes.io/managed-by is '', not agent.network.swh.dev",
	}, {
		name: "create a slice posing as the built-in controller's",
		write: func(*testing.T) error {
			s := agentSlice(web, "web-x", "node-1", "node-1", "10.244.1.9")
			s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
			return agent.Create(ctx, s)
		},
		want: "label endpointslice.kubernetes.io/managed-by is 'endpointslice-controller.k8s.io', not agent.network.swh.dev",
	}, {
		name: "create a slice of web that web does not own",
		write: func(*testing.T) error {
			s := agentSlice(web, "web-http-x", "node-1", "node-1", "10.244.1.9")
			s.OwnerReferences = nil // it would outlive web, and join a later Service named web
			return agent.Create(ctx, s)
		},
		want: "no owner reference to Service " + ns + "/web with uid " + string(web.UID),
	}, {
		name: "create a slice of web owned by another Service",
		write: func(*testing.T) error {
			s := agentSlice(web, "web-http-x", "node-1", "node-1", "10.244.1.9")
			s.OwnerReferences[0].Name, s.OwnerReferences[0].UID = "api", svcs["api"].UID
			return agent.Create(ctx, s)
		},
		want: "no owner reference to Service " + ns + "/web with uid " + string(web.UID),
	}, {
		name: "add an endpoint on node-2 to its slice",
		write: func(*testing.T) error {
			s := mine.DeepCopy()
			if err := agent.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.2.9"}, NodeName: new("node-2")})
			return agent.Update(ctx, s)
		},
		want: "endpoint 10.244.2.9 has nodeName 'node-2': the agent of node node-1 publishes only endpoints on node node-1",
	}, {
		name: "take over the built-in controller's slice of a plain Service",
		write: func(*testing.T) error {
			s := builtin.DeepCopy()
			if err := agent.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			s.Labels[discoveryv1.LabelManagedBy] = endpoints.DefaultManagedBy
			s.Labels[endpoints.DefaultNodeLabel] = "node-1"
			s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.9"}, NodeName: new("node-1")}}
			return agent.Update(ctx, s)
		},
		want: "the agent of node node-1 may not update EndpointSlice " + ns + "/plain-abcde: it is labelled network.swh.dev/node='', endpointslice.kubernetes.io/managed-by='endpointslice-controller.k8s.io'",
		or:   "Service 'plain' (label kubernetes.io/service-name) is not a ServiceWithHealthchecks child registered in ConfigMap " + ns + "/swh-services",
	}, {
		name:  "delete the built-in controller's slice of a plain Service",
		write: func(*testing.T) error { return agent.Delete(ctx, builtin.DeepCopy()) },
		want:  "the agent of node node-1 may not delete EndpointSlice " + ns + "/plain-abcde",
	}, {
		name:  "relabel its slice to another Service",
		write: func(*testing.T) error { return relabel(ctx, agent, mine, discoveryv1.LabelServiceName, "api") },
		want:  "may not change label kubernetes.io/service-name from 'web' to 'api'",
		or:    "no owner reference to Service " + ns + "/api with uid " + string(svcs["api"].UID),
	}, {
		name:  "relabel its slice to node-2",
		write: func(*testing.T) error { return relabel(ctx, agent, mine, endpoints.DefaultNodeLabel, "node-2") },
		want:  "may not change label network.swh.dev/node from 'node-1' to 'node-2'",
	}, {
		name: "update node-2's slice",
		write: func(*testing.T) error {
			s := theirs.DeepCopy()
			s.Endpoints[0].Conditions.Ready = new(false)
			return agent.Update(ctx, s)
		},
		want: "the agent of node node-1 may not update EndpointSlice " + ns + "/web-http-node-2: it is labelled network.swh.dev/node='node-2'",
	}, {
		name:  "delete node-2's slice",
		write: func(*testing.T) error { return agent.Delete(ctx, theirs.DeepCopy()) },
		want:  "the agent of node node-1 may not delete EndpointSlice " + ns + "/web-http-node-2: it is labelled network.swh.dev/node='node-2'",
	}, {
		name: "write with a token not bound to a pod",
		write: func(*testing.T) error {
			return unbound.Create(ctx, agentSlice(web, "web-http-x", "node-1", "node-1", "10.244.1.9"))
		},
		want: "the agent's credentials name no node (no authentication.kubernetes.io/node-name in its user info)",
	}, {
		name:  "read a Secret no probe of its node references",
		write: func(*testing.T) error { return agent.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}) },
		want:  `cannot get resource "secrets" in API group "" in the namespace "` + ns + `"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(t)
			if want := cmp.Or(tc.code, http.StatusForbidden); statusCode(err) != want {
				t.Fatalf("not refused with %d (%d %s): %v", want, statusCode(err), apierrors.ReasonForError(err), err)
			}
			if !strings.Contains(err.Error(), tc.want) && (tc.or == "" || !strings.Contains(err.Error(), tc.or)) {
				t.Errorf("refused with\n\t%v\nwhich does not say\n\t%s", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}

	// Nothing above changed node-2's slice; the agent deletes its own.
	if err := admin.Get(ctx, client.ObjectKeyFromObject(theirs), &discoveryv1.EndpointSlice{}); err != nil {
		t.Errorf("node-2's slice: %v", err)
	}
	if err := agent.Delete(ctx, mine); err != nil {
		t.Errorf("node-1's agent deleting its slice: %v", err)
	}
}

// relabel sets one label of the agent's slice s (a copy) and updates it.
func relabel(ctx context.Context, c client.Client, s *discoveryv1.EndpointSlice, key, value string) error {
	cp := s.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp); err != nil {
		return fmt.Errorf("reading the slice back: %w", err)
	}
	cp.Labels[key] = value
	return c.Update(ctx, cp)
}

// unboundToken returns a token of the agent's ServiceAccount bound to no
// pod, as a legacy Secret-based token or a stolen `kubectl create token`
// would be.
func unboundToken(ctx context.Context, t *testing.T) string {
	t.Helper()
	token, err := harness.ServiceAccountToken(ctx, controlPlane.Client, namespace, agentSA, nil, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// statusCode is the HTTP status of an API error, 0 for another error.
func statusCode(err error) int32 {
	if status, ok := err.(apierrors.APIStatus); ok || errors.As(err, &status) {
		return status.Status().Code
	}
	return 0
}

// TestAgentPolicyLongNodeName checks the policies against a node whose name
// is too long for a label value: the agent labels its slices with a prefix
// of the name and a digest the policy cannot compute, so the policy checks
// the prefix and the digest's form, and nodeName pins the node.
func TestAgentPolicyLongNodeName(t *testing.T) {
	installRBAC(t)
	installAgentPolicies(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := controlPlane.CleanNamespace(t)
	// 46 characters end with a dot, which the label value drops.
	node := "ip-10-244-3-1." + strings.Repeat("x", 31) + ".zone-a.compute.example.internal"
	other := "ip-10-244-3-2." + strings.Repeat("x", 31) + ".zone-a.compute.example.internal"
	if v := endpoints.NodeLabelValue(node); v != "ip-10-244-3-1."+strings.Repeat("x", 31)+"-"+v[len(v)-16:] {
		t.Fatalf("node label value %q: want a digested one", endpoints.NodeLabelValue(node))
	}
	// Its hostname label would be too long: not harness.CreateNode.
	longNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	t.Cleanup(func() { _ = controlPlane.Client.Delete(context.Background(), longNode) })
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	for _, o := range []client.Object{longNode, web} {
		if err := controlPlane.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := controlPlane.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: servicesConfigMap,
		Labels: registryLabels()}, Data: map[string]string{"web": string(web.UID)}}); err != nil {
		t.Fatal(err)
	}
	agent, err := client.New(bearer(agentToken(ctx, t, node, "swh-agent-long-")), client.Options{Scheme: controlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "the agent of a long-named node creates its slice", func() error {
		return agent.Create(ctx, agentSlice(web, "web-http-long", node, node, "10.244.3.1"))
	})
	for _, tc := range []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		want  string
	}{{
		name:  "another long-named node's label",
		slice: agentSlice(web, "web-http-other", other, node, "10.244.3.9"),
		want:  "label network.swh.dev/node is '" + endpoints.NodeLabelValue(other) + "', not 'ip-10-244-3-1." + strings.Repeat("x", 31) + "-<16 hex digits>'",
	}, {
		name:  "its own label, an endpoint on another node",
		slice: agentSlice(web, "web-http-other", node, other, "10.244.3.9"),
		want:  "endpoint 10.244.3.9 has nodeName '" + other + "'",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := agent.Create(ctx, tc.slice)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refused with %v, want 403 saying %s", err, tc.want)
			}
		})
	}
}
