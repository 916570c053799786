package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

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

// causeOf returns what the stream saw fail (a refused packet, the TLS
// handshake, a read or a write) in place of err, the driver's report of it
// ("invalid connection", "bad connection"), unless the server itself
// reported an error.
func (g *connGuard) causeOf(err error) error {
	var serverErr *gomysql.MySQLError
	if errors.As(err, &serverErr) {
		return err
	}
	if cause := g.failure(); cause != nil {
		return cause
	}
	if errors.Is(err, gomysql.ErrUnknownPlugin) {
		return fmt.Errorf("the server asked for the authentication method %.40q, which the driver does not support (%w)", g.plugin(), err)
	}
	return err
}

// failPhase returns the failure of a phase ("connect" or "query"). When
// the probe's context has ended, the message starts with that: the error
// itself then often only says that the socket was closed under the driver.
// An error the server reported reads as the prober's words for its reason,
// then the server's.
func failPhase(ctx context.Context, start time.Time, phase string, err error) probes.Result {
	reason := classify(ctx, err, phase == "query")
	var serverErr *gomysql.MySQLError
	if errors.As(err, &serverErr) {
		err = &serverError{words: serverWords(reason), err: err, number: serverErr.Number, state: serverErr.SQLState, text: serverErr.Message}
	}
	var numErr *strconv.NumError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("the server closed the connection (%w)", err)
	case errors.As(err, &numErr):
		err = fmt.Errorf("the server sent a value its column's type cannot hold: %w", err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("mysql: %s: %w (%w)", phase, ctxErr, err)
	} else {
		err = fmt.Errorf("mysql: %s: %w", phase, err)
	}
	return fail(start, reason, err)
}

// serverReason maps the number of an error the server reported to a
// reason; "" for the numbers it does not tell apart. MySQL and MariaDB
// share the numbers below 2000 and each has some of its own above.
func serverReason(number uint16) probes.Reason {
	switch number {
	case 1044, // ER_DBACCESS_DENIED_ERROR: no access to the database
		1045, // ER_ACCESS_DENIED_ERROR: wrong user or password
		1129, // ER_HOST_IS_BLOCKED: too many failed connections from this host
		1130, // ER_HOST_NOT_PRIVILEGED: no account for this host
		1251, // ER_NOT_SUPPORTED_AUTH_MODE
		1698, // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
		1820, // ER_MUST_CHANGE_PASSWORD
		1862, // ER_MUST_CHANGE_PASSWORD_LOGIN: the password expired
		3118, // MySQL ER_ACCOUNT_HAS_BEEN_LOCKED
		4151: // MariaDB ER_ACCOUNT_HAS_BEEN_LOCKED
		return probes.ReasonAuth
	case 1049: // ER_BAD_DB_ERROR
		return probes.ReasonDBMissing
	case 1040, // ER_CON_COUNT_ERROR: max_connections
		1203, // ER_TOO_MANY_USER_CONNECTIONS: max_user_connections
		1226: // ER_USER_LIMIT_REACHED: an account's resource limit
		return probes.ReasonTooManyConnections
	case 1047, // ER_UNKNOWN_COM_ERROR: a Galera node not ready ("WSREP has not yet prepared node")
		1053, // ER_SERVER_SHUTDOWN
		1927, // MariaDB ER_CONNECTION_KILLED
		3032, // MySQL ER_SERVER_OFFLINE_MODE
		3169: // MySQL ER_SESSION_WAS_KILLED
		return probes.ReasonUnavailable
	case 1969, // MariaDB ER_STATEMENT_TIMEOUT: max_statement_time
		3024: // MySQL ER_QUERY_TIMEOUT: max_execution_time
		return probes.ReasonTimeout
	case 1043, // ER_HANDSHAKE_ERROR: the server could not read the login
		1156: // ER_NET_PACKETS_OUT_OF_ORDER
		return probes.ReasonProtocol
	}
	return ""
}

// classify maps an error of a probe to a Reason; query tells whether the
// login had succeeded.
func classify(ctx context.Context, err error, query bool) probes.Reason {
	var serverErr *gomysql.MySQLError
	if errors.As(err, &serverErr) {
		if r := serverReason(serverErr.Number); r != "" {
			return r
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
		numErr  *strconv.NumError
	)
	switch {
	case errors.As(err, &refused):
		return refused.reason
	case errors.As(err, &tlsErr):
		return probes.ReasonTLS
	case reason != probes.ReasonError:
		return reason
	case errors.Is(err, gomysql.ErrMalformPkt), errors.Is(err, gomysql.ErrPktSync), errors.Is(err, gomysql.ErrPktSyncMul),
		errors.Is(err, gomysql.ErrOldProtocol), errors.Is(err, gomysql.ErrBusyBuffer), errors.As(err, &numErr):
		// A packet or a value (a number column that is not one) the
		// driver cannot read, or packets it did not expect (still
		// unread when it sends a command: a busy buffer).
		return probes.ReasonProtocol
	case errors.Is(err, gomysql.ErrCleartextPassword), errors.Is(err, gomysql.ErrNativePassword),
		errors.Is(err, gomysql.ErrOldPassword), errors.Is(err, gomysql.ErrUnknownPlugin):
		// An authentication method the prober does not use.
		return probes.ReasonAuth
	case errors.Is(err, gomysql.ErrInvalidConn), errors.Is(err, driver.ErrBadConn):
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
		return "the server has no connection left for this login"
	case probes.ReasonUnavailable:
		return "the server is shutting down, not ready or ended the session"
	case probes.ReasonTimeout:
		return "the query ran past the server's statement time limit"
	case probes.ReasonProtocol:
		return "the server could not follow the protocol"
	case probes.ReasonQueryError:
		return "the query failed"
	}
	return "the server refused the login"
}

// serverError is an error the server reported: the prober's words for its
// reason, the error's number and SQLSTATE, and the server's own text.
type serverError struct {
	words  string
	number uint16
	state  [5]byte
	text   string
	err    error
}

func (e *serverError) Error() string {
	if e.state == [5]byte{} {
		return fmt.Sprintf("%s (error %d): %s", e.words, e.number, e.text)
	}
	return fmt.Sprintf("%s (error %d, SQLSTATE %s): %s", e.words, e.number, e.state[:], e.text)
}

func (e *serverError) Unwrap() error { return e.err }

// truthy reports whether the first column of a probe query passes. NULL,
// zero and the words false, f, 0, no and off (any case, surrounding space
// ignored) are false; everything else is true. The driver reads integer
// columns as int64 (uint64 when unsigned BIGINT), FLOAT and DOUBLE as
// floats, DECIMAL and text as bytes; a BIT arrives as a number (see
// bitValue).
func truthy(v driver.Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case uint64:
		return v != 0
	case float32:
		return v != 0
	case float64:
		return v != 0
	case string:
		return truthyText(v)
	case []byte:
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
	// DECIMAL comes as text: 0.00 is as false as 0.
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
