#!/usr/bin/env bash
# Runs a command inside a private network namespace made for tests:
#   - loopback up, and 10.244.0.0/16 routed as local on lo, so every address in
#     it is bindable: pods get real, answering IPv4 addresses that the API
#     server accepts in EndpointSlices (it rejects 127.0.0.0/8);
#   - fd00:10:244::1 to ::10 on lo for IPv6 pods;
#   - a default route through a veth pair whose both ends stay in the namespace
#     (kube-apiserver refuses to start without one; 192.0.2.0/30 is TEST-NET-1,
#     never routed anywhere). Nothing is
#     linked to the host, so no packet can leave the machine.
# As root it uses `unshare -n`; otherwise `unshare -rn` (a user namespace),
# where the kernel allows it. A PID namespace comes with it: when COMMAND
# ends, the kernel kills every process it left (an API server a crashed test
# did not stop), and the network namespace disappears with them.
#
# usage: hack/netns.sh COMMAND [ARG...]
set -euo pipefail

if [ "${SWH_NETNS:-}" != "1" ]; then
  if [ "$(id -u)" = 0 ]; then
    exec unshare --net --pid --fork --mount-proc -- env SWH_NETNS=1 "$0" "$@"
  fi
  exec unshare --map-root-user --net --pid --fork --mount-proc -- env SWH_NETNS=1 SWH_NETNS_ROOTLESS=1 "$0" "$@"
fi

ip link set lo up
ip route add local 10.244.0.0/16 dev lo
for i in $(seq 1 16); do
  ip -6 addr add "fd00:10:244::$(printf '%x' "$i")/128" dev lo nodad
done
ip link add swh-gw0 type veth peer name swh-gw1
ip addr add 192.0.2.1/30 dev swh-gw0
ip link set swh-gw0 up
ip link set swh-gw1 up
ip route add default via 192.0.2.2 dev swh-gw0
ip -6 route add default dev swh-gw0 2>/dev/null || true

exec "$@"
