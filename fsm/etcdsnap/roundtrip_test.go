package etcdsnap

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/keel-kv/keel/fsm"
)

// history builds a store with a seeded random history: puts, deletes, transactions
// of several keys, leases with keys, a revoke, and one compaction in the middle.
func history(t testing.TB, seed uint64, n int) *fsm.Store {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	s := fsm.NewStore()
	idx := uint64(0)
	apply := func(c *fsm.Command) *fsm.Result {
		idx++
		res := s.ApplyCommand(idx, c)
		if res.Err != nil && !errors.Is(res.Err, fsm.ErrLeaseNotFound) {
			t.Fatalf("apply %+v: %v", c, res.Err)
		}
		return res
	}
	key := func() []byte { return fmt.Appendf(nil, "k/%02d", r.IntN(30)) }
	leases := []int64{}
	for i := range n {
		switch x := r.IntN(10); {
		case x < 4:
			apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: key(), Value: fmt.Appendf(nil, "v%d", i)}}}})
		case x < 5:
			apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpDelete, Key: key()}}}})
		case x < 7:
			a, b := key(), key()
			if bytes.Equal(a, b) {
				continue
			}
			apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: a, Value: []byte("t")}, {Type: fsm.OpDelete, Key: b}}}})
		case x < 8:
			id := int64(100 + i)
			apply(&fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: id, LeaseTTL: int64(1+r.IntN(100)) * 1000})
			leases = append(leases, id)
		case x < 9 && len(leases) > 0:
			apply(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: key(), Value: []byte("l"), Lease: leases[r.IntN(len(leases))]}}}})
		case len(leases) > 1:
			apply(&fsm.Command{Type: fsm.CmdLeaseRevoke, LeaseIDs: leases[:1]})
			leases = leases[1:]
		}
		if i == n/2 {
			apply(&fsm.Command{Type: fsm.CmdCompact, Revision: s.Revision() - 3})
		}
	}
	return s
}

// sameHistory compares every key at every revision from the compact revision to the
// head, and the leases (ID, TTL).
func sameHistory(t *testing.T, got, want *fsm.View) {
	t.Helper()
	if got.Revision() != want.Revision() || got.CompactRevision() != want.CompactRevision() {
		t.Fatalf("revision %d compact %d, want %d compact %d", got.Revision(), got.CompactRevision(), want.Revision(), want.CompactRevision())
	}
	for rev := want.CompactRevision(); rev <= want.Revision(); rev++ {
		if rev == 0 {
			continue
		}
		a, _, errA := got.Range([]byte{0}, nil, rev, 0)
		b, _, errB := want.Range([]byte{0}, nil, rev, 0)
		if errA != nil || errB != nil {
			t.Fatalf("rev %d: %v / %v", rev, errA, errB)
		}
		for i := range a {
			a[i].Encoding = ""
		}
		for i := range b {
			b[i].Encoding = ""
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("rev %d:\n got %+v\nwant %+v", rev, a, b)
		}
	}
	gl, wl := got.Leases(), want.Leases()
	if len(gl) != len(wl) {
		t.Fatalf("leases %+v, want %+v", gl, wl)
	}
	for i := range gl {
		if gl[i].ID != wl[i].ID || gl[i].TTL != wl[i].TTL || !reflect.DeepEqual(got.LeaseKeys(gl[i].ID, 0), want.LeaseKeys(wl[i].ID, 0)) {
			t.Errorf("lease %+v, want %+v", gl[i], wl[i])
		}
	}
}

func importFile(t *testing.T, path string, o ImportOptions) (*fsm.Store, Summary) {
	t.Helper()
	d, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	sum, err := d.WriteKeel(&buf, o)
	if err != nil {
		t.Fatal(err)
	}
	s := fsm.NewStore()
	if err := s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return s, sum
}

