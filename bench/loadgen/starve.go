package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// starveCmd runs a 3-node keel and a 3-node etcd side by side on a starved CPU (busy
// goroutines on -burners OS threads beside the six servers) with a light write load
// through clientv3 on each, and counts, per system, the elections its members logged
// and the writes that failed. Both systems share one run, so they share the same
// starvation. It answers issue #34's "elections per hour under the same starvation".
//
//	loadgen starve -keel-bin bin/keel -etcd-bin /usr/bin/etcd -work DIR -dur 10m
func starveCmd(args []string) error {
	fs := flag.NewFlagSet("starve", flag.ExitOnError)
	etcdBin := fs.String("etcd-bin", "/usr/bin/etcd", "etcd server binary")
	keelBin := fs.String("keel-bin", "bin/keel", "keel binary")
	work := fs.String("work", "", "scratch dir for data dirs and node logs (required)")
	pidFile := fs.String("pids", "", "append each started server's PID to this file")
	dur := fs.Duration("dur", 10*time.Minute, "how long the starvation lasts (bounded: at most 2h)")
	burners := fs.Int("burners", 13, "busy OS threads (with the six servers and the writers: a load of about burners+2 on 2 cores)")
	rate := fs.Int("rate", 20, "puts per second to each system")
	fs.Parse(args)
	if *work == "" {
		return errors.New("starve: -work is required")
	}
	if *dur <= 0 || *dur > 2*time.Hour {
		return fmt.Errorf("starve: -dur %v, want (0, 2h]", *dur)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	keel := newKeelCluster(*keelBin, filepath.Join(*work, "keel"), *pidFile, false, "etcd", false, 1)
	etcd := newEtcdCluster(*etcdBin, filepath.Join(*work, "etcd"), *pidFile, 1, false, "")
	systems := []Cluster{keel, etcd}
	for _, c := range systems {
		if err := c.Start(ctx); err != nil {
			return fmt.Errorf("start %s: %w", c.Name(), err)
		}
		defer c.Stop()
	}
	before := make([]int, len(systems))
	for i, c := range systems {
		before[i] = countElections(c)
	}

	log.Printf("starving the CPU with %d busy threads for %v", *burners, *dur)
	runCtx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	runtime.GOMAXPROCS(*burners + 4)
	var wg sync.WaitGroup
	for range *burners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			burn(runCtx)
		}()
	}
	fails := make([]atomic.Int64, len(systems))
	puts := make([]atomic.Int64, len(systems))
	for i, c := range systems {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(*rate))
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-runCtx.Done():
					return
				case <-tick.C:
				}
				pctx, pcancel := context.WithTimeout(runCtx, 5*time.Second)
				err := c.Driver().Put(pctx, n%3, 0, fmt.Sprintf("starve/%d", n%100), []byte("v"))
				pcancel()
				puts[i].Add(1)
				if err != nil && runCtx.Err() == nil {
					fails[i].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	hours := dur.Hours()
	fmt.Printf("starvation: %d busy threads on %d cores for %v, %d puts/s to each system\n", *burners, runtime.NumCPU(), *dur, *rate)
	fmt.Printf("%-6s %10s %14s %8s %8s\n", "system", "elections", "elections/h", "puts", "failed")
	for i, c := range systems {
		e := countElections(c) - before[i]
		fmt.Printf("%-6s %10d %14.1f %8d %8d\n", c.Name(), e, float64(e)/hours, puts[i].Load(), fails[i].Load())
	}
	return nil
}

// burn keeps one OS thread busy until ctx is done.
func burn(ctx context.Context) {
	runtime.LockOSThread()
	x := uint64(1)
	for i := 0; ; i++ {
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if ctx.Err() != nil {
			_ = x
			return
		}
	}
}

// countElections counts the leader elections the nodes' logs record: keel's
// (hashicorp/raft) "entering leader state", etcd's "became leader at term".
func countElections(c Cluster) int {
	marker := "entering leader state"
	if c.Name() == "etcd" {
		marker = "became leader at term"
	}
	n := 0
	for i := range 3 {
		f, err := os.Open(c.LogPath(i))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), marker) {
				n++
			}
		}
		f.Close()
	}
	return n
}
