package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"
)

// profileCPU captures CPU profiles of the leader and one follower while a workload
// runs: it waits delay (the warm-up), then profiles for secs seconds. The returned
// function waits for the captures. No-op unless profiling is on.
func (s *suite) profileCPU(ctx context.Context, name string, lead int, delay time.Duration, secs int) func() {
	if s.profileDir == "" {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the load generator's own share: its clients are part of the result
		defer wg.Done()
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return
		}
		os.MkdirAll(s.profileDir, 0o755)
		f, err := os.Create(filepath.Join(s.profileDir, fmt.Sprintf("%s-%s-loadgen.cpu.pprof", s.res.System, name)))
		if err != nil {
			log.Printf("profile: %v", err)
			return
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Printf("profile: %v", err)
			return
		}
		select {
		case <-time.After(time.Duration(secs) * time.Second):
		case <-ctx.Done():
		}
		pprof.StopCPUProfile()
	}()
	if s.cl == nil || s.cl.PprofURL(lead) == "" {
		return wg.Wait
	}
	for _, n := range []int{lead, (lead + 1) % 3} {
		role := "leader"
		if n != lead {
			role = "follower"
		}
		wg.Add(1)
		go func(n int, role string) {
			defer wg.Done()
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return
			}
			u := fmt.Sprintf("%s/profile?seconds=%d", s.cl.PprofURL(n), secs)
			s.fetchProfile(ctx, u, fmt.Sprintf("%s-%s-%s.cpu.pprof", s.res.System, name, role))
		}(n, role)
	}
	return wg.Wait
}

// profileHeap saves the heap profile of node n.
func (s *suite) profileHeap(ctx context.Context, name string, n int) {
	if s.profileDir == "" || s.cl == nil || s.cl.PprofURL(n) == "" {
		return
	}
	s.fetchProfile(ctx, s.cl.PprofURL(n)+"/heap", fmt.Sprintf("%s-%s-node%d.heap.pprof", s.res.System, name, n))
}

func (s *suite) fetchProfile(ctx context.Context, url, file string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Printf("profile %s: %v", url, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		log.Printf("profile %s: HTTP %d", url, resp.StatusCode)
		return
	}
	os.MkdirAll(s.profileDir, 0o755)
	f, err := os.Create(filepath.Join(s.profileDir, file))
	if err != nil {
		return
	}
	defer f.Close()
	io.Copy(f, resp.Body)
}
