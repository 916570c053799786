package redis

import (
	"strings"
	"testing"
	"time"

	"github.com/swh-dev/swh/probes"
)

func readOne(t *testing.T, in string) value {
	t.Helper()
	v, err := newRESPReader(strings.NewReader(in)).readValue()
	if err != nil {
		t.Fatalf("reading %q: %v", in, err)
	}
	return v
}

func TestParseRole(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want roleReply
		err  string
	}{
		{"master", masterRole(), roleReply{name: "master"}, ""},
		{"master with replicas", masterRole("10.0.0.2:6379", "10.0.0.3:6379"), roleReply{name: "master", replicas: 2}, ""},
		{"replica", replicaRole("10.0.0.1", 6379, "connected"), roleReply{name: "slave", master: "10.0.0.1:6379", state: "connected"}, ""},
		{"replica of an IPv6 master", replicaRole("fd00::1", 6380, "connect"), roleReply{name: "slave", master: "[fd00::1]:6380", state: "connect"}, ""},
		{"sentinel", "*2\r\n$8\r\nsentinel\r\n*1\r\n$8\r\nmymaster\r\n", roleReply{name: "sentinel"}, ""},
		{"role as a simple string", "*2\r\n+sentinel\r\n*0\r\n", roleReply{name: "sentinel"}, ""},

		{"not an array", "+master\r\n", roleReply{}, "a simple string, not an array"},
		{"null array", "*-1\r\n", roleReply{}, "a null, not an array"},
		{"empty array", "*0\r\n", roleReply{}, "an array of 0, not an array"},
		{"role as an integer", "*1\r\n:1\r\n", roleReply{}, "starting with an integer"},
		{"unknown role", "*1\r\n$7\r\nprimary\r\n", roleReply{}, `unknown role "primary"`},
		{"master without replicas list", "*2\r\n$6\r\nmaster\r\n:1\r\n", roleReply{}, "without a list of replicas"},
		{"master with a null list", "*3\r\n$6\r\nmaster\r\n:1\r\n*-1\r\n", roleReply{}, "without a list of replicas"},
		{"short replica", "*3\r\n$5\r\nslave\r\n$1\r\nh\r\n:1\r\n", roleReply{}, "3 elements, not 5"},
		{"replica with a port as text", "*5\r\n$5\r\nslave\r\n$1\r\nh\r\n$4\r\n6379\r\n$9\r\nconnected\r\n:1\r\n", roleReply{}, "not a host, a port and a state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRole(readOne(t, tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %+v, %v; want an error holding %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestJudge is the table of what each Role and lag bound makes of each
// server: the reason and what the message must say.
func TestJudge(t *testing.T) {
	master := roleReply{name: "master", replicas: 2}
	replica := func(state string) roleReply {
		return roleReply{name: "slave", master: "10.0.0.1:6379", state: state}
	}
	sentinel := roleReply{name: "sentinel"}
	info := func(link string, syncing, lastIO, read, processed int) map[string]string {
		fields, err := parseInfo(infoText(link, syncing, lastIO, read, processed))
		if err != nil {
			t.Fatal(err)
		}
		return fields
	}
	old := info("up", 0, 1, 5, 5)
	delete(old, "slave_read_repl_offset")
	bytes := &ReplicationLag{Bytes: 1000}
	secs := &ReplicationLag{Time: 5 * time.Second}
	both := &ReplicationLag{Bytes: 1000, Time: 5 * time.Second}
	for _, tc := range []struct {
		name string
		want Role
		lag  *ReplicationLag
		role roleReply
		info map[string]string
		rsn  probes.Reason
		msg  string
	}{
		{"master wanted, master", RoleMaster, nil, master, nil, probes.ReasonOK, "master with 2 replicas"},
		{"master wanted, replica", RoleMaster, nil, replica("connected"), nil, probes.ReasonWrongRole, "replica of 10.0.0.1:6379; the probe wants a master"},
		{"master wanted, sentinel", RoleMaster, nil, sentinel, nil, probes.ReasonWrongRole, "Sentinel"},
		{"replica wanted, master", RoleReplica, nil, master, nil, probes.ReasonWrongRole, "is a master; the probe wants a replica"},
		{"replica wanted, connected", RoleReplica, nil, replica("connected"), nil, probes.ReasonOK, "replica of 10.0.0.1:6379, link up"},
		{"replica wanted, connect", RoleReplica, nil, replica("connect"), nil, probes.ReasonReplicaLinkDown, `down (state "connect")`},
		{"replica wanted, connecting", RoleReplica, nil, replica("connecting"), nil, probes.ReasonReplicaLinkDown, `"connecting"`},
		{"replica wanted, sync", RoleReplica, nil, replica("sync"), nil, probes.ReasonReplicaLinkDown, `"sync"`},
		{"replica wanted, handshake", RoleReplica, nil, replica("handshake"), nil, probes.ReasonReplicaLinkDown, `"handshake"`},
		{"replica wanted, none", RoleReplica, nil, replica("none"), nil, probes.ReasonReplicaLinkDown, `"none"`},
		{"replica wanted, sentinel", RoleReplica, nil, sentinel, nil, probes.ReasonWrongRole, "Sentinel"},
		{"any, sentinel", RoleAny, bytes, sentinel, nil, probes.ReasonWrongRole, "Sentinel"},

		{"lag, master never judged", RoleAny, both, master, nil, probes.ReasonOK, "master"},
		{"lag, master wanted, master", RoleMaster, both, master, nil, probes.ReasonOK, "master"},
		{"lag, within", RoleAny, both, replica("connected"), info("up", 0, 5, 1500, 500), probes.ReasonOK, "last heard 5s ago, 1000 bytes not processed"},
		{"lag, bytes past", RoleReplica, bytes, replica("connected"), info("up", 0, 0, 1501, 500), probes.ReasonReplicationLag, "1001 bytes of replication stream received and not processed (bound 1000)"},
		{"lag, time past", RoleAny, secs, replica("connected"), info("up", 0, 6, 0, 0), probes.ReasonReplicationLag, "last heard from its master 10.0.0.1:6379 6s ago (bound 5s)"},
		{"lag, time bound ignores bytes", RoleAny, secs, replica("connected"), info("up", 0, 1, 1<<30, 0), probes.ReasonOK, "last heard 1s ago"},
		{"lag, bytes bound ignores time", RoleAny, bytes, replica("connected"), info("up", 0, 600, 0, 0), probes.ReasonOK, "last heard 10m0s ago"},
		{"lag, link down in ROLE", RoleAny, both, replica("connecting"), info("down", 0, -1, 0, 0), probes.ReasonReplicaLinkDown, "connecting"},
		{"lag, link down in INFO", RoleAny, both, replica("connected"), info("down", 0, -1, 0, 0), probes.ReasonReplicaLinkDown, "INFO master_link_status"},
		{"lag, syncing", RoleReplica, both, replica("connected"), info("up", 1, 0, 0, 0), probes.ReasonReplicaLinkDown, "still syncing"},
		{"lag, replica wanted, master", RoleReplica, both, master, nil, probes.ReasonWrongRole, "wants a replica"},
		{"lag, master wanted, replica", RoleMaster, both, replica("connected"), info("up", 0, 0, 0, 0), probes.ReasonWrongRole, "wants a master"},
		{"bytes bound before Redis 7.0", RoleAny, bytes, replica("connected"), old, probes.ReasonProtocol, "slave_read_repl_offset"},
		{"time bound before Redis 7.0", RoleAny, secs, replica("connected"), old, probes.ReasonOK, "last heard 1s ago"},
		{"INFO of a master on a replica", RoleAny, both, replica("connected"), map[string]string{"role": "master"}, probes.ReasonProtocol, "no master_link_status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := judge(tc.want, tc.lag, tc.role, tc.info)
			text := j.msg
			if j.err != nil {
				text = j.err.Error()
			}
			if j.reason != tc.rsn || (j.err == nil) != (tc.rsn == probes.ReasonOK) || !strings.Contains(text, tc.msg) {
				t.Fatalf("got %s, %q; want %s, %q", j.reason, text, tc.rsn, tc.msg)
			}
		})
	}
}
