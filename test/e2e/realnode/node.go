package realnode

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/swh-dev/swh/test/harness/netns"
	"github.com/swh-dev/swh/test/harness/process"
)

// Node is one real node: a network namespace on the cluster's bridge with
// its kube-proxy, and a mount and PID namespace (the node's "machine")
// running containerd and kubelet, whose containers live inside it.
type Node struct {
	Index int
	Name  string
	IP    string
	NS    *netns.Namespace
	// Client is a pod-like namespace routed through the node, which sends
	// the scenarios' requests as a pod on the node would.
	Client *Client
	// Machine is the node's PID 1 (a shell running containerd and
	// kubelet); killing it ends every process of the node at once.
	Machine *Proc
	Proxy   *Proc

	c   *Cluster
	dir string
	// runs numbers the machine's boots, for log names.
	runs int
}

// Client is a network namespace on a node with an address of the node's
// pod range, as a client pod would have.
type Client struct {
	IP string
	NS *netns.Namespace
}

// nodeScript is the node machine's PID 1: it makes /var and /run private to
// the node, shadows the global sysctls kubelet writes (so the host keeps its
// values), starts containerd, imports the images, and runs kubelet. Bash
// reaps the orphans (containerd shims) as a PID 1 must; the kernel ends
// every process of the node when it exits.
const nodeScript = `set -euo pipefail
D=$1; shift
# /run and /var are replaced below, and the checkout may be under either
# (/var/tmp): what the node needs of it (bin/ and the image files) is bound
# into $D first.
mkdir -p "$D/host-bin" "$D/images"
mount --bind "$SWH_BIN" "$D/host-bin"
export PATH="$D/host-bin:$PATH"
imgs=()
for img in "$@"; do
  f="$D/images/${#imgs[@]}.tar"
  touch "$f"
  mount --bind "$img" "$f"
  imgs+=("$f")
done
mount -t tmpfs -o mode=0755 swh-run /run
mount --bind "$D/var" /var
mkdir -p "$D/sysctl"
for k in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
  f="$D/sysctl/${k//\//_}"
  [ -e "/proc/sys/$k" ] || continue
  cat "/proc/sys/$k" > "$f"
  mount --bind "$f" "/proc/sys/$k"
done
containerd --config "$D/containerd.toml" > "$D/containerd-$RUN.log" 2>&1 &
for i in $(seq 1 300); do
  [ -S "$D/containerd.sock" ] && ctr --address "$D/containerd.sock" version >/dev/null 2>&1 && break
  sleep 0.1
done
for img in "${imgs[@]}"; do
  ctr --address "$D/containerd.sock" -n k8s.io images import --snapshotter native "$img" > /dev/null
done
kubelet --config "$D/kubelet.yaml" --kubeconfig "$D/kubelet.kubeconfig" \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v=1 > "$D/kubelet-$RUN.log" 2>&1 &
wait -n
echo "a node process exited: $?" >&2
exit 1
`

// containerdConfig is a node's containerd: its own root, state and socket;
// the native snapshotter (copies, no overlay mounts: images are a few MiB);
// the CRI plugin with our pause image, cgroupfs and the node's CNI folder.
// restrict_oom_score_adj: root without CAP_SYS_RESOURCE cannot lower the
// pause container's oom_score_adj.
const containerdConfig = `version = 2
root = "%[1]s/containerd/root"
state = "%[1]s/containerd/state"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.overlayfs"]
[grpc]
  address = "%[1]s/containerd.sock"
[ttrpc]
  address = "%[1]s/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "%[2]s"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "%[3]s"
    conf_dir = "%[1]s/cni"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "%[1]s/certs.d"
`

// cniConfig gives each pod a veth routed through the node (ptp) and an
// address of the node's range (host-local): traffic between pods, and to
// ClusterIPs, is routed in the node's namespace where its kube-proxy's rules
// apply, with no bridge netfilter needed. .250 and up are the harness's
// client namespaces.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "swh-pods",
  "plugins": [
    {
      "type": "ptp",
      "mtu": 1500,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "%[1]s", "rangeStart": "%[2]s", "rangeEnd": "%[3]s", "gateway": "%[4]s"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "%[5]s/cni-ipam"
      }
    }
  ]
}
`

// kubeletConfig: cgroupfs under the node's own cgroup root, no swap check,
// no image garbage collection (the imported images cannot be pulled again),
// evictions only when truly out of room, authentication and authorization
// of the kubelet API left open (only the cluster's namespaces reach it).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[2]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://%[1]s/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /%[3]s
cgroupsPerQOS: true
enforceNodeAllocatable: []
failSwapOn: false
# cgroup v1 hosts still run kubelet 1.37 when allowed to.
failCgroupV1: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
  nodefs.inodesFree: "1%%"
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
resolvConf: ""
staticPodPath: ""
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s
# Renewed every quarter of its duration: every 2 s, well inside the node
# lifecycle controller's grace period of 10 s here.
nodeLeaseDurationSeconds: 8
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 5s
shutdownGracePeriod: 0s
localStorageCapacityIsolation: false
podPidsLimit: -1
maxPods: 60
tlsCertFile: %[1]s/kubelet.crt
tlsPrivateKeyFile: %[1]s/kubelet.key
`

