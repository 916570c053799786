package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/swh-dev/swh/probes"
)

// Config configures a Prober.
type Config struct {
	// User is the ACL user to log in as (Redis 6 or later): AUTH user
	// password. Empty: AUTH password, as the default user, or no AUTH at
	// all when Password is empty too.
	User string
	// Password is sent with AUTH. AUTH carries it as it is, in clear, so
	// it goes only to a verified server (TLSVerifyCA, TLSVerifyFull) or
	// when AllowCleartextPassword is set.
	Password string
	// TLSMode is TLSDisable, TLSRequire, TLSVerifyCA or TLSVerifyFull;
	// it is required.
	TLSMode TLSMode
	// ServerName is the name verify-full checks and the SNI sent; empty
	// means the target host (a pod IP then needs an IP SAN).
	ServerName string
	// CACert is a PEM bundle of the authorities that verify the server.
	// verify-ca needs it; verify-full uses the system roots without it;
	// require and disable refuse it, as they would not use it.
	CACert []byte
	// ClientCert and ClientKey are a PEM certificate and key for servers
	// that authenticate clients by certificate (tls-auth-clients); both
	// or neither.
	ClientCert []byte
	ClientKey  []byte
	// AllowCleartextPassword lets the prober send Password over a
	// connection whose server is not verified (TLSDisable, TLSRequire).
	// Off, such a probe fails with probes.ReasonAuth before it connects:
	// whoever answers on the target's address would otherwise receive
	// the password.
	AllowCleartextPassword bool
	// Role is the role the server must have: RoleAny (the default),
	// RoleMaster or RoleReplica.
	Role Role
	// MaxReplicationLag, when set, fails a replica that is further behind
	// its master than it allows, with probes.ReasonReplicationLag, and
	// one whose link to its master is down, with
	// probes.ReasonReplicaLinkDown. A master is never judged.
	MaxReplicationLag *ReplicationLag
	// Dialer opens the connection; nil means a net.Dialer.
	Dialer probes.Dialer
}

// Prober checks a Redis server: it logs in when configured to, sends PING
// and, with a Role or a MaxReplicationLag, ROLE and INFO replication, all
// in one round trip, and judges the answers. Each probe opens exactly one
// connection and closes it with a reset. The context's deadline bounds
// the whole probe; cancelling it closes the socket. It is safe for
// concurrent use; one Prober probes any number of targets.
type Prober struct {
	tls        *tls.Config // nil for TLSDisable
	serverName string
	dialer     probes.Dialer
	role       Role
	lag        *ReplicationLag
	// refuseCleartext fails every probe: the password would go in clear
	// to a server nobody verified.
	refuseCleartext bool
	tlsMode         TLSMode
	// request holds the commands of every probe, pipelined; commands
	// names them in order.
	request  []byte
	commands []string
}

var _ probes.Prober = (*Prober)(nil)

// The commands a probe sends, by the names messages use.
const (
	cmdAuth = "AUTH"
	cmdPing = "PING"
	cmdRole = "ROLE"
	cmdInfo = "INFO replication"
)

