package pebblelog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	hraft "github.com/hashicorp/raft"
)

// model is the acknowledged log: entries first..last.
type model struct {
	first, last uint64
	ents        map[uint64]*hraft.Log
}

func (m model) clone() model {
	c := model{first: m.first, last: m.last, ents: make(map[uint64]*hraft.Log, len(m.ents))}
	for k, v := range m.ents {
		c.ents[k] = v
	}
	return c
}

// op is one write with its effect on the model.
type op struct {
	name  string
	run   func(*Store) error
	apply func(*model)
}

func randEntry(rng *rand.Rand, index, term uint64) *hraft.Log {
	l := &hraft.Log{Index: index, Term: term, Type: hraft.LogType(rng.IntN(6))}
	if n := rng.IntN(300); n > 0 {
		l.Data = make([]byte, n)
		for i := range l.Data {
			l.Data[i] = byte(rng.Uint32())
		}
	}
	if rng.IntN(4) == 0 {
		l.Extensions = []byte{byte(rng.Uint32()), byte(rng.Uint32())}
	}
	if rng.IntN(2) == 0 {
		l.AppendedAt = time.Unix(0, rng.Int64())
	}
	return l
}

func storeOp(name string, logs []*hraft.Log) op {
	return op{
		name: fmt.Sprintf("%s StoreLogs(%d..%d, term %d)", name, logs[0].Index, logs[len(logs)-1].Index, logs[0].Term),
		run:  func(s *Store) error { return s.StoreLogs(logs) },
		apply: func(m *model) {
			if m.last == 0 || logs[0].Index > m.last+1 {
				m.ents = map[uint64]*hraft.Log{}
				m.first = logs[0].Index
			}
			for _, l := range logs {
				m.ents[l.Index] = l
			}
			m.last = logs[len(logs)-1].Index
		},
	}
}

func deleteOp(lo, hi uint64) op {
	return op{
		name: fmt.Sprintf("DeleteRange(%d, %d)", lo, hi),
		run:  func(s *Store) error { return s.DeleteRange(lo, hi) },
		apply: func(m *model) {
			for i := lo; i <= hi && i <= m.last; i++ {
				delete(m.ents, i)
			}
			switch {
			case lo <= m.first && hi >= m.last:
				m.first, m.last = 0, 0
			case lo <= m.first:
				m.first = hi + 1
			default:
				m.last = lo - 1
			}
		},
	}
}

// nextOp picks a write the way hashicorp/raft issues them: appends in the current
// term, a follower's conflict (suffix delete, then the leader's entries in a newer
// term), a snapshot's head trim, a restore that restarts the log past its end.
func nextOp(rng *rand.Rand, m *model, term *uint64) []op {
	batch := func(from uint64) []*hraft.Log {
		n := 1 + rng.IntN(16)
		logs := make([]*hraft.Log, n)
		for i := range logs {
			logs[i] = randEntry(rng, from+uint64(i), *term)
		}
		return logs
	}
	switch r := rng.IntN(100); {
	case m.last == 0:
		return []op{storeOp("start", batch(1+rng.Uint64N(1000)))}
	case r < 60:
		return []op{storeOp("append", batch(m.last+1))}
	case r < 75:
		cut := m.first + rng.Uint64N(m.last-m.first+1)
		*term++
		return []op{deleteOp(cut, m.last), storeOp("conflict", batch(cut))}
	case r < 88:
		// Trim up to half of the log (a snapshot keeps trailing entries).
		return []op{deleteOp(m.first, m.first+rng.Uint64N((m.last-m.first)/2+1))}
	case r < 98:
		*term++
		return []op{storeOp("restore", batch(m.last+2+rng.Uint64N(50)))}
	default:
		return []op{deleteOp(0, m.last+rng.Uint64N(10))}
	}
}

