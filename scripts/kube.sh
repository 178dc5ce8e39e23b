#!/usr/bin/env bash
# kube.sh — a real single-node Kubernetes cluster on this machine, built from source.
#
# Usage: scripts/kube.sh [up|down|status|import <docker-image>...|env]
#   up      (default) build what is missing, start what is not running, wait until the
#           node is Ready, the `default` ServiceAccount and the default StorageClass
#           exist; the LAST line of stdout is KUBECONFIG=<path>. Idempotent: a second
#           `up` while the cluster runs takes seconds and changes nothing.
#   down    stop every process `up` started, remove the pods' containers, mounts,
#           network namespaces, bridge and iptables rules, and the cluster's state
#           (etcd, kubelet). Keeps the build cache, the certificates and the imported
#           images, so the next `up` is a fresh cluster in about a minute.
#   status  each component's pid and log file, the node and the paths.
#   import  copy images from the local Docker engine into the cluster's containerd
#           (namespace k8s.io) with `docker save | ctr import`; an image whose Docker id
#           is already there is skipped. Pods use them with imagePullPolicy Never or
#           IfNotPresent (no registry is reachable).
#   env     print KUBECONFIG=<path> only.
#
# Why built from source: this host reaches only the Go module proxy, the Debian mirror
# and npm — no image registry and no download site. So:
#   - Kubernetes v1.34.4 (kube-apiserver, kube-controller-manager, kube-scheduler,
#     kubelet, kube-proxy, kubectl — all the same version, the newest v1.34 patch; v1.34
#     is the version whose build was verified on this kind of machine) is built with ONE
#     `go build` from the module deploy/kube/build, which requires k8s.io/kubernetes and
#     replaces each k8s.io staging module with its published v0.34.4.
#   - etcd v3.6.16 (go.etcd.io/etcd/server/v3, its own main) from deploy/kube/etcd, a
#     separate module so that etcd's dependency versions do not leak into Kubernetes'.
#   - CoreDNS v1.13.2 (the release built with client-go v0.34) with the plugins a
#     cluster DNS needs, from deploy/kube/coredns (separate module, same reason).
#   - NetworkPolicy enforcement: the bridge CNI enforces none, so the controller of
#     sigs.k8s.io/kube-network-policies v0.8.0 (what kind runs: nfqueue, no nft program)
#     runs on the host from deploy/kube/netpol, whose own main takes a kubeconfig (the
#     upstream command reads only in-cluster configuration). This kernel has no nft
#     queue expression (CONFIG_NFT_QUEUE), so the controller's own nftables rules fail to
#     load (it logs that, and retries); instead two iptables rules here (netpol_queue)
#     send every new connection a pod opens to its nfqueue, where it judges it by the
#     NetworkPolicies as it would have. --queue-bypass: if it stops, traffic flows
#     unjudged rather than the cluster going dark.
#   - The pod sandbox ("pause") image is a static Go program (deploy/kube/build/pause)
#     packed here into a one-layer image tar and imported into containerd.
#   - From Debian: containerd 1.6 (a SECOND instance with its own root, state, socket
#     and config — dockerd's own containerd is not touched; it runs as
#     cws-kube-containerd so that `pkill -x containerd` in scripts/deps.sh spares it),
#     runc, the CNI plugins (bridge + host-local + loopback), iptables, conntrack, openssl.
#
# Cluster layout:
#   - Node `cws-kube-node` (an /etc/hosts line maps it to 127.0.0.1; the API server
#     reaches the kubelet by Hostname, so apiserver→kubelet stays on loopback). The node's
#     InternalIP is this host's primary IPv4 address.
#   - API server on 0.0.0.0:6443, advertised on the host's primary IPv4 address (so pods
#     reach it). In-cluster config works through kube-proxy (iptables mode) which routes
#     the `kubernetes` Service ClusterIP 10.96.0.1:443 to it.
#   - Pods on the bridge cws-kube0, 10.244.0.0/24, reachable from the host. Pods reach
#     the host (API server, DNS) and each other, not the outside: no masquerading, and
#     dockerd's FORWARD policy is DROP. One FORWARD rule (chain CWS-KUBE-FORWARD) lets
#     pods on the bridge talk to each other (bridge-nf-call-iptables is on here).
#   - Cluster DNS: CoreDNS runs on the host (not in a pod: there is no image for it),
#     listening on <host IP>:1053; the kube-dns Service 10.96.0.10:53 has that as its
#     endpoint (a Service without selector + EndpointSlice), and kubelet hands it to
#     pods. *.cluster.local resolves; other names are forwarded to the host's resolver.
#   - NetworkPolicy objects are accepted by the API but NOT enforced (the bridge CNI has
#     no policy engine).
#   - StorageClass cws-hostpath (default): kube-controller-manager's hostpath
#     provisioner makes each PV a directory /tmp/hostpath_pv/<uuid>, owned by root,
#     mode 0750, and fsGroup does not apply to hostPath: a non-root pod needs an init
#     container (root, CAP_CHOWN) that chowns the volume before it can write there.
#   - Needed on this kind of host (cgroup v1, a VM): kubelet failCgroupV1: false,
#     cgroupDriver: cgroupfs, localStorageCapacityIsolation: false; containerd
#     restrict_oom_score_adj = true (the kernel refuses a negative oom_score_adj),
#     SystemdCgroup = false. Image garbage collection is off (threshold 100%): an image
#     removed here could not be pulled back.
#   - UserNamespacesSupport is on in kubelet and API server, but containerd 1.6 cannot
#     run `hostUsers: false` pods (that needs containerd 2.0); such pods fail to start.
#
# Files:
#   $CWS_KUBE_CACHE (default ~/.cache/cws-kube): bin/{kubernetes,etcd,coredns}-<v>,
#     pki/ (CA, certificates, service-account keys; made once with openssl),
#     kubeconfig (admin, certificates embedded), kubectl, build-*.log.
#   $CWS_KUBE_STATE (default /var/lib/cws-kube): etcd data, kubelet root, containerd
#     root (images), configs, logs/<component>.log, run/<component>.pid.
#   /run/cws-kube: containerd socket and state, runc root.
#
# Environment:
#   CWS_KUBE_CACHE, CWS_KUBE_STATE   see above
#   CWS_KUBE_ADVERTISE_IP            the API server's advertised IPv4 address
#                                    (default: the source address of the default route)
set -euo pipefail

cd "$(dirname "$0")/.."
REPO=$(pwd)

