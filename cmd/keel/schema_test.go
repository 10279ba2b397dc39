package main

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keel-kv/keel/versions"
)

// TestReloadOnSignal: each SIGHUP calls the agent's reload once, a failed reload does
// not stop the watcher, and the watcher ends with its context.
func TestReloadOnSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal)
	calls := make(chan int, 3)
	n := 0
	reload := func(context.Context) (*versions.SchemaChange, error) {
		n++
		calls <- n
		if n == 1 {
			return nil, errors.New("schema.yaml:3: bad")
		}
		return &versions.SchemaChange{File: "schema.yaml"}, nil
	}
	done := make(chan struct{})
	go func() {
		reloadOnSignal(ctx, sigs, reload, hclog.NewNullLogger())
		close(done)
	}()
	for want := 1; want <= 2; want++ {
		sigs <- syscall.SIGHUP
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("#%d: reload call %d", want, got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("#%d: SIGHUP did not reload", want)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher did not stop with its context")
	}
}
