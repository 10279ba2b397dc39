// Package versions owns keel's typed resources and their storage versions: the schema
// a node loads at start (resources, versions, declarative conversions), the
// StorageVersion record of KEP-2339 (which encodings each node writes, decodes and
// serves; the common encoding version), the StorageState record of the
// storage-version-migration KEP (which encodings stored objects use), the garbage
// collection of entries of departed nodes, and the upgrade-safety checks.
//
// The contract it enforces, beyond Kubernetes': a node never writes a version some
// live member cannot decode (Manager.WriteEncoding), and a node never becomes ready
// while objects are stored in a version it cannot decode.
//
// It must never write objects of a resource itself (package migrate does) and never
// bypass the replicated store: every record it keeps is a key under SystemPrefix,
// updated by compare-and-swap on its revision through Raft.
package versions
