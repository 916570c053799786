package harness

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// RedisError is an error answer of a Redis server ("ERR ...", "WRONGPASS
// ...").
type RedisError struct{ Text string }

func (e *RedisError) Error() string { return e.Text }

// maxRedisBulk bounds a bulk string the harness's client reads: its own
// server's answers are small, and a mistake must not take the suite's
// memory.
const maxRedisBulk = 16 << 20

// Do sends one command to the server, logged in as the default user with
// its Password, and returns the answer: a string (simple or bulk), an
// int64, a []any, or nil for a null. An error answer is a *RedisError. It
// opens a connection of its own and closes it. The harness speaks RESP
// itself: the probes module's reader is not exported, and a client library
// would be a dependency for three commands.
func (r *Redis) Do(ctx context.Context, args ...string) (any, error) {
	conn, err := r.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	var req []byte
	answers := 1
	if r.opts.Password != "" {
		req = appendRedisCommand(req, "AUTH", r.opts.Password)
		answers++
	}
	req = appendRedisCommand(req, args...)
	if _, err := conn.Write(req); err != nil {
		return nil, fmt.Errorf("sending %s to %s: %w", args[0], r.Addr(), err)
	}
	br := bufio.NewReader(conn)
	var answer any
	for range answers {
		if answer, err = readRedisValue(br); err != nil {
			return nil, fmt.Errorf("%s on %s: %w", args[0], r.Addr(), err)
		}
	}
	return answer, nil
}

func (r *Redis) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.Addr())
	if err != nil {
		return nil, err
	}
	if r.opts.TLS == nil {
		return conn, nil
	}
	// The harness talks to the child it started, on an address it
	// chose: verifying the certificate, which names whatever the test
	// wants it to, would prove nothing.
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", r.Addr(), err)
	}
	return tc, nil
}

func appendRedisCommand(b []byte, args ...string) []byte {
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// readRedisValue reads one RESP2 value; an error answer is returned as a
// *RedisError.
func readRedisValue(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if line == "" {
		return nil, errors.New("an empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, &RedisError{Text: body}
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > maxRedisBulk {
			return nil, fmt.Errorf("a bulk string of length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 || n > 1<<20 {
			return nil, fmt.Errorf("an array of length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		elems := make([]any, n)
		for i := range elems {
			if elems[i], err = readRedisValue(br); err != nil {
				return nil, err
			}
		}
		return elems, nil
	}
	return nil, fmt.Errorf("an answer of type %q", line[0])
}

// Info returns the fields of INFO section ("replication", "stats", ...).
func (r *Redis) Info(ctx context.Context, section string) (map[string]string, error) {
	answer, err := r.Do(ctx, "INFO", section)
	if err != nil {
		return nil, err
	}
	text, ok := answer.(string)
	if !ok {
		return nil, fmt.Errorf("INFO %s on %s answered %T", section, r.Addr(), answer)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSuffix(line, "\r")
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			fields[k] = v
		}
	}
	return fields, nil
}

// Role returns the first word of ROLE: "master" or "slave".
func (r *Redis) Role(ctx context.Context) (string, error) {
	answer, err := r.Do(ctx, "ROLE")
	if err != nil {
		return "", err
	}
	if elems, ok := answer.([]any); ok && len(elems) > 0 {
		if role, ok := elems[0].(string); ok {
			return role, nil
		}
	}
	return "", fmt.Errorf("ROLE on %s answered %v", r.Addr(), answer)
}

// WaitLinkUp waits until a replica's link to its master is up and its
// first synchronisation done.
func (r *Redis) WaitLinkUp(ctx context.Context) error {
	var last string
	for {
		info, err := r.Info(ctx, "replication")
		if err == nil && info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0" {
			return nil
		}
		last = fmt.Sprintf("master_link_status %q, master_sync_in_progress %q, error %v",
			info["master_link_status"], info["master_sync_in_progress"], err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica %s did not link up with its master: %w (%s); its log:\n%s", r.Addr(), ctx.Err(), last, tail(r.Log(), 30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitReplicaOnline waits until the master r lists rep as an online
// replica, as ROLE does: with a diskless sync that is a moment after the
// replica's link is up (its first acknowledgement).
func (r *Redis) WaitReplicaOnline(ctx context.Context, rep *Redis) error {
	want := fmt.Sprintf("port=%d,state=online", rep.Port())
	var last string
	for {
		info, err := r.Info(ctx, "replication")
		if err == nil {
			for k, v := range info {
				if strings.HasPrefix(k, "slave") && strings.Contains(v, want) {
					return nil
				}
			}
		}
		last = fmt.Sprintf("connected_slaves %q, error %v", info["connected_slaves"], err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not list the replica %s online: %w (%s)", r.Addr(), rep.Addr(), ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
