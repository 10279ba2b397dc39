package etcdsnap

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The decoders of an etcd snapshot read untrusted bytes (a file uploaded to restore).
// They never panic, and every failure is ErrCorrupt (or ErrNotEtcd for a file that is
// not a bbolt database). Seeds: testdata/fuzz/<target>/ (records and a small file
// made by Write).

func FuzzDecodeKeyRecord(f *testing.F) {
	f.Add(revKey(5, 0, false), []byte("\x0a\x01a\x10\x05\x18\x05\x20\x01\x2a\x01v"))
	f.Add(revKey(9, 1, true), []byte("\x0a\x01a"))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		main, kv, err := decodeKeyRecord(k, v)
		switch {
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("error %v is not ErrCorrupt", err)
		case err == nil && (main <= 0 || kv.ModRevision != main || len(kv.Key) == 0 || kv.CreateRevision > main):
			t.Fatalf("decoded %+v at %d: does not fit", kv, main)
		}
	})
}

func FuzzDecodeLease(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x07"), []byte("\x08\x07\x10\x3c"))
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x07"), []byte("\x08\x07\x10\x3c\x18\x1e"))
	f.Fuzz(func(t *testing.T, k, v []byte) {
		l, err := decodeLease(k, v)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v is not ErrCorrupt", err)
		}
		if err == nil && l.ID <= 0 {
			t.Fatalf("lease %+v accepted", l)
		}
	})
}

// FuzzRead reads whole files: mutations of a real export (flipped bytes, cut or
// grown tails) must be read or refused, never crash.
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "db")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotEtcd) {
			t.Fatalf("error %v is neither ErrCorrupt nor ErrNotEtcd", err)
		}
	})
}
