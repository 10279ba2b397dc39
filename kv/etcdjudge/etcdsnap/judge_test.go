package etcdsnap

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	etcdutl "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// writeHistory runs a seeded random history on c: puts, deletes, range deletes,
// guarded transactions of several keys, leases with keys and revokes, and one
// compaction in the middle. It returns the compact revision.
func writeHistory(t *testing.T, c *clientv3.Client, seed uint64, n int) int64 {
	t.Helper()
	ctx := ctxT(t)
	r := rand.New(rand.NewPCG(seed, 36))
	key := func() string { return fmt.Sprintf("k/%02d", r.IntN(25)) }
	var leases []clientv3.LeaseID
	var compact int64
	for i := range n {
		var err error
		switch x := r.IntN(20); {
		case x < 8:
			_, err = c.Put(ctx, key(), fmt.Sprintf("v%d-%d", i, r.IntN(1000)))
		case x < 10:
			_, err = c.Delete(ctx, key())
		case x < 11:
			a := r.IntN(23)
			_, err = c.Delete(ctx, fmt.Sprintf("k/%02d", a), clientv3.WithRange(fmt.Sprintf("k/%02d", a+1+r.IntN(2))))
		case x < 14:
			a, b, d := key(), key(), key()
			if a == b || b == d || a == d {
				continue
			}
			_, err = c.Txn(ctx).If(clientv3.Compare(clientv3.Version(a), ">", 0)).
				Then(clientv3.OpPut(a, "t"+fmt.Sprint(i)), clientv3.OpDelete(b), clientv3.OpPut(d, "u")).
				Else(clientv3.OpPut(b, "e"), clientv3.OpPut(d, "f")).Commit()
		case x < 16:
			// An explicit small ID, or one etcd numbers itself (above 2^53: its member
			// ID in the high bits), which keel holds as it is.
			ttl := int64(60 + r.IntN(3600))
			if i%2 == 0 {
				id := clientv3.LeaseID(1000 + i)
				if _, err = pb.NewLeaseClient(c.ActiveConnection()).LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: int64(id), TTL: ttl}); err == nil {
					leases = append(leases, id)
				}
			} else {
				var g *clientv3.LeaseGrantResponse
				if g, err = c.Grant(ctx, ttl); err == nil {
					leases = append(leases, g.ID)
				}
			}
		case x < 19 && len(leases) > 0:
			_, err = c.Put(ctx, key(), "leased", clientv3.WithLease(leases[r.IntN(len(leases))]))
		case len(leases) > 2:
			j := r.IntN(len(leases))
			_, err = c.Revoke(ctx, leases[j])
			leases = slices.Delete(leases, j, j+1)
		}
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if i == n/2 {
			g, err := c.Get(ctx, "k/")
			if err != nil {
				t.Fatal(err)
			}
			compact = g.Header.Revision - int64(r.IntN(20))
			if _, err := c.Compact(ctx, compact, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
		}
	}
	return compact
}

// state is what a store answers about its history: every key at every revision
// from compact to head, a watch from compact, the leases.
type state struct {
	head, compact int64
	ranges        map[int64][]*mvccpb.KeyValue
	events        []string
	leases        map[int64]string // ID → granted TTL and keys
}

