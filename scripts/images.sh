#!/usr/bin/env bash
# images.sh — build the cws container images: cws-workspace:<version> (the default
# Debian workspace, with language servers) and cws-testbox:<version> (a FROM-scratch
# busybox image that proves the injected agent runs in any image).
#
# The Debian base is pulled when a registry answers; otherwise (air-gapped hosts) it is
# built with debootstrap from a Debian mirror and `docker import`ed as cws-debian:bookworm.
# The language servers come from what an air-gapped host can still reach: a Go toolchain
# (module golang.org/toolchain) and gopls (built here, static) from the Go module proxy,
# pyright / typescript-language-server / typescript from the npm registry (`npm ci` on
# the host against the committed deploy/images/workspace/lsp/package-lock.json), nodejs
# (and optionally clangd) from the Debian mirror. No image registry is needed.
#
# Everything is cached: the base step is skipped when cws-debian:bookworm exists; the Go
# toolchain, gopls and node_modules are kept under $CWS_IMAGES_CACHE keyed by version
# (lockfile hash for npm); and the image builds use docker's layer cache with the big,
# stable layers first, so a rerun takes a few seconds.
#
# Assumes scripts/deps.sh ran (docker.io, debootstrap, a running dockerd) and that `go`
# is on PATH (it fetches the toolchain). npm is installed from Debian when missing.
#
# Environment:
#   VERSION            image tag (default: const Version in version/version.go)
#   CWS_REBUILD_BASE   non-empty: rebuild cws-debian:bookworm even when it exists
#   CWS_DEBIAN_MIRROR  Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   CWS_PULL_TIMEOUT   seconds to wait for `docker pull` of the base (default 15)
#   CWS_GO_VERSION     Go toolchain put into the workspace image (default below)
#   CWS_GOPLS_VERSION  gopls version, built with that toolchain (default below)
#   CWS_WITH_CLANGD    1: also install clangd + C/C++ headers (Debian, about +335 MB)
#   CWS_IMAGES_CACHE   download/build cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/cws-images)
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'images: %s\n' "$*"; }
die() { printf 'images: error: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
# drop_replaced ID removes an image that a rebuild untagged (and its untagged parents),
# so that rebuilds do not pile up dangling 200 MB images. Images still in use stay.
drop_replaced() {
	[ -n "$1" ] || return 0
	[ "$(docker image inspect -f '{{len .RepoTags}}' "$1" 2>/dev/null)" = 0 ] || return 0
	docker rmi "$1" >/dev/null 2>&1 && say "removed replaced image ${1:7:12}" || true
}
size_of() { docker image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1000000 }'; }

VERSION=${VERSION:-$(sed -n 's/^const Version = "\(.*\)"$/\1/p' version/version.go)}
[ -n "$VERSION" ] || die "cannot read Version from version/version.go"

BASE_IMAGE=cws-debian:bookworm
UPSTREAM_IMAGE=debian:bookworm-slim
SUITE=bookworm
MIRROR=${CWS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=git,ripgrep,python3,ca-certificates,procps
WORKSPACE_IMAGE=cws-workspace:$VERSION
# gopls v0.24 needs Go >= 1.27 to build; it is built with the same toolchain it ships with.
GO_VERSION=${CWS_GO_VERSION:-go1.27.4}
GOPLS_VERSION=${CWS_GOPLS_VERSION:-v0.24.0}
WITH_CLANGD=${CWS_WITH_CLANGD:-0}
LSP_DIR=deploy/images/workspace/lsp
CACHE=${CWS_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cws-images}
TESTBOX_IMAGE=cws-testbox:$VERSION

# The engine is Debian docker.io 20.10 without buildx; the legacy builder does all we
# need (local base images, layer cache) and prints one "Step n/m" line per step.
export DOCKER_BUILDKIT=0

docker info >/dev/null 2>&1 || die "docker is not reachable; run scripts/deps.sh (make deps) first"

started=$SECONDS
tmp=""
ticker=""
cleanup() {
	set +e
	[ -z "$ticker" ] || kill "$ticker" 2>/dev/null
	[ -n "$tmp" ] && [ -d "$tmp" ] || return 0
	# debootstrap mounts proc/sys (and may bind /dev) inside the target; unmount
	# everything below $tmp before deleting it, deepest first.
	awk -v p="$tmp/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r |
		while read -r m; do as_root umount -l "$m" 2>/dev/null || true; done
	as_root rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
tmp=$(mktemp -d /var/tmp/cws-images.XXXXXX)

# ---------------------------------------------------------------- base image

pull_base() {
	local t=${CWS_PULL_TIMEOUT:-15}
	say "base: trying docker pull $UPSTREAM_IMAGE (timeout ${t}s)"
	if timeout "$t" docker pull -q "$UPSTREAM_IMAGE" >"$tmp/pull.log" 2>&1; then
		docker tag "$UPSTREAM_IMAGE" "$BASE_IMAGE"
		say "base: pulled $UPSTREAM_IMAGE, tagged $BASE_IMAGE"
		return 0
	fi
	say "base: pull failed ($(tail -n 1 "$tmp/pull.log" | cut -c1-120)); no registry reachable"
	return 1
}

# debootstrap_base builds a minbase Debian rootfs from $MIRROR and imports it.
debootstrap_base() {
	command -v debootstrap >/dev/null 2>&1 || die "debootstrap is missing; run scripts/deps.sh (make deps)"
	local rootfs=$tmp/rootfs log=$tmp/debootstrap.log t0=$SECONDS
	say "base: air-gapped path: debootstrap --variant=minbase $SUITE from $MIRROR"
	say "base: packages: $PACKAGES (this takes 30-90 s)"
	# Ticker: one line every 5 s with the elapsed time and debootstrap's current stage
	# (at least every 15 s when the stage does not change). debootstrap itself runs in
	# the foreground so that Ctrl-C reaches it, and the EXIT trap runs only after it ended.
	(
		last="" n=0
		while sleep 1 && kill -0 $$ 2>/dev/null; do
			[ $((n += 1)) -ge 5 ] || continue
			n=0
			line=$(grep -E '^[IEW]: ' "$log" 2>/dev/null | tail -n 1 | cut -c1-100 || true)
			if [ "$line" != "$last" ] || [ $(((SECONDS - t0) % 15)) -lt 5 ]; then
				say "base: debootstrap [$((SECONDS - t0))s] ${line:-starting}"
				last=$line
			fi
		done
	) &
	ticker=$!
	local rc=0
	as_root debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	ticker=""
	if [ "$rc" -ne 0 ]; then
		tail -n 25 "$log" >&2
		[ -f "$rootfs/debootstrap/debootstrap.log" ] && tail -n 25 "$rootfs/debootstrap/debootstrap.log" >&2
		die "debootstrap failed (exit $rc) after $((SECONDS - t0))s (mirror $MIRROR; set CWS_DEBIAN_MIRROR to use another)"
	fi
	say "base: debootstrap done in $((SECONDS - t0))s"

	# Keep the image small: no package lists, downloaded .debs, logs, docs or man pages
	# (copyright files stay). apt-get update restores the lists when a user needs them.
	as_root sh -c '
		set -e
		cd "$1"
		rm -rf var/lib/apt/lists/* var/cache/apt/*.bin var/cache/apt/archives/*.deb \
			var/cache/debconf/*-old var/lib/dpkg/*-old var/log/* tmp/* var/tmp/* \
			usr/share/man/* usr/share/info/* usr/share/lintian/* usr/share/linda/*
		find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete
		find usr/share/doc -mindepth 1 -type d -empty -delete
		find usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
		# The engine mounts /dev, /proc and /sys itself.
		rm -rf dev/* proc/* sys/*
		# Like the official images: docs and man pages are not installed by later apt-get runs.
		mkdir -p etc/dpkg/dpkg.cfg.d
		printf "%s\n" "path-exclude /usr/share/doc/*" "path-include /usr/share/doc/*/copyright" \
			"path-exclude /usr/share/man/*" "path-exclude /usr/share/info/*" \
			>etc/dpkg/dpkg.cfg.d/docker-excludes
		printf "%s\n" "APT::Install-Recommends \"false\";" >etc/apt/apt.conf.d/docker-no-recommends
		printf "%s\n" "Acquire::GzipIndexes \"true\";" >etc/apt/apt.conf.d/docker-gzip-indexes
	' sh "$rootfs"

	say "base: importing rootfs ($(as_root du -sh --one-file-system "$rootfs" | cut -f1)) as $BASE_IMAGE"
	local t1=$SECONDS
	as_root tar --numeric-owner -C "$rootfs" -c . | docker import \
		-c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		-c 'ENV LANG=C.UTF-8' \
		-c 'CMD ["bash"]' \
		-c "LABEL org.opencontainers.image.title=cws-debian org.opencontainers.image.source=debootstrap:$SUITE" \
		-m "debootstrap --variant=minbase --include=$PACKAGES $SUITE $MIRROR" \
		- "$BASE_IMAGE" >/dev/null
	say "base: imported $BASE_IMAGE in $((SECONDS - t1))s ($(size_of "$BASE_IMAGE"))"
	as_root rm -rf --one-file-system "$rootfs"
}

if have_image "$BASE_IMAGE" && [ -z "${CWS_REBUILD_BASE:-}" ]; then
	say "base: $BASE_IMAGE exists, skipping (CWS_REBUILD_BASE=1 rebuilds it)"
else
	[ -n "${CWS_REBUILD_BASE:-}" ] && say "base: CWS_REBUILD_BASE is set, rebuilding $BASE_IMAGE"
	old_base=$(image_id "$BASE_IMAGE")
	pull_base || debootstrap_base
fi

# ---------------------------------------------------------------- language servers

# with_ticker LABEL LOG CMD... runs CMD with its output in LOG and prints
# "LABEL [Ns] <last line of LOG>" every 10 s while it runs; returns CMD's status.
with_ticker() {
	local label=$1 log=$2 t0=$SECONDS rc=0
	shift 2
	: >"$log"
	(
		n=0
		while sleep 1 && kill -0 $$ 2>/dev/null; do
			[ $((n += 1)) -ge 10 ] || continue
			n=0
			say "$label [$((SECONDS - t0))s] $(tail -n 1 "$log" 2>/dev/null | tr -d '\r' | cut -c1-90)"
		done
	) &
	ticker=$!
	"$@" >"$log" 2>&1 || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	ticker=""
	return "$rc"
}

# prune KEEP PATTERN removes cache entries matching PATTERN other than KEEP, so that a
# version bump does not leave the old toolchain (250 MB) behind.
prune() {
	local keep=$1 old
	shift
	for old in "$CACHE"/$1; do
		[ -e "$old" ] && [ "$old" != "$keep" ] || continue
		chmod -R u+w "$old" 2>/dev/null || true
		rm -rf "$old" && say "cache: removed old ${old##*/}"
	done
}

ARCH=$(docker version -f '{{.Server.Arch}}' 2>/dev/null || true)
command -v go >/dev/null 2>&1 || die "go is missing; it is needed to fetch the Go toolchain and build gopls"
[ "$ARCH" = "$(go env GOHOSTARCH)" ] ||
	die "the docker engine is $ARCH but this host is $(go env GOHOSTARCH); gopls is built on the host for the engine"
mkdir -p "$CACHE"

# The Go toolchain, from the module proxy (checked against the checksum database),
# trimmed of the standard library's testdata, with the executable bits module zips lose.
GO_DIR=$CACHE/$GO_VERSION.linux-$ARCH
if [ -x "$GO_DIR/go/bin/go" ]; then
	say "go: $GO_VERSION cached ($GO_DIR)"
else
	mod=golang.org/toolchain@v0.0.1-$GO_VERSION.linux-$ARCH
	say "go: downloading $mod from $(go env GOPROXY) (~75 MB)"
	t0=$SECONDS
	if ! (cd "$tmp" && with_ticker "go: download" "$tmp/go-download.log" \
		env GOTOOLCHAIN=local GOFLAGS= GO111MODULE=on go mod download -json "$mod"); then
		cat "$tmp/go-download.log" >&2
		die "go mod download $mod failed (is $GO_VERSION on $(go env GOPROXY)? set CWS_GO_VERSION)"
	fi
	src=$(sed -n 's/^\t"Dir": "\(.*\)",\{0,1\}$/\1/p' "$tmp/go-download.log")
	[ -x "$src/bin/go" ] || [ -f "$src/bin/go" ] || die "go mod download $mod: no bin/go in ${src:-(no Dir)}"
	rm -rf "$GO_DIR.part"
	mkdir -p "$GO_DIR.part"
	cp -r "$src" "$GO_DIR.part/go"
	chmod -R u+w,go-w "$GO_DIR.part/go"
	chmod a+x "$GO_DIR.part/go/bin/"* "$GO_DIR.part/go/pkg/tool/"*/*
	find "$GO_DIR.part/go/src" -type d -name testdata -prune -exec rm -rf {} +
	"$GO_DIR.part/go/bin/go" version >/dev/null || die "the downloaded $GO_VERSION does not run"
	mv "$GO_DIR.part" "$GO_DIR"
	say "go: $GO_VERSION ready in $((SECONDS - t0))s ($(du -sh "$GO_DIR" | cut -f1))"
	prune "$GO_DIR" "go1.*.linux-$ARCH"
fi

# gopls, built static with that toolchain (GOMODCACHE/GOCACHE are the host's, so a
# rebuild after a cache wipe is quick).
GOPLS_BIN=$CACHE/gopls-$GOPLS_VERSION-$GO_VERSION-linux-$ARCH
if [ -x "$GOPLS_BIN" ]; then
	say "gopls: $GOPLS_VERSION cached ($GOPLS_BIN)"
else
	say "gopls: building golang.org/x/tools/gopls@$GOPLS_VERSION with $GO_VERSION (CGO_ENABLED=0, 2-5 min cold)"
	t0=$SECONDS
	rm -rf "$tmp/gobin"
	if ! (cd "$tmp" && with_ticker "gopls: build" "$tmp/gopls.log" \
		env GOTOOLCHAIN=local GOFLAGS= GO111MODULE=on CGO_ENABLED=0 GOBIN="$tmp/gobin" \
		"$GO_DIR/go/bin/go" install -x -trimpath -ldflags='-s -w' "golang.org/x/tools/gopls@$GOPLS_VERSION"); then
		grep -v '^\(mkdir\|cd\|cat\|EOF\|#\|WORK=\|packagefile\|importmap\|modinfo\|[[:space:]]\)' "$tmp/gopls.log" | tail -n 40 >&2
		die "building gopls $GOPLS_VERSION failed"
	fi
	# ldd exits non-zero on a static binary.
	! ldd "$tmp/gobin/gopls" >/dev/null 2>&1 || die "gopls is dynamically linked"
	mv "$tmp/gobin/gopls" "$GOPLS_BIN"
	say "gopls: built in $((SECONDS - t0))s ($(du -h "$GOPLS_BIN" | cut -f1))"
	prune "$GOPLS_BIN" "gopls-*-linux-$ARCH"
fi

# The npm language servers, installed exactly as locked. They are plain JavaScript (no
# install scripts, no native parts), so the host's npm/node version does not matter.
npm_key=$(cat "$LSP_DIR/package.json" "$LSP_DIR/package-lock.json" | sha256sum | cut -c1-16)
NPM_DIR=$CACHE/npm-$npm_key
npm_versions=$(sed -n '/"dependencies"/,/}/s/^ *"\([a-z-]*\)": "\([0-9][0-9.]*\)",\{0,1\}$/\1 \2/p' "$LSP_DIR/package.json" |
	paste -sd, | sed 's/,/, /g')
if [ -d "$NPM_DIR/node_modules" ]; then
	say "npm: $npm_versions cached ($NPM_DIR)"
else
	if ! command -v npm >/dev/null 2>&1; then
		say "npm: installing npm (apt-get)"
		if ! { as_root apt-get update -qq &&
			as_root env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
				apt-get install -y -qq --no-install-recommends npm; } >"$tmp/apt-npm.log" 2>&1; then
			cat "$tmp/apt-npm.log" >&2
			die "apt-get install npm failed"
		fi
	fi
	say "npm: npm ci $npm_versions from $(npm config get registry 2>/dev/null)"
	t0=$SECONDS
	rm -rf "$NPM_DIR.part"
	mkdir -p "$NPM_DIR.part"
	cp "$LSP_DIR/package.json" "$LSP_DIR/package-lock.json" "$NPM_DIR.part/"
	if ! (cd "$NPM_DIR.part" && with_ticker "npm: ci" "$tmp/npm.log" \
		npm ci --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=http); then
		cat "$tmp/npm.log" >&2
		die "npm ci in $LSP_DIR failed"
	fi
	mv "$NPM_DIR.part" "$NPM_DIR"
	say "npm: installed in $((SECONDS - t0))s ($(du -sh "$NPM_DIR/node_modules" | cut -f1))"
	prune "$NPM_DIR" "npm-*"
fi

# ---------------------------------------------------------------- image builds

# build TAG CONTEXT [docker build args...] runs the legacy builder and prints one line per
# step with its result ("cached" or "ran"), or the whole log when the build fails.
build() {
	local tag=$1 ctx=$2 t0=$SECONDS log old
	shift 2
	old=$(image_id "$tag")
	log=$tmp/build-${tag%%:*}.log
	say "build: $tag"
	if ! with_ticker "build: ${tag%%:*}" "$log" \
		docker build --label "org.opencontainers.image.version=$VERSION" -t "$tag" "$@" "$ctx"; then
		cat "$log" >&2
		die "docker build of $tag failed"
	fi
	awk '
		function flush() { if (step != "") printf "images:   %-72s -> %s\n", step, result }
		/^Step [0-9]+\/[0-9]+ : / { flush(); step = substr($0, 1, 72); result = "ok"; next }
		/ ---> Using cache/ { result = "cached" }
		/ ---> Running in / { result = "ran" }
		END { flush() }
	' "$log"
	say "build: $tag done in $((SECONDS - t0))s ($(size_of "$tag"))"
	[ "$old" = "$(image_id "$tag")" ] || drop_replaced "$old"
}

lsp_label="gopls $GOPLS_VERSION, $GO_VERSION, $npm_versions"
[ "$WITH_CLANGD" = 1 ] && lsp_label="$lsp_label, clangd (Debian)"
say "workspace: language servers: $lsp_label"

# Even fully cached, `docker build` spends ~25 s sending and hashing the 350 MB context.
# The image carries a hash of all its inputs (the files here, the base image, the cache
# keys above) in the label dev.cws.inputs; when it matches, the build is skipped.
inputs=$({
	find deploy/images/workspace -type f | LC_ALL=C sort | xargs sha256sum
	echo "$(image_id "$BASE_IMAGE") $VERSION $GO_VERSION $GOPLS_VERSION npm-$npm_key clangd-$WITH_CLANGD $ARCH"
} | sha256sum | cut -c1-16)
have=$(docker image inspect -f '{{index .Config.Labels "dev.cws.inputs"}}' "$WORKSPACE_IMAGE" 2>/dev/null || true)

# build_workspace assembles the context in $tmp: the repo's files plus the cached
# toolchain, gopls and node_modules, hard-linked (copied across file systems). COPY
# caches by content, so an unchanged cache means cached layers.
link_into() { cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2" && cp -a "$1" "$2"; }; }
build_workspace() {
	local ctx=$tmp/workspace
	mkdir -p "$ctx"
	cp -a deploy/images/workspace/. "$ctx/"
	link_into "$GO_DIR/go" "$ctx/go"
	link_into "$GOPLS_BIN" "$ctx/gopls"
	link_into "$NPM_DIR/node_modules" "$ctx/node_modules"
	build "$WORKSPACE_IMAGE" "$ctx" --build-arg "BASE=$BASE_IMAGE" --build-arg "WITH_CLANGD=$WITH_CLANGD" \
		--build-arg "LSP_VERSIONS=$lsp_label" --label "dev.cws.inputs=$inputs"
}

if [ "$have" = "$inputs" ] && [ -z "${CWS_REBUILD_BASE:-}" ]; then
	say "build: $WORKSPACE_IMAGE is up to date (inputs $inputs), skipping"
else
	build_workspace
fi
[ "${old_base:-}" = "$(image_id "$BASE_IMAGE")" ] || drop_replaced "${old_base:-}"

# The testbox context is assembled in $tmp: the repo's files plus a static busybox from
# Debian's busybox-static package. Content-based COPY caching keeps rebuilds cached.
busybox=/bin/busybox
if ! dpkg -s busybox-static >/dev/null 2>&1; then
	say "testbox: installing busybox-static (apt-get)"
	if ! { as_root apt-get update -qq &&
		as_root env DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1 \
			apt-get install -y -qq --no-install-recommends busybox-static; } >"$tmp/apt.log" 2>&1; then
		cat "$tmp/apt.log" >&2
		die "apt-get install busybox-static failed"
	fi
fi
# ldd exits non-zero on a static binary ("not a dynamic executable").
if ldd "$busybox" >/dev/null 2>&1; then
	die "$busybox is dynamically linked; it cannot run in a FROM-scratch image (is busybox-static installed?)"
fi
ctx=$tmp/testbox
mkdir -p "$ctx"
cp -a deploy/images/testbox/. "$ctx/"
cp "$busybox" "$ctx/busybox"
build "$TESTBOX_IMAGE" "$ctx"

say "done in $((SECONDS - started))s: $BASE_IMAGE $(size_of "$BASE_IMAGE"), $WORKSPACE_IMAGE $(size_of "$WORKSPACE_IMAGE"), $TESTBOX_IMAGE $(size_of "$TESTBOX_IMAGE")"
