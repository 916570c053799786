package publisher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// secretReadTimeout bounds one read of a Secret: a hung API server
	// must not keep a refresh, or the probes waiting for a first read,
	// in flight for ever.
	secretReadTimeout = 10 * time.Second
	// secretIdle is how long an entry no probe reads survives. It exceeds
	// the longest probe period (3600 s), so a slow probe's credentials stay
	// known between its runs.
	secretIdle = 2 * time.Hour
	// secretRetryFirst and secretRetryMax bound the backoff of a Secret not
	// read yet (see retryAfter): an agent started during an API server blip,
	// or a Secret created just after its resource, must not wait a whole
	// reuse period for its first credentials.
	secretRetryFirst = time.Second
	secretRetryMax   = 5 * time.Second
	// secretRetryWindow is how long a Secret never read is retried on that
	// backoff; then once per reuse period, like any other.
	secretRetryWindow = time.Minute
	// secretShortMax and secretPEMMax bound what the cache keeps of a key:
	// a Secret may hold 1 MiB and a tenant may name a different one in each
	// resource, against the agent's 256 MiB. user, password and tlsMode
	// need far less than 1 KiB (a role name has at most 63 bytes, the
	// longest mode 11). caCert, clientCert and clientKey are PEM: a
	// certificate or key takes 1 to 7 KiB, so 64 KiB holds a chain or a
	// private CA bundle of a dozen or more; a public roots bundle (200 KiB)
	// is not needed, verify-full without caCert uses the system roots.
	// A Secret costs the cache at most 3 KiB + 192 KiB.
	secretShortMax = 1 << 10
	secretPEMMax   = 64 << 10
	// secretConcurrentReads bounds the Secret reads in flight: a read
	// decodes the whole Secret (up to 1 MiB of data, more as JSON) before
	// the cache keeps its few keys, and a tenant naming a thousand Secrets
	// must not have them all decoded at once.
	secretConcurrentReads = 4
)

// secretCache holds the credentials Secrets the database probes read. A
// probe with known credentials never waits on the API server: it gets the
// last good data, and a read refreshes it in the background, at most once
// per Secret per ttl. A failed refresh keeps the last good data (an API
// server restart must not withdraw endpoints), except NotFound and
// Forbidden: the Secret was deleted, or the agent may no longer read it
// (its grant goes with the last resource naming it, and with its
// namespace). A probe with no credentials yet waits for the one read in
// flight of its Secret, however many probes ask at once; until a read of a
// Secret succeeds, reads are retried on a short backoff instead of once
// per ttl.
//
// Credentials are served only to the resources (owners, by UID) that a
// read vouched for: a resource asking for the first time waits for a read
// that started after it asked, so a namespace deleted and created again,
// whose new resources name a Secret of the old name, never gets what the
// previous owner's Secret held.
//
// What the cache keeps is bounded in bytes, in total and per namespace
// (see secretBounds): past a bound a Secret is not kept and its probes fail
// with reason secret, saying which bound.
type secretCache struct {
	reader  client.Reader
	ttl     time.Duration
	timeout time.Duration
	idle    time.Duration
	// retryFirst and retryMax are the backoff of a Secret not read yet.
	retryFirst, retryMax time.Duration
	log                  logr.Logger
	metrics              *Metrics
	// onTLSModeChange, when set, is called (without the lock) after a read
	// changed the tlsMode a Secret holds, its first read included.
	onTLSModeChange func(types.NamespacedName)

	// reads holds a token per read in flight (secretConcurrentReads).
	reads chan struct{}

	mu      sync.Mutex
	entries map[types.NamespacedName]*secretEntry
	usage   secretUsage
	swept   time.Time
}

// secretData is what the cache keeps of one read of a Secret; it is not
// modified once made.
type secretData struct {
	// values are the keys the probes use, each within its bound.
	values map[string][]byte
	// oversize, when set, says which key exceeds its bound: the probe
	// fails with it, and the value is not kept.
	oversize string
	// fingerprint identifies values, computed once per read rather than
	// hashing the certificates on every probe.
	fingerprint [sha256.Size]byte
}

