package main

import (
	"context"
	"errors"
)

// errNotFound is returned by Driver.Get for an absent key.
var errNotFound = errors.New("key not found")

// Driver speaks one system's native client protocol: etcd through clientv3 (gRPC),
// keel through its HTTP API. node indexes the cluster's nodes (3 = a joined node);
// worker picks a connection from the node's pool so concurrent workers spread the same
// way for both systems.
type Driver interface {
	Put(ctx context.Context, node, worker int, key string, val []byte) error
	// Get reads one key (linearizable unless serializable). errNotFound if absent.
	Get(ctx context.Context, node, worker int, key string, serializable bool) error
	// PutBatch writes keys (all = val) in one transaction and returns its revision.
	PutBatch(ctx context.Context, node, worker int, keys []string, val []byte) (int64, error)
	// Scan pages through every key with prefix at one revision, limit keys per page,
	// the way that system's clients normally do, and returns keys and pages seen.
	Scan(ctx context.Context, node int, prefix string, limit int) (keys, pages int, err error)
	// Compact discards history at and below rev. For etcd it waits for the physical
	// compaction (WithCompactPhysical); keel compacts physically in the background.
	Compact(ctx context.Context, node int, rev int64) error
	// Revision is the store's current revision (a linearizable read).
	Revision(ctx context.Context, node int) (int64, error)
	Close()
}

// Cluster is one system's set of server processes on loopback.
type Cluster interface {
	Name() string
	// Start launches three nodes and returns when a leader serves requests.
	Start(ctx context.Context) error
	// Leader is the index of the current leader.
	Leader(ctx context.Context) (int, error)
	// PIDs of the running nodes, by node index.
	PIDs() []int
	// Join starts a fourth node that joins the cluster; it returns the new node's index
	// once the process runs (catch-up is measured by the caller).
	Join(ctx context.Context) (int, error)
	Driver() Driver
	// PprofURL is node i's /debug/pprof base URL, "" when profiling is off.
	PprofURL(i int) string
	// LogPath is node i's log file.
	LogPath(i int) string
	// Stop stops every node and the driver.
	Stop()
}
