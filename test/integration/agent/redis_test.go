package agent_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/test/harness"
)

// redisProbe is a Redis probe of role on 6379 that logs in with the
// password of Secret secret, sent in clear (the servers have no TLS).
func redisProbe(role swhv1alpha1.RedisRole, secret string) swhv1alpha1.Probe {
	return swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeRedis, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 2,
		Redis: &swhv1alpha1.RedisProbe{TargetPort: intstr.FromString("redis"), Role: role, AuthSecretName: secret, InsecureAllowCleartextPassword: true}}
}

// TestRedisWriteFollowsTheMaster: real redis-server master and replica
// on pod addresses of two nodes; redis-write (role Master) publishes the
// master only, redis-read (role Replica) the replica, and a failover
// (the replica promoted, the old master made its replica, as Sentinel
// does) moves both within period × (failureThreshold + successThreshold)
// + 1 s. A probe without the password fails with reason auth.
func TestRedisWriteFollowsTheMaster(t *testing.T) {
	startAgent(t, nodeA)
	startAgent(t, nodeB)
	ns := namespace(t)
	ctx := context.Background()
	const password = "cache-secret"

	ips := harness.PodIPs(t, 2)
	master := harness.StartTestRedis(t, harness.RedisOptions{Addr: ips[0], Port: 6379, Password: password})
	replica := master.StartTestReplica(t, harness.RedisOptions{Addr: ips[1], Port: 6379, Password: password})
	for i, name := range []string{"cache-a", "cache-b"} {
		_, err := harness.CreatePod(ctx, controlPlane.Client, harness.PodOptions{Namespace: ns, Name: name, Node: []string{nodeA, nodeB}[i],
			Labels: map[string]string{"app": "cache"}, IPs: []string{ips[i]}, Ports: []corev1.ContainerPort{{Name: "redis", ContainerPort: 6379}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache-credentials"}, StringData: map[string]string{"password": password}}
	if err := controlPlane.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ports := []swhv1alpha1.ServicePort{{Name: "redis", Port: 6379, TargetPort: intstr.FromString("redis")}}
	for _, r := range []*swhv1alpha1.ServiceWithHealthchecks{
		resource(ns, "redis-write", ports, redisProbe(swhv1alpha1.RedisRoleMaster, "cache-credentials")),
		resource(ns, "redis-read", ports, redisProbe(swhv1alpha1.RedisRoleReplica, "cache-credentials")),
		resource(ns, "redis-nopass", ports, redisProbe(swhv1alpha1.RedisRoleAny, "")),
	} {
		r.Spec.Selector = map[string]string{"app": "cache"}
		if err := controlPlane.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	waitPortState(t, ns, "redis-write", "redis", "cache-a", "ready")
	waitPortState(t, ns, "redis-write", "redis", "cache-b", "not ready: wrong-role")
	waitPortState(t, ns, "redis-read", "redis", "cache-b", "ready")
	waitPortState(t, ns, "redis-read", "redis", "cache-a", "not ready: wrong-role")
	waitPortState(t, ns, "redis-nopass", "redis", "cache-a", "not ready: auth")

	// The failover.
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := master.ReplicaOf(ctx, ips[1], 6379); err != nil {
		t.Fatal(err)
	}
	failover := time.Now()
	bound := 1*time.Second*(2+1) + time.Second
	harness.Eventually(t, 20*time.Second, "redis-write on the new master only", func() error {
		for pod, want := range map[string]string{"cache-b": "ready", "cache-a": "not ready: wrong-role"} {
			got, err := portState(ctx, ns, "redis-write", "redis", pod)
			if err != nil {
				return err
			}
			if got != want {
				return &stateError{pod: pod, got: got, want: want}
			}
		}
		return nil
	})
	moved := time.Since(failover)
	t.Logf("redis-write moved %v after the failover (bound %v)", moved.Round(time.Millisecond), bound)
	if moved > bound {
		t.Errorf("redis-write moved %v after the failover, more than period × (failureThreshold + successThreshold) + 1 s = %v", moved, bound)
	}
	if err := master.WaitLinkUp(ctx); err != nil {
		t.Fatal(err)
	}
	waitPortState(t, ns, "redis-read", "redis", "cache-a", "ready")
	waitPortState(t, ns, "redis-read", "redis", "cache-b", "not ready: wrong-role")
}

type stateError struct{ pod, got, want string }

func (e *stateError) Error() string { return e.pod + " is " + e.got + ", want " + e.want }
