package etcdsnap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/fsm"
)

// Sentinel errors of the package. Match them with errors.Is.
var (
	// ErrNotEtcd: the file is not a bbolt database (so not an etcd snapshot).
	ErrNotEtcd = errors.New("etcdsnap: not an etcd snapshot")
	// ErrCorrupt: the file is an etcd snapshot but damaged: its sha256 does not match,
	// it is shorter than its pages, or a record does not decode.
	ErrCorrupt = errors.New("etcdsnap: damaged etcd snapshot")
	// ErrUnholdable: the snapshot holds keys or leases keel cannot hold (Unholdable
	// lists them) and the caller did not say to skip them.
	ErrUnholdable = errors.New("etcdsnap: the snapshot holds keys or leases keel cannot hold")
)

// Bucket and meta key names (etcd server/storage/schema/bucket.go).
var (
	bucketKey   = []byte("key")
	bucketMeta  = []byte("meta")
	bucketLease = []byte("lease")

	metaFinishedCompact  = []byte("finishedCompactRev")
	metaScheduledCompact = []byte("scheduledCompactRev")
	metaConsistentIndex  = []byte("consistent_index")
	metaStorageVersion   = []byte("storageVersion")
)

const (
	revKeyLen   = 17 // main:8 '_' sub:8
	boltMagic   = 0xED0CDAED
	boltMetaOff = 16 // the meta of page 0 follows the 16-byte page header
	openTimeout = 5 * time.Second
)

// Lease is one lease of an etcd snapshot, in etcd's units (seconds).
type Lease struct {
	ID           int64
	TTL          int64 // granted TTL
	RemainingTTL int64 // checkpointed remaining TTL; 0 when etcd did not checkpoint it
}

// Data is what an etcd snapshot holds that keel imports.
type Data struct {
	Revision        int64 // etcd's current revision (see doc.go)
	CompactRevision int64
	ConsistentIndex uint64
	// Keys are every key's history since the compaction, ascending keys, each newest
	// first (fsm.KeyHistory: a delete has CreateRevision 0).
	Keys   []fsm.KeyHistory
	Leases []Lease // ascending IDs
	// Checksummed says the file carried etcdctl's sha256 and it matched.
	Checksummed bool
	Size        int64 // the file's size in bytes
}

// Sniff reports whether r starts as a bbolt database: page 0 holds bbolt's meta magic.
func Sniff(r io.ReaderAt) bool {
	var head [boltMetaOff + 4]byte
	if _, err := r.ReadAt(head[:], 0); err != nil {
		return false
	}
	return binary.LittleEndian.Uint32(head[boltMetaOff:]) == boltMagic ||
		binary.BigEndian.Uint32(head[boltMetaOff:]) == boltMagic
}

// hasChecksum reports whether a file of size n carries etcdctl's sha256 (etcdutl's
// rule: the database is a whole number of 512-byte blocks).
func hasChecksum(n int64) bool { return n%512 == sha256.Size }

// checkSum verifies the sha256 trailer of f (size n), if it has one.
func checkSum(f *os.File, n int64) (bool, error) {
	if !hasChecksum(n) {
		return false, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n-sha256.Size)); err != nil {
		return false, fmt.Errorf("read etcd snapshot: %w", err)
	}
	sum := make([]byte, sha256.Size)
	if _, err := f.ReadAt(sum, n-sha256.Size); err != nil {
		return false, fmt.Errorf("read etcd snapshot: %w", err)
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		return false, fmt.Errorf("%w: its sha256 does not match the one etcdctl appended (a changed byte, or a truncated file)", ErrCorrupt)
	}
	return true, nil
}

