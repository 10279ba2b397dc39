package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/internal/tlsutil"
)

// `keel tls`: a CA and certificates without openssl (as `consul tls` does). Keys are
// written 0600 and never overwritten.

func newTLSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create a CA, node and client certificates, and a gossip key",
		Long: `Create what a TLS cluster needs, in the current directory:

  keel tls ca create                                     keel-ca.pem, keel-ca-key.pem
  keel tls cert create -node n1 -ip 10.0.0.1 -dns n1.internal   n1.pem, n1-key.pem
  keel tls cert create -client ops                       ops.pem, ops-key.pem
  keel tls gossip-key                                    a key for -encrypt

Node certificates always list localhost and 127.0.0.1, and name the node ID
(URI SAN keel://node/ID): a node's ID must match its certificate.`,
	}
	ca := &cobra.Command{Use: "ca", Short: "Manage the cluster CA"}
	ca.AddCommand(newTLSCACreateCmd())
	cert := &cobra.Command{Use: "cert", Short: "Manage certificates signed by the cluster CA"}
	cert.AddCommand(newTLSCertCreateCmd())
	cmd.AddCommand(ca, cert, newTLSGossipKeyCmd())
	return cmd
}

func newTLSCACreateCmd() *cobra.Command {
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Write a new CA: " + tlsutil.CAFile + " and " + tlsutil.CAKeyFile + " (0600)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := tlsutil.CreateCA(tlsutil.CAFile, tlsutil.CAKeyFile, lifetime(days)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (keep the key secret: it signs every certificate)\n",
				tlsutil.CAFile, tlsutil.CAKeyFile)
			return nil
		},
	}
	cmd.Flags().IntVar(&days, "days", int(tlsutil.CALifetime/(24*time.Hour)), "days the CA is valid")
	return cmd
}

func newTLSCertCreateCmd() *cobra.Command {
	var node, clientName, caFile, caKey string
	var ips, dns []string
	var days int
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Write NAME.pem and NAME-key.pem (0600), signed by the CA",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := certIdentity(node, clientName)
			if err != nil {
				return err
			}
			req := tlsutil.CertRequest{Identity: id, DNS: dns, Lifetime: lifetime(days)}
			for _, s := range ips {
				ip := net.ParseIP(strings.TrimSpace(s))
				if ip == nil {
					return fmt.Errorf("-ip %q is not an IP address", s)
				}
				req.IPs = append(req.IPs, ip)
			}
			cert, key := id.Name+".pem", id.Name+"-key.pem"
			if err := tlsutil.CreateCert(caFile, caKey, cert, key, req); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s (%s)\n", cert, key, id)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&node, "node", "", "node ID the certificate names (a server certificate)")
	fl.StringVar(&clientName, "client", "", "client name the certificate names (a client certificate)")
	fl.StringSliceVar(&ips, "ip", nil, "IP addresses the node is reached at (127.0.0.1 is always added)")
	fl.StringSliceVar(&dns, "dns", nil, "DNS names the node is reached at (localhost is always added)")
	fl.StringVar(&caFile, "ca", tlsutil.CAFile, "CA certificate")
	fl.StringVar(&caKey, "ca-key", tlsutil.CAKeyFile, "CA key")
	fl.IntVar(&days, "days", int(tlsutil.CertLifetime/(24*time.Hour)), "days the certificate is valid (at most the CA's)")
	return cmd
}

func certIdentity(node, clientName string) (tlsutil.Identity, error) {
	switch {
	case node != "" && clientName != "":
		return tlsutil.Identity{}, errors.New("give -node NAME or -client NAME, not both")
	case node != "":
		return tlsutil.ParseIdentity("keel://node/" + node)
	case clientName != "":
		return tlsutil.ParseIdentity("keel://client/" + clientName)
	}
	return tlsutil.Identity{}, errors.New("give -node NAME (a node certificate) or -client NAME (a client certificate)")
}

func newTLSGossipKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gossip-key",
		Short: "Print a new random gossip encryption key for -encrypt (the same on every node)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var k [32]byte
			if _, err := rand.Read(k[:]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), base64.StdEncoding.EncodeToString(k[:]))
			return nil
		},
	}
}

func lifetime(days int) time.Duration { return time.Duration(days) * 24 * time.Hour }

// clientTLS builds the CLI's TLS config from -ca-file/-cert-file/-key-file (or
// KEEL_CA_FILE, KEEL_CERT_FILE, KEEL_KEY_FILE); nil when none is set.
func clientTLS() (*tls.Config, error) {
	f := tlsutil.Files{CAFile: global.caFile, CertFile: global.certFile, KeyFile: global.keyFile}
	if !f.Enabled() {
		return nil, nil
	}
	r, err := tlsutil.NewReloader(f)
	if err != nil {
		return nil, err
	}
	return r.ClientConfig(), nil
}
