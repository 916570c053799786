package main

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/swh-dev/swh/test/harness"
)

// agentNamespace holds the agents' pod objects, as the chart's release
// namespace holds its DaemonSet's pods.
const agentNamespace = "swh-system"

// agentLabels are the labels of the chart's agent pods: kubectl swh finds
// each node's agent by them.
func agentLabels() map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "swh",
		"app.kubernetes.io/component": "agent",
		"app.kubernetes.io/instance":  "swh",
	}
}

// agentPod names the pod object of a node's agent.
func agentPod(n *node) types.NamespacedName {
	return types.NamespacedName{Namespace: agentNamespace, Name: "swh-agent-" + n.name}
}

// startAgent runs the node's agent and marks its pod Ready, as a kubelet
// would once the container runs; an agent that exits on its own leaves the
// pod not ready, as a crashed container does.
func (s *sandbox) startAgent(ctx context.Context, n *node) error {
	p, err := s.startBinary("swh-agent", "agent-"+n.name, "--node-name="+n.name)
	if err != nil {
		return err
	}
	n.agent = p
	if err := s.setAgentReady(ctx, n, true); err != nil {
		return err
	}
	go func() {
		<-p.Exited()
		select {
		case <-p.stopping:
			return // stopped on purpose: whoever stopped it updates the pod
		default:
		}
		// Detached from any command: the crash happens on its own.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		if n.agent == p && !n.gone {
			if err := s.setAgentReady(ctx, n, false); err != nil {
				progress("WARNING: %v", err)
			}
		}
	}()
	return nil
}

// setAgentReady creates the agent's pod the first time, then flips its
// readiness.
func (s *sandbox) setAgentReady(ctx context.Context, n *node, ready bool) error {
	key := agentPod(n)
	err := harness.SetPodReady(ctx, s.cp.Client, key, ready)
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = harness.CreatePod(ctx, s.cp.Client, harness.PodOptions{
		Namespace: key.Namespace, Name: key.Name, Node: n.name, Labels: agentLabels(), NotReady: !ready,
	})
	return err
}

// agentRunning reports whether the node's agent process is up.
func agentRunning(n *node) bool {
	if n.agent == nil {
		return false
	}
	return n.agent.Running()
}

// stopAgent stops the node's agent: its pod turns not ready and its slices
// stay as last published, which kubectl swh reports as stale.
func (s *sandbox) stopAgent(ctx context.Context, name string) (string, error) {
	n := s.node(name)
	if n == nil || n.gone {
		return "", fmt.Errorf("no node %q", name)
	}
	if !agentRunning(n) {
		return "", fmt.Errorf("the agent of %s is not running (start-agent %s)", name, name)
	}
	n.agent.stop()
	if err := s.setAgentReady(ctx, n, false); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("stopped the agent of %s; pod %s is not ready", name, agentPod(n).Name)
	s.record(ctx, nodeRef(name), "AgentStopped", msg)
	return msg, nil
}

// restartAgent starts a stopped agent again in the same pod, as a kubelet
// restarts a container.
func (s *sandbox) restartAgent(ctx context.Context, name string) (string, error) {
	n := s.node(name)
	if n == nil || n.gone {
		return "", fmt.Errorf("no node %q", name)
	}
	if agentRunning(n) {
		return "", fmt.Errorf("the agent of %s is running", name)
	}
	if err := s.startAgent(ctx, n); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("started the agent of %s again; pod %s is ready", name, agentPod(n).Name)
	s.record(ctx, nodeRef(name), "AgentStarted", msg)
	return msg, nil
}