// boot starts the node's machine: containerd and kubelet in a mount and
// PID namespace of their own, inside the node's network namespace.
func (n *Node) boot() error {
	n.runs++
	images := make([]string, 0, len(n.c.images))
	for _, img := range n.c.images {
		if img.Name == "swh-controller" || img.Name == "swh-agent" {
			continue // pulled from the suite's registry, as a cluster would
		}
		file, err := filepath.Abs(img.File)
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Name, err)
		}
		images = append(images, file)
	}
	// --kill-child: the machine's first process dies with unshare, even
	// on SIGKILL, and the kernel then ends every process of the node.
	args := append([]string{"--mount", "--pid", "--fork", "--kill-child=SIGKILL", "--mount-proc", "--propagation", "private", "--",
		"bash", "-c", nodeScript, "swh-node", n.dir}, images...)
	p, err := n.c.procs.Start(n.NS, fmt.Sprintf("%s-machine-%d", n.Name, n.runs),
		[]string{"NODE_NAME=" + n.Name, "NODE_IP=" + n.IP, fmt.Sprintf("RUN=%d", n.runs), "SWH_BIN=" + n.c.bin, "PATH=" + os.Getenv("PATH")},
		"unshare", args...)
	if err != nil {
		return err
	}
	n.Machine = p
	return nil
}

// PowerOff ends the node's machine at once (kubelet, containerd and every
// container on it), as a lost machine would; its Node object stays.
func (n *Node) PowerOff() {
	if n.Machine != nil {
		n.Machine.Kill()
	}
}

// PowerOn boots the node's machine again; kubelet restarts the pods the API
// server still binds to the node.
func (n *Node) PowerOn() error { return n.boot() }

// prepare writes the node's files: its /var, configurations, the kubelet's
// serving certificate and kubeconfig, and its cgroup root.
func (n *Node) prepare() error {
	for _, d := range []string{"var", "cni", "cni-ipam", "containerd", "certs.d/" + registryHost} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return fmt.Errorf("creating %s's folders: %w", n.Name, err)
		}
	}
	cert, err := n.c.ca.Issue(n.Name, n.IP)
	if err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml": fmt.Sprintf(containerdConfig, n.dir, n.c.pauseRef, n.c.cniBin),
		"cni/10-swh.conflist": fmt.Sprintf(cniConfig, podCIDR(n.Index), podIP(n.Index, 2), podIP(n.Index, 249),
			podGateway(n.Index), n.dir),
		"kubelet.yaml": fmt.Sprintf(kubeletConfig, n.dir, n.IP, n.cgroupRoot()),
		"kubelet.crt":  string(cert.CertPEM),
		"kubelet.key":  string(cert.KeyPEM),
		// The suite's registry, over HTTP (registry.go).
		"certs.d/" + registryHost + "/hosts.toml": fmt.Sprintf(hostsConfig, registryHost),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(data), 0o600); err != nil {
			return fmt.Errorf("writing %s of %s: %w", name, n.Name, err)
		}
	}
	// Every node is a cluster administrator: the API server here runs RBAC
	// only (no Node authorizer), and the kubelet must request the pods'
	// ServiceAccount tokens. Its user is still system:node:NAME.
	if err := n.c.CP.WriteUserKubeconfig(filepath.Join(n.dir, "kubelet.kubeconfig"), "system:node:"+n.Name, "system:nodes", "system:masters"); err != nil {
		return err
	}
	return n.c.cgroups.create(n.cgroupRoot())
}

// cgroupRoot is unique to the cluster (its folder's random name): the
// suite's PID is 1 inside hack/netns.sh.
func (n *Node) cgroupRoot() string { return filepath.Base(n.c.dir) + "-" + n.Name }

// Proc is a program the cluster started, stopped by its PID.
type Proc = process.Proc

// tail returns the last lines of a file.
func tail(file string, lines int) string { return process.Tail(file, lines) }

// PodCIDR is the node's pod address range.
func (n *Node) PodCIDR() string { return podCIDR(n.Index) }