say() { printf 'kube: %s\n' "$*"; }
die() { printf 'kube: error: %s\n' "$*" >&2; exit 1; }

K8S_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
COREDNS_VERSION=v1.13.2
PAUSE_IMAGE=localhost/cws-kube/pause:3.10
NODE=cws-kube-node
POD_CIDR=10.244.0.0/24
CLUSTER_CIDR=10.244.0.0/16
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
DNS_PORT=1053
BRIDGE=cws-kube0
STORAGE_CLASS=cws-hostpath
API_PORT=6443
ETCD_CLIENT=http://127.0.0.1:2379
ETCD_PEER=http://127.0.0.1:2380
HOSTS_TAG="# cws-kube (scripts/kube.sh)"
FWD_CHAIN=CWS-KUBE-FORWARD

CACHE=${CWS_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cws-kube}
STATE=${CWS_KUBE_STATE:-/var/lib/cws-kube}
RUNDIR=/run/cws-kube
K8S_BIN=$CACHE/bin/kubernetes-$K8S_VERSION
ETCD_BIN=$CACHE/bin/etcd-$ETCD_VERSION
COREDNS_BIN=$CACHE/bin/coredns-$COREDNS_VERSION
# localpv: the provisioner of StorageClass cws-local (deploy/kube/localpv, this repo).
LOCALPV_BIN=$CACHE/bin/localpv
# netpol: NetworkPolicy enforcement (deploy/kube/netpol).
NETPOL_VERSION=v0.8.0
NETPOL_BIN=$CACHE/bin/netpol-$NETPOL_VERSION
PKI=$CACHE/pki
KUBECONFIG_FILE=$CACHE/kubeconfig
KUBECTL=$CACHE/kubectl
LOGS=$STATE/logs
PIDS=$STATE/run
CONF=$STATE/conf
SOCK=$RUNDIR/containerd.sock
RUNC_ROOT=$RUNDIR/runc
CNI_CONF_DIR=$STATE/cni/net.d
CNI_IPAM_DIR=$STATE/cni/ipam
HOSTPATH_DIR=/tmp/hostpath_pv
# The kubelet's root (the pods' emptyDir volumes: the workspaces without a storage
# class) on a journaled ext4 kept in this file, where $STATE sits on ext4 without a
# journal (scripts/journaled.sh says why).
KUBELET_IMG=${CWS_KUBE_KUBELET_IMAGE:-/var/lib/cws/kube-kubelet.ext4}
# Start order; `down` stops in reverse.
COMPONENTS=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy netpol coredns localpv)

ticker=""
cleanup() {
	set +e
	[ -z "$ticker" ] || kill "$ticker" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- helpers

need_root() {
	[ "$(id -u)" -eq 0 ] && return 0
	command -v sudo >/dev/null 2>&1 || die "run as root (containerd, kubelet and iptables need it)"
	exec sudo CWS_KUBE_CACHE="$CACHE" CWS_KUBE_STATE="$STATE" \
		CWS_KUBE_ADVERTISE_IP="${CWS_KUBE_ADVERTISE_IP:-}" PATH="$PATH" "$0" "$@"
}

# lock serialises concurrent kube.sh runs (a test and a developer, say).
lock() {
	mkdir -p "$STATE"
	exec 9>"$STATE/kube.sh.lock"
	if ! flock -n 9; then
		say "waiting for another scripts/kube.sh to finish"
		flock 9
	fi
}

# write_file PATH: stdin into PATH when the content differs (keeps mtimes stable).
write_file() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if [ -f "$1" ] && cmp -s "$tmp" "$1"; then rm -f "$tmp"; else mv -f "$tmp" "$1"; fi
}

# with_ticker LABEL LOG CMD... runs CMD with its output in LOG and prints one line every
# 15 s with the elapsed time and what it is doing; returns CMD's status.
with_ticker() {
	local label=$1 log=$2 t0=$SECONDS rc=0
	shift 2
	: >"$log"
	(
		n=0
		while sleep 1 && kill -0 $$ 2>/dev/null; do
			[ $((n += 1)) -ge 15 ] || continue
			n=0
			pkgs=$(grep -c . "$log" 2>/dev/null || true)
			last=$(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-80)
			say "building $label [$((SECONDS - t0))s] ${pkgs:-0} packages done, last: ${last:-(none yet: resolving, or linking cached packages)}"
		done
	) &
	ticker=$!
	"$@" >"$log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	ticker=""
	return "$rc"
}

host_ip() {
	if [ -n "${CWS_KUBE_ADVERTISE_IP:-}" ]; then
		echo "$CWS_KUBE_ADVERTISE_IP"
		return
	fi
	local ip
	ip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p' | head -n 1)
	if [ -z "$ip" ]; then
		ip=$(ip -4 -o addr show scope global | awk '$2 != "docker0" && $2 != "'"$BRIDGE"'" { sub(/\/.*/, "", $4); print $4; exit }')
	fi
	[ -n "$ip" ] || die "cannot find this host's IPv4 address (no default route); set CWS_KUBE_ADVERTISE_IP"
	echo "$ip"
}

# ---------------------------------------------------------------- packages

install_packages() {
	local missing=()
	command -v containerd >/dev/null 2>&1 || missing+=(containerd)
	command -v ctr >/dev/null 2>&1 || missing+=(containerd)
	command -v runc >/dev/null 2>&1 || missing+=(runc)
	[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] && [ -x /usr/lib/cni/loopback ] ||
		missing+=(containernetworking-plugins)
	command -v iptables >/dev/null 2>&1 || missing+=(iptables)
	command -v conntrack >/dev/null 2>&1 || missing+=(conntrack)
	command -v openssl >/dev/null 2>&1 || missing+=(openssl)
	command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
	command -v ip >/dev/null 2>&1 || missing+=(iproute2)
	command -v flock >/dev/null 2>&1 || missing+=(util-linux)
	command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go 1.26 or newer (it builds Kubernetes, etcd and CoreDNS; etcd v3.6.16 needs 1.26)"
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing ${missing[*]} (apt-get)"
	apt-get update -qq || die "apt-get update failed; check the Debian mirror in /etc/apt/sources.list*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install ${missing[*]} failed; install them by hand and rerun"
}

# ---------------------------------------------------------------- build

K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

