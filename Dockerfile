# keel image: a static binary on an empty base (no image is pulled; build with `make image`).
FROM scratch
COPY bin/keel /keel
EXPOSE 7370 7371 7372
ENTRYPOINT ["/keel"]
CMD ["agent", "-dev", "-data-dir", "/data", "-http-addr", "0.0.0.0:7370", "-raft-addr", "0.0.0.0:7371"]
