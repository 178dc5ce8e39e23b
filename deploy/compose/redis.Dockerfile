# cws-redis: Redis for the compose stack, built with no container registry.
#
# BASE is cws-debian:bookworm, the Debian base that scripts/images.sh builds (pulled, or
# debootstrapped and imported on air-gapped hosts). redis-server comes from the same
# Debian mirror that debootstrap uses, so this build needs that mirror and nothing else.
# With a registry, skip this image: CWS_REDIS_IMAGE=redis:7-bookworm docker compose up.
#
# scripts/cws-image.sh builds it as cws-redis:<version>.
ARG BASE=cws-debian:bookworm
FROM ${BASE}

ARG DEBIAN_MIRROR=
RUN set -eu; \
    if [ -n "$DEBIAN_MIRROR" ]; then \
        echo "deb $DEBIAN_MIRROR bookworm main" >/etc/apt/sources.list; \
        rm -f /etc/apt/sources.list.d/*; \
    fi; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*; \
    mkdir -p /data; \
    chown redis:redis /data

# The Debian package creates the redis user; its uid is whatever adduser chose, so the
# data directory is chowned by name above.
USER redis
WORKDIR /data
VOLUME /data
EXPOSE 6379
# No config file: everything is on the command line, which compose may override.
# appendonly with fsync every second: at most one second of writes is lost on a crash.
CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--port", "6379", \
     "--dir", "/data", "--appendonly", "yes", "--appendfsync", "everysec", \
     "--save", "", "--daemonize", "no", "--logfile", ""]
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=5 \
    CMD ["redis-cli", "-p", "6379", "ping"]
LABEL org.opencontainers.image.title=cws-redis \
      org.opencontainers.image.description="redis-server from Debian bookworm, for the cws compose stack"
