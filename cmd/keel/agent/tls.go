package agent

import (
	"crypto/tls"
	"fmt"

	"github.com/keel-kv/keel/internal/tlsutil"
)

// loadTLS loads the node's certificates (when configured) before the node ID is
// settled: a node without an ID takes its certificate's, and a node whose ID differs
// from its certificate's is refused — peers check that ID on every Raft connection.
func loadTLS(cfg *Config) (*tlsutil.Reloader, error) {
	if !cfg.TLS.Enabled() {
		return nil, nil
	}
	r, err := tlsutil.NewReloader(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	id := r.Identity()
	if id.Kind != tlsutil.KindNode {
		return nil, fmt.Errorf("agent: %s is not a node certificate (want URI SAN keel://node/<id>; "+
			"make one with keel tls cert create -node ID)", cfg.TLS.CertFile)
	}
	if cfg.NodeID == "" {
		cfg.NodeID = id.Name
	}
	return r, nil
}

// checkTLSIdentity refuses a node whose ID is not its certificate's.
func checkTLSIdentity(r *tlsutil.Reloader, nodeID, certFile string) error {
	if r == nil {
		return nil
	}
	if got := r.Identity().Name; got != nodeID {
		return fmt.Errorf("agent: node %q has the certificate of node %q (%s): a node's certificate must name its ID",
			nodeID, got, certFile)
	}
	return nil
}

// ReloadTLS reads the certificate, key and CA files again (SIGHUP). New connections
// use the new files; established ones keep theirs. On error (a missing file, a
// certificate of another node or another CA) the old files stay in use.
func (a *Agent) ReloadTLS() error {
	if a.tls == nil {
		return nil
	}
	old := a.tls.Identity()
	m, err := tlsutil.NewReloader(a.cfg.TLS)
	if err != nil {
		return fmt.Errorf("reload TLS: %w", err)
	}
	if id := m.Identity(); id != old {
		return fmt.Errorf("reload TLS: the new certificate names %s, the node is %s: not loaded", id, old)
	}
	if err := a.tls.Reload(); err != nil {
		return fmt.Errorf("reload TLS: %w", err)
	}
	a.log.Info("TLS certificates reloaded", "cert", a.cfg.TLS.CertFile, "ca", a.cfg.TLS.CAFile)
	return nil
}

// TLSEnabled reports whether the node's ports use TLS.
func (a *Agent) TLSEnabled() bool { return a.tls != nil }

// clientTLS is the config of this node's HTTP requests to other nodes; nil without TLS.
func (a *Agent) clientTLS() *tls.Config {
	if a.tls == nil {
		return nil
	}
	return a.tls.ClientConfig()
}
