package publisher

import (
	"testing"

	swhv1alpha1 "github.com/swh-dev/swh/api/v1alpha1"
)

// TestTLSModesAreSSLModes: every tlsMode of the CRD is an SSL mode of the
// prober, so a valid resource never fails with reason config; a libpq mode
// the prober does not offer is refused, even from a Secret.
func TestTLSModesAreSSLModes(t *testing.T) {
	for _, m := range []swhv1alpha1.PostgreSQLTLSMode{
		swhv1alpha1.PostgreSQLTLSDisable, swhv1alpha1.PostgreSQLTLSRequire,
		swhv1alpha1.PostgreSQLTLSVerifyCA, swhv1alpha1.PostgreSQLTLSVerifyFull,
	} {
		if !validTLSMode(string(m)) {
			t.Errorf("the CRD's tlsMode %q is not an SSL mode of the prober", m)
		}
	}
	for _, m := range []string{"", "prefer", "allow", "Require"} {
		if validTLSMode(m) {
			t.Errorf("tlsMode %q was accepted", m)
		}
	}
}
