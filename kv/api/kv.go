package api

// KV is one key as seen at some revision.
//
//	{"key":"app/a","value":"aGk=","create_revision":3,"mod_revision":7,"version":2}
type KV struct {
	// Key is the key, a UTF-8 string.
	Key string `json:"key"`
	// Value is the value bytes, base64 in JSON.
	Value []byte `json:"value"`
	// CreateRevision is the revision of the write that created this generation of the
	// key (a key deleted and written again gets a new create revision).
	CreateRevision int64 `json:"create_revision"`
	// ModRevision is the revision of the last write to the key. Compare-and-swap
	// (prev_revision, compare target "mod_revision") is on this field.
	ModRevision int64 `json:"mod_revision"`
	// Version counts writes to the key since its creation: 1 after the create.
	Version int64 `json:"version"`
	// Lease is the lease the key is attached to, absent when none.
	Lease int64 `json:"lease,omitempty"`
}

// GetResponse answers GET /v1/kv/{key}: the key's fields and the revision the read was
// served at.
//
//	{"key":"a","value":"aGk=","create_revision":3,"mod_revision":7,"version":2,"revision":9}
type GetResponse struct {
	KV
	// Revision is the store revision the read reflects (the requested ?revision= when
	// one was given).
	Revision int64 `json:"revision"`
}

// PutResponse answers PUT /v1/kv/{key}.
//
//	{"revision":10}
type PutResponse struct {
	// Revision is the revision of the write; it is the key's new mod revision.
	Revision int64 `json:"revision"`
}

// DeleteResponse answers DELETE /v1/kv/{key}.
//
//	{"revision":11,"deleted":1}
type DeleteResponse struct {
	// Revision is the revision of the delete, or the current revision when nothing
	// was deleted (a delete of an absent key does not advance the revision).
	Revision int64 `json:"revision"`
	// Deleted is the number of keys deleted (0 or 1 without ?prefix=true).
	Deleted int64 `json:"deleted"`
}

// ListResponse answers GET /v1/kv/{prefix}?list=true: one page of a paged scan with
// ?limit=, the whole list without (then Continue is empty).
//
//	{"items":[{"key":"a/1",...},{"key":"a/2",...}],"revision":42,"continue":"AQ..."}
//
// Every page of one scan is served at the same Revision. A page never holds more than
// the requested limit items. An empty Continue means the scan is complete. A non-empty
// one means only that the page stopped before the end of the range (limit reached with
// any entry left in the range, deleted or newer keys included; a long run of deleted
// keys; the page size bound), not that a live key follows: the next page may be empty
// and final, or a 410 if Revision was compacted meanwhile (KEP-365 allows both).
type ListResponse struct {
	// Items are the live keys of this page in ascending key order.
	Items []KV `json:"items"`
	// Revision is the revision every page of the scan is served at.
	Revision int64 `json:"revision"`
	// Continue is an opaque token for the next page (pass it as ?continue=, unchanged:
	// its contents are not part of the API and change between releases); empty
	// when the scan is complete. It is valid on every node and across restarts until
	// Revision is compacted.
	Continue string `json:"continue,omitempty"`
	// RemainingItemCount is how many items follow this page (KEP-365's
	// remainingItemCount), at Revision, exactly; set whenever Continue is. Under an
	// ACL token whose rules cover only part of the rest, it counts the keys the token
	// may read, and is set only when the rest is no longer than one more page of the
	// same limit. The binary encoding does not carry it.
	RemainingItemCount *int64 `json:"remainingItemCount,omitempty"`
}