k8s_ldflags() {
	local ld="-s -w" p
	# What hack/lib/version.sh stamps; without it every component says v0.0.0-master.
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=34"
		ld+=" -X $p.gitTreeState=clean -X $p.buildDate=2026-02-10T12:53:36Z -X $p.gitCommit="
	done
	echo "$ld"
}

# stamp DIR FILES...: a hash of the inputs of a build, stored beside its binaries.
GO_VERSION=""
stamp_of() {
	[ -n "$GO_VERSION" ] || GO_VERSION=$(go env GOVERSION)
	(cd "$1" && shift && cat "$@") | { cat; echo "$GO_VERSION"; k8s_ldflags; } | sha256sum | cut -c1-16
}

build_k8s() {
	local src=$REPO/deploy/kube/build stamp c ok=1
	stamp=$(stamp_of "$src" go.mod go.sum pause/main.go)
	for c in "${K8S_CMDS[@]}" pause; do [ -x "$K8S_BIN/$c" ] || ok=0; done
	if [ "$ok" = 1 ] && [ "$(cat "$K8S_BIN/.stamp" 2>/dev/null)" = "$stamp" ]; then return 0; fi
	say "building Kubernetes $K8S_VERSION (${K8S_CMDS[*]}) and the pause program from source"
	say "one go build in deploy/kube/build; cold it takes about 8 min on 2 idle cores, 25 on a busy machine (log: $CACHE/build-kubernetes.log)"
	local tmp=$K8S_BIN.partial t0=$SECONDS pkgs=()
	for c in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
	rm -rf "$tmp" && mkdir -p "$tmp"
	if ! with_ticker "kubernetes $K8S_VERSION" "$CACHE/build-kubernetes.log" \
		env -C "$src" GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
		go build -v -trimpath -ldflags "$(k8s_ldflags)" -o "$tmp/" "${pkgs[@]}" ./pause; then
		grep -v '^[a-zA-Z0-9._/-]*$' "$CACHE/build-kubernetes.log" | tail -n 30 >&2 || true
		die "building Kubernetes failed after $((SECONDS - t0))s (full log: $CACHE/build-kubernetes.log). A 'missing go.sum entry' means: cd deploy/kube/build && go mod tidy"
	fi
	echo "$stamp" >"$tmp/.stamp"
	rm -rf "$K8S_BIN" && mv "$tmp" "$K8S_BIN"
	say "built Kubernetes $K8S_VERSION in $((SECONDS - t0))s ($(du -sh "$K8S_BIN" | cut -f1) in $K8S_BIN)"
}

build_etcd() {
	local src=$REPO/deploy/kube/etcd stamp
	stamp=$(stamp_of "$src" go.mod go.sum)
	if [ -x "$ETCD_BIN/etcd" ] && [ "$(cat "$ETCD_BIN/.stamp" 2>/dev/null)" = "$stamp" ]; then return 0; fi
	say "building etcd $ETCD_VERSION from source (deploy/kube/etcd; cold about 2-3 min; log: $CACHE/build-etcd.log)"
	local tmp=$ETCD_BIN.partial t0=$SECONDS
	rm -rf "$tmp" && mkdir -p "$tmp"
	if ! with_ticker "etcd $ETCD_VERSION" "$CACHE/build-etcd.log" \
		env -C "$src" GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
		go build -v -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3; then
		grep -v '^[a-zA-Z0-9._/-]*$' "$CACHE/build-etcd.log" | tail -n 30 >&2 || true
		die "building etcd failed after $((SECONDS - t0))s (full log: $CACHE/build-etcd.log). A 'missing go.sum entry' means: cd deploy/kube/etcd && go mod tidy"
	fi
	echo "$stamp" >"$tmp/.stamp"
	rm -rf "$ETCD_BIN" && mv "$tmp" "$ETCD_BIN"
	say "built etcd $ETCD_VERSION in $((SECONDS - t0))s"
}

# build_localpv builds the cws-local provisioner from this repo's own module (seconds
# once client-go is in the build cache).
build_localpv() {
	local stamp
	stamp=$(cat "$REPO/deploy/kube/localpv/main.go" "$REPO/go.sum" | sha256sum | cut -c1-16)
	if [ -x "$LOCALPV_BIN" ] && [ "$(cat "$LOCALPV_BIN.stamp" 2>/dev/null)" = "$stamp" ]; then return 0; fi
	say "building localpv (deploy/kube/localpv)"
	mkdir -p "$(dirname "$LOCALPV_BIN")"
	(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -o "$LOCALPV_BIN.partial" ./deploy/kube/localpv) ||
		die "building localpv failed (cd $REPO && go build ./deploy/kube/localpv says why)"
	mv "$LOCALPV_BIN.partial" "$LOCALPV_BIN"
	echo "$stamp" >"$LOCALPV_BIN.stamp"
}

