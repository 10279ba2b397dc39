package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/raft/wal"
)

// commit1Cmd measures issue #39's goal for one client on real keel processes: a
// write's commit against one fdatasync plus one round trip. Every node's raft log sits
// on a disk of its own whose fdatasync takes -slow longer (wal.FaultFS's slow=DUR
// through -test-log-faults; put -work on tmpfs so that the added delay is the disk),
// which is what a cluster of machines with a disk each has and three nodes sharing
// this machine's one disk do not. Each round measures, in this order and on the same
// files: that fdatasync alone, a 300-byte loopback round trip, one client's writes on
// a 1-node keel, and on a 3-node keel (the client talks to the leader).
//
// The round trip is measured twice. "rtt" is between two goroutines of this process
// sending back to back: the wire and the kernel, with every CPU awake. "idle rtt" is
// to another process after -slow (or 2 ms) of quiet before each send, which is what a
// commit's round trip to a follower is: the follower has had nothing to do since the
// last write's fdatasync, so its thread, and maybe its CPU, sleep, and the message
// must wake them (on this VM that costs 5-15 times the wire). A commit cannot be faster
// than fdatasync plus that round trip, so both ratios are printed.
//
//	loadgen commit1 -keel-bin bin/keel -work /dev/shm/commit1 -slow 2ms -rounds 3
func commit1Cmd(args []string) error {
	fs := flag.NewFlagSet("commit1", flag.ExitOnError)
	keelBin := fs.String("keel-bin", "bin/keel", "keel binary")
	work := fs.String("work", "", "scratch dir for data dirs and logs, on tmpfs (required)")
	slow := fs.Duration("slow", 2*time.Millisecond, "added to every fdatasync of the raft log (0: the work dir's own)")
	writes := fs.Int("writes", 2000, "writes per cluster and round (bounded: at most 100000)")
	rounds := fs.Int("rounds", 3, "rounds (bounded: at most 20)")
	fs.Parse(args)
	if *work == "" {
		return errors.New("commit1: -work is required")
	}
	if *writes <= 0 || *writes > 100000 || *rounds <= 0 || *rounds > 20 {
		return fmt.Errorf("commit1: -writes %d -rounds %d out of bounds", *writes, *rounds)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(*work, 0o755); err != nil {
		return err
	}
	control := filepath.Join(*work, "log-faults")
	if err := os.Remove(control); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if *slow > 0 {
		if err := os.WriteFile(control, fmt.Appendf(nil, "slow=%s", *slow), 0o644); err != nil {
			return err
		}
	}
	quiet := *slow
	if quiet <= 0 {
		quiet = 2 * time.Millisecond
	}
	fmt.Printf("%-5s %10s %10s %10s %12s %12s %12s %14s %16s %12s\n", "round", "fsync p50", "rtt p50", "idle rtt",
		"1-node p50", "3-node p50", "3-node p99", "3/(fsync+rtt)", "3/(fsync+idle)", "3-node/1")
	for r := range *rounds {
		sync, err := fsyncLatency(filepath.Join(*work, "fsync"), control, *writes)
		if err != nil {
			return err
		}
		rtt, err := loopbackRTT(*writes)
		if err != nil {
			return err
		}
		idle, err := idleRTT(ctx, min(*writes, 1000), quiet)
		if err != nil {
			return err
		}
		var p50, p99 [2]time.Duration
		for i, nodes := range []int{1, 3} {
			dir := filepath.Join(*work, fmt.Sprintf("r%d-n%d", r, nodes))
			lat, err := commitLatency(ctx, *keelBin, dir, control, nodes, *writes)
			if err != nil {
				return fmt.Errorf("round %d, %d node(s): %w", r, nodes, err)
			}
			p50[i], p99[i] = pct(lat, 50), pct(lat, 99)
			os.RemoveAll(dir)
		}
		base, idleBase := pct(sync, 50)+pct(rtt, 50), pct(sync, 50)+pct(idle, 50)
		fmt.Printf("%-5d %8dµs %8dµs %8dµs %10dµs %10dµs %10dµs %13.2f× %15.2f× %11.2f×\n", r, pct(sync, 50).Microseconds(),
			pct(rtt, 50).Microseconds(), pct(idle, 50).Microseconds(), p50[0].Microseconds(), p50[1].Microseconds(),
			p99[1].Microseconds(), float64(p50[1])/float64(base), float64(p50[1])/float64(idleBase),
			float64(p50[1])/float64(p50[0]))
	}
	return nil
}

// commitLatency runs one client's writes of 256 bytes, one after another, against the
// leader of a new keel cluster of nodes nodes, and returns each write's latency.
func commitLatency(ctx context.Context, bin, dir, control string, nodes, writes int) ([]time.Duration, error) {
	c := newKeelCluster(bin, dir, "", false, "stream", false, 1)
	c.nodes, c.flags = nodes, []string{"-test-log-faults", control}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	defer c.Stop()
	lead, err := c.Leader(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := client.New([]string{"http://" + c.httpAddr(lead)}, client.Options{Stream: true})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	val := make([]byte, 256)
	lat := make([]time.Duration, 0, writes)
	for i := range 50 + writes { // the first 50 warm up connections and the log
		t0 := time.Now()
		if _, err := cl.Put(ctx, fmt.Sprintf("commit1/%06d", i), val); err != nil {
			return nil, err
		}
		if i >= 50 {
			lat = append(lat, time.Since(t0))
		}
	}
	return lat, nil
}

// fsyncLatency times n appends of 300 bytes, each followed by a Sync, through the
// FaultFS the nodes' logs use with the same control file: one node's fdatasync.
func fsyncLatency(path, control string, n int) ([]time.Duration, error) {
	f, err := wal.FaultFS{Control: control}.Create(path)
	if err != nil {
		return nil, err
	}
	defer os.Remove(path)
	defer f.Close()
	buf := make([]byte, 300)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i*len(buf))); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// loopbackRTT times n 300-byte round trips over one loopback TCP connection to a
// goroutine of this process, back to back.
func loopbackRTT(n int) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		io.Copy(conn, conn)
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return roundTrips(conn, n, 0)
}

