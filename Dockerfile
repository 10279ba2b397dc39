# keel image: the static binary on an empty base (no image is pulled; build with
# `make image`, which also lays out bin/image-root). docs in deploy/README.md.
#
# The default is a production node: TLS required (it refuses to start without
# certificates, saying how to make them: set KEEL_CA_FILE, KEEL_CERT_FILE and
# KEEL_KEY_FILE, read by the node and by the health check alike — deploy/compose mounts
# them at /etc/keel/tls), data on the /data volume, every port on all
# interfaces, a non-root numeric user (FROM scratch has no /etc/passwd). Configure it
# with KEEL_* variables (each agent flag: KEEL_ADVERTISE, KEEL_BOOTSTRAP_EXPECT,
# KEEL_JOIN, ...) or a full command line. A throwaway dev node only when asked:
#   docker run --rm -p 127.0.0.1:7370:7370 -p 127.0.0.1:2379:2379 keel:dev agent -dev
FROM scratch
# /data, empty, 0700, owned by the user below: a named volume starts as a copy of it.
COPY --chown=65532:65532 bin/image-root/ /
COPY bin/keel /keel
USER 65532:65532
ENV KEEL_DATA_DIR=/data \
    KEEL_HTTP_ADDR=0.0.0.0:7370 \
    KEEL_RAFT_ADDR=0.0.0.0:7371 \
    KEEL_ETCD_ADDR=0.0.0.0:2379
VOLUME /data
# HTTP API, Raft, gossip (with KEEL_GOSSIP_ADDR=0.0.0.0:7372), etcd v3 API.
EXPOSE 7370 7371 7372 2379
# keel health: GET /livez, over TLS with the same KEEL_*_FILE variables as the node
# (its certificate serves as a client certificate of the CA); no shell or curl needed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/keel", "health", "-timeout", "4s"]
ENTRYPOINT ["/keel"]
CMD ["agent"]
