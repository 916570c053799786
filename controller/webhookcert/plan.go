package webhookcert

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"
)

// planInput is what a pass decides from.
type planInput struct {
	now time.Time
	// data is the Secret's data; nil when there is no Secret.
	data map[string][]byte
	// trustedSince is when the webhook configuration was first seen to
	// trust the Secret's current CA (the first of its bundle); zero when
	// it has not been.
	trustedSince time.Time
	// injected are the CAs the webhook configuration trusts now: a CA made
	// afresh (the Secret lost, edited or corrupted) keeps them beside it,
	// so that certificates other replicas still serve stay trusted.
	injected []*x509.Certificate
	settings
}

// settings are the Options plan needs, with defaults applied.
type settings struct {
	caName                   string
	hosts                    []string
	caValidity, certValidity time.Duration
	settle                   time.Duration
	reload                   time.Duration
}

// decision is what a pass must do.
type decision struct {
	// data is what the Secret must hold; nil when it holds it already.
	data map[string][]byte
	// why says what changed, for the log.
	why string
	// wakeAt is when a wait of this decision ends (the new CA trusted long
	// enough, every replica serving the new certificate); zero when none.
	wakeAt time.Time
}

// plan decides what the Secret must hold (see the package doc).
func plan(in planInput) (decision, error) {
	now := in.now
	bundle := parseCerts(in.data[KeyCABundle])
	var ca *issued
	if len(bundle) > 0 && bundle[0].IsCA && now.Before(bundle[0].NotAfter) {
		ca, _ = parsePair(encodeBundle(bundle[:1]), in.data[KeyCAKey])
	}
	leaf, _ := parsePair(in.data[KeyCert], in.data[KeyKey])
	if leaf != nil && (!now.Before(leaf.cert.NotAfter) || !servesHosts(leaf.cert, in.hosts) || signer(leaf.cert, bundle) == nil) {
		leaf = nil
	}

	var d decision
	switch {
	case ca == nil || renewDue(now, ca.cert):
		// A new CA, trusted beside the one the serving certificate has,
		// which stays until the new CA has been trusted long enough.
		next, err := newCA(now, in.caName, in.caValidity)
		if err != nil {
			return decision{}, err
		}
		trusted := []*x509.Certificate{next.cert}
		d.why = "a new CA: there was none usable"
		if ca != nil {
			d.why = "a new CA: two thirds of the previous one's life have passed"
		}
		if leaf != nil {
			trusted = append(trusted, signer(leaf.cert, bundle))
		}
		if ca == nil {
			for _, c := range in.injected {
				if c.IsCA && now.Before(c.NotAfter) && !containsCert(trusted, c) {
					trusted = append(trusted, c)
				}
			}
		}
		if leaf == nil {
			if leaf, err = newLeaf(now, next, in.hosts, in.certValidity); err != nil {
				return decision{}, err
			}
			d.why += ", and a serving certificate"
		}
		d.data = secretData(trusted, next, leaf)
		return d, nil

	case leaf == nil:
		var err error
		if leaf, err = newLeaf(now, ca, in.hosts, in.certValidity); err != nil {
			return decision{}, err
		}
		d.why = "a serving certificate: there was none usable"

	case !signedBy(leaf.cert, ca.cert):
		// Served only once the API server has trusted the CA for a while:
		// it reads the webhook configuration from an informer.
		if in.trustedSince.IsZero() || now.Before(in.trustedSince.Add(in.settle)) {
			if !in.trustedSince.IsZero() {
				d.wakeAt = in.trustedSince.Add(in.settle)
			}
			break
		}
		var err error
		if leaf, err = newLeaf(now, ca, in.hosts, in.certValidity); err != nil {
			return decision{}, err
		}
		d.why = "a serving certificate of the new CA"

	case renewDue(now, leaf.cert):
		var err error
		if leaf, err = newLeaf(now, ca, in.hosts, in.certValidity); err != nil {
			return decision{}, err
		}
		d.why = "a serving certificate: two thirds of the previous one's life have passed"
	}

	// The previous CA goes once every replica has had time to load a
	// certificate of the current one.
	trusted := bundle
	if len(bundle) > 1 && signedBy(leaf.cert, ca.cert) {
		if now.After(issuedAt(leaf.cert).Add(in.reload)) {
			trusted = bundle[:1]
		} else {
			d.wakeAt = issuedAt(leaf.cert).Add(in.reload)
		}
	}
	// An expired CA can vouch for nothing.
	var kept []*x509.Certificate
	for _, c := range trusted {
		if now.Before(c.NotAfter) {
			kept = append(kept, c)
		}
	}
	data := secretData(kept, ca, leaf)
	if !sameData(data, in.data) {
		d.data = data
		if d.why == "" {
			d.why = fmt.Sprintf("the CA bundle: %d CAs", len(kept))
		}
	}
	return d, nil
}

// signer returns the CA of bundle that signed cert, nil when none did.
func signer(cert *x509.Certificate, bundle []*x509.Certificate) *x509.Certificate {
	for _, ca := range bundle {
		if signedBy(cert, ca) {
			return ca
		}
	}
	return nil
}

func secretData(bundle []*x509.Certificate, ca, leaf *issued) map[string][]byte {
	return map[string][]byte{
		KeyCABundle: encodeBundle(bundle),
		KeyCAKey:    ca.keyPEM,
		KeyCert:     leaf.certPEM,
		KeyKey:      leaf.keyPEM,
	}
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func containsCert(bundle []*x509.Certificate, c *x509.Certificate) bool {
	for _, b := range bundle {
		if b.Equal(c) {
			return true
		}
	}
	return false
}
