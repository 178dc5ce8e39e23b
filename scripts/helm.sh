#!/usr/bin/env bash
# helm.sh — run helm v3: the installed `helm` if there is one, else a pinned helm built
# from source with the Go toolchain into ~/.cache/cws/bin (once per machine, shared by
# every clone; a few minutes, no registry other than the Go module proxy).
#
# Usage: scripts/helm.sh <helm args>...   e.g. scripts/helm.sh lint --strict helm/cws
# Environment:
#   HELM          a helm binary to use, skipping the lookup
#   HELM_VERSION  version built when none is installed (default v3.19.0)
set -euo pipefail

version=${HELM_VERSION:-v3.19.0}

if [ -z "${HELM:-}" ]; then
	cache=${XDG_CACHE_HOME:-$HOME/.cache}/cws/bin
	cached=$cache/helm-$version
	if command -v helm >/dev/null 2>&1 && helm version --short 2>/dev/null | grep -q '^v3\.'; then
		HELM=$(command -v helm)
	elif [ -x "$cached" ]; then
		HELM=$cached
	else
		printf 'helm.sh: building helm %s into %s (go install, once)\n' "$version" "$cached" >&2
		mkdir -p "$cache"
		tmp=$(mktemp -d)
		(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp" \
			go install "helm.sh/helm/v3/cmd/helm@$version")
		mv "$tmp/helm" "$cached.partial" && mv "$cached.partial" "$cached"
		rm -rf "$tmp"
		HELM=$cached
	fi
fi
exec "$HELM" "$@"
