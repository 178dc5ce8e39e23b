#!/usr/bin/env bash
# cws-image.sh — build the images the compose stack runs, with no registry:
#   cws:<version>        deploy/cws.Dockerfile: FROM scratch, bin/cws + bin/cws-agent + bin/cws-launch
#   cws-redis:<version>  deploy/compose/redis.Dockerfile: Debian's redis-server
#
# Both start from cws-debian:bookworm, which `make images` (scripts/images.sh) builds;
# the binaries come from `make build`. cws-redis needs the Debian mirror that debootstrap
# used (apt-get inside the build); docker's layer cache makes a rerun take a second.
#
# Usage: scripts/cws-image.sh [cws|redis]...   (default: both)
#
# Environment:
#   VERSION            image tag (default: const Version in version/version.go)
#   CWS_IMAGE          name:tag of the cws image (default cws:$VERSION)
#   CWS_BIN_DIR        directory holding cws, cws-agent and cws-launch (default bin, from make build)
#   CWS_DEBIAN_MIRROR  Debian mirror for the redis image's apt-get (default: the base's)
set -euo pipefail

cd "$(dirname "$0")/.."

say() { printf 'cws-image: %s\n' "$*"; }
die() { printf 'cws-image: error: %s\n' "$*" >&2; exit 1; }

VERSION=${VERSION:-$(sed -n 's/^const Version = "\(.*\)"$/\1/p' version/version.go)}
[ -n "$VERSION" ] || die "cannot read Version from version/version.go"
BASE_IMAGE=cws-debian:bookworm

# The legacy builder: Debian's docker.io has no buildx, and it is all we need.
export DOCKER_BUILDKIT=0

docker info >/dev/null 2>&1 || die "docker is not reachable; run scripts/deps.sh (make deps) first"
docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 ||
	die "$BASE_IMAGE is missing; run scripts/images.sh (make images) first"

build() {
	local tag=$1 t0=$SECONDS log
	shift
	log=$(mktemp)
	if ! docker build --label "org.opencontainers.image.version=$VERSION" -t "$tag" "$@" >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		die "docker build of $tag failed"
	fi
	rm -f "$log"
	say "built $tag in $((SECONDS - t0))s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{ printf "%.1f MB", $1 / 1000000 }'))"
}

ctx=""
trap '[ -z "$ctx" ] || rm -rf "$ctx"' EXIT

build_cws() {
	local dir=${CWS_BIN_DIR:-bin}
	for b in "$dir/cws" "$dir/cws-agent" "$dir/cws-launch"; do
		[ -x "$b" ] || die "$b is missing; run make build first"
		# ldd fails on a static binary; a dynamic one cannot run in a FROM-scratch image.
		if ldd "$b" >/dev/null 2>&1; then
			die "$b is dynamically linked; build it with CGO_ENABLED=0 (make build)"
		fi
	done
	# The context is the three binaries under bin/, as deploy/cws.Dockerfile expects.
	ctx=$(mktemp -d)
	mkdir "$ctx/bin"
	cp "$dir/cws" "$dir/cws-agent" "$dir/cws-launch" "$ctx/bin/"
	build "${CWS_IMAGE:-cws:$VERSION}" -f deploy/cws.Dockerfile --build-arg "BASE=$BASE_IMAGE" "$ctx"
}

build_redis() {
	build "cws-redis:$VERSION" -f deploy/compose/redis.Dockerfile \
		--build-arg "BASE=$BASE_IMAGE" --build-arg "DEBIAN_MIRROR=${CWS_DEBIAN_MIRROR:-}" deploy/compose
}

[ $# -gt 0 ] || set -- cws redis
for what in "$@"; do
	case $what in
	cws) build_cws ;;
	redis) build_redis ;;
	*) die "unknown image $what (want cws or redis)" ;;
	esac
done
