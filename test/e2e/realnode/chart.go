package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

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

// InstallChart installs (or, when upgrade, upgrades) the chart as
// published to the suite's registry (ChartRef: its values pin the images
// pushed with it) and waits until every pod of the release is Ready. set
// are extra --set values.
func (c *Cluster) InstallChart(ctx context.Context, upgrade bool, set ...string) (string, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return "", err
	}
	version := c.chartVersion
	if version == "" {
		if version, err = chartVersion(root); err != nil {
			return "", err
		}
	}
	verb := "install"
	if upgrade {
		verb = "upgrade"
	}
	args := []string{verb, ChartRelease, ChartRef, "--version", version, "--plain-http",
		"--namespace", ChartNamespace, "--wait", "--timeout", "4m",
		// The CRD is the control plane's already (test/harness installs it).
		"--skip-crds",
	}
	if !upgrade {
		args = append(args, "--create-namespace")
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return c.Helm(ctx, args...)
}

// ApplyCRDs applies the CRD of the chart version InstallChart installs
// next, server-side, as docs/installing.md says to before an upgrade
// (helm show crds | kubectl apply --server-side).
func (c *Cluster) ApplyCRDs(ctx context.Context) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	version := c.chartVersion
	if version == "" {
		if version, err = chartVersion(root); err != nil {
			return err
		}
	}
	out, err := c.Helm(ctx, "show", "crds", ChartRef, "--version", version, "--plain-http")
	if err != nil {
		return err
	}
	file := filepath.Join(c.dir, "crds-"+version+".yaml")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		return err
	}
	objs, err := harness.ReadManifests(file)
	if err != nil {
		return err
	}
	applied := 0
	for _, o := range objs {
		if o.GetKind() == "" {
			continue // an empty document
		}
		applied++
		o.SetManagedFields(nil)
		if err := c.CP.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if applied == 0 {
		return fmt.Errorf("helm show crds of %s printed no CRD", version)
	}
	return nil
}

// chartVersion is the version of deploy/charts/swh, as hack/push.sh
// pushed it.
func chartVersion(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, "deploy", "charts", "swh", "Chart.yaml"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "version:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`), nil
		}
	}
	return "", errors.New("no version in deploy/charts/swh/Chart.yaml")
}
