package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/swh-dev/swh/test/harness"
)

// ChartNamespace and ChartRelease are where the suite installs the chart.
const (
	ChartNamespace = "swh-system"
	ChartRelease   = "swh"
)

// Helm runs bin/helm against the cluster as its administrator and returns
// what it printed.
func (c *Cluster) Helm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "helm"), args...)
	cmd.Env = append(cmd.Environ(), "KUBECONFIG="+c.CP.Kubeconfig, "HELM_CACHE_HOME="+filepath.Join(c.dir, "helm-cache"),
		"HELM_CONFIG_HOME="+filepath.Join(c.dir, "helm-config"), "HELM_DATA_HOME="+filepath.Join(c.dir, "helm-data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// InstallChart installs (or, when upgrade, upgrades) deploy/charts/swh
// with the suite's images and waits until every pod of the release is
// Ready. set are extra --set values.
func (c *Cluster) InstallChart(ctx context.Context, upgrade bool, set ...string) (string, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	verb := "install"
	if upgrade {
		verb = "upgrade"
	}
	args := []string{verb, ChartRelease, filepath.Join(root, "deploy", "charts", "swh"),
		"--namespace", ChartNamespace, "--wait", "--timeout", "4m",
		// The CRD is the control plane's already (test/harness installs it).
		"--skip-crds",
		// Imported images only: nothing can be pulled here.
		"--set", "controller.image.pullPolicy=Never", "--set", "agent.image.pullPolicy=Never",
	}
	if !upgrade {
		args = append(args, "--create-namespace")
	}
	// The images the nodes hold, by name: a tag other than the chart's
	// appVersion (VERSION=… make images) must still be what the pods run.
	for _, img := range c.images {
		component := strings.TrimPrefix(img.Name, "swh-")
		if component != "controller" && component != "agent" {
			continue
		}
		at := strings.LastIndex(img.Ref, ":")
		if at < 0 {
			return "", fmt.Errorf("image reference %q has no tag", img.Ref)
		}
		args = append(args, "--set", component+".image.repository="+img.Ref[:at], "--set", component+".image.tag="+img.Ref[at+1:])
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return c.Helm(ctx, args...)
}
