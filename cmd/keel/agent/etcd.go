package agent

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/etcdv3"
)

// startEtcd serves the etcd v3 API when the config asks for it, and publishes this
// node's etcd client URL so that every node's MemberList can name it.
func (a *Agent) startEtcd() error {
	if a.cfg.EtcdAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.cfg.EtcdAddr)
	if err != nil {
		return fmt.Errorf("listen etcd %s: %w", a.cfg.EtcdAddr, err)
	}
	a.etcdLn = ln
	a.etcd = etcdv3.New(a.server)
	a.metricsReg.MustRegister(a.etcd.Collectors()...)
	a.etcd.ProgressNotifyInterval = a.cfg.EtcdProgressNotifyInterval
	a.etcdReady = make(chan struct{})
	a.etcd.Ready = a.etcdReady
	a.etcdErr = make(chan error, 1)
	go func() { a.etcdErr <- a.etcd.Serve(a.server.LimitListener(ln)) }()
	return nil
}

// EtcdAddr is the address the etcd v3 API listens on, "" when it is off.
func (a *Agent) EtcdAddr() string {
	if a.etcdLn == nil {
		return ""
	}
	return a.etcdLn.Addr().String()
}

// etcdClientURL is the URL other machines reach this node's etcd API at: the
// listener's address, its host replaced by the Raft advertise host when it listens
// on every interface.
func (a *Agent) etcdClientURL() string {
	if _, _, err := net.SplitHostPort(a.EtcdAddr()); err != nil {
		return ""
	}
	scheme := "http://"
	if a.TLSEnabled() {
		scheme = "https://"
	}
	return scheme + reachableAddr(a.EtcdAddr(), a.RaftAddr())
}

// publishEtcdURLLoop writes this node's etcd client URL to its record
// (etcdv3.URLKey), unless the record already says it, retrying until it is applied or
// ctx ends. The record is keel's own: invisible through every door's KV API. It is
// written after the cluster's own start records (genesis, secret: mintSecretLoop), so
// a fresh cluster is at revision 2 (genesis 1, URL 2) when the loop, seeing it applied
// here, opens the etcd door (etcdReady).
func (a *Agent) publishEtcdURLLoop(ctx context.Context) {
	url := a.etcdClientURL()
	key := []byte(etcdv3.URLKey(a.cfg.NodeID))
	tick := time.NewTicker(secretPoll)
	defer tick.Stop()
	for {
		// The cluster's start records first: the genesis record is written only into an
		// empty store, so a URL record before it would leave a fresh cluster without one
		// (and its revision 1 or 2 by the race).
		if _, _, ok := a.store.ClusterMeta(); ok && a.store.Revision() > 0 {
			kvv, err := a.store.View().Get(key, 0)
			if err == nil && string(kvv.Value) == url {
				close(a.etcdReady)
				return
			}
			txn := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: key, Value: []byte(url)}}}
			a.node.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn}) // applied here: seen at the next tick
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
