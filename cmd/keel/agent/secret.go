package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
)

// secretPoll is how often a node without the cluster secret checks whether it leads.
const secretPoll = 50 * time.Millisecond

// genesisKey is the record every cluster holds from its start (its ID, under keel's
// own prefix). Writing it makes a new cluster's revision 1 before any client writes,
// as a fresh etcd's is: etcd clients (kube-apiserver) refuse a current revision of 0.
const genesisKey = versions.SystemPrefix + "cluster" // value: the founding node's ID

// mintSecretLoop gives a new cluster its secret (the key of continue tokens' HMAC),
// ID and genesis record: while the cluster lacks one and this node leads, it proposes
// it (the genesis record first, so a node whose secret is applied has it too). It
// first takes a linearizable view, which waits for the leader's barrier, so a leader
// that has not yet applied an earlier term's secret does not propose another; and if
// two are proposed anyway, the state machine keeps the first (CmdClusterMeta sets the
// secret once). It returns once the secret is applied here or ctx ends.
func (a *Agent) mintSecretLoop(ctx context.Context) {
	tick := time.NewTicker(secretPoll)
	defer tick.Stop()
	for {
		if _, _, ok := a.store.ClusterMeta(); ok && a.store.Revision() > 0 {
			return
		}
		if a.node.IsLeader() {
			a.proposeSecret(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) proposeSecret(ctx context.Context) {
	v, err := a.node.View(ctx, fsm.Linearizable)
	if err != nil {
		return // not (yet) a leader that may serve reads: try again at the next tick
	}
	if v.Revision() == 0 {
		// Created only if absent: two leaders proposing it write it once.
		txn := &fsm.Txn{Compares: []fsm.Compare{{Key: []byte(genesisKey), Target: fsm.TargetVersion,
			Result: fsm.CompareEqual, Int: 0}},
			Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte(genesisKey), Value: []byte(a.cfg.NodeID)}}}
		if _, err := a.node.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: txn}); err != nil {
			a.log.Warn("proposing the genesis record failed", "error", err)
			return
		}
	}
	if _, _, ok := a.store.ClusterMeta(); ok {
		return
	}
	secret := make([]byte, 32)
	id := make([]byte, 8)
	rand.Read(secret)
	rand.Read(id)
	cmd := &fsm.Command{Type: fsm.CmdClusterMeta, ClusterID: hex.EncodeToString(id), Secret: secret}
	if _, err := a.node.Apply(ctx, cmd); err != nil {
		a.log.Warn("proposing cluster secret failed", "error", err)
	}
}