// checkModel compares the whole store with m: bounds, every entry byte for byte,
// and terms that never go backwards along the log.
func checkModel(s *Store, m model) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	last, err := s.LastIndex()
	if err != nil {
		return err
	}
	if first != m.first || last != m.last {
		return fmt.Errorf("bounds [%d, %d], model [%d, %d]", first, last, m.first, m.last)
	}
	var prevTerm uint64
	for i := first; i <= last && last != 0; i++ {
		var got hraft.Log
		if err := s.GetLog(i, &got); err != nil {
			return fmt.Errorf("GetLog(%d): %v", i, err)
		}
		if want := m.ents[i]; want == nil || !sameLog(&got, want) {
			return fmt.Errorf("entry %d: got %+v, model %+v", i, got, want)
		}
		if got.Term < prevTerm {
			return fmt.Errorf("term goes backwards at %d: %d after %d", i, got.Term, prevTerm)
		}
		prevTerm = got.Term
	}
	var l hraft.Log
	if err := s.GetLog(last+1, &l); !errors.Is(err, hraft.ErrLogNotFound) {
		return fmt.Errorf("GetLog(last+1 = %d): %v", last+1, err)
	}
	if first > 1 {
		if err := s.GetLog(first-1, &l); !errors.Is(err, hraft.ErrLogNotFound) {
			return fmt.Errorf("GetLog(first-1 = %d): %v", first-1, err)
		}
	}
	return nil
}

// TestCrash runs random Raft-shaped writes on a crashable in-memory file system and
// crashes after random steps: the file system is replaced by a clone holding what was
// synced plus a random share of what was not, and the store is reopened on it. A
// crash either falls between two calls — then the reopened log must equal the model
// of everything acknowledged — or lands while a call is running, and then the log
// must equal the model before or after that call, and after it if the call had
// returned before the crash.
func TestCrash(t *testing.T) {
	seeds, steps := 6, 1000
	if testing.Short() {
		seeds, steps = 2, 100
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { crashRun(t, uint64(seed), steps) })
	}
}

func crashRun(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x6b65656c))
	fs := vfs.NewCrashableMem()
	// A small memtable so that flushes, sstables and range deletions over them are
	// part of what crashes interrupt.
	open := func() *Store {
		s, err := Open("log", WithFS(fs), WithMemTableSize(64<<10))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return s
	}
	crash := func() *vfs.MemFS {
		return fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101),
			RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))})
	}
	s := open()
	var m model
	m.ents = map[uint64]*hraft.Log{}
	term := uint64(1)
	crashes, midCall := 0, 0
	for step := 0; step < steps; step++ {
		ops := nextOp(rng, &m, &term)
		for k, o := range ops {
			if rng.IntN(8) != 0 {
				if err := o.run(s); err != nil {
					t.Fatalf("step %d %s: %v", step, o.name, err)
				}
				o.apply(&m)
				continue
			}
			// Crash while o runs.
			before := m.clone()
			after := m.clone()
			o.apply(&after)
			var done atomic.Bool
			errc := make(chan error, 1)
			go func() {
				err := o.run(s)
				done.Store(true)
				errc <- err
			}()
			for range rng.IntN(50) {
				runtime.Gosched()
			}
			returned := done.Load()
			crashed := crash()
			if err := <-errc; err != nil {
				t.Fatalf("step %d %s: %v", step, o.name, err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			fs = crashed
			s = open()
			crashes++
			errBefore := checkModel(s, before)
			errAfter := checkModel(s, after)
			switch {
			case errAfter == nil:
				m = after
			case returned:
				t.Fatalf("step %d: %s was acknowledged before the crash but is lost: %v", step, o.name, errAfter)
			case errBefore == nil:
				midCall++
				m = before
				// The rest of a lost pair (the conflict's append) is not applied.
				if k < len(ops)-1 {
					goto next
				}
			default:
				t.Fatalf("step %d: crash during %s: log matches neither side:\nbefore: %v\nafter: %v", step, o.name, errBefore, errAfter)
			}
		}
		if rng.IntN(25) == 0 {
			// Crash between calls: everything acknowledged must be there.
			crashed := crash()
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			fs = crashed
			s = open()
			crashes++
			if err := checkModel(s, m); err != nil {
				t.Fatalf("step %d: after a crash between calls: %v", step, err)
			}
		}
	next:
	}
	if err := checkModel(s, m); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps, %d crashes, %d of them lost the call they interrupted; log [%d, %d]",
		steps, crashes, midCall, m.first, m.last)
}
