//go:build tools

// Package tools pins the chosen dependencies in go.mod while the packages that import
// them are being written, so parallel work never races on go.mod edits.
package tools

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/google/btree"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/memberlist"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "go.yaml.in/yaml/v3"
)
