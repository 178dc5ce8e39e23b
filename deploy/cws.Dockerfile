# cws: the service image. `cws serve` plus the static agent it injects into workspaces.
#
# Built offline, with no registry: scripts/cws-image.sh (or, from the repo root,
#   docker build -f deploy/cws.Dockerfile -t cws:0.1.0 .
# after `make build images`). The root .dockerignore keeps the context to bin/cws,
# bin/cws-agent and bin/cws-launch, which `make build` makes static (CGO_ENABLED=0) on the host: no Go
# builder image can be pulled here.
#
# Stage 1 is the locally built Debian base (cws-debian:bookworm, from scripts/images.sh:
# pulled, or debootstrapped on air-gapped hosts). It only contributes files: Debian's CA
# bundle, /etc/passwd and /etc/group naming uid 65532, and an empty sticky /tmp. Any
# Debian-like BASE that has ca-certificates installed works.
ARG BASE=cws-debian:bookworm

FROM ${BASE} AS rootfs
RUN set -eu; \
    test -s /etc/ssl/certs/ca-certificates.crt; \
    mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp /rootfs/home/nonroot; \
    cp /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/; \
    printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
        'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >/rootfs/etc/passwd; \
    printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >/rootfs/etc/group; \
    chmod 1777 /rootfs/tmp; \
    chown 65532:65532 /rootfs/home/nonroot

# The final stage has no shell, no libc and no package manager: three static binaries
# (cws; the agent; its native launcher, which pods' init containers install beside it),
# CA certificates and the user database.
FROM scratch
COPY --from=rootfs /rootfs/ /
COPY bin/cws bin/cws-agent bin/cws-launch /

# cws runs as an unprivileged user. It needs exactly one privilege: talking to the Docker
# engine, whose socket (/var/run/docker.sock, mode 0660 root:docker) only root and the
# socket's group may open. The deployment adds that group to the process
# (compose: group_add with the socket's gid; Kubernetes: supplementalGroups) rather than
# running cws as root. Be clear about what that grants: whoever controls the Docker API
# controls the host, so this group is root-equivalent on the engine's host. It is the
# price of a Docker-backed sandbox; the workspaces themselves never see the socket.
USER 65532:65532
ENV HOME=/home/nonroot \
    CWS_ADDR=0.0.0.0:9960 \
    CWS_AGENT_BINARY=/cws-agent \
    CWS_LOG_FORMAT=json
EXPOSE 9960

# `cws healthcheck` GETs /healthz on the address in CWS_ADDR (0.0.0.0 means 127.0.0.1)
# and exits 0 on 200, 1 otherwise. No shell or curl is needed in the image.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/cws", "healthcheck"]

ENTRYPOINT ["/cws"]
CMD ["serve"]

LABEL org.opencontainers.image.title=cws \
      org.opencontainers.image.description="cws, the Coding Workspace Service, with its workspace agent" \
      org.opencontainers.image.source=https://github.com/cwsdev/cws
