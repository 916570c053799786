package postgresql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/swh-dev/swh/probes"
)

// begin starts a probe as the probes package's probers do: it records the
// start time, applies probes.DefaultTimeout when ctx has no deadline, and
// validates the target.
func begin(ctx context.Context, t probes.Target) (context.Context, context.CancelFunc, time.Time, error) {
	start := time.Now()
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, probes.DefaultTimeout)
	}
	return ctx, cancel, start, t.Validate()
}

func pass(start time.Time, msg string) probes.Result {
	return probes.Result{Status: probes.Success, Reason: probes.ReasonOK, Message: probes.CutMessage(msg), Latency: time.Since(start)}
}

func fail(start time.Time, reason probes.Reason, err error) probes.Result {
	return probes.Result{Status: probes.Failure, Reason: reason, Message: probes.CutMessage(err.Error()), Latency: time.Since(start), Err: err}
}

// SQLSTATE codes the prober tells apart.
const (
	sqlstateInvalidAuthorization = "28000" // e.g. no pg_hba.conf entry
	sqlstateInvalidPassword      = "28P01"
	sqlstateInvalidCatalogName   = "3D000" // the database does not exist
	sqlstateTooManyConnections   = "53300"
	sqlstateQueryCanceled        = "57014" // statement_timeout
	sqlstateAdminShutdown        = "57P01"
	sqlstateCrashShutdown        = "57P02"
	sqlstateCannotConnectNow     = "57P03" // starting up, shutting down, recovering
)

// classify maps an error of a probe to a Reason; query tells whether the
// login had succeeded.
func classify(ctx context.Context, err error, query bool) probes.Reason {
	if pqErr := pq.As(err); pqErr != nil {
		switch pqErr.Code {
		case sqlstateInvalidPassword, sqlstateInvalidAuthorization:
			return probes.ReasonAuth
		case sqlstateInvalidCatalogName:
			return probes.ReasonDBMissing
		case sqlstateTooManyConnections:
			return probes.ReasonTooManyConnections
		case sqlstateQueryCanceled:
			return probes.ReasonTimeout
		case sqlstateAdminShutdown, sqlstateCrashShutdown, sqlstateCannotConnectNow:
			return probes.ReasonUnavailable
		}
		if query {
			return probes.ReasonQueryError
		}
		return probes.ReasonError
	}
	reason := probes.Classify(ctx, err)
	if reason == probes.ReasonTimeout || reason == probes.ReasonCanceled {
		return reason
	}
	var (
		refused *streamError
		tlsErr  *tlsPhaseError
	)
	switch {
	case errors.As(err, &refused):
		return refused.reason
	case errors.As(err, &tlsErr):
		return probes.ReasonTLS
	case reason != probes.ReasonError:
		return reason
	case errors.Is(err, driver.ErrBadConn):
		// pq reports a lost connection, and a FATAL error during a
		// query, as ErrBadConn.
		return probes.ReasonReset
	case query:
		return probes.ReasonQueryError
	}
	return reason
}

// serverWords says what an error the server reported means, for a reason
// classify gave it.
func serverWords(r probes.Reason) string {
	switch r {
	case probes.ReasonAuth:
		return "authentication failed"
	case probes.ReasonDBMissing:
		return "the database does not exist"
	case probes.ReasonTooManyConnections:
		return "the server has no connection slot left for this login"
	case probes.ReasonUnavailable:
		return "the server is starting up, shutting down or recovering"
	case probes.ReasonTimeout:
		return "the query ran past statement_timeout"
	case probes.ReasonQueryError:
		return "the query failed"
	}
	return "the server refused the login"
}

// serverError is an error the server reported: the prober's words for its
// reason, its SQLSTATE and the server's own text.
type serverError struct {
	words, code, text string
	err               error
}

func (e *serverError) Error() string {
	return fmt.Sprintf("%s (SQLSTATE %s): %s", e.words, e.code, e.text)
}

func (e *serverError) Unwrap() error { return e.err }

// truthy reports whether the first column of a probe query passes. NULL,
// false, zero and the words false, f, 0, no and off (any case, surrounding
// space ignored) are false; everything else is true.
func truthy(v driver.Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return truthyText(v)
	case []byte: // numeric, and types pq does not decode
		return truthyText(string(v))
	}
	return true
}

func truthyText(s string) bool {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "false", "f", "0", "no", "off":
		return false
	}
	// numeric comes as text: 0.00 is as false as 0.
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == 0 {
		return false
	}
	return true
}

// describeValue formats a column value for a result message.
func describeValue(v driver.Value) string {
	const maxLen = 64
	var s string
	switch v := v.(type) {
	case nil:
		return "NULL"
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Sprint(v)
	}
	if len(s) > maxLen {
		s = strings.ToValidUTF8(s[:maxLen], "") + "…"
	}
	return strconv.Quote(s)
}