# build_module NAME DIR OUT WHAT: one `go build` of the module deploy/kube/DIR (its own
# go.mod, so its dependencies stay apart from Kubernetes') into OUT/NAME, skipped when
# OUT holds a build of the same sources. WHAT says what it is, for the progress line.
build_module() {
	local name=$1 src=$REPO/deploy/kube/$2 out=$3 what=$4 stamp
	stamp=$(stamp_of "$src" go.mod go.sum main.go)
	if [ -x "$out/$name" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then return 0; fi
	say "building $what from source (deploy/kube/$2; cold about 2-3 min; log: $CACHE/build-$name.log)"
	local tmp=$out.partial t0=$SECONDS
	rm -rf "$tmp" && mkdir -p "$tmp"
	if ! with_ticker "$name" "$CACHE/build-$name.log" \
		env -C "$src" GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
		go build -v -trimpath -ldflags "-s -w" -o "$tmp/$name" .; then
		grep -v '^[a-zA-Z0-9._/-]*$' "$CACHE/build-$name.log" | tail -n 30 >&2 || true
		die "building $name failed after $((SECONDS - t0))s (full log: $CACHE/build-$name.log). A 'missing go.sum entry' means: cd deploy/kube/$2 && go mod tidy"
	fi
	echo "$stamp" >"$tmp/.stamp"
	rm -rf "$out" && mv "$tmp" "$out"
	say "built $name in $((SECONDS - t0))s"
}

build_coredns() { build_module coredns coredns "$COREDNS_BIN" "CoreDNS $COREDNS_VERSION (cluster DNS)"; }

build_netpol() {
	build_module netpol netpol "$NETPOL_BIN" "kube-network-policies $NETPOL_VERSION (NetworkPolicy enforcement)"
}

# netpol_queue -I|-D adds (once) or removes the rules that hand every new connection
# from a pod, forwarded or to the host, to netpol's nfqueue.
netpol_queue() {
	local chain rule
	for chain in FORWARD INPUT; do
		rule=(-m conntrack --ctstate NEW -s "$CLUSTER_CIDR" -m comment --comment cws-kube-netpol -j NFQUEUE --queue-num 98 --queue-bypass)
		if [ "$1" = -I ]; then
			iptables -C "$chain" "${rule[@]}" 2>/dev/null || iptables -I "$chain" "${rule[@]}"
		else
			while iptables -D "$chain" "${rule[@]}" 2>/dev/null; do :; done
		fi
	done
}

# ---------------------------------------------------------------- certificates

# cert NAME CN ORG SANS USAGE [CA]: a key and a certificate signed by CA (default: the
# cluster CA), (re)made when missing or when its subject/SANs changed (a new host IP).
cert() {
	local name=$1 cn=$2 org=$3 sans=$4 usage=$5 ca=${6:-ca} want
	want="$cn|$org|$sans|$usage"
	[ "$ca" = ca ] || want+="|$ca"
	if [ -f "$PKI/$name.crt" ] && [ -f "$PKI/$name.key" ] && [ "$(cat "$PKI/$name.meta" 2>/dev/null)" = "$want" ]; then
		return 0
	fi
	local subj="/CN=$cn"
	[ -z "$org" ] || subj="/O=$org$subj"
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		[ -z "$sans" ] || echo "subjectAltName=$sans"
	} >"$PKI/$name.ext"
	openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subj" 2>/dev/null
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	chmod 600 "$PKI/$name.key"
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
	echo "$want" >"$PKI/$name.meta"
	say "certificate $name: CN=$cn${org:+ O=$org}${sans:+ ($sans)}"
}

