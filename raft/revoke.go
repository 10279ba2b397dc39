package raft

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// Retired nodes' certificates. A node removed by an operator (RetireServer: keel
// remove-peer, keel leave) must not come back with the certificate it had: before the
// leader removes it from the configuration, it records a revocation in the replicated
// store under
//
//	revokedPrefix + node ID      ("\x00keel/revoked-nodes/n3")
//
// inside keel's system prefix, which the KV API refuses to write. The value is JSON:
//
//	{"removed_unix_nano": 1700000000000000000,   the leader's clock at the removal
//	 "sha256": ["9f86d0...", ...]}                 hex SHA-256 of certificates' DER
//
// Unknown fields are ignored (a later release may add some); a record of the same node
// retired again keeps the fingerprints of the old one. Every node refuses, on either
// side of a raft-port connection (and so on the join path), a certificate of that node
// ID that is listed (the leader lists the certificates it saw the node use) or whose
// NotBefore is earlier than the removal (one the leader never saw, such as that of a
// dead node). A node comes back under the same ID only with a certificate issued after
// its removal (keel tls cert create backdates NotBefore by a minute: issue it a minute
// after). Autopilot's removals (RemoveServer) revoke nothing: a dead or wiped server
// may return. Without TLS there are no certificates, and nothing is recorded.
const revokedPrefix = "\x00keel/revoked-nodes/"

// ErrRevoked: the peer's certificate belongs to a node retired from the cluster.
var ErrRevoked = errors.New("raft: the peer's certificate was revoked when its node was removed")

type revocation struct {
	RemovedUnixNano int64    `json:"removed_unix_nano"`
	SHA256          []string `json:"sha256"`
}

// revokes reports whether the record refuses cert.
func (r revocation) revokes(cert *x509.Certificate) bool {
	return slices.Contains(r.SHA256, fingerprint(cert)) || cert.NotBefore.Before(time.Unix(0, r.RemovedUnixNano))
}

func fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// revocationOf reads the record of node id; ok is false when there is none.
func (n *Node) revocationOf(id string) (rec revocation, ok bool) {
	kv, err := n.store.View().Get([]byte(revokedPrefix+id), 0)
	if err != nil {
		return revocation{}, false
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		// Written by a leader of this cluster: corrupt means refuse, not admit.
		return revocation{RemovedUnixNano: 1<<63 - 1}, true
	}
	return rec, true
}

// checkCert refuses the certificate of a retired node, and remembers the others that
// it has seen of each node (the leader lists them when it retires the node).
func (n *Node) checkCert(peer string, cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("raft: peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if rec, ok := n.revocationOf(peer); ok && rec.revokes(leaf) {
		n.log.Warn("refused the certificate of a retired node", "node", peer, "serial", leaf.SerialNumber)
		return fmt.Errorf("%w: node %q", ErrRevoked, peer)
	}
	n.seenCerts.add(peer, fingerprint(leaf))
	return nil
}

// CheckClientCert refuses, on a client port (HTTP, the stream protocol, etcd), the
// node certificate of a retired node: the same replicated list, and the same rule,
// as the Raft port's checkCert. cs is the verified TLS session of the request; a
// certificate that names no node (a client certificate) is not the list's: the
// CA's CRL (-crl-file) revokes those. Without TLS there is no list. The kv core
// calls it from its client-certificate rule (kv.Server.CheckClientCert), per
// request, so that a connection opened before the removal is refused too.
func (n *Node) CheckClientCert(cs tls.ConnectionState) error {
	if n.cfg.TLS == nil || len(cs.PeerCertificates) == 0 {
		return nil
	}
	id, err := n.cfg.TLS.PeerNodeID(cs)
	if err != nil {
		return nil // not a node certificate
	}
	if rec, ok := n.revocationOf(id); ok && rec.revokes(cs.PeerCertificates[0]) {
		return fmt.Errorf("%w: node %q", ErrRevoked, id)
	}
	return nil
}

// seenCerts remembers, per node ID, the fingerprints of the last few certificates a
// peer of that ID showed.
type seenCerts struct {
	mu   sync.Mutex
	byID map[string][]string
}

const seenPerNode = 4

func (s *seenCerts) add(id, fp string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string][]string{}
	}
	list := s.byID[id]
	if slices.Contains(list, fp) {
		return
	}
	if len(list) >= seenPerNode {
		list = list[1:]
	}
	s.byID[id] = append(slices.Clip(list), fp)
}

func (s *seenCerts) of(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byID[id])
}

// RetireServer revokes the certificates of node id (with TLS) and removes it from the
// configuration: the node cannot come back with them. On a follower it is forwarded.
// A leader of a release before it is asked to remove the node only.
func (n *Node) RetireServer(ctx context.Context, id string) error {
	err := n.onLeader(ctx, rpcRetire, []byte(id), func() error {
		if err := n.revoke(id); err != nil {
			return err
		}
		return n.removeLocal(id)
	})
	if isUnknownKind(err) {
		n.log.Warn("the leader cannot revoke certificates (an older release): removing the node only", "id", id)
		return n.RemoveServer(ctx, id)
	}
	return err
}

// revoke records, on the leader, the revocation of node id's certificates.
func (n *Node) revoke(id string) error {
	if n.cfg.TLS == nil {
		return nil
	}
	old, _ := n.revocationOf(id)
	rec := revocation{RemovedUnixNano: time.Now().UnixNano(), SHA256: old.SHA256}
	for _, fp := range n.seenCerts.of(id) {
		if !slices.Contains(rec.SHA256, fp) {
			rec.SHA256 = append(rec.SHA256, fp)
		}
	}
	val, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	d, err := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpPut, Key: []byte(revokedPrefix + id), Value: val}}}})
	if err != nil {
		return err
	}
	res, err := n.applyLocal(d)
	if err == nil {
		err = res.Err
	}
	if err != nil {
		return fmt.Errorf("raft: revoke the certificates of %q: %w", id, err)
	}
	n.log.Info("revoked the certificates of a retired node", "id", id, "known", len(rec.SHA256))
	return nil
}
