// Package patroni is a judge keel did not write: Patroni (Debian's `patroni`, which
// speaks etcd's JSON gateway over urllib3) and PostgreSQL run on a 3-node keel as their
// etcd3 DCS, and the same script runs on a 3-node etcd 3.4 (Debian's `etcd-server`) to
// show that it holds there. `make test-patroni` runs it (CI installs the packages).
//
// The script: two Patroni members elect a PostgreSQL leader and the replica streams
// from it; then (a) the leader's Patroni and postmaster are killed and the replica is
// promoted within the leader key's TTL, and (b) the DCS's own leader is killed and
// Patroni neither demotes its leader nor fails over.
//
// What it must never do: touch anything but loopback, or leave a process or a data dir
// behind. PostgreSQL refuses to run as root, so Patroni runs as the `postgres` user the
// package creates, in a scratch dir it owns.
package patroni