# make_ca NAME CN: a self-signed CA, once; certificates it signed are remade after.
make_ca() {
	[ -f "$PKI/$1.crt" ] && [ -f "$PKI/$1.key" ] && return 0
	say "making CA $2 (openssl; $PKI)"
	openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/$1.key" -out "$PKI/$1.crt" -days 3650 \
		-sha256 -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	chmod 600 "$PKI/$1.key"
	# Certificates it is to sign: made again (their .meta records the CA unless "ca").
	# (grep finds no .meta on a fresh machine: exit 2, which pipefail would make fatal.)
	if [ "$1" = ca ]; then rm -f "$PKI"/*.meta; else { grep -l "|$1\$" "$PKI"/*.meta 2>/dev/null || true; } | xargs -r rm -f; fi
}

make_pki() {
	local ip=$1
	mkdir -p "$PKI" && chmod 700 "$PKI"
	make_ca ca cws-kube-ca
	# The aggregation layer's own CA (API server -> extension API servers; lets the
	# controller-manager and scheduler delegate authentication without complaints).
	make_ca front-proxy-ca cws-kube-front-proxy-ca
	if [ ! -f "$PKI/sa.key" ] || [ ! -f "$PKI/sa.pub" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
		chmod 600 "$PKI/sa.key"
	fi
	cert apiserver kube-apiserver "" \
		"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE,IP:127.0.0.1,IP:$API_SERVICE_IP,IP:$ip" \
		serverAuth
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" clientAuth
	cert kubelet "$NODE" "" "DNS:$NODE,DNS:localhost,IP:127.0.0.1,IP:$ip" serverAuth
	cert kubelet-client "system:node:$NODE" system:nodes "" clientAuth
	cert controller-manager system:kube-controller-manager "" "" clientAuth
	cert scheduler system:kube-scheduler "" "" clientAuth
	cert kube-proxy system:kube-proxy "" "" clientAuth
	cert admin cws-kube-admin system:masters "" clientAuth
	cert front-proxy-client front-proxy-client "" "" clientAuth front-proxy-ca
	cert coredns system:cws-kube-coredns "" "" clientAuth
}

# kubeconfig FILE CERT: a kubeconfig for https://127.0.0.1:6443, certificates embedded.
kubeconfig() {
	local file=$1 name=$2
	write_file "$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cws-kube
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: cws-kube
  context:
    cluster: cws-kube
    user: $name
current-context: cws-kube
EOF
	chmod 600 "$file"
}

# ---------------------------------------------------------------- configuration

write_configs() {
	local ip=$1
	mkdir -p "$CONF" "$LOGS" "$PIDS" "$CNI_CONF_DIR" "$CNI_IPAM_DIR" "$RUNDIR" "$STATE/containerd"
	kubeconfig "$KUBECONFIG_FILE" admin
	kubeconfig "$CONF/controller-manager.kubeconfig" controller-manager
	kubeconfig "$CONF/scheduler.kubeconfig" scheduler
	kubeconfig "$CONF/kubelet.kubeconfig" kubelet-client
	kubeconfig "$CONF/kube-proxy.kubeconfig" kube-proxy
	kubeconfig "$CONF/coredns.kubeconfig" coredns
	ln -sfn "$K8S_BIN/kubectl" "$KUBECTL"

	write_file "$CONF/containerd.toml" <<EOF
# containerd for cws-kube (scripts/kube.sh): a second instance beside dockerd's own.
version = 2
root = "$STATE/containerd"
state = "$RUNDIR/containerd"
oom_score = 0

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE/containerd-opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    # This VM refuses a negative oom_score_adj (runc: "can't get final child's PID from pipe: EOF").
    restrict_oom_score_adj = true
    enable_selinux = false
    enable_unprivileged_ports = true
    enable_unprivileged_icmp = true
    disable_hugetlb_controller = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          Root = "$RUNC_ROOT"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF

	write_file "$CNI_CONF_DIR/10-cws-kube.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "cws-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CNI_IPAM_DIR",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    }
  ]
}
EOF

	write_file "$CONF/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
containerRuntimeEndpoint: unix://$SOCK
# cgroup v1 host: kubelet v1.34 refuses cgroup v1 unless told; no systemd here.
failCgroupV1: false
cgroupDriver: cgroupfs
# The eviction manager cannot stat this VM's root device.
localStorageCapacityIsolation: false
evictionHard:
  memory.available: 100Mi
failSwapOn: false
# No registry: an image removed by GC could not come back.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDomain: cluster.local
clusterDNS:
- $DNS_SERVICE_IP
resolvConf: /etc/resolv.conf
podLogsDir: $STATE/pod-logs
volumePluginDir: $STATE/kubelet-plugins
rotateCertificates: false
serverTLSBootstrap: false
featureGates:
  UserNamespacesSupport: true
EOF

	write_file "$CONF/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE
clusterCIDR: $CLUSTER_CIDR
clientConnection:
  kubeconfig: $CONF/kube-proxy.kubeconfig
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the host's conntrack sysctls and route_localnet alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
nodePortAddresses: ["primary"]
EOF

	write_file "$CONF/Corefile" <<EOF
# CoreDNS for cws-kube: serves cluster.local from the API, forwards the rest like the host.
.:$DNS_PORT {
    bind $ip
    errors
    health 127.0.0.1:10054
    ready 127.0.0.1:10055
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $CONF/coredns.kubeconfig cws-kube
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf
    cache 30
    loop
    loadbalance
}
EOF

	# Cluster objects kube.sh owns: the default StorageClass, and the kube-dns Service
	# whose endpoint is CoreDNS on this host (a Service without selector + EndpointSlice).
	write_file "$CONF/addons.yaml" <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $STORAGE_CLASS
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
# Directories a non-root pod can write (the hostpath provisioner's are root's, 0750,
# and kubelet applies no fsGroup to hostPath volumes): deploy/kube/localpv.
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: cws-local
provisioner: cws.dev/local-dir
reclaimPolicy: Delete
volumeBindingMode: Immediate
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: system:cws-kube-coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels:
    k8s-app: kube-dns
    kubernetes.io/name: CoreDNS
spec:
  clusterIP: $DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, targetPort: $DNS_PORT, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: $DNS_PORT, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-host
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: cws-kube
addressType: IPv4
ports:
- {name: dns, port: $DNS_PORT, protocol: UDP}
- {name: dns-tcp, port: $DNS_PORT, protocol: TCP}
endpoints:
- addresses: ["$ip"]
  nodeName: $NODE
  conditions: {ready: true}
EOF
}

# ---------------------------------------------------------------- host setup

host_setup() {
	if ! awk -v n="$NODE" '$1 == "127.0.0.1" { for (i = 2; i <= NF; i++) if ($i == n) f = 1 } END { exit !f }' /etc/hosts; then
		say "adding '127.0.0.1 $NODE' to /etc/hosts (the API server reaches the kubelet by this name)"
		printf '127.0.0.1 %s %s\n' "$NODE" "$HOSTS_TAG" >>/etc/hosts
	fi
	# Pod traffic needs forwarding; pod-to-pod traffic on the bridge is seen by the
	# FORWARD chain (bridge-nf-call-iptables), whose policy dockerd sets to DROP.
	[ "$(cat /proc/sys/net/ipv4/ip_forward)" = 1 ] || { say "enabling net.ipv4.ip_forward"; echo 1 >/proc/sys/net/ipv4/ip_forward; }
	iptables -w -N "$FWD_CHAIN" 2>/dev/null || true
	iptables -w -C "$FWD_CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT 2>/dev/null ||
		iptables -w -A "$FWD_CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
	iptables -w -C FORWARD -j "$FWD_CHAIN" 2>/dev/null || iptables -w -I FORWARD 1 -j "$FWD_CHAIN"
}

# ---------------------------------------------------------------- processes

pid_of() {
	local f=$PIDS/$1.pid pid
	[ -f "$f" ] || return 1
	pid=$(cat "$f")
	[ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
	# The pid must still be our binary (pids are reused).
	[ "$(tr '\0' '\n' <"/proc/$pid/cmdline" | head -n 1)" = "$(cat "$PIDS/$1.exe" 2>/dev/null)" ] || return 1
	echo "$pid"
}
running() { pid_of "$1" >/dev/null; }

# start NAME HEALTH-CMD -- CMD...: start CMD in the background (own session, nohup,
# log in $LOGS/NAME.log) unless it runs with the same command line and config; then
# wait for HEALTH-CMD. A running component whose command or config changed restarts.
start() {
	local name=$1 health=$2 hash
	shift 3
	# The command line, the binary's mtime (a rebuild restarts it) and the config files.
	hash=$({ printf '%s\n' "$@"; stat -c %Y "$1"; cat "${CONFIG_FILES[@]}" /dev/null; } | sha256sum | cut -c1-16)
	if running "$name"; then
		if [ "$(cat "$PIDS/$name.hash" 2>/dev/null)" = "$hash" ]; then
			wait_healthy "$name" "$health" 60
			return 0
		fi
		say "restarting $name (its command line or configuration changed)"
		stop "$name"
	fi
	say "starting $name (log: $LOGS/$name.log)"
	printf '==== %s scripts/kube.sh starts: %s\n' "$(date -Is)" "$*" >>"$LOGS/$name.log"
	# 9>&-: the daemon must not inherit (and so hold) the lock of this script.
	setsid nohup "$@" >>"$LOGS/$name.log" 2>&1 </dev/null 9>&- &
	echo $! >"$PIDS/$name.pid"
	echo "$1" >"$PIDS/$name.exe"
	echo "$hash" >"$PIDS/$name.hash"
	wait_healthy "$name" "$health" 120
}

wait_healthy() {
	local name=$1 health=$2 timeout=$3 t0=$SECONDS
	until eval "$health" >/dev/null 2>&1; do
		if ! running "$name"; then
			tail -n 25 "$LOGS/$name.log" >&2
			die "$name exited (log above: $LOGS/$name.log); fix the cause and rerun scripts/kube.sh up"
		fi
		if [ $((SECONDS - t0)) -ge "$timeout" ]; then
			tail -n 25 "$LOGS/$name.log" >&2
			die "$name did not become healthy in ${timeout}s (log above: $LOGS/$name.log); scripts/kube.sh down && scripts/kube.sh up starts over"
		fi
		sleep 1
	done
}

stop() {
	local name=$1 pid i
	pid=$(pid_of "$name") || { rm -f "$PIDS/$name".{pid,exe,hash}; return 0; }
	say "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 30); do
		[ -d "/proc/$pid" ] || break
		sleep 0.5
	done
	if [ -d "/proc/$pid" ]; then
		say "$name did not stop in 15 s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$PIDS/$name".{pid,exe,hash}
}

ctrd() { ctr -a "$SOCK" -n k8s.io "$@"; }
kc() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
api_curl() { curl -fsS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$API_PORT$1"; }

# ---------------------------------------------------------------- pause image

# import_pause packs the pause binary into a one-layer image (docker-archive tar) and
# imports it, unless containerd has that exact binary already.
import_pause() {
	local sum tmp layer_sum cfg cfg_sum line old
	sum=$(sha256sum "$K8S_BIN/pause" | cut -c1-64)
	line=$(ctrd images ls 2>/dev/null | awk -v n="$PAUSE_IMAGE" '$1 == n')
	case "$line" in *"cws.pause-sha256=$sum"*) return 0 ;; esac
	old=$(echo "$line" | grep -o 'cws\.pause-config=[0-9a-f]*' | cut -d= -f2 || true)
	say "importing the pause image $PAUSE_IMAGE (built from deploy/kube/build/pause)"
	tmp=$(mktemp -d)
	mkdir -p "$tmp/root" "$tmp/img"
	cp "$K8S_BIN/pause" "$tmp/root/pause"
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$tmp/root" -cf "$tmp/layer.tar" pause
	layer_sum=$(sha256sum "$tmp/layer.tar" | cut -c1-64)
	cfg=$(printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535","WorkingDir":"/","Labels":{"org.opencontainers.image.title":"cws-kube-pause","org.opencontainers.image.source":"deploy/kube/build/pause"}},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/kube.sh: COPY pause /pause"}],"created":"1970-01-01T00:00:00Z"}' "$layer_sum")
	cfg_sum=$(printf '%s' "$cfg" | sha256sum | cut -c1-64)
	printf '%s' "$cfg" >"$tmp/img/$cfg_sum.json"
	mkdir -p "$tmp/img/$layer_sum"
	mv "$tmp/layer.tar" "$tmp/img/$layer_sum/layer.tar"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg_sum" "$PAUSE_IMAGE" "$layer_sum" >"$tmp/img/manifest.json"
	tar -C "$tmp/img" -cf "$tmp/pause.tar" .
	ctrd images import "$tmp/pause.tar" >/dev/null || { rm -rf "$tmp"; die "ctr images import of the pause image failed; see $LOGS/containerd.log"; }
	ctrd images label "$PAUSE_IMAGE" "cws.pause-sha256=$sum" "cws.pause-config=$cfg_sum" >/dev/null
	# The previous pause image's by-id name (CRI's) would keep it forever.
	[ -z "$old" ] || [ "$old" = "$cfg_sum" ] || ctrd images rm "sha256:$old" >/dev/null 2>&1 || true
	rm -rf "$tmp"
}

# ---------------------------------------------------------------- up

up() {
	local t0=$SECONDS ip
	install_packages
	lock
	mkdir -p "$CACHE/bin"
	build_k8s
	build_etcd
	build_coredns
	build_localpv
	build_netpol
	ip=$(host_ip)
	make_pki "$ip"
	write_configs "$ip"
	host_setup

	# shellcheck source=scripts/journaled.sh
	. "$REPO/scripts/journaled.sh"
	running kubelet || journaled "$STATE/kubelet" "$KUBELET_IMG" say "containerd-shim.*-address $SOCK"

	# containerd runs under its own name (a symlink): scripts/deps.sh clears a crashed
	# dockerd's state with `pkill -x containerd`, which must not hit this one.
	mkdir -p "$STATE/bin"
	ln -sfn "$(command -v containerd)" "$STATE/bin/cws-kube-containerd"
	CONFIG_FILES=("$CONF/containerd.toml" "$CNI_CONF_DIR/10-cws-kube.conflist")
	start containerd "ctr -a $SOCK version" -- \
		"$STATE/bin/cws-kube-containerd" --config "$CONF/containerd.toml" --log-level warn
	import_pause

	CONFIG_FILES=()
	start etcd "curl -fsS --max-time 3 $ETCD_CLIENT/health | grep -q '\"health\":\"true\"'" -- \
		"$ETCD_BIN/etcd" --name cws-kube --data-dir "$STATE/etcd" \
		--listen-client-urls "$ETCD_CLIENT" --advertise-client-urls "$ETCD_CLIENT" \
		--listen-peer-urls "$ETCD_PEER" --initial-advertise-peer-urls "$ETCD_PEER" \
		--initial-cluster "cws-kube=$ETCD_PEER" --initial-cluster-state new \
		--log-level warn

	CONFIG_FILES=("$PKI/apiserver.meta" "$PKI/ca.crt" "$PKI/sa.pub" "$PKI/front-proxy-client.meta")
	start kube-apiserver "api_curl /readyz" -- \
		"$K8S_BIN/kube-apiserver" \
		--advertise-address="$ip" --bind-address=0.0.0.0 --secure-port="$API_PORT" \
		--etcd-servers="$ETCD_CLIENT" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-certificate-authority="$PKI/ca.crt" \
		--kubelet-preferred-address-types=Hostname,InternalIP \
		--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
		--requestheader-allowed-names=front-proxy-client \
		--requestheader-username-headers=X-Remote-User \
		--requestheader-group-headers=X-Remote-Group \
		--requestheader-extra-headers-prefix=X-Remote-Extra- \
		--proxy-client-cert-file="$PKI/front-proxy-client.crt" \
		--proxy-client-key-file="$PKI/front-proxy-client.key" \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" \
		--service-account-signing-key-file="$PKI/sa.key" \
		--authorization-mode=Node,RBAC \
		--enable-admission-plugins=NodeRestriction \
		--allow-privileged=true \
		--feature-gates=UserNamespacesSupport=true \
		--profiling=false \
		--v=1

	apply_addons

	CONFIG_FILES=("$CONF/controller-manager.kubeconfig" "$PKI/sa.key")
	start kube-controller-manager "curl -fsSk --max-time 3 https://127.0.0.1:10257/healthz" -- \
		"$K8S_BIN/kube-controller-manager" \
		--kubeconfig="$CONF/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$CONF/controller-manager.kubeconfig" \
		--authorization-kubeconfig="$CONF/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--use-service-account-credentials=true \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--enable-hostpath-provisioner=true \
		--profiling=false \
		--v=1

	CONFIG_FILES=("$CONF/scheduler.kubeconfig")
	start kube-scheduler "curl -fsSk --max-time 3 https://127.0.0.1:10259/healthz" -- \
		"$K8S_BIN/kube-scheduler" \
		--kubeconfig="$CONF/scheduler.kubeconfig" \
		--authentication-kubeconfig="$CONF/scheduler.kubeconfig" \
		--authorization-kubeconfig="$CONF/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --profiling=false \
		--v=1

	CONFIG_FILES=("$CONF/kubelet.yaml" "$CONF/kubelet.kubeconfig" "$PKI/kubelet.meta")
	start kubelet "curl -fsS --max-time 3 http://127.0.0.1:10248/healthz" -- \
		"$K8S_BIN/kubelet" \
		--config="$CONF/kubelet.yaml" --kubeconfig="$CONF/kubelet.kubeconfig" \
		--hostname-override="$NODE" --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
		--v=1

	CONFIG_FILES=("$CONF/kube-proxy.yaml" "$CONF/kube-proxy.kubeconfig")
	start kube-proxy "curl -fsS --max-time 3 http://127.0.0.1:10256/healthz" -- \
		"$K8S_BIN/kube-proxy" --config="$CONF/kube-proxy.yaml" --v=1

	# NetworkPolicy enforcement; healthy once it has put its rules in place.
	CONFIG_FILES=("$KUBECONFIG_FILE")
	start netpol "grep -q 'Syncing nftables rules' $LOGS/netpol.log" -- \
		"$NETPOL_BIN/netpol" --kubeconfig "$KUBECONFIG_FILE" --node "$NODE" --nfqueue-id 98 --v=0
	netpol_queue -I

	CONFIG_FILES=("$CONF/Corefile" "$CONF/coredns.kubeconfig")
	start coredns "curl -fsS --max-time 3 http://127.0.0.1:10055/ready" -- \
		"$COREDNS_BIN/coredns" -conf "$CONF/Corefile"

	CONFIG_FILES=("$KUBECONFIG_FILE")
	mkdir -p "$STATE/pv"
	start localpv "grep -q 'provisioning' $LOGS/localpv.log" -- \
		"$LOCALPV_BIN" --kubeconfig "$KUBECONFIG_FILE" --dir "$STATE/pv"

	wait_cluster
	say "cluster up in $((SECONDS - t0))s: node $NODE Ready, API https://$ip:$API_PORT (pods: https://$API_SERVICE_IP:443)"
	say "kubectl: $KUBECTL   (logs: $LOGS/; scripts/kube.sh status)"
	echo "KUBECONFIG=$KUBECONFIG_FILE"
}

# apply_addons applies $CONF/addons.yaml when it changed or an object of it is missing.
apply_addons() {
	local hash t0=$SECONDS
	hash=$(sha256sum <"$CONF/addons.yaml" | cut -c1-16)
	if [ "$(cat "$PIDS/addons.hash" 2>/dev/null)" = "$hash" ] && kc get -f "$CONF/addons.yaml" -o name >/dev/null 2>&1; then
		return 0
	fi
	say "applying StorageClass $STORAGE_CLASS (default, kubernetes.io/host-path) and the kube-dns Service ($DNS_SERVICE_IP)"
	until kc apply -f "$CONF/addons.yaml" >"$LOGS/addons.log" 2>&1; do
		[ $((SECONDS - t0)) -lt 60 ] || { cat "$LOGS/addons.log" >&2; die "kubectl apply -f $CONF/addons.yaml failed"; }
		sleep 2
	done
	echo "$hash" >"$PIDS/addons.hash"
}

wait_cluster() {
	local t0=$SECONDS said=""
	until [ "$(kc get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]; do
		[ -n "$said" ] || { say "waiting for node $NODE to be Ready"; said=1; }
		[ $((SECONDS - t0)) -lt 180 ] || {
			kc describe node "$NODE" 2>&1 | tail -n 30 >&2 || true
			tail -n 20 "$LOGS/kubelet.log" >&2
			die "node $NODE not Ready after 180 s (kubelet log: $LOGS/kubelet.log)"
		}
		sleep 2
	done
	t0=$SECONDS
	until kc -n default get serviceaccount default >/dev/null 2>&1; do
		[ $((SECONDS - t0)) -lt 120 ] || die "no default ServiceAccount after 120 s (see $LOGS/kube-controller-manager.log)"
		sleep 1
	done
}

# ---------------------------------------------------------------- down

# ours_mounts lists mount points below our state directories (deepest first).
our_mounts() {
	awk -v a="$STATE/" -v b="$RUNDIR/" 'index($5, a) == 1 || index($5, b) == 1 { print $5 }' /proc/self/mountinfo | sort -r
}

down() {
	lock
	local name i netns=() id pid
	stop localpv
	stop coredns
	netpol_queue -D
	stop netpol
	stop kube-proxy
	if [ -x "$K8S_BIN/kube-proxy" ]; then
		"$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || say "kube-proxy --cleanup reported an error (ignored)"
	fi
	for name in kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$name"; done

	# Pods: kill and remove every container of our containerd (keeps the images).
	if running containerd && ctr -a "$SOCK" version >/dev/null 2>&1; then
		local ids
		ids=$(ctrd containers ls -q 2>/dev/null || true)
		if [ -n "$ids" ]; then
			say "removing $(echo "$ids" | wc -l) pod containers"
			for id in $ids; do
				while read -r ns; do netns+=("$ns"); done < <(ctrd containers info "$id" 2>/dev/null |
					grep -o '"/var/run/netns/cni-[0-9a-f-]*"' | tr -d '"' | sort -u)
				ctrd tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
			done
			sleep 1
			for id in $ids; do
				ctrd tasks rm -f "$id" >/dev/null 2>&1 || true
				ctrd containers rm "$id" >/dev/null 2>&1 || true
			done
		fi
	fi
	# Containers whose containerd is gone: runc can still kill them.
	if [ -d "$RUNC_ROOT/k8s.io" ]; then
		for id in $(runc --root "$RUNC_ROOT/k8s.io" list -q 2>/dev/null); do
			runc --root "$RUNC_ROOT/k8s.io" delete -f "$id" >/dev/null 2>&1 || true
		done
	fi
	stop containerd
	# Shims of our containerd (they outlive it), found by the socket in their command line.
	for pid in $(grep -lsF -- "$SOCK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
		if { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -q "containerd-shim.*-address $SOCK "; then
			say "killing leftover shim pid $pid"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done

	# Mounts (kubelet volumes, container rootfs, sandbox shm), network namespaces.
	local m n=0
	for m in $(our_mounts); do umount -l "$m" 2>/dev/null && n=$((n + 1)) || true; done
	for m in "${netns[@]}"; do
		umount -l "$m" 2>/dev/null || true
		rm -f "$m"
	done
	[ "$n" = 0 ] || say "unmounted $n mounts"
	if ip link show "$BRIDGE" >/dev/null 2>&1; then
		say "deleting bridge $BRIDGE"
		ip link del "$BRIDGE" || true
	fi
	if iptables -w -C FORWARD -j "$FWD_CHAIN" 2>/dev/null; then iptables -w -D FORWARD -j "$FWD_CHAIN"; fi
	iptables -w -F "$FWD_CHAIN" 2>/dev/null && iptables -w -X "$FWD_CHAIN" 2>/dev/null || true
	# kubelet's own chains (kube-proxy --cleanup removed kube-proxy's).
	local ipt table chain
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null 2>&1 || continue
		while $ipt -w -D INPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
		while $ipt -w -D OUTPUT -j KUBE-FIREWALL 2>/dev/null; do :; done
		for table in filter nat mangle; do
			for chain in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
				$ipt -w -t "$table" -F "$chain" 2>/dev/null && $ipt -w -t "$table" -X "$chain" 2>/dev/null || true
			done
		done
	done
	if grep -qF "$HOSTS_TAG" /etc/hosts; then
		grep -vF "$HOSTS_TAG" /etc/hosts >/etc/hosts.cws-kube && cat /etc/hosts.cws-kube >/etc/hosts && rm -f /etc/hosts.cws-kube
	fi
	# Pod cgroups kubelet made (only empty ones can go; deepest first).
	for m in /sys/fs/cgroup/*/kubepods; do
		[ -d "$m" ] && find "$m" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	find /var/log/containers -maxdepth 1 -lname "$STATE/*" -delete 2>/dev/null || true
	rm -f /var/lib/cni/results/cws-kube-* 2>/dev/null || true

	if [ -n "$(our_mounts)" ]; then
		our_mounts >&2
		die "mounts above are still there; not deleting $STATE (unmount them and rerun scripts/kube.sh down)"
	fi
	# The cluster's state goes; the images (containerd root), certificates and binaries stay.
	rm -f "$PIDS/addons.hash"
	rm -rf --one-file-system "$STATE/etcd" "$STATE/kubelet" "$STATE/pod-logs" "$CNI_IPAM_DIR" "$RUNDIR" "$HOSTPATH_DIR" "$STATE/pv"
	rm -f "$KUBELET_IMG"
	say "down: all stopped (state removed; images, certificates and binaries kept under $STATE/containerd and $CACHE)"
}

