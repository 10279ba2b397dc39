// Package httpapi is keel's HTTP door: the JSON API under /v1 (keys, lists, watches,
// transactions, compaction, leases, ACL management, status, health) and the typed
// objects under /apis, over HTTP/1.1 and cleartext HTTP/2, with TLS when configured.
//
// It only translates: a handler decodes the request (params.go: the route's own query
// parameters, bounded bodies), calls one method of the service core (a *kv.Server)
// for the Caller that authorize resolved, and encodes the answer; a failure is
// answered through writeError with the status and reason of kv.WireError, keel's one
// error table. DESIGN: the door states no right, limit or validation of its own. What
// it owns is HTTP's: the route table (acl_routes.go: which routes are open, which need
// a token and leave the right to the core, which need an operator right — the agent's
// routes the core does not serve), the in-flight bound's middleware over the core's
// counters, the client-certificate requirement, TLS, net/http's own error answers
// rewritten as JSON (rawerrors.go), the access log and the request metrics.
//
// The stream protocol (kv/stream) takes over the connections this door upgrades from
// GET /v1/stream (SetStreamDoor); the agent adds its operator routes with Handle.
package httpapi