// New validates cfg and returns a prober.
func New(cfg Config) (*Prober, error) {
	p := &Prober{serverName: cfg.ServerName, dialer: cfg.Dialer, role: cfg.Role, tlsMode: cfg.TLSMode}
	if p.dialer == nil {
		// As the probes package's default: keep-alive is pointless on a
		// connection that lives for one probe.
		p.dialer = &net.Dialer{KeepAlive: -1}
	}
	var err error
	if p.tls, err = tlsConfig(cfg); err != nil {
		return nil, err
	}
	if p.tls == nil && cfg.ServerName != "" {
		return nil, errors.New("redis: ServerName is set with TLS mode disable")
	}
	if err := cfg.Role.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxReplicationLag != nil {
		if err := cfg.MaxReplicationLag.validate(); err != nil {
			return nil, err
		}
		lag := *cfg.MaxReplicationLag
		p.lag = &lag
	}
	p.refuseCleartext = cfg.Password != "" && !cfg.TLSMode.verified() && !cfg.AllowCleartextPassword

	if cfg.User != "" || cfg.Password != "" {
		if cfg.User != "" {
			p.request = appendCommand(p.request, "AUTH", cfg.User, cfg.Password)
		} else {
			p.request = appendCommand(p.request, "AUTH", cfg.Password)
		}
		p.commands = append(p.commands, cmdAuth)
	}
	// PING always: a server loading its dataset (LOADING), a replica
	// refusing stale data (MASTERDOWN) or one running a long script
	// (BUSY) still answers ROLE and INFO, but no client's command.
	p.request = appendCommand(p.request, "PING")
	p.commands = append(p.commands, cmdPing)
	if p.role != RoleAny || p.lag != nil {
		p.request = appendCommand(p.request, "ROLE")
		p.commands = append(p.commands, cmdRole)
	}
	if p.lag != nil {
		p.request = appendCommand(p.request, "INFO", "replication")
		p.commands = append(p.commands, cmdInfo)
	}
	return p, nil
}

// appendCommand appends a command as Redis reads one: an array of bulk
// strings.
func appendCommand(b []byte, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, "\r\n"...)
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, "\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

// Probe connects to target, sends the probe's commands and judges the
// answers.
func (p *Prober) Probe(ctx context.Context, target probes.Target) probes.Result {
	ctx, cancel, start, err := begin(ctx, target)
	defer cancel()
	if err != nil {
		return fail(start, probes.ReasonInvalidTarget, err)
	}
	if p.refuseCleartext {
		// Before connecting: nothing is sent, and a probe that can
		// never pass says why at once.
		return fail(start, probes.ReasonAuth, fmt.Errorf("redis: AUTH sends the password in clear text and TLS mode %s does not verify the server; "+
			"the prober refused to send it (use TLS mode verify-ca or verify-full, or allow cleartext passwords: insecureAllowCleartextPassword)", p.tlsMode))
	}
	answers, phase, err := p.exchange(ctx, target)
	if err != nil {
		return failPhase(ctx, start, phase, err)
	}
	next := func() value { v := answers[0]; answers = answers[1:]; return v }
	if p.commands[0] == cmdAuth {
		if v := next(); v.typ != typeSimple || v.str != "OK" {
			return fail(start, probes.ReasonProtocol, fmt.Errorf("redis: AUTH answered %s, not OK", v.describe()))
		}
	}
	if v := next(); v.typ != typeSimple || v.str != "PONG" {
		return fail(start, probes.ReasonProtocol, fmt.Errorf("redis: PING answered %s, not PONG", v.describe()))
	}
	if len(answers) == 0 {
		return pass(start, "PONG")
	}
	role, err := parseRole(next())
	if err != nil {
		return fail(start, probes.ReasonProtocol, fmt.Errorf("redis: %w", err))
	}
	var info map[string]string
	if p.lag != nil && role.name == roleSlave {
		text, ok := next().text()
		if !ok {
			return fail(start, probes.ReasonProtocol, errors.New("redis: INFO replication did not answer a string"))
		}
		if info, err = parseInfo(text); err != nil {
			return fail(start, probes.ReasonProtocol, fmt.Errorf("redis: %w", err))
		}
	}
	j := judge(p.role, p.lag, role, info)
	if j.err != nil {
		return fail(start, j.reason, j.err)
	}
	return pass(start, j.msg)
}