# ---------------------------------------------------------------- status, import

status() {
	local name pid ok=1
	for name in "${COMPONENTS[@]}"; do
		if pid=$(pid_of "$name"); then
			printf '  %-24s running, pid %-7s log %s\n' "$name" "$pid" "$LOGS/$name.log"
		else
			printf '  %-24s stopped             log %s\n' "$name" "$LOGS/$name.log"
			ok=0
		fi
	done
	echo "  kubeconfig: $KUBECONFIG_FILE"
	echo "  kubectl:    $KUBECTL"
	echo "  binaries:   $K8S_BIN, $ETCD_BIN, $COREDNS_BIN"
	echo "  state:      $STATE (containerd socket $SOCK)"
	if [ -x "$KUBECTL" ] && [ -f "$KUBECONFIG_FILE" ] && running kube-apiserver; then
		kc get nodes -o wide 2>&1 | sed 's/^/  /' || true
	fi
	[ "$ok" = 1 ]
}

# ref_of IMAGE: the name containerd gives a docker image (docker.io/library/x:latest).
ref_of() {
	local ref=$1 first=${1%%/*}
	case "$ref" in
	*/*) case "$first" in *.* | *:* | localhost) ;; *) ref=docker.io/$ref ;; esac ;;
	*) ref=docker.io/library/$ref ;;
	esac
	case "${ref##*/}" in *:* | *@*) ;; *) ref=$ref:latest ;; esac
	echo "$ref"
}

