package realnode

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/swh-dev/swh/test/harness"
)

// The registry the nodes pull the swh images from, and helm the chart:
// distribution's registry (bin/registry, built from the Go module proxy),
// in the world namespace, over plain HTTP.
const (
	registryHost = worldIP + ":5000"
	// RegistryRepo is where hack/push.sh publishes the release.
	RegistryRepo = registryHost + "/swh"
	// ChartRef is the chart as pushed there.
	ChartRef = "oci://" + RegistryRepo + "/charts/swh"
)

// registryConfig is distribution's configuration: its storage in the
// cluster's folder.
const registryConfig = `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`

// hostsConfig tells a node's containerd that the registry speaks HTTP.
const hostsConfig = `server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`

// startRegistry runs the registry and waits until it answers.
func (c *Cluster) startRegistry(ctx context.Context) error {
	bin := filepath.Join(c.bin, "registry")
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%w: registry not in %s (make test builds it)", harness.ErrMissingDependency, c.bin)
	}
	config := filepath.Join(c.dir, "registry.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, registryConfig, filepath.Join(c.dir, "registry"), registryHost), 0o600); err != nil {
		return err
	}
	if _, err := c.procs.Start(nil, "registry", nil, bin, "serve", config); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+registryHost+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the registry at %s does not answer: %v (log: %s)", registryHost, err, tail(filepath.Join(c.dir, "registry.log"), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Publish pushes a release there as a user would (hack/push.sh: the
// images, for this machine's architecture only, and the chart pinned to
// their digests) as version (the chart's and the images'; the checkout's
// when empty), makes it the version InstallChart installs, and returns the
// script's output.
func (c *Cluster) Publish(ctx context.Context, version string) (string, error) {
	out, err := c.publish(ctx, runtime.GOARCH, version)
	if err == nil && version != "" {
		c.chartVersion = version
	}
	return out, err
}

// publish runs hack/push.sh for arch; version "" is the checkout's.
func (c *Cluster) publish(ctx context.Context, arch, version string) (string, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "push.sh"), RegistryRepo)
	cmd.Dir = root
	home := filepath.Join(c.dir, "helm-home")
	cmd.Env = append(os.Environ(), "PLATFORMS=linux/"+arch, "PLAIN_HTTP=true")
	if version != "" {
		cmd.Env = append(cmd.Env, "VERSION="+version, "CHART_VERSION="+version)
	}
	cmd.Env = append(cmd.Env,
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "DOCKER_CONFIG="+filepath.Join(home, "docker"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("hack/push.sh %s: %w\n%s", RegistryRepo, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
