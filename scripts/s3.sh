#!/usr/bin/env bash
# s3.sh — the S3 server the snapshot store's tests run against: SeaweedFS's `weed`
# (Apache-2.0), built from the Go module proxy. MinIO's server is AGPL: not used.
#
# Usage: scripts/s3.sh [build|path]
#   build  (default) build weed into the cache unless it is there; prints its path last.
#   path   print the path weed is (or would be) built at.
#
# `go install` refuses seaweedfs because of its replace directive, so it is built from
# the wrapper module deploy/s3, which copies that directive. A cold build takes about
# 5 minutes on 2 cores and gives a 160 MB binary, cached under
# ${CWS_S3_CACHE:-~/.cache/cws-s3} (tests find it there, or at $CWS_WEED).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${CWS_S3_CACHE:-$HOME/.cache/cws-s3}"
VERSION="$(sed -n 's/^require github.com\/seaweedfs\/seaweedfs \(.*\)$/\1/p' deploy/s3/go.mod)"
STAMP="$CACHE/weed.version"
BIN="$CACHE/weed"

say() { echo "s3: $*" >&2; }

build() {
	if [[ -x "$BIN" && -f "$STAMP" && "$(cat "$STAMP")" == "$VERSION" ]]; then
		say "weed $VERSION is built ($BIN)"
		echo "$BIN"
		return
	fi
	mkdir -p "$CACHE"
	say "building weed $VERSION from the Go module proxy (about 5 min cold) ..."
	local start=$SECONDS
	( cd deploy/s3 && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$BIN.partial" github.com/seaweedfs/seaweedfs/weed ) &
	local pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 15
		kill -0 "$pid" 2>/dev/null && say "building weed [$((SECONDS - start))s]"
	done
	wait "$pid"
	mv "$BIN.partial" "$BIN"
	echo "$VERSION" > "$STAMP"
	say "weed built in $((SECONDS - start))s ($(du -h "$BIN" | cut -f1))"
	echo "$BIN"
}

case "${1:-build}" in
	build) build ;;
	path) echo "$BIN" ;;
	*) echo "usage: scripts/s3.sh [build|path]" >&2; exit 2 ;;
esac
