// Package tlsutil owns keel's certificates: the identity a certificate carries (a node
// ID or a client name, in a URI SAN), the TLS configurations of the agent's ports and
// of its clients, their reload on SIGHUP, and the `keel tls` helpers that create a CA
// and certificates signed by it. It never logs key material and never reads a key
// anywhere but from the files it is given.
package tlsutil
