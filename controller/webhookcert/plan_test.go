package webhookcert

import (
	"crypto/x509"
	"testing"
	"time"
)

var testSettings = settings{
	caName: "test-ca", hosts: []string{"guard.swh-system.svc", "127.0.0.1"},
	caValidity: 30 * time.Minute, certValidity: 10 * time.Minute,
	settle: 20 * time.Second, reload: 40 * time.Second,
}

// mustPlan runs plan and fails the test on an error.
func mustPlan(t *testing.T, now time.Time, data map[string][]byte, trustedSince time.Time, s settings) decision {
	t.Helper()
	d, err := plan(planInput{now: now, data: data, trustedSince: trustedSince, settings: s})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// held is what a Secret's data holds, parsed.
type held struct {
	bundle []*x509.Certificate
	leaf   *x509.Certificate
}

func parseHeld(t *testing.T, data map[string][]byte) held {
	t.Helper()
	leaf, err := parsePair(data[KeyCert], data[KeyKey])
	if err != nil {
		t.Fatalf("the serving certificate: %v", err)
	}
	if _, err := parsePair(encodeBundle(parseCerts(data[KeyCABundle])[:1]), data[KeyCAKey]); err != nil {
		t.Fatalf("the CA: %v", err)
	}
	return held{bundle: parseCerts(data[KeyCABundle]), leaf: leaf.cert}
}

// verifies says whether leaf serves every host under the CAs of bundle.
func verifies(leaf *x509.Certificate, bundle []*x509.Certificate, hosts []string, at time.Time) error {
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	for _, h := range hosts {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return err
		}
	}
	return nil
}

// TestPlanSteps walks one rotation of the CA decision by decision.
func TestPlanSteps(t *testing.T) {
	s := testSettings
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

	// No Secret: a CA and a certificate of it.
	d := mustPlan(t, t0, nil, time.Time{}, s)
	first := parseHeld(t, d.data)
	if len(first.bundle) != 1 || verifies(first.leaf, first.bundle, s.hosts, t0) != nil {
		t.Fatalf("a new Secret: %d CAs, a certificate that does not verify for %v", len(first.bundle), s.hosts)
	}
	data := d.data

	for _, tc := range []struct {
		name  string
		after time.Duration
		// trusted: how long the API server has trusted the current CA
		// (negative: not at all).
		trusted time.Duration
		mutate  func(map[string][]byte) map[string][]byte
		// want: "none" (no write), "leaf" (a new certificate of the same
		// CA), "ca" (a new CA, same certificate), "both".
		want       string
		wantBundle int
	}{
		{name: "fresh: nothing to do", after: time.Minute, trusted: time.Minute, want: "none", wantBundle: 1},
		{name: "a certificate two thirds through its life is renewed", after: 7 * time.Minute, trusted: time.Minute, want: "leaf", wantBundle: 1},
		{name: "a certificate for other hosts is replaced", after: time.Minute, trusted: time.Minute, want: "leaf", wantBundle: 1,
			mutate: func(m map[string][]byte) map[string][]byte {
				leaf, _ := newLeaf(t0, mustCA(t, m), []string{"other.svc"}, time.Hour)
				m[KeyCert], m[KeyKey] = leaf.certPEM, leaf.keyPEM
				return m
			}},
		{name: "a key that is not the certificate's is replaced", after: time.Minute, trusted: time.Minute, want: "leaf", wantBundle: 1,
			mutate: func(m map[string][]byte) map[string][]byte { m[KeyKey] = m[KeyCAKey]; return m }},
		{name: "a CA two thirds through its life: a new one beside it", after: 21 * time.Minute, trusted: time.Minute, want: "ca", wantBundle: 2,
			mutate: func(m map[string][]byte) map[string][]byte {
				leaf, _ := newLeaf(t0.Add(20*time.Minute), mustCA(t, m), s.hosts, s.certValidity)
				m[KeyCert], m[KeyKey] = leaf.certPEM, leaf.keyPEM
				return m
			}},
		{name: "a CA key that does not parse: a new CA beside the old", after: time.Minute, trusted: time.Minute, want: "ca", wantBundle: 2,
			mutate: func(m map[string][]byte) map[string][]byte { m[KeyCAKey] = []byte("garbage"); return m }},
		{name: "all expired: a new CA and certificate", after: 31 * time.Minute, trusted: time.Minute, want: "both", wantBundle: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := clone(data)
			if tc.mutate != nil {
				in = tc.mutate(in)
			}
			now := t0.Add(tc.after)
			d := mustPlan(t, now, in, now.Add(-tc.trusted), s)
			if tc.want == "none" {
				if d.data != nil {
					t.Fatalf("wrote the Secret (%s), want no change", d.why)
				}
				return
			}
			if d.data == nil {
				t.Fatalf("no change, want %s", tc.want)
			}
			got := parseHeld(t, d.data)
			newCA := !got.bundle[0].Equal(first.bundle[0])
			newLeaf := string(d.data[KeyCert]) != string(in[KeyCert])
			if kind := map[[2]bool]string{{false, true}: "leaf", {true, false}: "ca", {true, true}: "both", {false, false}: "none"}[[2]bool{newCA, newLeaf}]; kind != tc.want {
				t.Errorf("changed %s (%s), want %s", kind, d.why, tc.want)
			}
			if len(got.bundle) != tc.wantBundle {
				t.Errorf("%d CAs in the bundle, want %d", len(got.bundle), tc.wantBundle)
			}
			if err := verifies(got.leaf, got.bundle, s.hosts, now); err != nil {
				t.Errorf("the certificate does not verify under the bundle: %v", err)
			}
		})
	}
}

