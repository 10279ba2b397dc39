package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary be idleRTT's peer, as the loadgen binary is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == rttEchoCmd {
		if err := rttEcho(os.Args[2:]); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestIdleRTT: every round trip reaches the other process and comes back whole, and
// the quiet before each send is not counted.
func TestIdleRTT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	lat, err := idleRTT(ctx, 20, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 20 {
		t.Fatalf("%d round trips timed, want 20", len(lat))
	}
	if took := time.Since(start); took < 20*20*time.Millisecond {
		t.Fatalf("20 round trips with 20 ms of quiet each took %v", took)
	}
	for i, d := range lat {
		if d <= 0 || d >= 20*time.Millisecond {
			t.Fatalf("round trip %d took %v: the quiet is counted, or it did not happen", i, d)
		}
	}
}
