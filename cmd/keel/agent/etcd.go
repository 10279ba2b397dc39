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
	a.etcd.ProgressNotifyInterval = a.cfg.EtcdProgressNotifyInterval
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
	host, port, err := net.SplitHostPort(a.EtcdAddr())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(a.RaftAddr()); err == nil {
			host = rh
		}
	}
	scheme := "http://"
	if a.TLSEnabled() {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port)
}

// publishEtcdURLLoop writes this node's etcd client URL to its record
// (etcdv3.URLKey), unless the record already says it, retrying until it is applied or
// ctx ends. The record is keel's own: invisible through every door's KV API.
func (a *Agent) publishEtcdURLLoop(ctx context.Context) {
	url := a.etcdClientURL()
	key := []byte(etcdv3.URLKey(a.cfg.NodeID))
	tick := time.NewTicker(secretPoll)
	defer tick.Stop()
	for {
		if kvv, err := a.store.View().Get(key, 0); err == nil && string(kvv.Value) == url {
			return
		}
		txn := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: key, Value: []byte(url)}}}
		if res, err := a.node.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn}); err == nil && res.Err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
