package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "Save the cluster's state to a file, or restore it from one"}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Write a snapshot reflecting every acknowledged write to FILE",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			addr := httpBase(strings.Split(global.addr, ",")[0])
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/agent/snapshot", nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return remoteError(resp)
			}
			// Write beside the target and rename, so FILE is either whole or untouched.
			tmp, err := os.CreateTemp(filepath.Dir(args[0]), ".keel-snapshot-*")
			if err != nil {
				return err
			}
			defer os.Remove(tmp.Name())
			n, err := io.Copy(tmp, resp.Body)
			if err == nil {
				err = tmp.Sync()
			}
			if cerr := tmp.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("snapshot save: %w", err)
			}
			if err := os.Rename(tmp.Name(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "saved %d bytes to %s\n", n, args[0])
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "restore FILE",
		Short: "Replace the whole cluster's state with a saved snapshot (disaster recovery)",
		Long: `Replace the whole cluster's state with a snapshot saved by 'keel snapshot save'.
The file is checked completely before anything changes. Only the leader restores: list
every node in -addr and the command finds it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := withTimeout(cmd)
			defer cancel()
			var lastErr error
			for _, a := range strings.Split(global.addr, ",") {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, httpBase(a)+"/v1/agent/snapshot", f)
				if err != nil {
					f.Close()
					return err
				}
				resp, err := http.DefaultClient.Do(req)
				f.Close()
				if err != nil {
					lastErr = err
					continue
				}
				err = remoteError(resp)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					fmt.Fprintf(cmd.OutOrStdout(), "restored the cluster from %s\n", args[0])
					return nil
				}
				if resp.StatusCode != http.StatusServiceUnavailable {
					return err // a bad file: no other node will take it either
				}
				lastErr = err
			}
			return fmt.Errorf("snapshot restore: no node in -addr accepted it (is the leader listed?): %w", lastErr)
		},
	})
	return cmd
}

func httpBase(addr string) string {
	addr = strings.TrimSpace(addr)
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return addr
}

// remoteError turns a non-200 answer into an error carrying the server's message.
func remoteError(resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	var e struct{ Message string }
	json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
	return fmt.Errorf("%s: %s", resp.Status, e.Message)
}
