package pebblelog

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	hraft "github.com/hashicorp/raft"
)

// faults injects errors into the operations of one kind while armed.
type faults struct {
	armed atomic.Bool
	kinds []errorfs.OpKind
	wal   bool // only the WAL (*.log), or every file
	hits  atomic.Int32
}

func (f *faults) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() || (f.wal && !strings.HasSuffix(op.Path, ".log")) {
		return nil
	}
	for _, k := range f.kinds {
		if op.Kind == k {
			f.hits.Add(1)
			return errorfs.ErrInjected
		}
	}
	return nil
}

func (f *faults) String() string { return fmt.Sprintf("faults%v", f.kinds) }

var (
	writeOps = []errorfs.OpKind{errorfs.OpFileWrite, errorfs.OpFileWriteAt}
	syncOps  = []errorfs.OpKind{errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo}
)

// TestIOErrors injects write and fsync errors under StoreLogs and DeleteRange: the
// failing call returns ErrFailed, every later call is refused (also once the disk
// works again: a failed fsync is never retried as if the data were safe), and a
// reopen shows exactly the acknowledged log after a power loss, and the acknowledged
// log or the acknowledged log plus the failed call (never anything else) without one.
func TestIOErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kinds  []errorfs.OpKind
		wal    bool
		delete bool // the failing call is a DeleteRange
	}{
		{"wal-write", writeOps, true, false},
		{"wal-sync", syncOps, true, false},
		{"wal-sync-delete", syncOps, true, true},
		{"any-write", writeOps, false, false},
		{"any-sync", syncOps, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := vfs.NewCrashableMem()
			f := &faults{kinds: tc.kinds, wal: tc.wal}
			s, err := Open("log", WithFS(errorfs.Wrap(base, f)))
			if err != nil {
				t.Fatal(err)
			}
			var acked model
			acked.ents = map[uint64]*hraft.Log{}
			for _, o := range []op{storeOp("a", entries(1, 20, 1)), storeOp("b", entries(21, 40, 1))} {
				if err := o.run(s); err != nil {
					t.Fatal(err)
				}
				o.apply(&acked)
			}
			failing := storeOp("failing", entries(41, 60, 2))
			if tc.delete {
				failing = deleteOp(1, 30)
			}
			withFailed := acked.clone()
			failing.apply(&withFailed)

			f.armed.Store(true)
			err = failing.run(s)
			if !errors.Is(err, ErrFailed) {
				t.Fatalf("%s with %s errors: %v, want ErrFailed", failing.name, tc.name, err)
			}
			if f.hits.Load() == 0 {
				t.Fatal("no fault was injected")
			}
			t.Logf("failing call: %v", err)
			f.armed.Store(false) // the disk works again; the store must not
			if err := s.StoreLogs(entries(41, 41, 3)); !errors.Is(err, ErrFailed) {
				t.Fatalf("StoreLogs after a failure: %v", err)
			}
			if err := s.DeleteRange(1, 5); !errors.Is(err, ErrFailed) {
				t.Fatalf("DeleteRange after a failure: %v", err)
			}
			var l hraft.Log
			if err := s.GetLog(10, &l); !errors.Is(err, ErrFailed) {
				t.Fatalf("GetLog after a failure: %v", err)
			}
			if _, err := s.LastIndex(); !errors.Is(err, ErrFailed) {
				t.Fatalf("LastIndex after a failure: %v", err)
			}

			// Power loss now: only what was synced survives.
			crashed := base.CrashClone(vfs.CrashCloneCfg{})
			t.Logf("close after the failure: %v", s.Close())
			s2, err := Open("log", WithFS(crashed))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkModel(s2, acked); err != nil {
				t.Fatalf("after power loss: %v", err)
			}
			s2.Close()

			// No power loss: the failed call's data may have reached the file.
			s3, err := Open("log", WithFS(base))
			if err != nil {
				t.Fatal(err)
			}
			defer s3.Close()
			if errA := checkModel(s3, acked); errA != nil {
				if errB := checkModel(s3, withFailed); errB != nil {
					t.Fatalf("reopen: neither the acknowledged log (%v) nor it plus the failed call (%v)", errA, errB)
				}
				t.Logf("reopen without power loss shows the failed call's effect (written, not known to be synced)")
			}
			// And the reopened store takes writes again.
			last, _ := s3.LastIndex()
			if err := s3.StoreLogs(entries(last+1, last+1, 9)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestPebbleFatalfOnFailedSync records what pebble itself does when the WAL fsync
// fails, the reason the store installs a Logger whose Fatalf panics: Batch.Commit
// does not return the error; pebble calls Logger.Fatalf("pebble: fatal commit error")
// — the default logger then exits the process — and, if Fatalf returns, Commit
// returns nil as if the batch were durable.
func TestPebbleFatalfOnFailedSync(t *testing.T) {
	f := &faults{kinds: syncOps, wal: true}
	logger := &recordingLogger{}
	db, err := pebble.Open("db", &pebble.Options{FS: errorfs.Wrap(vfs.NewMem(), f), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("a"), []byte("1"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	f.armed.Store(true)
	err = db.Set([]byte("b"), []byte("2"), pebble.Sync)
	fatal := logger.fatal()
	t.Logf("Set with a failing fsync returned %v; Fatalf got %q", err, fatal)
	if err != nil || !strings.Contains(fatal, "fatal commit error") {
		t.Fatalf("pebble's behaviour changed: Set returned %v, Fatalf got %q; revisit Store.commit", err, fatal)
	}
	// The failed write is visible to reads, though not durable.
	if v, closer, err := db.Get([]byte("b")); err == nil {
		t.Logf("the failed write is readable: %q", v)
		closer.Close()
	}
	// The WAL writer's error is sticky: the next synced write fails too.
	f.armed.Store(false)
	logger.reset()
	err = db.Set([]byte("c"), []byte("3"), pebble.Sync)
	t.Logf("next Set with a working disk returned %v; Fatalf got %q", err, logger.fatal())
	if logger.fatal() == "" {
		t.Fatalf("pebble recovered from a failed WAL fsync by itself; revisit Store.commit")
	}
	t.Logf("close: %v", db.Close())
}

type recordingLogger struct {
	mu     sync.Mutex
	fatals []string
}

func (l *recordingLogger) Infof(string, ...any)  {}
func (l *recordingLogger) Errorf(string, ...any) {}
func (l *recordingLogger) Fatalf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatals = append(l.fatals, fmt.Sprintf(format, args...))
}
func (l *recordingLogger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.fatals, "; ")
}
func (l *recordingLogger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatals = nil
}