// exchange dials target, sends the request and reads one answer per
// command, on one connection closed before it returns. It returns the
// answers or the phase that failed and its error; an error answer of the
// server is a *serverError.
func (p *Prober) exchange(ctx context.Context, target probes.Target) ([]value, string, error) {
	raw, err := p.dialer.DialContext(ctx, "tcp", target.Addr())
	if err != nil {
		return nil, "connecting", err
	}
	resetOnClose(raw)
	defer raw.Close()
	// The deadline bounds every read and write; cancellation closes the
	// socket under them.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	if deadline, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(deadline)
	}
	conn := raw
	if p.tls != nil {
		if conn, err = p.handshake(ctx, raw, target); err != nil {
			return nil, "TLS handshake", err
		}
	}
	if _, err := conn.Write(p.request); err != nil {
		return nil, "sending the commands", err
	}
	r := newRESPReader(conn)
	answers := make([]value, 0, len(p.commands))
	for _, cmd := range p.commands {
		v, err := r.readValue()
		if err != nil {
			return nil, "reading the answer to " + cmd, err
		}
		if v.typ == typeError {
			// The rest answers a failed command (NOAUTH after a
			// refused AUTH): it says nothing more.
			return nil, cmd, newServerError(cmd, v.str)
		}
		answers = append(answers, v)
	}
	return answers, "", nil
}

// resetOnClose sets SO_LINGER to 0 so that Close sends a RST instead of a
// FIN, as the probes package's probers do: frequent probes then leave no
// TIME_WAIT sockets to exhaust the ephemeral ports. A probe has nothing
// left to send when it closes.
func resetOnClose(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
}

// serverError is an error answer of the server to one of the probe's
// commands: the prober's words for its reason, and the server's text.
type serverError struct {
	cmd, text string
	reason    probes.Reason
}

func newServerError(cmd, text string) *serverError {
	return &serverError{cmd: cmd, text: text, reason: errorReason(cmd, text)}
}

func (e *serverError) Error() string {
	return serverWords(e.reason) + ": " + e.text
}

// errorReason maps an error answer to a reason by its code, the first word
// of its text.
func errorReason(cmd, text string) probes.Reason {
	code, _, _ := strings.Cut(text, " ")
	switch code {
	case "NOAUTH", "WRONGPASS", "NOPERM", "DENIED": // DENIED: protected mode
		return probes.ReasonAuth
	case "LOADING", "MASTERDOWN", "BUSY":
		return probes.ReasonUnavailable
	}
	switch {
	case strings.HasPrefix(text, "ERR max number of clients reached"):
		// Sent on connecting, before any command is read: it answers
		// whichever came first, AUTH included.
		return probes.ReasonTooManyConnections
	case cmd == cmdAuth:
		// "ERR AUTH <password> called without any password configured
		// for the default user", and older servers' wordings.
		return probes.ReasonAuth
	}
	// The server speaks RESP but refused a command: an unknown command
	// (a proxy without ROLE, a renamed command) or another error.
	return probes.ReasonQueryError
}

// serverWords says what an error answer means, for its reason.
func serverWords(r probes.Reason) string {
	switch r {
	case probes.ReasonAuth:
		return "authentication failed"
	case probes.ReasonUnavailable:
		return "the server is not available (loading, stale or busy)"
	case probes.ReasonTooManyConnections:
		return "the server has no connection slot left"
	}
	return "the command failed"
}

// classify maps an error of a probe to a Reason.
func classify(ctx context.Context, err error) probes.Reason {
	reason := probes.Classify(ctx, err)
	if reason == probes.ReasonTimeout || reason == probes.ReasonCanceled {
		return reason
	}
	var (
		server   *serverError
		protocol *protocolError
		tlsErr   *tlsPhaseError
	)
	switch {
	case errors.As(err, &server):
		return server.reason
	case errors.As(err, &protocol):
		return probes.ReasonProtocol
	case errors.As(err, &tlsErr):
		return probes.ReasonTLS
	}
	return reason
}

// failPhase returns the failure of a phase. When the probe's context has
// ended, the message says so first: the error itself then often only says
// that the socket was closed.
func failPhase(ctx context.Context, start time.Time, phase string, err error) probes.Result {
	reason := classify(ctx, err)
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("redis: %s: %w (%w)", phase, ctxErr, err)
	} else {
		err = fmt.Errorf("redis: %s: %w", phase, err)
	}
	return fail(start, reason, err)
}

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
