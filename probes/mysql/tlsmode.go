package mysql

import (
	"errors"
	"fmt"
)

// TLSMode says whether the prober uses TLS and how it verifies the server.
// MySQL's PREFERRED is not offered: it falls back to plain TCP without
// saying so, and a probe must check one known configuration.
type TLSMode string

// The TLS modes, named as PostgreSQL's sslmode (MySQL's --ssl-mode
// DISABLED, REQUIRED, VERIFY_CA and VERIFY_IDENTITY).
const (
	TLSDisable    TLSMode = "disable"     // plain TCP
	TLSRequire    TLSMode = "require"     // TLS, server not verified (unless CACert is set, as probes/postgresql does)
	TLSVerifyCA   TLSMode = "verify-ca"   // TLS, server certificate signed by CACert
	TLSVerifyFull TLSMode = "verify-full" // verify-ca, and the certificate names the server
)

// maxQuotedMode bounds the value an error quotes: a mode comes from user
// input (a Secret, say) and may be long.
const maxQuotedMode = 40

// Validate returns nil for the modes above and otherwise an error naming
// the value (cut to 40 characters). The empty mode is refused too: clients
// default differently (the MySQL client prefers TLS, the Go driver does
// not use it), so a caller has to choose.
func (m TLSMode) Validate() error {
	switch m {
	case TLSDisable, TLSRequire, TLSVerifyCA, TLSVerifyFull:
		return nil
	case "":
		return errors.New("mysql: TLS mode is required: disable, require, verify-ca or verify-full")
	}
	return fmt.Errorf("mysql: TLS mode %.*q is not disable, require, verify-ca or verify-full", maxQuotedMode, string(m))
}

// verified reports whether a connection in mode m (with CACert set or not)
// authenticates the server: only then may the password itself go to it.
func (m TLSMode) verified(haveCA bool) bool {
	return m == TLSVerifyCA || m == TLSVerifyFull || (m == TLSRequire && haveCA)
}
