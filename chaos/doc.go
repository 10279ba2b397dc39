// Package chaos proves, under faults, that keel loses no acknowledged write and serves
// no stale read. It starts real `keel agent` processes (and, where a Docker daemon
// answers, containers), drives concurrent clients against them while a seeded fault
// schedule kills, pauses, partitions and slows nodes, records every operation's call and
// return time and outcome, and checks the history with porcupine against a key-value
// model with revisions (KVModel), plus the weaker rules serializable reads promise.
//
// What it owns: the fault-injecting TCP proxy in front of every node's Raft port
// (Network), the process and container clusters, the workload, the history and its
// checks. The scenarios (scenarios.go) each declare the backends they must run on;
// chaos_test.go runs them behind the `chaos` build tag (`make chaos`, `make
// chaos-soak`). The model, checker (with its self-test), schedule and proxy have plain
// unit tests that run in `make test`.
//
// What it must never do: touch anything but loopback (127.0.0.0/8) and the Docker
// networks and containers it created, touch another live run's mounts or containers,
// or leave processes, mounts or containers behind after a test, failed or not.
package chaos