// TestPlanCAHandover: after a new CA, the certificate changes only once
// the API server has trusted the new CA for settle, and the old CA goes
// only reload after that.
func TestPlanCAHandover(t *testing.T) {
	s := testSettings
	s.certValidity = 25 * time.Minute // still valid when the CA is renewed
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	data := mustPlan(t, t0, nil, time.Time{}, s).data
	renew := t0.Add(21 * time.Minute)
	rotated := mustPlan(t, renew, data, t0, s).data
	before := parseHeld(t, rotated)

	if d := mustPlan(t, renew.Add(time.Minute), rotated, time.Time{}, s); d.data != nil || !d.wakeAt.IsZero() {
		t.Errorf("with the new CA not trusted yet: wrote %q or waits until %v, want neither", d.why, d.wakeAt)
	}
	trusted := renew.Add(5 * time.Second)
	if d := mustPlan(t, trusted.Add(s.settle/2), rotated, trusted, s); d.data != nil || !d.wakeAt.Equal(trusted.Add(s.settle)) {
		t.Errorf("trusted for half of settle: wrote %q, waits until %v; want no write and a wake at %v", d.why, d.wakeAt, trusted.Add(s.settle))
	}
	issue := trusted.Add(s.settle)
	d := mustPlan(t, issue, rotated, trusted, s)
	if d.data == nil {
		t.Fatal("trusted for settle: no new certificate")
	}
	after := parseHeld(t, d.data)
	if !signedBy(after.leaf, after.bundle[0]) || len(after.bundle) != 2 || !after.bundle[1].Equal(before.bundle[1]) {
		t.Errorf("want a certificate of the new CA with both CAs still trusted; got %d CAs", len(after.bundle))
	}
	if d2 := mustPlan(t, issue.Add(s.reload/2), d.data, trusted, s); d2.data != nil || d2.wakeAt.IsZero() {
		t.Errorf("before every replica reloaded: wrote %q or no wake, want to wait", d2.why)
	}
	d3 := mustPlan(t, issue.Add(s.reload+time.Second), d.data, trusted, s)
	if d3.data == nil || len(parseHeld(t, d3.data).bundle) != 1 {
		t.Errorf("after the reload: want the old CA dropped, got %v", d3.why)
	}
}

// TestPlanLifetime runs plan every 5 s over three CA lifetimes, with an
// API server that trusts the bundle of the previous pass and replicas that
// load the Secret up to 30 s late (a check interval under reload), and
// fails at the first moment a served certificate would not verify.
func TestPlanLifetime(t *testing.T) {
	s := testSettings
	const step = 5 * time.Second
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	var (
		data         map[string][]byte
		apiBundle    []*x509.Certificate
		trustedSince time.Time
		history      []*x509.Certificate // the certificate after each pass
		cas, leaves  = map[string]bool{}, map[string]bool{}
	)
	for now := t0; now.Before(t0.Add(3 * s.caValidity)); now = now.Add(step) {
		// trustedSince: when the API server's bundle first held the CA.
		current := parseCerts(data[KeyCABundle])
		if len(current) > 0 && containsCert(apiBundle, current[0]) {
			if trustedSince.IsZero() {
				trustedSince = now
			}
		} else {
			trustedSince = time.Time{}
		}
		d := mustPlan(t, now, data, trustedSince, s)
		if d.data != nil {
			if len(parseCerts(d.data[KeyCABundle])) > 0 && len(current) > 0 && !parseCerts(d.data[KeyCABundle])[0].Equal(current[0]) {
				trustedSince = time.Time{}
			}
			data = d.data
		}
		h := parseHeld(t, data)
		cas[string(h.bundle[0].Raw)], leaves[string(h.leaf.Raw)] = true, true
		history = append(history, h.leaf)
		const lag = 6 // passes: 30 s
		if len(history) > lag+1 {
			// Every certificate a replica may serve (this pass's and those of
			// the last 30 s) verifies under what the API server trusts.
			for i, served := range history[len(history)-lag-1:] {
				if err := verifies(served, apiBundle, s.hosts, now); err != nil {
					t.Fatalf("at %v the certificate of %d passes ago does not verify under the API server's bundle: %v", now.Sub(t0), lag-i, err)
				}
			}
		}
		apiBundle = h.bundle // injected; the API server has it at the next pass
	}
	if len(cas) < 4 || len(leaves) < 12 {
		t.Errorf("%d CAs and %d certificates over three CA lifetimes; want rotations of both", len(cas), len(leaves))
	}
}

func mustCA(t *testing.T, data map[string][]byte) *issued {
	t.Helper()
	ca, err := parsePair(encodeBundle(parseCerts(data[KeyCABundle])[:1]), data[KeyCAKey])
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func clone(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = append([]byte(nil), v...)
	}
	return out
}

// TestPlanSecretLost: a Secret deleted (or emptied) under running replicas
// makes a new CA, and keeps trusting what the webhook configuration
// trusts, so the certificates the other replicas still serve stay valid.
func TestPlanSecretLost(t *testing.T) {
	s := testSettings
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	before := parseHeld(t, mustPlan(t, t0, nil, time.Time{}, s).data)
	now := t0.Add(time.Minute)
	d, err := plan(planInput{now: now, data: nil, injected: before.bundle, settings: s})
	if err != nil {
		t.Fatal(err)
	}
	after := parseHeld(t, d.data)
	if len(after.bundle) != 2 || !after.bundle[1].Equal(before.bundle[0]) {
		t.Fatalf("%d CAs after the Secret was lost, want the new one and the one injected", len(after.bundle))
	}
	if err := verifies(before.leaf, after.bundle, s.hosts, now); err != nil {
		t.Errorf("the certificate other replicas serve is no longer trusted: %v", err)
	}
}
