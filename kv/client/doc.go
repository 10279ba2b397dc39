// Package client is the Go client of keel's HTTP API (package kv serves it). It speaks
// the wire types of kv/api and imports no other keel package.
//
// A Client is safe for concurrent use by many goroutines and keeps a pool of HTTP
// connections per node; create one per process and reuse it.
//
//	c, err := client.New([]string{"10.0.0.1:7370", "10.0.0.2:7370"}, client.Options{})
//	rev, err := c.Put(ctx, "app/config", []byte("v1"))
//	_, err = c.PutCAS(ctx, "app/config", []byte("v2"), rev) // 409 if someone wrote since
//	kv, err := c.Get(ctx, "app/config")
//
//	p := c.NewPager("app/", client.PagerOptions{Limit: 500})
//	for kv, err := range p.All(ctx) { ... } // every key once, all at one revision
//
// # Retries
//
// Failures that are known not to have changed anything are retried with bounded,
// jittered backoff, rotating over the node addresses: connection refused (or any
// failure to connect), and 503 Unavailable (no leader, node not ready). Reads are also
// retried after any other 503/504 and broken connections. A write whose outcome is
// unknown (504 Timeout, 503 LeadershipLost/ShuttingDown, a connection broken after
// the request was sent) is never retried: it is returned, and [IsRetriable] tells the
// caller that a retry is possible if the write is idempotent (a CAS write is).
// Options.NoLeaderBudget bounds the retries once a node answered 503 NoLeader (the
// CLI's: one second), so that a cluster without quorum fails fast with that answer.
//
// # Errors
//
// Every answer of the server that is not a success is an [*Error] (the api.Error
// body); match it with [IsNotFound], [IsConflict], [IsCompacted], [IsRetriable] or
// errors.As. Transport failures are returned wrapped as they are.
package client