// head 0 reads up to the store's head. keel writes its own records after a restore
// (storage-version registration, under a prefix its etcd door hides), which moves its
// revision past etcd's with no event an etcd client sees: keel is read up to etcd's
// head, and its own head must not be below it.
func readState(t *testing.T, c *clientv3.Client, compact, head int64) state {
	t.Helper()
	ctx := ctxT(t)
	g, err := c.Get(ctx, "k/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if head == 0 {
		head = g.Header.Revision
	} else if g.Header.Revision < head {
		t.Fatalf("head revision %d, below etcd's %d", g.Header.Revision, head)
	}
	s := state{head: head, compact: compact, ranges: map[int64][]*mvccpb.KeyValue{}, leases: map[int64]string{}}
	for rev := compact; rev <= s.head; rev++ {
		g, err := c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("range at %d: %v", rev, err)
		}
		s.ranges[rev] = g.Kvs
	}
	if _, err := c.Get(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(compact-1)); err == nil {
		t.Errorf("read below the compact revision %d served", compact)
	}
	wctx, cancel := clientv3.WithRequireLeader(ctx), func() {}
	defer cancel()
	wch := c.Watch(wctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(compact), clientv3.WithPrevKV())
	var evs []*clientv3.Event
	for len(evs) == 0 || evs[len(evs)-1].Kv.ModRevision < s.head {
		select {
		case w := <-wch:
			if err := w.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			for _, e := range w.Events {
				if e.Kv.ModRevision <= s.head {
					evs = append(evs, e)
				}
			}
			if w.Header.Revision >= s.head && len(evs) > 0 && evs[len(evs)-1].Kv.ModRevision < s.head {
				t.Fatalf("watch from %d: the last event is at %d, etcd's head is %d", compact, evs[len(evs)-1].Kv.ModRevision, s.head)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("watch from %d: no event up to %d (last %d events)", compact, s.head, len(evs))
		}
	}
	// etcd delivers one revision's events in the order its transaction ran them, keel in
	// key order: compare each revision's events as a set.
	slices.SortStableFunc(evs, func(a, b *clientv3.Event) int {
		return cmp.Or(cmp.Compare(a.Kv.ModRevision, b.Kv.ModRevision), cmp.Compare(string(a.Kv.Key), string(b.Kv.Key)))
	})
	for _, e := range evs {
		s.events = append(s.events, fmt.Sprintf("%s %s prev=%v", e.Type, e.Kv, e.PrevKv))
	}
	ls, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls.Leases {
		ttl, err := c.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		keys := make([]string, len(ttl.Keys))
		for i, k := range ttl.Keys {
			keys[i] = string(k)
		}
		slices.Sort(keys)
		s.leases[int64(l.ID)] = fmt.Sprintf("granted %d keys %q", ttl.GrantedTTL, keys)
	}
	return s
}

func sameState(t *testing.T, what string, got, want state) {
	t.Helper()
	if got.head != want.head {
		t.Fatalf("%s: head revision %d, want %d", what, got.head, want.head)
	}
	for rev := want.compact; rev <= want.head; rev++ {
		if !reflect.DeepEqual(kvs(got.ranges[rev]), kvs(want.ranges[rev])) {
			t.Fatalf("%s: range at %d:\n got %v\nwant %v", what, rev, kvs(got.ranges[rev]), kvs(want.ranges[rev]))
		}
	}
	if !reflect.DeepEqual(got.events, want.events) {
		for i := range min(len(got.events), len(want.events)) {
			if got.events[i] != want.events[i] {
				t.Fatalf("%s: watch event %d:\n got %s\nwant %s", what, i, got.events[i], want.events[i])
			}
		}
		t.Fatalf("%s: watch: %d events, want %d", what, len(got.events), len(want.events))
	}
	if !reflect.DeepEqual(got.leases, want.leases) {
		t.Fatalf("%s: leases\n got %v\nwant %v", what, got.leases, want.leases)
	}
}

func kvs(in []*mvccpb.KeyValue) []string {
	out := make([]string, len(in))
	for i, kv := range in {
		out[i] = fmt.Sprintf("%q=%q c%d m%d v%d l%d", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
	}
	return out
}

// TestImportExportAgainstEtcd is the judge of #36 (see doc.go).
func TestImportExportAgainstEtcd(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { judge(t, seed) })
	}
}

// TestImportFromEtcd34: the same import from Debian's etcd 3.4 (/usr/bin/etcd), when
// it is installed: a file written by an older etcd (no storageVersion) imports the same.
func TestImportFromEtcd34(t *testing.T) {
	if _, err := os.Stat(etcd34); err != nil {
		t.Skipf("%s not installed", etcd34)
	}
	judgeFrom(t, 3, func(t *testing.T, dir string) (*clientv3.Client, string) { return startEtcd34(t, dir) })
}

func judge(t *testing.T, seed uint64) {
	judgeFrom(t, seed, func(t *testing.T, dir string) (*clientv3.Client, string) {
		cfg, addr := etcdConfig(filepath.Join(dir, "etcd"), "src")
		return startEtcd(t, cfg, addr), addr
	})
}

