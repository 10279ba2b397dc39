package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// secretPoll is how often a node without the cluster secret checks whether it leads.
const secretPoll = 50 * time.Millisecond

// mintSecretLoop gives a new cluster its secret (the key of continue tokens' HMAC) and
// ID: while the cluster has none and this node leads, it proposes a random one. It
// first takes a linearizable view, which waits for the leader's barrier, so a leader
// that has not yet applied an earlier term's secret does not propose another; and if
// two are proposed anyway, the state machine keeps the first (CmdClusterMeta sets the
// secret once). It returns once the secret is applied here or ctx ends.
func (a *Agent) mintSecretLoop(ctx context.Context) {
	tick := time.NewTicker(secretPoll)
	defer tick.Stop()
	for {
		if _, _, ok := a.store.ClusterMeta(); ok {
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
	if _, err := a.node.View(ctx, fsm.Linearizable); err != nil {
		return // not (yet) a leader that may serve reads: try again at the next tick
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
