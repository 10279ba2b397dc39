// Package api holds keel's HTTP wire types: the JSON bodies, query parameters, headers
// and error reasons of the /v1 API served by package kv and spoken by package
// kv/client. It is the only keel package kv/client imports, so it must never import
// another keel package, and it holds no behaviour beyond small helpers on the types.
//
// # Conventions
//
// Keys are UTF-8 strings (non-empty, at most 4 KiB by default) and travel as JSON
// strings. Values are arbitrary bytes and travel as standard base64 (encoding/json's
// []byte encoding): the value "hi" is "aGk=". Revisions are int64 JSON numbers: the
// store has one global revision that grows by one per committed write.
//
// Every failure is an [Error] body, {"code":409,"reason":"Conflict","message":"..."},
// with the HTTP status in "code" and a machine-readable reason from the Reason
// constants. 503 and 504 answers also carry a Retry-After header (seconds).
//
// # Routes
//
//	PUT    /v1/kv/{key}                  body = raw value bytes          → PutResponse
//	       ?prev_revision=N              compare-and-swap on the key's mod revision (0 = create only)
//	GET    /v1/kv/{key}                                                  → GetResponse
//	       ?revision=R                   read at an older revision
//	       ?consistency=serializable     read the node's local state (default linearizable)
//	       ?raw=true                     body = the bare value; metadata in X-Keel-* headers
//	DELETE /v1/kv/{key}                                                  → DeleteResponse
//	       ?prev_revision=N              delete only if the key's mod revision is N
//	       ?prefix=true                  delete every key starting with {key}
//	GET    /v1/kv/{prefix}?list=true     the keys with that prefix → ListResponse
//	       &limit=N&continue=T           one page (no limit: all of them, or 413 ListTooLarge)
//	       &revision=R[&revision_match=not_older_than]&consistency=serializable
//	POST   /v1/txn                       body = TxnRequest                → TxnResponse
//	POST   /v1/compact                   body = CompactRequest            → CompactResponse
//	GET    /v1/status                                                    → StatusResponse
//	GET    /healthz                      200 while the process serves    → HealthResponse
//	GET    /readyz                       200 when ready, else 503 Error  → HealthResponse
//
// A key is the rest of the path after /v1/kv/, percent-decoded. Clients should escape
// "/" inside keys as %2F and "." as %2E when a key has empty, "." or ".." segments,
// because the server cleans and redirects such paths otherwise.
package api