// rttEchoCmd is the hidden subcommand idleRTT starts: it echoes one connection.
const rttEchoCmd = "rtt-echo"

// rttEcho dials args[0] and echoes what it reads until the connection closes.
func rttEcho(args []string) error {
	if len(args) != 1 {
		return errors.New(rttEchoCmd + ": want one address")
	}
	conn, err := net.Dial("tcp", args[0])
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = io.Copy(conn, conn)
	return err
}

// idleRTT times n 300-byte round trips over loopback TCP to another process (this
// program as rttEchoCmd), with quiet before each: the round trip to a peer that had
// nothing to do.
func idleRTT(ctx context.Context, n int, quiet time.Duration) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	peer := exec.CommandContext(ctx, self, rttEchoCmd, ln.Addr().String())
	peer.Stderr = os.Stderr
	if err := peer.Start(); err != nil {
		return nil, err
	}
	defer peer.Wait()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		peer.Process.Kill()
		return nil, err
	}
	defer conn.Close() // the peer's copy ends, and it exits
	return roundTrips(conn, n, quiet)
}

// roundTrips times n round trips of 300 bytes on conn, each after quiet, and checks
// that each comes back as it was sent.
func roundTrips(conn net.Conn, n int, quiet time.Duration) ([]time.Duration, error) {
	out, in := make([]byte, 300), make([]byte, 300)
	lat := make([]time.Duration, 0, n)
	for i := range n {
		for j := range out {
			out[j] = byte(i + j)
		}
		if quiet > 0 {
			time.Sleep(quiet)
		}
		t0 := time.Now()
		if _, err := conn.Write(out); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(conn, in); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		if !bytes.Equal(in, out) {
			return nil, fmt.Errorf("round trip %d came back changed", i)
		}
	}
	return lat, nil
}

// pct is the p-th percentile of lat (sorted in place).
func pct(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[len(lat)*p/100]
}
