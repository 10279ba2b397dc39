package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/keel-kv/keel/kv/client"
)

func newLeaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Grant, keep alive, revoke and list leases",
		Long: `Leases: keys attached to a lease (keel put KEY VALUE --lease ID) are deleted, all at
one revision, when it is revoked or expires. A lease expires TTL after its last
keepalive, however many leader changes come (no later than one election timeout
after that in a healthy cluster; see docs/api.md).

  ID=$(keel lease grant 10s)
  keel put svc/a up --lease $ID
  keel lease keepalive $ID      until interrupted
  keel lease revoke $ID`,
	}
	cmd.AddCommand(newLeaseGrantCmd(), newLeaseKeepAliveCmd(), newLeaseRevokeCmd(), newLeaseListCmd())
	return cmd
}

func parseLeaseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("lease ID %q is not a positive integer", s)
	}
	return id, nil
}

func newLeaseGrantCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "grant TTL",
		Short: "Grant a lease of TTL (1s to 24h, whole seconds) and print its ID",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ttl, err := time.ParseDuration(args[0])
			if err != nil {
				if n, nerr := strconv.Atoi(args[0]); nerr == nil {
					ttl, err = time.Duration(n)*time.Second, nil
				}
			}
			if err != nil {
				return fmt.Errorf("TTL %q: want a duration such as 10s", args[0])
			}
			if ttl < time.Second {
				return fmt.Errorf("TTL %s: a lease lives at least 1s (TTLs are whole seconds, so %s would round down to %ds)",
					args[0], args[0], int64(ttl/time.Second))
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				g, err := c.Grant(ctx, ttl)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), g)
				}
				fmt.Fprintln(cmd.OutOrStdout(), g.ID)
				return nil
			})
		},
	}
}

func newLeaseKeepAliveCmd() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "keepalive ID",
		Short: "Keep a lease alive until interrupted (or once with --once)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLeaseID(args[0])
			if err != nil {
				return err
			}
			c, err := newClient()
			if err != nil {
				return err
			}
			if once {
				ctx, cancel := withTimeout(cmd)
				defer cancel()
				r, err := c.KeepAliveOnce(ctx, id)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "lease %d kept alive, ttl %ds\n", id, r.TTL)
				return nil
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if err := <-c.KeepAlive(ctx, id); err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "send one keepalive and print the TTL it guarantees")
	return cmd
}

func newLeaseRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a lease: its attached keys are deleted at one revision",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLeaseID(args[0])
			if err != nil {
				return err
			}
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				r, err := c.Revoke(ctx, id)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "lease %d revoked, %d keys deleted at revision %d\n", id, r.Deleted, r.Revision)
				return nil
			})
		},
	}
}

func newLeaseListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List leases (ID and granted TTL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, func(ctx context.Context, c *client.Client) error {
				ls, err := c.Leases(ctx)
				if err != nil {
					return err
				}
				if structured() {
					return printValue(cmd.OutOrStdout(), ls)
				}
				for _, l := range ls {
					fmt.Fprintf(cmd.OutOrStdout(), "%d\t%ds\n", l.ID, l.GrantedTTL)
				}
				return nil
			})
		},
	}
}

func newLockCmd() *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "lock NAME -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock",
		Long: `Take the lock NAME (a key prefix), run COMMAND while holding it, release it.
The lock is held through a lease kept alive by this process; if the lease is lost
(this process was cut off for longer than --ttl), COMMAND is killed and keel lock
fails. COMMAND gets the lock's fencing revision in KEEL_LOCK_REVISION: it strictly
increases from one holder to the next, so a resource that records the highest one it
has seen can refuse a stale holder.

  keel lock locks/backup -- ./backup.sh

keel lock exits with COMMAND's exit status (1 when keel itself fails).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: keel lock NAME -- COMMAND [ARGS...]")
			}
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s, err := client.NewSession(ctx, c, ttl)
			if err != nil {
				return err
			}
			defer s.Close(context.Background())
			m := client.NewMutex(s, args[0])
			if err := m.Lock(ctx); err != nil {
				return fmt.Errorf("lock %s: %w", args[0], err)
			}
			run := exec.Command(args[1], args[2:]...)
			run.Stdin, run.Stdout, run.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			run.Env = append(os.Environ(), "KEEL_LOCK_REVISION="+strconv.FormatInt(m.Revision(), 10))
			if err := run.Start(); err != nil {
				return err
			}
			waited := make(chan error, 1)
			go func() { waited <- run.Wait() }()
			select {
			case err = <-waited:
				var exit *exec.ExitError
				if errors.As(err, &exit) && exit.ExitCode() > 0 {
					err = &childExit{code: exit.ExitCode()} // keel exits with COMMAND's status
				}
			case <-s.Done():
				run.Process.Kill()
				<-waited
				return fmt.Errorf("lock %s lost, command killed: %w", args[0], s.Err())
			case <-ctx.Done():
				run.Process.Signal(syscall.SIGTERM)
				err = <-waited
			}
			uctx, cancel := context.WithTimeout(context.Background(), global.timeout)
			defer cancel()
			if uerr := m.Unlock(uctx); uerr != nil && err == nil {
				err = uerr
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "TTL of the lease that holds the lock")
	return cmd
}