import_images() {
	[ $# -gt 0 ] || die "usage: scripts/kube.sh import <docker-image>..."
	running containerd && ctr -a "$SOCK" version >/dev/null 2>&1 ||
		die "the cluster's containerd is not running; run scripts/kube.sh up first"
	docker info >/dev/null 2>&1 || die "docker is not reachable; run scripts/deps.sh (make deps) first"
	local img id ref t0 old try
	# One import at a time: containerd's garbage collection after one import's `images
	# rm` can take a snapshot another import running beside it is about to extend
	# ("parent snapshot ... does not exist"), as tests importing in parallel saw.
	exec 9>"$STATE/import.lock"
	flock 9
	for img in "$@"; do
		id=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) ||
			die "no image $img in the local Docker engine (build it first, e.g. make images)"
		ref=$(ref_of "$img")
		old=$(ctrd images ls 2>/dev/null | awk -v n="$ref" '$1 == n' | grep -o 'cws\.docker-id=sha256:[0-9a-f]*' | cut -d= -f2 || true)
		if [ "$old" = "$id" ]; then
			say "$img: already in the cluster as $ref (${id:7:12})"
			continue
		fi
		t0=$SECONDS
		say "$img: importing (docker save | ctr import) ..."
		for try in 1 2 3; do
			docker save "$img" | ctrd images import - >/dev/null && break
			[ "$try" -lt 3 ] || die "importing $img failed; see $LOGS/containerd.log"
			say "$img: the import failed (try $try of 3); trying again"
			sleep 2
		done
		ctrd images label "$ref" "cws.docker-id=$id" >/dev/null ||
			die "$img was imported but not as $ref; check ctr -a $SOCK -n k8s.io images ls"
		# The replaced image's by-id name (CRI's) would keep its layers forever.
		[ -z "$old" ] || ctrd images rm "$old" >/dev/null 2>&1 || true
		say "$img: imported as $ref (${id:7:12}) in $((SECONDS - t0))s; use imagePullPolicy: Never or IfNotPresent"
	done
}

# ---------------------------------------------------------------- main

main() {
	local cmd=${1:-up}
	[ $# -eq 0 ] || shift
	case "$cmd" in
	up) need_root up; up ;;
	down) need_root down; down ;;
	status) status ;;
	import) need_root import "$@"; import_images "$@" ;;
	env) echo "KUBECONFIG=$KUBECONFIG_FILE" ;;
	-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
	*) die "unknown command $cmd; use up, down, status, import <image>... or env" ;;
	esac
}

# One line, so that bash never reads past it: editing this file while it runs is safe.
main "$@"; exit