type secretEntry struct {
	// data is the last good read; nil before the first success, after a
	// NotFound or Forbidden, and when it did not fit in the bounds.
	data *secretData
	// owners are the resources a read vouched for, with when each last
	// asked: they get data without waiting. pending are the others that
	// asked, with when each first asked: they wait for a read started then
	// or later. Both forget a resource that stops asking (sweep).
	owners, pending map[types.UID]time.Time
	// cost is what the entry counts against the bounds (secretCost).
	cost int64
	// err is the last read's failure; nil after a success.
	err error
	// attempted is when the last read started; used when a probe last
	// asked.
	attempted, used time.Time
	// inflight is closed when the read in flight ends; nil when none is.
	inflight chan struct{}
	// failingSince is when the current streak of failed reads began.
	failingSince time.Time
	// everRead is set by the first successful read of the Secret and
	// cleared by a refusal (403); until then backoff, the wait after a
	// failed read, applies instead of the ttl. NotFound keeps it.
	everRead bool
	backoff  time.Duration
}

func newSecretCache(reader client.Reader, ttl time.Duration, bounds secretBounds, log logr.Logger, m *Metrics) *secretCache {
	return &secretCache{
		reader: reader, ttl: ttl, timeout: secretReadTimeout, idle: max(secretIdle, 4*ttl),
		retryFirst: secretRetryFirst, retryMax: secretRetryMax,
		log: log, metrics: m, entries: map[types.NamespacedName]*secretEntry{},
		reads: make(chan struct{}, secretConcurrentReads),
		usage: secretUsage{bounds: bounds.withDefaults(), namespaces: map[string]int64{}},
	}
}

// get returns what the cache keeps of a Secret for the probes of resource
// owner (callers must not modify it).
func (c *secretCache) get(ctx context.Context, key types.NamespacedName, owner types.UID) (*secretData, error) {
	for {
		now := time.Now()
		c.mu.Lock()
		c.sweep(now)
		e := c.entries[key]
		if e == nil {
			if err := c.usage.admit(key); err != nil {
				c.mu.Unlock()
				c.metrics.secretRead("over-bound")
				return nil, err
			}
			e = &secretEntry{owners: map[types.UID]time.Time{}, pending: map[types.UID]time.Time{}, cost: secretCost(key, nil)}
			c.usage.add(key.Namespace, e.cost)
			c.entries[key] = e
		}
		e.used = now
		_, known := e.owners[owner]
		since, waiting := e.pending[owner]
		switch {
		case known:
			e.owners[owner] = now
		case !waiting:
			since = now
			e.pending[owner] = now
		}
		vouched := known && e.data != nil
		// An owner not vouched for yet needs a read that began once it
		// asked: one that began before may answer with a Secret deleted
		// since (with the namespace that held it). A known owner whose
		// Secret went follows the usual pace.
		stale := !known && (e.attempted.IsZero() || e.attempted.Before(since))
		if e.inflight == nil && (stale || now.Sub(e.attempted) >= c.retryAfter(e)) {
			c.start(key, e, now)
		}
		if vouched {
			data := e.data
			c.mu.Unlock()
			return data, nil
		}
		done, began := e.inflight, e.attempted
		if done == nil {
			// The last read, begun after the owner asked, failed less
			// than retryAfter ago: its answer stands.
			err := e.err
			c.mu.Unlock()
			return nil, err
		}
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for Secret %s to be read: %w", key, ctx.Err())
		}
		if !began.Before(since) {
			return c.answer(key, e, owner)
		}
		// That read began before the owner asked: wait for the next.
	}
}

// answer is what the last read of e says to owner, once it ended.
func (c *secretCache) answer(key types.NamespacedName, e *secretEntry, owner types.UID) (*secretData, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := e.owners[owner]; ok && e.data != nil {
		return e.data, nil
	}
	if e.err != nil {
		return nil, e.err
	}
	//lint:ignore ST1005 Secret is the Kubernetes kind's name
	return nil, fmt.Errorf("Secret %s: no read answered for this resource yet", key)
}

// tlsMode returns the tlsMode key of the last good read of a Secret if it
// was vouched for owner, without reading it or counting as a use.
func (c *secretCache) tlsMode(key types.NamespacedName, owner types.UID) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		if _, ok := e.owners[owner]; ok {
			return tlsModeIn(e.data)
		}
	}
	return "", false
}

