package etcdsnap

import (
	"fmt"
	"hash/crc32"

	bolt "go.etcd.io/bbolt"
)

// Status is what `etcdutl snapshot status` prints for a snapshot, and what keel adds.
type Status struct {
	// etcdutl's fields, computed as etcdutl computes them (snapshot.v3Manager.Status):
	// Hash is crc32c over every bucket's name, keys and values in bbolt order;
	// Revision the main revision of the key bucket's last record; TotalKey the keys
	// live at that revision; TotalSize the database's size; Version its storageVersion.
	Hash      uint32
	Revision  int64
	TotalKey  int
	TotalSize int64
	Version   string
	// keel's:
	CompactRevision int64
	Leases          int
	Records         int // key bucket records: versions since the compaction
	FileSize        int64
	// Checksummed: the file carries etcdctl's sha256 and it matched (without one
	// only bbolt's page structure and the records' decoding check the file).
	Checksummed bool
}

// ReadStatus checks the etcd snapshot at path completely — sha256 when it carries one,
// its length, every record (reached through bbolt's pages) of the key, lease and meta buckets — and returns its
// status. A damaged file is ErrCorrupt.
func ReadStatus(path string) (Status, error) {
	var st Status
	err := view(path, func(tx *bolt.Tx, summed bool, size int64) error {
		st.Checksummed, st.FileSize, st.TotalSize = summed, size, tx.Size()
		if meta := tx.Bucket(bucketMeta); meta != nil {
			st.Version = string(meta.Get(metaStorageVersion))
		}
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			h.Write(name)
			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)
				return nil
			})
		})
		if err != nil {
			return err
		}
		st.Hash = h.Sum32()
		d, err := readTx(tx)
		if err != nil {
			return err
		}
		st.CompactRevision, st.Leases = d.CompactRevision, len(d.Leases)
		for _, k := range d.Keys {
			st.Records += len(k.Versions)
			if k.Versions[0].CreateRevision != 0 {
				st.TotalKey++
			}
			st.Revision = max(st.Revision, k.Versions[0].ModRevision)
		}
		return nil
	})
	if err != nil {
		return Status{}, fmt.Errorf("etcd snapshot status: %w", err)
	}
	return st, nil
}
