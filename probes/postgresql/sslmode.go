package postgresql

import (
	"errors"
	"fmt"
)

// SSLMode is libpq's sslmode: whether the prober uses TLS and how it
// verifies the server. libpq's allow and prefer are not offered: they fall
// back to plain TCP without saying so, and a probe must check one known
// configuration.
type SSLMode string

// The SSL modes.
const (
	SSLDisable    SSLMode = "disable"     // plain TCP
	SSLRequire    SSLMode = "require"     // TLS, server not verified (unless CACert is set, as libpq does)
	SSLVerifyCA   SSLMode = "verify-ca"   // TLS, server certificate signed by CACert
	SSLVerifyFull SSLMode = "verify-full" // verify-ca, and the certificate names the server
)

// maxQuotedMode bounds the value an error quotes: a mode comes from user
// input (a Secret, say) and may be long.
const maxQuotedMode = 40

// Validate returns nil for the modes above and otherwise an error naming
// the value (cut to 40 characters). The empty mode is refused too: the
// default sslmode differs between libpq and versions of lib/pq, so a
// caller has to choose.
func (m SSLMode) Validate() error {
	switch m {
	case SSLDisable, SSLRequire, SSLVerifyCA, SSLVerifyFull:
		return nil
	case "":
		return errors.New("postgresql: SSL mode is required: disable, require, verify-ca or verify-full")
	}
	return fmt.Errorf("postgresql: SSL mode %.*q is not disable, require, verify-ca or verify-full", maxQuotedMode, string(m))
}