// len is the number of Secrets held.
func (c *secretCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// retryAfter is how long after the start of a Secret's last read the next
// one is due: the ttl once the Secret was read, a backoff before. NotFound
// counts as not read: a Secret created just after its resource (kubectl
// apply of a directory creates them in any order) then takes effect within
// seconds. That costs one GET per missing Secret per retryMax for its
// first minute missing (secretRetryWindow), then one per ttl, never more
// however many probes ask. A Secret deleted after it
// was read is read again once per ttl. c.mu is held.
func (c *secretCache) retryAfter(e *secretEntry) time.Duration {
	if e.everRead || e.backoff == 0 {
		return c.ttl
	}
	return min(e.backoff, c.ttl)
}

// start begins a read of key; c.mu is held.
func (c *secretCache) start(key types.NamespacedName, e *secretEntry, now time.Time) {
	e.attempted = now
	e.inflight = make(chan struct{})
	go c.read(key, e)
}

// read runs off the probes' path, bounded by c.timeout whoever waits
// (the wait for a turn among the reads in flight included).
func (c *secretCache) read(key types.NamespacedName, e *secretEntry) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	data, err := c.fetch(ctx, key)

	c.mu.Lock()
	oldMode, hadMode := tlsModeIn(e.data)
	hadData := e.data != nil
	outcome := "ok"
	switch {
	case err == nil:
		if over := c.usage.resize(key, e, data); over != nil {
			outcome = "over-bound"
			e.data, e.err = nil, over
		} else {
			e.data, e.err = data, nil
			// The read began after these owners asked: it vouches for
			// them.
			for owner, since := range e.pending {
				if !since.After(e.attempted) {
					e.owners[owner] = since
					delete(e.pending, owner)
				}
			}
		}
	case apierrors.IsNotFound(err):
		outcome = "not-found"
		c.usage.resize(key, e, nil)
		//lint:ignore ST1005 Secret is the Kubernetes kind's name
		e.data, e.err = nil, fmt.Errorf("Secret %s not found", key)
	case apierrors.IsForbidden(err):
		// No resource of the namespace names the Secret any more, or the
		// namespace is gone with the grant: whoever names it next must not
		// get what it held.
		outcome = "forbidden"
		c.usage.resize(key, e, nil)
		e.data, e.err = nil, fmt.Errorf("reading Secret %s: %w", key, err)
		// As if never read: the next read comes after the short backoff,
		// not the ttl, so that a grant given again (a namespace made
		// again, a Role rewritten) takes effect within seconds.
		e.everRead = false
	default:
		outcome = "error"
		e.err = fmt.Errorf("reading Secret %s: %w", key, err)
	}
	switch {
	case err == nil:
		e.everRead, e.backoff = true, 0
		err = e.err // a read that did not fit in the bounds fails the probes
	case e.everRead:
		// Read before: the next read is due after the ttl.
	case e.backoff == 0:
		e.backoff = c.retryFirst
	case !e.failingSince.IsZero() && time.Since(e.failingSince) > secretRetryWindow:
		// Missing (or unreadable) for long: once per ttl, so that many
		// missing Secrets do not eat the client's shared request budget.
		e.backoff = c.ttl
	default:
		e.backoff = min(2*e.backoff, c.retryMax)
	}
	streakBegins := err != nil && e.failingSince.IsZero()
	failedFor := time.Duration(0)
	switch {
	case streakBegins:
		e.failingSince = e.attempted
	case err == nil && !e.failingSince.IsZero():
		failedFor = time.Since(e.failingSince)
		e.failingSince = time.Time{}
	}
	kept := e.data != nil
	newMode, hasMode := tlsModeIn(e.data)
	close(e.inflight)
	e.inflight = nil
	c.mu.Unlock()

	c.metrics.secretRead(outcome)
	switch {
	case streakBegins && outcome == "not-found":
		c.log.Info("credentials Secret not found; its probes fail until it exists", "secret", key.String())
	case streakBegins && outcome == "over-bound":
		c.log.Error(err, "a credentials Secret does not fit in the agent's bounds; its probes fail until it does", "secret", key.String())
	case streakBegins && outcome == "forbidden" && !hadData:
		// The controller grants the agent its resources' Secrets when it
		// reconciles them (docs/security.md): a resource's first reads can
		// come before the grant, and are retried on the short backoff.
		c.log.Info("credentials Secret not readable yet; its probes fail until the controller's grant takes effect", "secret", key.String(), "reason", err.Error())
	case streakBegins && outcome == "forbidden":
		c.log.Info("credentials Secret no longer readable (its grant, or its namespace, is gone): its credentials are dropped", "secret", key.String(), "reason", err.Error(), "dropped", hadData)
	case streakBegins && kept:
		c.log.Error(err, "reading a credentials Secret failed; the last credentials read stay in use until a read succeeds", "secret", key.String())
	case streakBegins:
		c.log.Error(err, "reading a credentials Secret failed; its probes fail until a read succeeds", "secret", key.String())
	case failedFor > 0:
		c.log.Info("credentials Secret read again", "secret", key.String(), "failingFor", failedFor.Round(time.Millisecond).String())
	}
	if (oldMode != newMode || hadMode != hasMode) && c.onTLSModeChange != nil {
		c.onTLSModeChange(key)
	}
}

