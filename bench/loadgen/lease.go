package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keel-kv/keel/kv/api"
)

// LeaseDriver is what the lease workload needs: grant a lease and renew it once, each
// one request the way that system's clients send it (keel: the Go client over the
// stream protocol, or HTTP JSON with -keel-protocol http; etcd: clientv3's LeaseGrant
// and KeepAliveOnce over gRPC).
type LeaseDriver interface {
	Grant(ctx context.Context, node, worker int, ttl time.Duration) (int64, error)
	KeepAliveOnce(ctx context.Context, node, worker int, id int64) error
}

func (d *keelDriver) Grant(ctx context.Context, node, _ int, ttl time.Duration) (int64, error) {
	if d.streams != nil {
		g, err := d.streams[node].Grant(ctx, ttl)
		if err != nil {
			return 0, streamErr(err)
		}
		return g.ID, nil
	}
	body, _ := json.Marshal(api.LeaseGrantRequest{TTL: int64(ttl / time.Second)})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.bases[node]+api.PathLeases, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	var resp api.LeaseGrantResponse
	if err := d.do(req, &resp); err != nil {
		return 0, err
	}
	return resp.ID, nil
}

func (d *keelDriver) KeepAliveOnce(ctx context.Context, node, _ int, id int64) error {
	if d.streams != nil {
		_, err := d.streams[node].KeepAliveOnce(ctx, id)
		return streamErr(err)
	}
	u := d.bases[node] + api.PathLeases + "/" + strconv.FormatInt(id, 10) + "/keepalive"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	return d.do(req, nil)
}

func (d *etcdDriver) Grant(ctx context.Context, node, worker int, ttl time.Duration) (int64, error) {
	resp, err := d.conn(node, worker).Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return 0, err
	}
	return int64(resp.ID), nil
}

func (d *etcdDriver) KeepAliveOnce(ctx context.Context, node, worker int, id int64) error {
	_, err := d.conn(node, worker).KeepAliveOnce(ctx, clientv3.LeaseID(id))
	return err
}

// leaseKept is how many leases the keepalive workload renews, spread over the workers.
const leaseKept = 1000

// leases measures lease grants/s (each worker grants back to back, 60 s TTLs that
// expire after the run) and keepalives/s (renewals of leaseKept leases granted first,
// worker w renewing lease w, w+clients, ...), both with the configured number of
// clients spread over the members, as controllers holding leases would be.
func (s *suite) leases(ctx context.Context, d Driver, lead int) {
	ld, ok := d.(LeaseDriver)
	if !ok {
		s.fail("leases", fmt.Errorf("%s has no lease driver", s.cl.Name()))
		return
	}
	const ttl = 60 * time.Second
	node := func(w int) int { return w % 3 }
	grant := func(ctx context.Context, w int, _ *mrand.Rand) error {
		_, err := ld.Grant(ctx, node(w), w, ttl)
		return err
	}
	name := fmt.Sprintf("leasegrant%d", s.cfg.clients)
	wait := s.profileCPU(ctx, name, lead, s.cfg.warm, int(s.cfg.writeDur.Seconds())-1)
	s.record(name, s.load(ctx, loadSpec{clients: s.cfg.clients, warm: s.cfg.warm, dur: s.cfg.writeDur, op: grant}))
	wait()

	ids := make([]int64, leaseKept)
	for i := range ids {
		id, err := ld.Grant(ctx, lead, 0, ttl)
		if err != nil {
			s.fail("leases: grant the kept leases", err)
			return
		}
		ids[i] = id
	}
	next := make([]atomic.Int64, s.cfg.clients)
	keep := func(ctx context.Context, w int, _ *mrand.Rand) error {
		i := w + int(next[w].Add(1)-1)*s.cfg.clients
		return ld.KeepAliveOnce(ctx, node(w), w, ids[i%leaseKept])
	}
	name = fmt.Sprintf("keepalive%d", s.cfg.clients)
	wait = s.profileCPU(ctx, name, lead, s.cfg.warm, int(s.cfg.readDur.Seconds())-1)
	s.record(name, s.load(ctx, loadSpec{clients: s.cfg.clients, warm: s.cfg.warm, dur: s.cfg.readDur, op: keep}))
	wait()
}
