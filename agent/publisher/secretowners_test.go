package publisher

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// testOwner is the resource whose probes ask in the tests of one owner.
const testOwner = types.UID("uid-of-the-resource")

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, dbName, errors.New("no RBAC policy matched"))
}

// TestSecretCacheDropsCredentialsOnForbidden: a Secret the agent may no
// longer read (its grant went with its namespace) is not kept: the probes
// fail instead of sending the previous owner's credentials on.
func TestSecretCacheDropsCredentialsOnForbidden(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	r := &secretReader{}
	r.set(returns(testCredentials(), nil))
	c := newSecretCache(r, 10*time.Millisecond, secretBounds{}, logr.Discard(), nil)
	ctx := context.Background()
	if _, err := c.get(ctx, dbKey, testOwner); err != nil {
		t.Fatal(err)
	}
	r.set(returns(nil, forbidden()))
	before := r.gets.Load()
	waitFor(t, func() bool { _, _ = c.get(ctx, dbKey, testOwner); return r.gets.Load() > before+1 })
	data, err := c.get(ctx, dbKey, testOwner)
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("after the Secret became forbidden, a probe got %v, %v; want the 403", data, err)
	}
}

// TestSecretCacheServesOnlyVouchedOwners: credentials read for one
// resource are not handed to another resource naming a Secret of the same
// name (a namespace deleted and created again) until a read that began
// after the newcomer asked says what the Secret holds now.
func TestSecretCacheServesOnlyVouchedOwners(t *testing.T) {
	const oldOwner, newOwner = types.UID("uid-old"), types.UID("uid-new")
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	tenantCredentials := map[string][]byte{"user": []byte("tenant-2"), "password": []byte("theirs")}
	for _, tc := range []struct {
		name string
		// now is what the API server answers once the namespace is
		// created again.
		now      func(context.Context) (map[string][]byte, error)
		wantUser string // "" for an error
		wantErr  string
	}{
		{"the grant is gone with the old namespace", returns(nil, forbidden()), "", "forbidden"},
		{"no Secret of that name yet", returns(nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, dbName)), "", "not found"},
		{"the API server fails", returns(nil, apierrors.NewInternalError(errors.New("etcd is sad"))), "", "etcd is sad"},
		{"the new tenant's own Secret", returns(tenantCredentials, nil), "tenant-2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &secretReader{}
			r.set(returns(testCredentials(), nil))
			c := newSecretCache(r, time.Hour, secretBounds{}, logr.Discard(), nil)
			ctx := context.Background()
			if data, err := c.get(ctx, dbKey, oldOwner); err != nil || string(data.values["user"]) != "probe" {
				t.Fatalf("the first owner: %v, %v", data, err)
			}
			r.set(tc.now)
			data, err := c.get(ctx, dbKey, newOwner)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("the new owner got %v, %v; want an error saying %q", data, err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || string(data.values["user"]) != tc.wantUser):
				t.Fatalf("the new owner got %v, %v; want user %s", data, err, tc.wantUser)
			}
			if n := r.gets.Load(); n != 2 {
				t.Errorf("%d reads, want 2: one per owner, however long the reuse period", n)
			}
			// A second ask of the new owner within the reuse period reads
			// nothing more and gets the same answer.
			again, err2 := c.get(ctx, dbKey, newOwner)
			if (err2 == nil) != (err == nil) || (again != nil && string(again.values["user"]) != tc.wantUser) || r.gets.Load() != 2 {
				t.Errorf("asked again: %v, %v after %d reads", again, err2, r.gets.Load())
			}
		})
	}
}

// TestSecretCacheNewOwnerWaitsForALaterRead: a read in flight when a new
// owner asks may answer with what the Secret held before the owner's
// namespace was created: the owner waits for the next one.
func TestSecretCacheNewOwnerWaitsForALaterRead(t *testing.T) {
	const oldOwner, newOwner = types.UID("uid-old"), types.UID("uid-new")
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	r := &secretReader{}
	release := make(chan struct{})
	var later atomic.Bool
	r.set(func(context.Context) (map[string][]byte, error) {
		if !later.Swap(true) {
			<-release
			return testCredentials(), nil
		}
		return nil, forbidden()
	})
	c := newSecretCache(r, time.Hour, secretBounds{}, logr.Discard(), nil)
	ctx := context.Background()
	oldDone := make(chan error, 1)
	go func() { _, err := c.get(ctx, dbKey, oldOwner); oldDone <- err }()
	waitFor(t, func() bool { return r.gets.Load() == 1 })
	newDone := make(chan error, 1)
	go func() {
		data, err := c.get(ctx, dbKey, newOwner)
		if err == nil {
			err = errors.New("got " + string(data.values["user"]))
		}
		newDone <- err
	}()
	// The new owner is waiting on the read in flight.
	time.Sleep(20 * time.Millisecond)
	close(release)
	<-oldDone // its answer is the last read's: the credentials, or already the 403
	if err := <-newDone; !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("the new owner: %v; want the answer of a read begun after it asked (forbidden)", err)
	}
	if n := r.gets.Load(); n != 2 {
		t.Errorf("%d reads, want 2", n)
	}
}