// fetch reads a Secret and returns the keys the probes use; the decoded
// Secret is garbage once it returns. At most secretConcurrentReads run at
// once.
func (c *secretCache) fetch(ctx context.Context, key types.NamespacedName) (*secretData, error) {
	select {
	case c.reads <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("reading Secret %s: waiting for one of the %d reads in flight: %w", key, secretConcurrentReads, ctx.Err())
	}
	defer func() { <-c.reads }()
	s := &corev1.Secret{}
	if err := c.reader.Get(ctx, key, s); err != nil {
		return nil, err
	}
	return keptOf(key, s.Data), nil
}

// sweep drops, at most once per ttl, the Secrets no probe asked for in
// c.idle, and the resources that stopped asking: probes removed or edited
// leave nothing behind. c.mu is held.
func (c *secretCache) sweep(now time.Time) {
	if now.Sub(c.swept) < c.ttl {
		return
	}
	c.swept = now
	for key, e := range c.entries {
		if e.inflight == nil && now.Sub(e.used) > c.idle {
			c.usage.add(key.Namespace, -e.cost)
			delete(c.entries, key)
			continue
		}
		for _, owners := range []map[types.UID]time.Time{e.owners, e.pending} {
			for owner, at := range owners {
				if now.Sub(at) > c.idle {
					delete(owners, owner)
				}
			}
		}
	}
}

// keptOf copies the keys the probes use, each within its bound: nothing
// else of a Secret stays in memory. The result is never nil, so a Secret
// without data counts as read.
func keptOf(key types.NamespacedName, data map[string][]byte) *secretData {
	keys := [...]string{secretUser, secretPassword, secretTLSMode, secretCACert, secretClientCert, secretClientKey}
	d := &secretData{values: make(map[string][]byte, len(keys))}
	h := sha256.New()
	for _, k := range keys {
		v, ok := data[k]
		if !ok {
			continue
		}
		if limit := secretKeyMax(k); len(v) > limit {
			if d.oversize == "" {
				d.oversize = fmt.Sprintf("Secret %s: key %q is %d bytes, more than the %d (%d KiB) the agent accepts", key, k, len(v), limit, limit>>10)
			}
			continue
		}
		// A copy: the decoded Secret is not kept reachable through it.
		d.values[k] = bytes.Clone(v)
		// Length-prefixed, so no two contents share a fingerprint by
		// moving bytes between keys.
		for _, field := range [][]byte{[]byte(k), v} {
			_ = binary.Write(h, binary.BigEndian, uint64(len(field)))
			h.Write(field)
		}
	}
	h.Sum(d.fingerprint[:0])
	return d
}

// secretKeyMax is the largest value of key the cache keeps.
func secretKeyMax(key string) int {
	switch key {
	case secretCACert, secretClientCert, secretClientKey:
		return secretPEMMax
	}
	return secretShortMax
}

// tlsModeIn returns a Secret's tlsMode, spaces trimmed (a value written
// from a file often ends with a newline); an empty value, or no data,
// counts as unset.
func tlsModeIn(d *secretData) (string, bool) {
	if d == nil {
		return "", false
	}
	mode := strings.TrimSpace(string(d.values[secretTLSMode]))
	return mode, mode != ""
}
