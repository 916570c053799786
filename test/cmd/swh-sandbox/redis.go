package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// setRedis stops a Redis backend, or starts it again: a master stopped
// while another was promoted comes back as a replica of the new master,
// as Sentinel would make it.
func (s *sandbox) setRedis(ctx context.Context, p *pod, b *backend, where string, fail bool) (string, error) {
	if fail {
		return where + " stopped", b.redis.Stop()
	}
	if err := b.redis.Restart(ctx); err != nil {
		return "", err
	}
	if !b.demoted {
		return where + " running again", nil
	}
	master := s.pod(s.master)
	if master == nil {
		return where + " running again, with no master to follow", nil
	}
	mb := master.backends[0]
	if err := b.redis.ReplicaOf(ctx, master.ip, mb.port); err != nil {
		// Running on as a master, it would be a second one: stopped,
		// it can be recovered again.
		b.failed = true
		return "", errors.Join(fmt.Errorf("making %s a replica of %s: %w", p.name, master.name, err), b.redis.Stop())
	}
	b.demoted = false
	return where + " running again, a replica of " + master.name, nil
}

// promoteRedis makes a replica the master: REPLICAOF NO ONE on it, then
// the other running servers, the old master first, replicate from it. A
// stopped old master follows it when it comes back (setRedis).
func (s *sandbox) promoteRedis(ctx context.Context, p *pod) (string, error) {
	if p.name == s.master {
		return "", fmt.Errorf("%s is already the master", p.name)
	}
	b := p.backends[0]
	if b.failed || b.redis == nil || p.gone {
		return "", fmt.Errorf("%s is not running (recover it first)", p.name)
	}
	if err := b.redis.Promote(ctx); err != nil {
		return "", err
	}
	old := s.master
	s.master = p.name
	did := []string{fmt.Sprintf("promoted %s to master", p.name)}
	for _, other := range s.pods {
		ob := other.backends[0]
		if other == p || other.labels["app"] != "cache" || ob.redis == nil {
			continue
		}
		if ob.failed || other.gone {
			ob.demoted = true // follows the new master when it comes back
			continue
		}
		if err := ob.redis.ReplicaOf(ctx, p.ip, b.port); err != nil {
			did = append(did, fmt.Sprintf("%s could not follow: %v", other.name, err))
			continue
		}
		what := "replicates"
		if other.name == old {
			what = "the old master, replicates"
		}
		did = append(did, fmt.Sprintf("%s (%s) from %s", other.name, what, p.name))
	}
	msg := strings.Join(did, "; ")
	s.record(ctx, podRef(p.name), "Promoted", msg)
	return msg, nil
}
