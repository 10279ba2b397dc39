// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

// This file is keel's addition to hashicorp/raft v1.8.0 (PATCHES.md).

package raft

import (
	"testing"
	"time"
)

// TestRaft_FollowersLearnCommitAtOnce: a follower applies a write as soon as the
// leader commits it, not when the leader next has entries to send or its commit timer
// fires. The leader's commit timer is set far beyond the test's wait, so a follower can
// only learn the commit from an AppendEntries the commit itself triggers.
func TestRaft_FollowersLearnCommitAtOnce(t *testing.T) {
	c := MakeCluster(3, t, nil)
	defer c.Close()
	leader := c.Leader()
	// Set after the cluster is stable (its stability wait grows with CommitTimeout),
	// then let the timers armed with the old value fire.
	conf := leader.config()
	conf.CommitTimeout = 20 * time.Second
	leader.conf.Store(conf)
	time.Sleep(50 * time.Millisecond)
	if err := leader.Apply([]byte("first"), 0).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, f := range c.Followers() {
		fsm := getMockFSM(c.fsms[c.IndexOf(f)])
		for {
			logs := fsm.Logs()
			if len(logs) > 0 && string(logs[len(logs)-1]) == "first" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("follower %s did not apply the committed write within 2 s (commit timer: 20 s)", f.localID)
			}
			time.Sleep(time.Millisecond)
		}
	}
}
