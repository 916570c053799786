package redis

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestParseInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want map[string]string
		err  string
	}{
		{"empty", "", map[string]string{}, ""},
		{"sections and blank lines", "# Replication\r\nrole:master\r\n\r\n# CPU\r\nused_cpu_sys:0.5\r\n",
			map[string]string{"role": "master", "used_cpu_sys": "0.5"}, ""},
		{"LF only", "a:1\nb:2\n", map[string]string{"a": "1", "b": "2"}, ""},
		{"no final newline", "a:1", map[string]string{"a": "1"}, ""},
		{"colon in the value", "slave0:ip=10.0.0.2,port=6379,state=online\r\n",
			map[string]string{"slave0": "ip=10.0.0.2,port=6379,state=online"}, ""},
		{"empty value", "master_host:\r\n", map[string]string{"master_host": ""}, ""},
		{"line without a colon", "role:slave\r\ngarbage\r\n", nil, "without a colon"},
		{"empty key", ":1\r\n", nil, "without a key"},
		{"key twice", "role:master\r\nrole:slave\r\n", nil, `"role" twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseInfo(tc.in)
			if tc.err != "" {
				var pe *protocolError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want a protocol error holding %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestReadReplicaInfo(t *testing.T) {
	without := func(text, key string) string {
		var lines []string
		for l := range strings.SplitSeq(text, "\r\n") {
			if !strings.HasPrefix(l, key+":") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\r\n")
	}
	for _, tc := range []struct {
		name string
		in   string
		want replicaInfo
		err  string
	}{
		{"up", infoText("up", 0, 3, 1000, 900), replicaInfo{linkUp: true, lastIO: 3, pending: 100}, ""},
		{"down", infoText("down", 0, -1, 1000, 1000), replicaInfo{lastIO: -1}, ""},
		{"syncing", infoText("up", 1, 0, 0, 0), replicaInfo{linkUp: true, syncing: true}, ""},
		{"processed past read", infoText("up", 0, 0, 10, 20), replicaInfo{linkUp: true}, ""},
		{"before Redis 7.0", without(infoText("up", 0, 1, 5, 5), "slave_read_repl_offset"), replicaInfo{linkUp: true, lastIO: 1, pending: -1}, ""},
		{"a master's", "role:master\r\nconnected_slaves:0\r\n", replicaInfo{}, "no master_link_status"},
		{"no last I/O", without(infoText("up", 0, 1, 5, 5), "master_last_io_seconds_ago"), replicaInfo{}, "no master_last_io_seconds_ago"},
		{"offset not a number", strings.Replace(infoText("up", 0, 1, 5, 5), "slave_repl_offset:5", "slave_repl_offset:five", 1), replicaInfo{}, "not an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fields, err := parseInfo(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readReplicaInfo(fields)
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

// FuzzParseInfo parses any text: no panic, keys without colon nor line
// break, and the fields written back parse to the same fields.
func FuzzParseInfo(f *testing.F) {
	for _, seed := range []string{
		"", infoText("up", 0, 1, 100, 90), infoText("down", 1, -1, 0, 0),
		"# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=10.0.0.2,port=6379,state=online,offset=42,lag=0\r\n",
		"a:1\nb:2", ":1\r\n", "role:master\r\nrole:slave\r\n", "garbage", "\r\r\n#\r\nk:\r\r\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		fields, err := parseInfo(text)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			if k == "" || k[0] == '#' || strings.ContainsAny(k, ":\n") || strings.Contains(fields[k], "\n") {
				t.Fatalf("field %q: %q", k, fields[k])
			}
			b.WriteString(k + ":" + fields[k] + "\r\n")
		}
		again, err := parseInfo(b.String())
		if err != nil || !maps.Equal(again, fields) {
			t.Fatalf("%q parses as %v; written back as %q, it parses as %v, %v", text, fields, b.String(), again, err)
		}
		_, _ = readReplicaInfo(fields)
	})
}
