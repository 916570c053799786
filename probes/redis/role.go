package redis

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/swh-dev/swh/probes"
)

// Role is the replication role a probe asks of the server.
type Role string

// The roles.
const (
	RoleAny     Role = ""        // any: a master, a replica in any state, a Sentinel (not with a lag bound: a Sentinel has no data)
	RoleMaster  Role = "master"  // a master (a primary): what a write Service selects
	RoleReplica Role = "replica" // a replica whose link to its master is up and not syncing
)

// Validate returns nil for the roles above and otherwise an error naming
// the value (cut to 40 characters).
func (r Role) Validate() error {
	switch r {
	case RoleAny, RoleMaster, RoleReplica:
		return nil
	}
	return fmt.Errorf("redis: role %.*q is not master, replica or empty (any)", maxQuotedMode, string(r))
}

// ReplicationLag bounds how far a replica may be behind its master and
// still pass. A master is never judged. Zero fields set no bound; a probe
// with a bound sends INFO replication after ROLE.
type ReplicationLag struct {
	// Bytes bounds the replication stream the replica has received and
	// not processed yet: slave_read_repl_offset minus slave_repl_offset
	// in INFO replication. It needs Redis 7.0 or later; an older replica
	// fails with probes.ReasonProtocol.
	Bytes int64
	// Time bounds how long ago the replica last heard from its master:
	// master_last_io_seconds_ago, in whole seconds. An idle master sends
	// only its ping, every repl-ping-replica-period (10 s by default), so
	// Time must be above that period or a healthy idle replica fails. A
	// bound below a second cannot be measured and is refused.
	Time time.Duration
}

// validate refuses bounds that cannot work.
func (l ReplicationLag) validate() error {
	switch {
	case l.Bytes < 0 || l.Time < 0:
		return errors.New("redis: MaxReplicationLag bounds must not be negative")
	case l.Bytes == 0 && l.Time == 0:
		return errors.New("redis: MaxReplicationLag sets no bound")
	case l.Time > 0 && l.Time < time.Second:
		return fmt.Errorf("redis: MaxReplicationLag.Time %s is below a second, the unit of master_last_io_seconds_ago", l.Time)
	}
	return nil
}

// roleReply is ROLE's answer.
type roleReply struct {
	name string // "master", "slave" or "sentinel"
	// A master's replicas.
	replicas int
	// A replica's master, and the state of its link: "connected" when
	// up; "connect", "connecting", "sync", "handshake" and the like
	// while it is not.
	master string // host:port
	state  string
}

// Roles as ROLE names them.
const (
	roleMaster   = "master"
	roleSlave    = "slave"
	roleSentinel = "sentinel"
	stateUp      = "connected"
)

// parseRole reads ROLE's answer: ["master", offset, [[ip, port, offset]
// ...]], ["slave", host, port, state, offset] or ["sentinel", [names]].
func parseRole(v value) (roleReply, error) {
	if v.typ != typeArray || v.null || len(v.elems) == 0 {
		return roleReply{}, protocolErrorf("ROLE answered %s, not an array naming a role", v.describe())
	}
	name, ok := v.elems[0].text()
	if !ok {
		return roleReply{}, protocolErrorf("ROLE answered an array starting with %s, not a role", v.elems[0].describe())
	}
	r := roleReply{name: name}
	switch name {
	case roleMaster:
		if len(v.elems) < 3 || v.elems[2].typ != typeArray || v.elems[2].null {
			return roleReply{}, protocolErrorf("ROLE answered master without a list of replicas")
		}
		r.replicas = len(v.elems[2].elems)
	case roleSlave:
		if len(v.elems) != 5 {
			return roleReply{}, protocolErrorf("ROLE answered slave with %d elements, not 5", len(v.elems))
		}
		host, okHost := v.elems[1].text()
		port := v.elems[2]
		state, okState := v.elems[3].text()
		if !okHost || port.typ != typeInteger || !okState {
			return roleReply{}, protocolErrorf("ROLE answered slave with %s, %s and %s, not a host, a port and a state",
				v.elems[1].describe(), port.describe(), v.elems[3].describe())
		}
		r.master = net.JoinHostPort(host, strconv.FormatInt(port.num, 10))
		r.state = state
	case roleSentinel:
	default:
		return roleReply{}, protocolErrorf("ROLE answered the unknown role %q", cut([]byte(name)))
	}
	return r, nil
}

// judgement is the outcome of a probe's answers: a message on success, a
// reason and an error on failure.
type judgement struct {
	msg    string
	reason probes.Reason
	err    error
}

func passed(format string, args ...any) judgement {
	return judgement{msg: fmt.Sprintf(format, args...), reason: probes.ReasonOK}
}

func failed(reason probes.Reason, format string, args ...any) judgement {
	return judgement{reason: reason, err: fmt.Errorf("redis: "+format, args...)}
}

// judge checks ROLE's answer against the probe's Role and, on a replica,
// INFO replication's fields against MaxReplicationLag (info is nil
// without a bound).
func judge(want Role, lag *ReplicationLag, role roleReply, info map[string]string) judgement {
	switch role.name {
	case roleSentinel:
		return failed(probes.ReasonWrongRole, "the server is a Redis Sentinel, not a master or a replica")
	case roleMaster:
		if want == RoleReplica {
			return failed(probes.ReasonWrongRole, "the server is a master; the probe wants a replica")
		}
		return passed("master with %d %s", role.replicas, plural(role.replicas, "replica", "replicas"))
	}
	if want == RoleMaster {
		return failed(probes.ReasonWrongRole, "the server is a replica of %s; the probe wants a master", role.master)
	}
	if role.state != stateUp {
		return failed(probes.ReasonReplicaLinkDown, "the replica's link to its master %s is down (state %q)", role.master, cut([]byte(role.state)))
	}
	if lag == nil {
		return passed("replica of %s, link up", role.master)
	}
	ri, err := readReplicaInfo(info)
	switch {
	case err != nil:
		return judgement{reason: probes.ReasonProtocol, err: fmt.Errorf("redis: %w", err)}
	case !ri.linkUp:
		return failed(probes.ReasonReplicaLinkDown, "the replica's link to its master %s is down (INFO master_link_status)", role.master)
	case ri.syncing:
		return failed(probes.ReasonReplicaLinkDown, "the replica is still syncing with its master %s", role.master)
	case lag.Bytes > 0 && ri.pending < 0:
		return failed(probes.ReasonProtocol, "the replica does not report slave_read_repl_offset (Redis 7.0 or later), which MaxReplicationLag.Bytes needs")
	case lag.Bytes > 0 && ri.pending > lag.Bytes:
		return failed(probes.ReasonReplicationLag, "the replica has %d bytes of replication stream received and not processed (bound %d); master %s",
			ri.pending, lag.Bytes, role.master)
	case lag.Time > 0 && ri.lastIODuration() > lag.Time:
		return failed(probes.ReasonReplicationLag, "the replica last heard from its master %s %s ago (bound %s)", role.master, ri.lastIODuration(), lag.Time)
	}
	msg := fmt.Sprintf("replica of %s, link up, master last heard %s ago", role.master, ri.lastIODuration())
	if ri.pending >= 0 {
		msg += fmt.Sprintf(", %d bytes not processed", ri.pending)
	}
	return passed("%s", msg)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
