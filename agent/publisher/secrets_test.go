package publisher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
	"github.com/swh-dev/swh/probes"
)

// secretReader is a client.Reader of Secrets whose answer a test sets.
type secretReader struct {
	gets   atomic.Int64
	mu     sync.Mutex
	answer func(ctx context.Context) (map[string][]byte, error)
}

func (r *secretReader) set(answer func(ctx context.Context) (map[string][]byte, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = answer
}

func (r *secretReader) Get(ctx context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.gets.Add(1)
	r.mu.Lock()
	answer := r.answer
	r.mu.Unlock()
	data, err := answer(ctx)
	if err == nil {
		obj.(*corev1.Secret).Data = data
	}
	return err
}

func (r *secretReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not supported")
}

func returns(data map[string][]byte, err error) func(context.Context) (map[string][]byte, error) {
	return func(context.Context) (map[string][]byte, error) { return data, err }
}

// The Secret of these tests.
const dbNamespace, dbName = "ns", "db"

func testCredentials() map[string][]byte {
	return map[string][]byte{"user": []byte("probe"), "password": []byte("pw"), "unrelated": []byte("big")}
}

// logLines collects what a logr.Logger writes.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, sub) {
			n++
		}
	}
	return n
}

func TestSecretCacheCoalescesConcurrentReads(t *testing.T) {
	dbKey, credentials := types.NamespacedName{Namespace: dbNamespace, Name: dbName}, testCredentials()
	release := make(chan struct{})
	r := &secretReader{}
	r.set(func(context.Context) (map[string][]byte, error) { <-release; return credentials, nil })
	c := newSecretCache(r, time.Minute, secretBounds{}, logr.Discard(), nil)
	const probes = 200
	var wg sync.WaitGroup
	errs := make(chan error, probes)
	for range probes {
		wg.Go(func() {
			data, err := c.get(context.Background(), dbKey, testOwner)
			if err == nil && string(data.values["user"]) != "probe" {
				err = errors.New("wrong data")
			}
			errs <- err
		})
	}
	time.Sleep(50 * time.Millisecond) // every probe is waiting
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := r.gets.Load(); n != 1 {
		t.Errorf("%d concurrent probes of one Secret made %d reads, want 1", probes, n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[dbKey].data.values["unrelated"]; ok {
		t.Error("the cache keeps keys the probes do not use")
	}
}

func TestSecretCacheKeepsCredentialsWhileReadsFail(t *testing.T) {
	const ttl = 20 * time.Millisecond
	dbKey, credentials := types.NamespacedName{Namespace: dbNamespace, Name: dbName}, testCredentials()
	serverError := apierrors.NewInternalError(errors.New("etcd is sad"))
	secretGone := apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, dbName)
	r := &secretReader{}
	r.set(returns(credentials, nil))
	logs := &logLines{}
	c := newSecretCache(r, ttl, secretBounds{}, logs.logger(), nil)
	// A hung read outlasts the wait allowed a probe below, and ends
	// within the test.
	c.timeout = 2 * time.Second
	ctx := context.Background()
	if _, err := c.get(ctx, dbKey, testOwner); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		answer func(context.Context) (map[string][]byte, error)
	}{
		{"the API server answers 500", returns(nil, serverError)},
		{"the API server does not answer", func(ctx context.Context) (map[string][]byte, error) { <-ctx.Done(); return nil, ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.set(tc.answer)
			before := r.gets.Load()
			start := time.Now()
			for time.Since(start) < 10*ttl {
				asked := time.Now()
				data, err := c.get(ctx, dbKey, testOwner)
				if err != nil || string(data.values["password"]) != "pw" {
					t.Fatalf("after %v of failed reads: %v, %q", time.Since(start), err, data.values["password"])
				}
				// Loose, for a loaded machine: a get that waited for the
				// hung read would take its 2 s.
				if d := time.Since(asked); d > time.Second {
					t.Fatalf("a probe with known credentials waited %v", d)
				}
				time.Sleep(ttl / 4)
			}
			// At most one read per ttl, a slow one included: reads start
			// at least ttl apart, within the time the gets took.
			elapsed := time.Since(start)
			if n := r.gets.Load() - before; n < 1 || n > int64(elapsed/ttl)+1 {
				t.Errorf("%d reads in %v of a %v reuse period", n, elapsed, ttl)
			}
		})
	}
	if n := logs.count("reading a credentials Secret failed"); n != 1 {
		t.Errorf("one failing streak logged %d times:\n%s", n, strings.Join(logs.lines, "\n"))
	}

	r.set(returns(credentials, nil))
	waitFor(t, func() bool {
		_, err := c.get(ctx, dbKey, testOwner)
		return err == nil && logs.count("read again") == 1
	})

	// A deleted Secret fails the probes: the user removed the credentials.
	r.set(returns(nil, secretGone))
	waitFor(t, func() bool {
		_, err := c.get(ctx, dbKey, testOwner)
		return err != nil && err.Error() == "Secret ns/db not found"
	})
	if n := logs.count("not found"); n != 1 {
		t.Errorf("a missing Secret logged %d times", n)
	}
}

