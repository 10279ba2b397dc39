// Package resources is keel's typed resource API: the objects under /apis, as Go
// methods that take the caller (kv.Caller) and return objects and typed errors — the
// layer k8s.io/apiserver's registry is between its handlers and its storage.
//
// It owns what makes a key an object: the resource's lookup in the node's schema and
// the name rule (a DNS subdomain); conversion between versions on every read
// (versions.Resource.Present); the storage-version write filter (a write is prepared in
// the version this node stores the resource in, refused when it would lose values
// unless forced, carried over from the stored object); Kubernetes' resourceVersion and
// resourceVersionMatch table for lists (parseListVersion); and the key migration
// overlays (keymig.go: each read follows the migration's phase, each write is one
// transaction guarded by the phase record).
//
// DESIGN: the layer never speaks HTTP and never touches the store directly. It reads
// and writes through the core's resource methods (kv.Server.ResourceView,
// ResourceList, ResourceTxn, CheckObjectSize), which check the caller's resource right,
// the value limit and the list bounds once, for every door; continue tokens are the
// core's. A door (today kv's /apis routes, through kv.ObjectAPI) decodes its request,
// calls a Layer method and encodes the answer; errors keep the core's sentinels
// (kv.ErrConflict, kv.ErrDowngraded, kv.ErrInvalidBody, fsm.ErrKeyNotFound, ...) so the
// door's one error table maps them. The HTTP route table only authenticates /apis
// requests (kv's ruleObjects): the resource right is the core's, so a door can neither
// forget it nor state it a second time (TestTypedRightsEveryDoor runs one table of
// rights against the layer and the HTTP routes).
package resources