func judgeFrom(t *testing.T, seed uint64, start func(*testing.T, string) (*clientv3.Client, string)) {
	dir := t.TempDir()
	src, addr := start(t, dir)
	compact := writeHistory(t, src, seed, 400)
	want := readState(t, src, compact, 0)

	file := filepath.Join(dir, "etcd.snap")
	if _, err := snapshot.SaveWithVersion(ctxT(t), zap.NewNop(), clientv3.Config{Endpoints: []string{addr}}, file); err != nil {
		t.Fatal(err)
	}
	t.Logf("inspect:\n%s", keel(t, "snapshot", "inspect", "--verify", file))
	sameStatus(t, file)

	k := startKeel(t)
	t.Logf("restore: %s", keel(t, "snapshot", "restore", "--yes", "-addr", k.httpAddr, file))
	sameState(t, "keel after import", readState(t, k.c, compact, want.head), want)

	out := filepath.Join(dir, "export.snap")
	t.Logf("export: %s", keel(t, "snapshot", "save", "--format", "etcd", "-addr", k.httpAddr, out))
	rcfg, raddr := etcdConfig(filepath.Join(dir, "restored"), "back")
	err := etcdutl.NewV3(zap.NewNop()).Restore(etcdutl.RestoreConfig{SnapshotPath: out, Name: rcfg.Name,
		OutputDataDir: rcfg.Dir, PeerURLs: []string{rcfg.AdvertisePeerUrls[0].String()},
		InitialCluster: rcfg.InitialCluster, InitialClusterToken: rcfg.InitialClusterToken})
	if err != nil {
		t.Fatalf("etcdutl snapshot restore of keel's export: %v", err)
	}
	sameStatus(t, out)
	back := startEtcd(t, rcfg, raddr)
	sameState(t, "etcd restored from keel's export", readState(t, back, compact, want.head), want)
}

// TestLeaseIDsEtcdNumbered: a lease etcd numbered itself (above 2^53 − 1, its member
// ID in the high bits) moves with its ID and its key, and etcd's client then keeps it
// alive, reads its keys and revokes it on keel, as it did on etcd.
func TestLeaseIDsEtcdNumbered(t *testing.T) {
	dir := t.TempDir()
	cfg, addr := etcdConfig(filepath.Join(dir, "etcd"), "src")
	c := startEtcd(t, cfg, addr)
	ctx := ctxT(t)
	g, err := c.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "leased", "x", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "plain", "y"); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "etcd.snap")
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), clientv3.Config{Endpoints: []string{addr}}, file); err != nil {
		t.Fatal(err)
	}
	if g.ID <= 1<<53-1 {
		t.Fatalf("etcd granted lease %d: not above 2^53 − 1, so this test shows nothing", g.ID)
	}
	k := startKeel(t)
	keel(t, "snapshot", "restore", "--yes", "-addr", k.httpAddr, file)
	r, err := k.c.Get(ctx, "leased")
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].Lease != int64(g.ID) {
		t.Fatalf("after the restore: %v %v; want leased, on lease %d", r, err, g.ID)
	}
	if _, err := k.c.KeepAliveOnce(ctx, g.ID); err != nil {
		t.Fatalf("keepalive of lease %d on keel: %v", g.ID, err)
	}
	ttl, err := k.c.TimeToLive(ctx, g.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.GrantedTTL != 600 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Fatalf("time-to-live of lease %d on keel: %+v %v; want granted 600 s, key leased", g.ID, ttl, err)
	}
	if _, err := k.c.Revoke(ctx, g.ID); err != nil {
		t.Fatalf("revoke of lease %d on keel: %v", g.ID, err)
	}
	if r, err := k.c.Get(ctx, "", clientv3.WithFromKey()); err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Key) != "plain" {
		t.Fatalf("after the revoke: %v %v; want plain alone", r, err)
	}
}

// sameStatus: keel snapshot inspect prints what etcdutl snapshot status prints for the
// same file (hash, revision, keys, size).
func sameStatus(t *testing.T, file string) {
	t.Helper()
	want, err := etcdutl.NewV3(zap.NewNop()).Status(file)
	if err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v", file, err)
	}
	var got struct {
		Revision int64  `json:"revision"`
		Keys     int    `json:"keys"`
		EtcdHash string `json:"etcd_hash"`
		DBSize   int64  `json:"db_size"`
	}
	if err := json.Unmarshal([]byte(keel(t, "snapshot", "inspect", "-o", "json", file)), &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != want.Revision || got.Keys != want.TotalKey || got.EtcdHash != fmt.Sprintf("%x", want.Hash) || got.DBSize != want.TotalSize {
		t.Errorf("inspect %s = %+v; etcdutl status %+v", file, got, want)
	}
}