// TestSecretCacheRetriesSoonUntilFirstRead: a Secret never read (an agent
// started during an API server blip, a Secret created just after its
// resource) is read again on a short backoff, not once per reuse period,
// still one read at a time however many probes ask; once read, the reuse
// period applies again, a later NotFound included, but not a refusal (403),
// which drops the credentials and counts as never read.
func TestSecretCacheRetriesSoonUntilFirstRead(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	for _, tc := range []struct {
		name string
		err  error
		// refusal: a 403 drops what was read and counts as never read,
		// so after a read too it is retried on the short backoff.
		refusal bool
	}{
		{name: "the API server answers 500", err: apierrors.NewInternalError(errors.New("etcd is sad"))},
		{name: "the Secret does not exist yet", err: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, dbName)},
		// The controller's grant of a new resource's Secret comes after
		// the agent's first reads (docs/security.md).
		{name: "the agent is not granted the Secret yet", err: apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, dbName, errors.New("no RBAC policy matched")), refusal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const retryFirst, retryMax = 10 * time.Millisecond, 40 * time.Millisecond
			var failing atomic.Bool
			failing.Store(true)
			r := &secretReader{}
			r.set(func(context.Context) (map[string][]byte, error) {
				if failing.Load() {
					return nil, tc.err
				}
				return testCredentials(), nil
			})
			c := newSecretCache(r, time.Hour, secretBounds{}, logr.Discard(), nil)
			c.retryFirst, c.retryMax = retryFirst, retryMax
			ctx := context.Background()

			// Ten probes asking every 5 ms for 200 ms (longer if a loaded
			// machine left no time for three reads): reads start 10, 20,
			// then 40 ms apart, at 0, 10, 30, 70, 110, 150, 190 ms...
			// (later on a loaded machine, never sooner).
			start := time.Now()
			asking := func() bool {
				return time.Since(start) < 200*time.Millisecond || (r.gets.Load() < 3 && time.Since(start) < 5*time.Second)
			}
			var wg sync.WaitGroup
			for range 10 {
				wg.Go(func() {
					for asking() {
						if _, err := c.get(ctx, dbKey, testOwner); err == nil {
							t.Error("a probe got credentials while every read failed")
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			most := 3 + int64((elapsed-30*time.Millisecond)/retryMax) // reads at 0, 10, 30, then every 40 ms
			if n := r.gets.Load(); n < 3 || n > most {
				t.Errorf("%d reads in %v of failures before the first success, want 3 to %d (a backoff from %v to %v)", n, elapsed, most, retryFirst, retryMax)
			}

			failing.Store(false)
			waitFor(t, func() bool { _, err := c.get(ctx, dbKey, testOwner); return err == nil })

			// Read once: a failure now waits for the reuse period (an hour).
			failing.Store(true)
			c.mu.Lock()
			c.entries[dbKey].attempted = time.Now().Add(-time.Hour)
			c.mu.Unlock()
			before := r.gets.Load()
			for range 20 {
				_, _ = c.get(ctx, dbKey, testOwner)
				time.Sleep(5 * time.Millisecond)
			}
			n := r.gets.Load() - before
			switch {
			case tc.refusal && (n < 2 || n > 20):
				// Reads 10, 20, then 40 ms apart in these 100 ms (fewer
				// on a loaded machine), one at a time.
				t.Errorf("a Secret refused after a read was read %d times in 100 ms, want 2 or more on the short backoff, one read at a time", n)
			case !tc.refusal && n != 1:
				t.Errorf("a Secret read before was read %d times in 100 ms after a failure, want 1 (then once per reuse period)", n)
			}
		})
	}
}

func TestSecretCacheFirstReadIsBoundedByTheProbe(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	r := &secretReader{}
	r.set(func(ctx context.Context) (map[string][]byte, error) { <-ctx.Done(); return nil, ctx.Err() })
	c := newSecretCache(r, 10*time.Millisecond, secretBounds{}, logr.Discard(), nil)
	c.timeout = time.Second
	c.retryFirst = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.get(ctx, dbKey, testOwner)
	// The message tells the probe's deadline from the read's own (which
	// says "reading Secret"); the time bound is loose, for a loaded machine.
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "waiting for Secret ns/db to be read") || time.Since(start) > time.Second {
		t.Fatalf("got %v after %v, want the probe's deadline", err, time.Since(start))
	}
	// The read itself ends at its own bound, and the next one can start.
	waitFor(t, func() bool {
		_, err := c.get(context.Background(), dbKey, testOwner)
		return err != nil && strings.Contains(err.Error(), "reading Secret ns/db")
	})
	r.set(returns(testCredentials(), nil))
	waitFor(t, func() bool { _, err := c.get(context.Background(), dbKey, testOwner); return err == nil })
}

func TestSecretCacheForgetsUnusedSecrets(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	r := &secretReader{}
	r.set(returns(testCredentials(), nil))
	c := newSecretCache(r, time.Millisecond, secretBounds{}, logr.Discard(), nil)
	c.idle = 20 * time.Millisecond
	for i := range 50 {
		if _, err := c.get(context.Background(), types.NamespacedName{Namespace: "ns", Name: string(rune('a' + i))}, testOwner); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(30 * time.Millisecond)
	if _, err := c.get(context.Background(), dbKey, testOwner); err != nil {
		t.Fatal(err)
	}
	if n := c.len(); n != 1 {
		t.Errorf("%d Secrets held, want only the one still used", n)
	}
}

func TestSecretCacheReportsTLSModeChanges(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	r := &secretReader{}
	var changes atomic.Int64
	c := newSecretCache(r, time.Millisecond, secretBounds{}, logr.Discard(), nil)
	c.onTLSModeChange = func(types.NamespacedName) { changes.Add(1) }
	read := func(data map[string][]byte) {
		t.Helper()
		r.set(returns(data, nil))
		n := r.gets.Load()
		waitFor(t, func() bool { _, _ = c.get(context.Background(), dbKey, testOwner); return r.gets.Load() > n+1 })
	}
	read(map[string][]byte{"user": []byte("u")})
	read(map[string][]byte{"user": []byte("u"), "tlsMode": []byte("verify-full\n")})
	read(map[string][]byte{"user": []byte("u"), "tlsMode": []byte("verify-full")})
	if got, _ := c.tlsMode(dbKey, testOwner); got != "verify-full" {
		t.Errorf("tlsMode %q", got)
	}
	read(map[string][]byte{"user": []byte("u")})
	// The callback runs after the read that made the change.
	waitFor(t, func() bool { return changes.Load() >= 2 })
	time.Sleep(10 * time.Millisecond)
	if n := changes.Load(); n != 2 {
		t.Errorf("%d tlsMode changes reported, want 2 (set, then removed)", n)
	}
}

func TestPostgreSQLConfigTLSMode(t *testing.T) {
	tests := []struct {
		name       string
		spec       swhv1alpha1.PostgreSQLTLSMode
		secret     string // "" for no tlsMode key
		want       string
		wantReason probes.Reason
	}{
		{"neither sets one", "", "", "disable", ""},
		{"the Secret's applies", "", "verify-full", "verify-full", ""},
		{"trimmed", "", " verify-ca\n", "verify-ca", ""},
		{"the spec wins", "require", "verify-full", "require", ""},
		{"the spec alone", "verify-ca", "", "verify-ca", ""},
		{"an invalid value fails", "", "prefer", "", ReasonSecret},
		{"an invalid value fails even with the spec's", "require", "VERIFY-FULL", "", ReasonSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := map[string][]byte{"user": []byte("u")}
			if tt.secret != "" {
				data["tlsMode"] = []byte(tt.secret)
			}
			r := &secretReader{}
			r.set(returns(data, nil))
			f := newProberFactory(newSecretCache(r, time.Minute, secretBounds{}, logr.Discard(), nil))
			spec := &swhv1alpha1.PostgreSQLProbe{AuthSecretName: "db", TLSMode: tt.spec, InsecureAllowCleartextPassword: true}
			cfg, _, failed := f.postgreSQLConfig(context.Background(), "ns", testOwner, spec)
			switch {
			case tt.wantReason != "":
				if failed == nil || failed.Reason != tt.wantReason || !strings.Contains(failed.Message, `"tlsMode"`) {
					t.Fatalf("got %+v, want a failure %s naming the key", failed, tt.wantReason)
				}
			case failed != nil:
				t.Fatalf("failed: %+v", failed)
			case string(cfg.SSLMode) != tt.want || !cfg.AllowCleartextPassword || cfg.User != "u":
				t.Errorf("got sslmode %q, cleartext %v, user %q; want %q, true, u", cfg.SSLMode, cfg.AllowCleartextPassword, cfg.User, tt.want)
			}
		})
	}
}

// TestSecretValuesAreBounded: a value over its key's bound is never kept
// and fails the probe with reason secret, naming the key and the bound; a
// value at its bound is kept.
func TestSecretValuesAreBounded(t *testing.T) {
	dbKey := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	tests := []struct {
		key   string
		limit int
	}{
		{"user", 1 << 10},
		{"password", 1 << 10},
		{"tlsMode", 1 << 10},
		{"caCert", 64 << 10},
		{"clientCert", 64 << 10},
		{"clientKey", 64 << 10},
	}
	for _, tt := range tests {
		for _, size := range []int{tt.limit, tt.limit + 1, 1 << 20} {
			t.Run(fmt.Sprintf("%s of %d bytes", tt.key, size), func(t *testing.T) {
				data := map[string][]byte{"user": []byte("u"), "password": []byte("pw")}
				data[tt.key] = bytes.Repeat([]byte("x"), size)
				r := &secretReader{}
				r.set(returns(data, nil))
				c := newSecretCache(r, time.Minute, secretBounds{}, logr.Discard(), nil)
				f := newProberFactory(c)
				spec := &swhv1alpha1.PostgreSQLProbe{AuthSecretName: dbName, TLSMode: swhv1alpha1.PostgreSQLTLSDisable}
				_, _, failed := f.postgreSQLConfig(context.Background(), dbNamespace, testOwner, spec)
				c.mu.Lock()
				kept, ok := c.entries[dbKey].data.values[tt.key]
				c.mu.Unlock()
				if size <= tt.limit {
					if !ok || len(kept) != size {
						t.Errorf("a value at the bound is not kept (%d bytes kept)", len(kept))
					}
					if failed != nil && failed.Reason == ReasonSecret && strings.Contains(failed.Message, "bytes, more than") {
						t.Errorf("a value at the bound fails the probe: %+v", failed)
					}
					return
				}
				if ok {
					t.Errorf("an oversize value is kept (%d bytes)", len(kept))
				}
				want := fmt.Sprintf("Secret ns/db: key %q is %d bytes, more than the %d (%d KiB) the agent accepts", tt.key, size, tt.limit, tt.limit>>10)
				if failed == nil || failed.Reason != ReasonSecret || failed.Message != want {
					t.Errorf("got %+v, want a failure %s saying %q", failed, ReasonSecret, want)
				}
			})
		}
	}
}

// TestSecretFingerprint: the fingerprint computed at read time tells
// contents apart, bytes moved between keys included, and only contents.
func TestSecretFingerprint(t *testing.T) {
	key := types.NamespacedName{Namespace: dbNamespace, Name: dbName}
	base := keptOf(key, map[string][]byte{"user": []byte("u"), "password": []byte("pw"), "unrelated": []byte("a")})
	same := keptOf(key, map[string][]byte{"user": []byte("u"), "password": []byte("pw"), "unrelated": []byte("b")})
	if base.fingerprint != same.fingerprint {
		t.Error("keys the probes do not use change the fingerprint")
	}
	for _, other := range []map[string][]byte{
		{"user": []byte("u"), "password": []byte("pw2")},
		{"user": []byte("up"), "password": []byte("w")},
		{"user": []byte("u"), "password": []byte("pw"), "tlsMode": []byte("")},
		{"user": []byte("u"), "password": []byte("pw"), "caCert": bytes.Repeat([]byte("x"), 64<<10+1)},
	} {
		if keptOf(key, other).fingerprint == base.fingerprint && keptOf(key, other).oversize == "" {
			t.Errorf("%q has the fingerprint of %q", other, base.values)
		}
	}
}

// TestTLSConflictNote: a conflict whose spec side is "disable", which the
// CRD used to fill in by default, says how to remove it; others do not.
func TestTLSConflictNote(t *testing.T) {
	secret := types.NamespacedName{Namespace: "shop", Name: "db-credentials"}
	for _, tt := range []struct {
		probe swhv1alpha1.Probe
		spec  string
		hint  bool
	}{
		{swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromInt32(5432), TLSMode: swhv1alpha1.PostgreSQLTLSDisable}}, "disable", true},
		{swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromInt32(5432), TLSMode: swhv1alpha1.PostgreSQLTLSRequire}}, "require", false},
		{swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModePostgreSQL, PostgreSQL: &swhv1alpha1.PostgreSQLProbe{TargetPort: intstr.FromInt32(5432), TLSMode: swhv1alpha1.PostgreSQLTLSVerifyFull}}, "verify-full", false},
		// The CRD never defaulted a Redis or MySQL tlsMode: no hint.
		{swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeRedis, Redis: &swhv1alpha1.RedisProbe{TargetPort: intstr.FromInt32(5432), TLSMode: swhv1alpha1.DatabaseTLSDisable}}, "disable", false},
		{swhv1alpha1.Probe{Mode: swhv1alpha1.ProbeModeMySQL, MySQL: &swhv1alpha1.MySQLProbe{TargetPort: intstr.FromInt32(5432), TLSMode: swhv1alpha1.DatabaseTLSRequire}}, "require", false},
	} {
		note := tlsConflictNote("db-write", 2, &tt.probe, secret, "verify-ca")
		prefix := fmt.Sprintf(`probe 2 (%s probe on 5432) sets tlsMode %q and Secret shop/db-credentials holds tlsMode "verify-ca": the probe uses the spec's %q`, tt.probe.Mode, tt.spec, tt.spec)
		const patch = `kubectl patch swh db-write -n shop --type=json -p '[{"op":"remove","path":"/spec/healthcheck/probes/2/postgreSQL/tlsMode"}]'`
		if !strings.HasPrefix(note, prefix) || strings.HasSuffix(note, patch) != tt.hint || len(note) > swhv1alpha1.MaxEventNoteBytes {
			t.Errorf("spec %s: note %q; want it to start %q and end with the patch: %v", tt.spec, note, prefix, tt.hint)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