// view opens path read-only as an etcd snapshot, checks its sha256 (if it carries
// one) and its length, and runs fn in a read transaction. bbolt panics on some
// damaged pages; view turns a panic into ErrCorrupt.
func view(path string, fn func(tx *bolt.Tx, checksummed bool, size int64) error) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !Sniff(f) {
		return fmt.Errorf("%w: %s is not a bbolt database", ErrNotEtcd, path)
	}
	summed, err := checkSum(f, fi.Size())
	if err != nil {
		return err
	}
	// bbolt reads pages straight from its memory map: a damaged page can make it fault
	// (or panic) in this goroutine. Turn both into ErrCorrupt.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrCorrupt, p)
		}
	}()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: openTimeout})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer db.Close()
	data := fi.Size()
	if hasChecksum(data) {
		data -= sha256.Size
	}
	return db.View(func(tx *bolt.Tx) error {
		if ps := int64(db.Info().PageSize); data < tx.Size() || data%ps != 0 {
			return fmt.Errorf("%w: truncated: the database is %d bytes, its pages need %d (pages of %d bytes)",
				ErrCorrupt, data, tx.Size(), ps)
		}
		return fn(tx, summed, fi.Size())
	})
}

// Read reads the etcd snapshot at path: its sha256 (when etcdctl appended one), its length
// and every record of the key, lease and meta buckets. A damaged file is
// ErrCorrupt, another file ErrNotEtcd.
func Read(path string) (*Data, error) {
	var d *Data
	err := view(path, func(tx *bolt.Tx, summed bool, size int64) error {
		var err error
		d, err = readTx(tx)
		if d != nil {
			d.Checksummed, d.Size = summed, size
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read etcd snapshot: %w", err)
	}
	return d, nil
}

func readTx(tx *bolt.Tx) (*Data, error) {
	d := &Data{}
	if meta := tx.Bucket(bucketMeta); meta != nil {
		var err error
		if d.CompactRevision, err = compactRevision(meta); err != nil {
			return nil, err
		}
		if v := meta.Get(metaConsistentIndex); len(v) == 8 {
			d.ConsistentIndex = binary.BigEndian.Uint64(v)
		}
	}
	keys := tx.Bucket(bucketKey)
	if keys == nil {
		return nil, fmt.Errorf("%w: no %q bucket (is it an etcd v3 database?)", ErrCorrupt, bucketKey)
	}
	hist := make(map[string]int)
	var last int64
	err := keys.ForEach(func(k, v []byte) error {
		main, kv, err := decodeKeyRecord(k, v)
		if err != nil {
			return err
		}
		if main < last {
			return fmt.Errorf("%w: key bucket out of revision order at %d", ErrCorrupt, main)
		}
		last = main
		i, ok := hist[string(kv.Key)]
		if !ok {
			i = len(d.Keys)
			hist[string(kv.Key)] = i
			d.Keys = append(d.Keys, fsm.KeyHistory{Key: kv.Key})
		}
		vs := d.Keys[i].Versions
		if n := len(vs); n > 0 && vs[n-1].ModRevision == main {
			vs[n-1] = kv // written twice in one transaction: the last write stands
		} else {
			d.Keys[i].Versions = append(vs, kv)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.Revision = max(last, d.CompactRevision)
	slices.SortFunc(d.Keys, func(a, b fsm.KeyHistory) int { return bytes.Compare(a.Key, b.Key) })
	for _, h := range d.Keys {
		slices.Reverse(h.Versions)
	}
	if lb := tx.Bucket(bucketLease); lb != nil {
		err = lb.ForEach(func(k, v []byte) error {
			l, err := decodeLease(k, v)
			d.Leases = append(d.Leases, l)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// compactRevision is the newer of the finished and the scheduled compaction.
func compactRevision(meta *bolt.Bucket) (int64, error) {
	var rev int64
	for _, name := range [][]byte{metaFinishedCompact, metaScheduledCompact} {
		v := meta.Get(name)
		if v == nil {
			continue
		}
		main, _, ok := parseRevKey(v)
		if !ok || len(v) != revKeyLen {
			return 0, fmt.Errorf("%w: meta %s = %x is not a revision", ErrCorrupt, name, v)
		}
		rev = max(rev, main)
	}
	return rev, nil
}

// parseRevKey decodes a key bucket key: main, whether it marks a delete, ok.
func parseRevKey(k []byte) (main int64, tomb, ok bool) {
	if (len(k) != revKeyLen && len(k) != revKeyLen+1) || k[8] != '_' {
		return 0, false, false
	}
	if len(k) == revKeyLen+1 && k[revKeyLen] != 't' {
		return 0, false, false
	}
	main = int64(binary.BigEndian.Uint64(k))
	sub := int64(binary.BigEndian.Uint64(k[9:]))
	if main <= 0 || sub < 0 {
		return 0, false, false
	}
	return main, len(k) == revKeyLen+1, true
}

// decodeKeyRecord decodes one record of the key bucket into the version it is: a
// delete is a tombstone (CreateRevision 0, only Key and ModRevision set).
func decodeKeyRecord(k, v []byte) (int64, fsm.KeyValue, error) {
	main, tomb, ok := parseRevKey(k)
	if !ok {
		return 0, fsm.KeyValue{}, fmt.Errorf("%w: key bucket key %x is not a revision", ErrCorrupt, k)
	}
	var kv mvccpb.KeyValue
	if err := proto.Unmarshal(v, &kv); err != nil {
		return 0, fsm.KeyValue{}, fmt.Errorf("%w: revision %d: %v", ErrCorrupt, main, err)
	}
	if len(kv.Key) == 0 {
		return 0, fsm.KeyValue{}, fmt.Errorf("%w: revision %d has no key", ErrCorrupt, main)
	}
	if tomb {
		return main, fsm.KeyValue{Key: kv.Key, ModRevision: main}, nil
	}
	if kv.ModRevision != main || kv.CreateRevision <= 0 || kv.CreateRevision > main || kv.Version <= 0 || kv.Lease < 0 {
		return 0, fsm.KeyValue{}, fmt.Errorf("%w: revision %d, key %q: create %d, mod %d, version %d, lease %d do not fit",
			ErrCorrupt, main, kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	value := kv.Value
	if value == nil {
		value = []byte{}
	}
	return main, fsm.KeyValue{Key: kv.Key, Value: value, CreateRevision: kv.CreateRevision, ModRevision: main,
		Version: kv.Version, Lease: kv.Lease}, nil
}

// decodeLease decodes one record of the lease bucket: key = ID, 8 bytes big-endian;
// value = leasepb.Lease, fields 1 ID, 2 TTL, 3 RemainingTTL, all varint int64
// (unknown fields are skipped, as proto does).
func decodeLease(k, v []byte) (Lease, error) {
	if len(k) != 8 {
		return Lease{}, fmt.Errorf("%w: lease bucket key %x is not an ID", ErrCorrupt, k)
	}
	var l Lease
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return Lease{}, fmt.Errorf("%w: lease %x: %v", ErrCorrupt, k, protowire.ParseError(n))
		}
		v = v[n:]
		if typ == protowire.VarintType && num >= 1 && num <= 3 {
			x, n := protowire.ConsumeVarint(v)
			if n < 0 {
				return Lease{}, fmt.Errorf("%w: lease %x: %v", ErrCorrupt, k, protowire.ParseError(n))
			}
			v = v[n:]
			*[]*int64{&l.ID, &l.TTL, &l.RemainingTTL}[num-1] = int64(x)
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, v)
		if n < 0 {
			return Lease{}, fmt.Errorf("%w: lease %x: %v", ErrCorrupt, k, protowire.ParseError(n))
		}
		v = v[n:]
	}
	if id := int64(binary.BigEndian.Uint64(k)); l.ID != id || id <= 0 {
		return Lease{}, fmt.Errorf("%w: lease bucket key %d holds lease %d", ErrCorrupt, id, l.ID)
	}
	return l, nil
}
