package publisher

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// largestCredentials is a Secret whose every key the probes use is at its
// bound: what a tenant who wants to exhaust the agent's memory names.
func largestCredentials(context.Context) (map[string][]byte, error) {
	return map[string][]byte{
		"user": bytes.Repeat([]byte("u"), 1<<10), "password": bytes.Repeat([]byte("p"), 1<<10), "tlsMode": bytes.Repeat([]byte("t"), 1<<10),
		"caCert": bytes.Repeat([]byte("a"), 64<<10), "clientCert": bytes.Repeat([]byte("c"), 64<<10), "clientKey": bytes.Repeat([]byte("k"), 64<<10),
	}, nil
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSecretCacheMemoryIsBounded names 400 Secrets of 195 KiB each (76 MiB,
// as 44 resources x 32 probes of one tenant could name 1,408): the cache
// holds no more than its bounds, in one namespace or spread over many.
func TestSecretCacheMemoryIsBounded(t *testing.T) {
	const secrets = 400
	for _, tc := range []struct {
		name       string
		namespaces int
		bound      uint64
	}{
		{"in one namespace", 1, 8 << 20},
		{"over forty namespaces", 40, 32 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &secretReader{}
			r.set(largestCredentials)
			c := newSecretCache(r, time.Hour, secretBounds{}, logr.Discard(), nil)
			before := heapInUse()
			failed := 0
			for i := range secrets {
				key := types.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i%tc.namespaces), Name: fmt.Sprintf("db-%d", i)}
				_, err := c.get(context.Background(), key, testOwner)
				if err == nil {
					continue
				}
				failed++
				if !strings.Contains(err.Error(), "(--secret-cache-namespace-mib)") && !strings.Contains(err.Error(), "(--secret-cache-mib)") {
					t.Fatalf("Secret %s refused with %q, which names no bound", key, err)
				}
			}
			held := heapInUse() - before
			runtime.KeepAlive(c)
			t.Logf("%d Secrets of 195 KiB named: the cache holds %.1f MiB, %d refused", secrets, float64(held)/(1<<20), failed)
			if held > tc.bound+(2<<20) {
				t.Errorf("the cache holds %.1f MiB, over its %d MiB bound", float64(held)/(1<<20), tc.bound>>20)
			}
		})
	}
}

// TestSecretCacheBoundsSayWhy: past a bound, the probes of a Secret fail
// with reason secret and a message naming the bound; one namespace full
// leaves the others their room; room freed by idle Secrets is used again.
func TestSecretCacheBoundsSayWhy(t *testing.T) {
	small := map[string][]byte{"user": []byte("u"), "password": []byte("pw")}
	// What each Secret held costs: their names are all as long.
	d1 := types.NamespacedName{Namespace: "ns-a", Name: "d1"}
	heldCost := secretCost(d1, keptOf(d1, small))
	ctx := context.Background()
	tests := []struct {
		name   string
		bounds secretBounds
		// held are Secrets (in ns-a unless said) read before the one
		// checked, ns-a/big, whose data is largestCredentials.
		held []types.NamespacedName
		want string
	}{{
		name:   "a Secret larger than its namespace's room",
		bounds: secretBounds{Total: 1 << 20, Namespace: 100 << 10},
		want:   "Secret ns-a/big not kept: its 197 KiB would exceed the agent's bound: the Secrets of namespace ns-a take 2 KiB of the agent's 100 KiB per namespace (--secret-cache-namespace-mib)",
	}, {
		name:   "a namespace full of Secrets",
		bounds: secretBounds{Total: 1 << 20, Namespace: 2 * heldCost},
		held:   []types.NamespacedName{{Namespace: "ns-a", Name: "d1"}, {Namespace: "ns-a", Name: "d2"}},
		want:   "Secret ns-a/big not read: the agent's credentials cache is full: the Secrets of namespace ns-a take 3 KiB of the agent's 3 KiB per namespace (--secret-cache-namespace-mib)",
	}, {
		name:   "every namespace together full",
		bounds: secretBounds{Total: 2 * heldCost, Namespace: 2 * heldCost},
		held:   []types.NamespacedName{{Namespace: "ns-b", Name: "d1"}, {Namespace: "ns-c", Name: "d2"}},
		want:   "Secret ns-a/big not read: the agent's credentials cache is full: the agent's credentials Secrets take 3 KiB of its 3 KiB (--secret-cache-mib)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &secretReader{}
			c := newSecretCache(r, time.Millisecond, tt.bounds, logr.Discard(), nil)
			r.set(returns(small, nil))
			for _, key := range tt.held {
				if _, err := c.get(ctx, key, testOwner); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
			}
			r.set(largestCredentials)
			f := newProberFactory(c)
			spec := &swhv1alpha1.PostgreSQLProbe{AuthSecretName: "big", TLSMode: swhv1alpha1.PostgreSQLTLSDisable}
			_, _, failed := f.postgreSQLConfig(ctx, "ns-a", testOwner, spec)
			if failed == nil || failed.Reason != ReasonSecret || !strings.HasPrefix(failed.Message, tt.want) {
				t.Fatalf("got %+v, want a failure %s saying %q", failed, ReasonSecret, tt.want)
			}
			t.Logf("%s", failed.Message)
			// Another namespace is not refused for ns-a's use.
			if tt.bounds.Total > 2*heldCost {
				r.set(returns(small, nil))
				if _, err := c.get(ctx, types.NamespacedName{Namespace: "ns-z", Name: "db"}, testOwner); err != nil {
					t.Errorf("another namespace: %v", err)
				}
			}
			if c.usage.total > tt.bounds.Total {
				t.Errorf("the cache counts %d bytes, over its %d", c.usage.total, tt.bounds.Total)
			}
		})
	}

	// Idle Secrets make room again.
	r := &secretReader{}
	r.set(returns(small, nil))
	c := newSecretCache(r, time.Millisecond, secretBounds{Total: 2 * heldCost, Namespace: 2 * heldCost}, logr.Discard(), nil)
	// Long enough that d1 and d2 are not idle yet when d3 asks, even on a
	// loaded machine under -race.
	c.idle = 2 * time.Second
	for _, name := range []string{"d1", "d2"} {
		if _, err := c.get(ctx, types.NamespacedName{Namespace: "ns-a", Name: name}, testOwner); err != nil {
			t.Fatal(err)
		}
	}
	third := types.NamespacedName{Namespace: "ns-a", Name: "d3"}
	if _, err := c.get(ctx, third, testOwner); err == nil {
		t.Fatal("a third Secret fits in the room of two")
	}
	time.Sleep(c.idle + 100*time.Millisecond)
	if _, err := c.get(ctx, third, testOwner); err != nil {
		t.Errorf("once the others are idle: %v", err)
	}
}
