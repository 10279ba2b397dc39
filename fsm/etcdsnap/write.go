package etcdsnap

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/fsm"
)

// allBuckets are the buckets an etcd 3.7 backend has (schema.AllBuckets); an export
// creates each, empty but for key, meta and lease.
var allBuckets = []string{"key", "meta", "lease", "alarm", "cluster", "members", "members_removed", "auth", "authUsers", "authRoles"}

// ExportSummary says what Write wrote.
type ExportSummary struct {
	Keys     int   // live keys at the revision
	Records  int   // records of the key bucket (versions since the compaction)
	Leases   int   //
	Revision int64 // the revision etcd will start at
	Compact  int64
	// Behind is how many revisions etcd's revision is behind keel's: etcd takes its
	// revision from the newest record it holds (doc.go), and keel's newest writes may
	// have been compacted away with nothing after them. 0 almost always.
	Behind int64
	Size   int64 // bytes, sha256 included
}

type record struct {
	main int64
	key  []byte
	kv   fsm.KeyValue
}

// Write writes the view's keyspace as an etcd snapshot file at path, as `etcdctl
// snapshot save` writes one: a bbolt database followed by its sha256, which
// `etcdutl snapshot restore` checks. It holds what etcd keeps after a compaction at
// the view's compact revision: for each key the newest version at or before it (not a
// delete older than it) and every later one. Leases keep their ID and TTL (rounded up to seconds);
// etcd restarts them whole. Keel's encoding tags are not kept (etcd has none). path
// is written beside and renamed, so it is whole or untouched. Keys for which leave
// returns true (keel's own records) are left out; leave may be nil.
func Write(path string, v *fsm.View, leave func(key []byte) bool) (ExportSummary, error) {
	s := ExportSummary{Compact: v.CompactRevision()}
	recs := exportRecords(v, leave, &s)
	tmp, err := os.CreateTemp(filepath.Dir(path), ".etcd-snapshot-*")
	if err != nil {
		return s, err
	}
	name := tmp.Name()
	tmp.Close()
	defer os.Remove(name)
	if err := writeBolt(name, recs, v, &s); err != nil {
		return s, fmt.Errorf("write etcd snapshot: %w", err)
	}
	out, err := copyDB(name, filepath.Dir(path))
	if err != nil {
		return s, fmt.Errorf("write etcd snapshot: %w", err)
	}
	defer os.Remove(out)
	if s.Size, err = appendSum(out); err != nil {
		return s, fmt.Errorf("write etcd snapshot: %w", err)
	}
	return s, os.Rename(out, path)
}

// copyDB copies the bbolt database at path into a new file in dir, as etcd's
// Snapshot RPC streams one (tx.WriteTo: exactly its pages, without the room bbolt
// grew the file by), and returns the new file's name.
func copyDB(path, dir string) (string, error) {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: openTimeout})
	if err != nil {
		return "", err
	}
	defer db.Close()
	f, err := os.CreateTemp(dir, ".etcd-snapshot-*")
	if err != nil {
		return "", err
	}
	err = db.View(func(tx *bolt.Tx) error {
		_, err := tx.WriteTo(f)
		return err
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// exportRecords lists the key bucket's records in revision order, then key order.
func exportRecords(v *fsm.View, leave func([]byte) bool, s *ExportSummary) []record {
	var recs []record
	compact := v.CompactRevision()
	v.Histories(func(h fsm.KeyHistory) bool {
		if leave != nil && leave(h.Key) {
			return true
		}
		for _, kv := range h.Versions {
			if kv.ModRevision <= compact {
				if kv.CreateRevision != 0 || kv.ModRevision == compact { // a delete at the compact revision stays, as in etcd
					recs = append(recs, record{main: kv.ModRevision, key: h.Key, kv: kv})
				}
				break
			}
			recs = append(recs, record{main: kv.ModRevision, key: h.Key, kv: kv})
		}
		if len(h.Versions) > 0 && h.Versions[0].CreateRevision != 0 {
			s.Keys++
		}
		return true
	})
	slices.SortFunc(recs, func(a, b record) int {
		if a.main != b.main {
			return cmp.Compare(a.main, b.main)
		}
		return bytes.Compare(a.key, b.key)
	})
	s.Records = len(recs)
	last := compact
	if n := len(recs); n > 0 {
		last = max(last, recs[n-1].main)
	}
	s.Revision = last
	s.Behind = v.Revision() - last
	return recs
}

// revKey is etcd's key bucket key (doc.go).
func revKey(main, sub int64, tomb bool) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, revKeyLen+1), uint64(main))
	k = append(k, '_')
	k = binary.BigEndian.AppendUint64(k, uint64(sub))
	if tomb {
		k = append(k, 't')
	}
	return k
}

func writeBolt(path string, recs []record, v *fsm.View, s *ExportSummary) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: openTimeout, NoSync: true})
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		bs := make(map[string]*bolt.Bucket)
		for _, name := range allBuckets {
			b, err := tx.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			bs[name] = b
		}
		kb := bs["key"]
		kb.FillPercent = 1 // appended in order
		var sub, prev int64
		for _, r := range recs {
			if r.main != prev {
				sub, prev = 0, r.main
			}
			tomb := r.kv.CreateRevision == 0
			pb := &mvccpb.KeyValue{Key: r.key}
			if !tomb {
				pb = &mvccpb.KeyValue{Key: r.key, CreateRevision: r.kv.CreateRevision, ModRevision: r.main,
					Version: r.kv.Version, Value: r.kv.Value, Lease: r.kv.Lease}
			}
			val, err := proto.Marshal(pb)
			if err != nil {
				return err
			}
			if err := kb.Put(revKey(r.main, sub, tomb), val); err != nil {
				return err
			}
			sub++
		}
		if s.Compact > 0 {
			c := revKey(s.Compact, 0, false)
			if err := bs["meta"].Put(metaFinishedCompact, c); err != nil {
				return err
			}
			if err := bs["meta"].Put(metaScheduledCompact, c); err != nil {
				return err
			}
		}
		for _, l := range v.Leases() {
			k := binary.BigEndian.AppendUint64(nil, uint64(l.ID))
			val := protowire.AppendTag(nil, 1, protowire.VarintType)
			val = protowire.AppendVarint(val, uint64(l.ID))
			val = protowire.AppendTag(val, 2, protowire.VarintType)
			val = protowire.AppendVarint(val, uint64((l.TTL+999)/1000))
			if err := bs["lease"].Put(k, val); err != nil {
				return err
			}
			s.Leases++
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// appendSum appends the sha256 of the file at path to it, syncs it, and returns its
// size.
func appendSum(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, err
	}
	if !hasChecksum(n + sha256.Size) {
		return 0, fmt.Errorf("bbolt file of %d bytes is not a whole number of 512-byte blocks", n)
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return 0, err
	}
	return n + sha256.Size, f.Sync()
}
