package agent

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/kv/client"
)

// resolveJoin lets -join name a member's HTTP address, the one a newcomer knows from
// `keel status` or the README: each address that answers GET /v1/status is replaced
// by the Raft address that node reports. Addresses that do not answer HTTP (Raft
// addresses, or members not up yet) are kept as given.
func resolveJoin(ctx context.Context, addrs []string, tlsCfg *tls.Config, log hclog.Logger) []string {
	out := make([]string, len(addrs))
	for i, addr := range addrs {
		out[i] = addr
		if raftAddr := raftAddrOf(ctx, addr, tlsCfg); raftAddr != "" && raftAddr != addr {
			log.Info("-join names an HTTP address: joining through that node's Raft address",
				"http", addr, "raft", raftAddr)
			out[i] = raftAddr
		}
	}
	return out
}

// raftAddrOf asks the keel node at httpAddr for its Raft address, once, within a
// second; "" when it is not a keel HTTP API.
func raftAddrOf(ctx context.Context, httpAddr string, tlsCfg *tls.Config) string {
	c, err := client.New([]string{httpAddr}, client.Options{MaxRetries: -1, DialTimeout: time.Second, TLS: tlsCfg})
	if err != nil {
		return ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return ""
	}
	if st.RaftAddr != "" {
		return st.RaftAddr
	}
	for _, m := range st.Members { // a release before raft_addr
		if m.ID == st.NodeID {
			return m.Address
		}
	}
	return ""
}
