package etcdsnap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdctl34 is Debian's etcdctl (3.4), for the online cut-over path.
const etcdctl34 = "/usr/bin/etcdctl"

// TestMakeMirrorIntoKeel runs the runbook's online path, (b): `etcdctl make-mirror`
// from etcd into keel's etcd port copies the keys and follows a live write; leases
// are dropped and revisions renumbered, as docs/operations.md says.
func TestMakeMirrorIntoKeel(t *testing.T) {
	if _, err := os.Stat(etcdctl34); err != nil {
		t.Skipf("%s not installed", etcdctl34)
	}
	dir := t.TempDir()
	cfg, addr := etcdConfig(filepath.Join(dir, "etcd"), "src")
	src := startEtcd(t, cfg, addr)
	ctx := ctxT(t)
	g, err := src.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		var opts []clientv3.OpOption
		if i%10 == 0 {
			opts = append(opts, clientv3.WithLease(g.ID))
		}
		if _, err := src.Put(ctx, fmt.Sprintf("m/%02d", i), fmt.Sprint(i), opts...); err != nil {
			t.Fatal(err)
		}
	}
	k := startKeel(t)
	mctx, stop := context.WithCancel(context.Background())
	defer stop()
	var log bytes.Buffer
	mirror := exec.CommandContext(mctx, etcdctl34, "--endpoints", addr, "make-mirror", "--prefix", "m/",
		k.c.Endpoints()[0]) // 3.4: the destination is an argument
	mirror.Env = append(os.Environ(), "ETCDCTL_API=3")
	mirror.Stdout, mirror.Stderr = &log, &log
	if err := mirror.Start(); err != nil {
		t.Fatal(err)
	}
	defer mirror.Wait()
	if _, err := src.Put(ctx, "m/live", "after the copy"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		r, err := k.c.Get(ctx, "m/", clientv3.WithPrefix())
		if err == nil && len(r.Kvs) == 51 {
			for _, kv := range r.Kvs {
				if kv.Lease != 0 {
					t.Errorf("%s kept a lease through make-mirror", kv.Key)
				}
			}
			w, _ := src.Get(ctx, "m/", clientv3.WithPrefix())
			if w.Kvs[0].CreateRevision == r.Kvs[0].CreateRevision && w.Header.Revision == r.Header.Revision {
				t.Errorf("revisions kept: the runbook says make-mirror renumbers them")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keel holds %v keys after 30 s of make-mirror (%v):\n%s", r, err, log.String())
		}
	}
	stop()
}