// TestExportImportRoundTrip: keel → etcd file → keel keeps every revision since the
// compaction, each key's metadata and lease, and the leases.
func TestExportImportRoundTrip(t *testing.T) {
	for seed := range uint64(5) {
		src := history(t, seed, 400)
		path := filepath.Join(t.TempDir(), "etcd.db")
		ex, err := Write(path, src.View(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Behind != 0 || ex.Revision != src.Revision() {
			t.Errorf("#%d: export revision %d behind %d, want %d", seed, ex.Revision, ex.Behind, src.Revision())
		}
		got, _ := importFile(t, path, ImportOptions{})
		sameHistory(t, got.View(), src.View())
		st, err := ReadStatus(path)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Checksummed || st.Revision != src.Revision() || st.TotalKey != src.View().Len() || st.CompactRevision != src.CompactRevision() {
			t.Errorf("#%d: status %+v; want revision %d, %d keys", seed, st, src.Revision(), src.View().Len())
		}
	}
}

// TestUnholdableListedAndRefused: a key keel cannot hold fails the import before a
// byte is written, unless it is skipped; a skipped key is gone with its history.
func TestUnholdableListedAndRefused(t *testing.T) {
	src := fsm.NewStore()
	src.ApplyCommand(1, &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte("good"), Value: []byte("1")}, {Type: fsm.OpPut, Key: []byte("bad\xff"), Value: []byte("2")}}}})
	path := filepath.Join(t.TempDir(), "etcd.db")
	if _, err := Write(path, src.View(), nil); err != nil {
		t.Fatal(err)
	}
	d, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	hold := func(k, _ []byte) error {
		if !bytes.Equal(k, []byte("good")) {
			return errors.New("not UTF-8")
		}
		return nil
	}
	u := d.Unholdable(hold)
	if len(u) != 1 || string(u[0].Key) != "bad\xff" {
		t.Fatalf("unholdable %v, want the key bad\\xff", u)
	}
	var buf bytes.Buffer
	if _, err := d.WriteKeel(&buf, ImportOptions{Hold: hold}); !errors.Is(err, ErrUnholdable) || buf.Len() != 0 {
		t.Fatalf("import without skip: err %v, %d bytes written; want ErrUnholdable, none", err, buf.Len())
	}
	got, sum := importFile(t, path, ImportOptions{Hold: hold, Skip: u})
	if sum.SkippedKeys != 1 || got.View().Len() != 1 {
		t.Fatalf("summary %+v, %d keys; want 1 skipped, 1 key", sum, got.View().Len())
	}
}

// TestDamagedFiles: a flipped byte or a cut tail is ErrCorrupt; another file is
// ErrNotEtcd.
func TestDamagedFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.db")
	if _, err := Write(path, history(t, 1, 200).View(), nil); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	for name, b := range map[string][]byte{
		"flipped byte":   func() []byte { b := bytes.Clone(good); b[len(b)/2] ^= 0x40; return b }(),
		"flipped in sum": func() []byte { b := bytes.Clone(good); b[len(b)-1] ^= 1; return b }(),
		"truncated tail": good[:len(good)-100],
		"half":           good[:len(good)/2],
	} {
		p := filepath.Join(t.TempDir(), "bad.db")
		os.WriteFile(p, b, 0o600)
		if _, err := Read(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Read = %v, want ErrCorrupt", name, err)
		}
		if _, err := ReadStatus(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: ReadStatus = %v, want ErrCorrupt", name, err)
		}
	}
	p := filepath.Join(t.TempDir(), "other")
	os.WriteFile(p, []byte("KEELSAVE\x01 not bolt at all, but long enough to read a head"), 0o600)
	if _, err := Read(p); !errors.Is(err, ErrNotEtcd) {
		t.Errorf("other file: %v, want ErrNotEtcd", err)
	}
}

// TestDamagedFilesRandom: a thousand seeded damages of an export (bytes overwritten in
// the first pages, tails cut, zeros inserted) are each read or refused with
// ErrCorrupt/ErrNotEtcd, in bounded time, never a crash (bbolt faults on some damaged
// pages: read turns the fault into ErrCorrupt).
func TestDamagedFilesRandom(t *testing.T) {
	src := filepath.Join(t.TempDir(), "e.db")
	if _, err := Write(src, history(t, 1, 100).View(), nil); err != nil {
		t.Fatal(err)
	}
	good, _ := os.ReadFile(src)
	r := rand.New(rand.NewPCG(3, 2))
	dir := t.TempDir()
	for i := range 1000 {
		b := bytes.Clone(good)
		switch r.IntN(3) {
		case 0:
			for range 1 + r.IntN(4) {
				b[r.IntN(min(len(b), 16384))] = byte(r.IntN(256))
			}
		case 1:
			b = b[:r.IntN(len(b))]
		case 2:
			p := r.IntN(len(b))
			b = append(b[:p:p], append(make([]byte, r.IntN(64)), b[p:]...)...)
		}
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotEtcd) {
			t.Fatalf("#%d: %v is neither ErrCorrupt nor ErrNotEtcd", i, err)
		}
	}
}
