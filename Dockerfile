# meshloc's image for the compose cluster (docker-compose.yml): FROM scratch,
# with static binaries built on the host, so that nothing is pulled from a
# registry. `make images` builds them into build/docker/ first:
#
#   build/docker/bin/     etcd, etcdctl (from their Go modules, the versions
#                         of go.mod), locationd, meshnode, meshctl (CGO_ENABLED=0)
#   build/docker/rootfs/  the empty directories the processes write to
#
# .dockerignore keeps the build context to build/docker/. There is no shell:
# health checks run `meshctl probe URL` and `etcdctl endpoint health`. The
# processes run as 65532:65532 (no passwd file: numeric ids); a named volume
# mounted on /var/lib/etcd starts with that owner, copied from the image.
FROM scratch
COPY --chown=65532:65532 build/docker/rootfs/ /
COPY build/docker/bin/ /usr/local/bin/
ENV PATH=/usr/local/bin
USER 65532:65532
WORKDIR /tmp
LABEL org.opencontainers.image.title="meshloc" \
      org.opencontainers.image.description="meshloc: etcd, etcdctl, locationd, meshnode, meshctl" \
      org.opencontainers.image.source="https://github.com/meshloc/meshloc"
