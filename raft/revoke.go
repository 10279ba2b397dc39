package raft

import "crypto/tls"

func (n *Node) checkCert(peer string, cs tls.ConnectionState) error { return nil }
