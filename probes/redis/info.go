package redis

import (
	"strconv"
	"strings"
	"time"
)

// parseInfo parses the text INFO answers: "# Section" headers, blank
// lines and "key:value" lines, separated by CRLF (or LF). It returns the
// fields. A line that is none of these, an empty key, or a key given twice
// is an error: the text is not what a Redis server writes, and a field read
// from it could be anything. The text is a bulk string, so MaxBulkBytes
// bounds it.
func parseInfo(text string) (map[string]string, error) {
	fields := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		switch {
		case !ok:
			return nil, protocolErrorf("INFO holds a line without a colon: %q", cut([]byte(line)))
		case key == "":
			return nil, protocolErrorf("INFO holds a line without a key: %q", cut([]byte(line)))
		}
		if _, dup := fields[key]; dup {
			return nil, protocolErrorf("INFO gives %q twice", cut([]byte(key)))
		}
		fields[key] = val
	}
	return fields, nil
}

// replicaInfo is what the prober reads of a replica's INFO replication.
type replicaInfo struct {
	linkUp  bool // master_link_status:up
	syncing bool // master_sync_in_progress:1
	// pending is slave_read_repl_offset minus slave_repl_offset: the
	// replication stream received and not processed yet; -1 when the
	// server does not report the first (before Redis 7.0).
	pending int64
	// lastIO is master_last_io_seconds_ago: the time since the master
	// last sent anything (data, or its ping every
	// repl-ping-replica-period); -1 when the link is down.
	lastIO int64
}

// readReplicaInfo reads a replica's fields of INFO replication.
func readReplicaInfo(fields map[string]string) (replicaInfo, error) {
	var ri replicaInfo
	link, ok := fields["master_link_status"]
	if !ok {
		return ri, protocolErrorf("INFO replication has no master_link_status: not a replica's?")
	}
	ri.linkUp = link == "up"
	syncing, err := infoInt(fields, "master_sync_in_progress")
	if err != nil {
		return ri, err
	}
	ri.syncing = syncing != 0
	if ri.lastIO, err = infoInt(fields, "master_last_io_seconds_ago"); err != nil {
		return ri, err
	}
	processed, err := infoInt(fields, "slave_repl_offset")
	if err != nil {
		return ri, err
	}
	ri.pending = -1
	if _, ok := fields["slave_read_repl_offset"]; ok {
		read, err := infoInt(fields, "slave_read_repl_offset")
		if err != nil {
			return ri, err
		}
		ri.pending = max(0, read-processed)
	}
	return ri, nil
}

// infoInt reads an integer field.
func infoInt(fields map[string]string, key string) (int64, error) {
	s, ok := fields[key]
	if !ok {
		return 0, protocolErrorf("INFO replication has no %s", key)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, protocolErrorf("INFO replication gives %s as %q, not an integer", key, cut([]byte(s)))
	}
	return n, nil
}

// lastIODuration is lastIO as a duration.
func (ri replicaInfo) lastIODuration() time.Duration { return time.Duration(ri.lastIO) * time.Second }
