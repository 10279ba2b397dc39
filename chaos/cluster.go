package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// Sentinel errors of the harness.
var (
	// ErrUnsupported: the cluster backend cannot inject this fault.
	ErrUnsupported = errors.New("chaos: fault not supported by this backend")
	// ErrNoLeader: no node reports itself leader.
	ErrNoLeader = errors.New("chaos: no leader")
	// ErrNodeCrashed: a node process exited without the harness stopping it.
	ErrNodeCrashed = errors.New("chaos: node exited unexpectedly")
	// ErrNotRunning: a fault aimed at a node that is not running (or already in the
	// state the fault would put it in) would do nothing.
	ErrNotRunning = errors.New("chaos: node not running")
)

// NetFaults is how a backend breaks the network between nodes. An error means the
// fault is not (fully) in place.
type NetFaults interface {
	// Partition cuts every link between nodes of different sides, both ways.
	Partition(sides ...[]string) error
	// SetLink sets the fault of the directed link from → to.
	SetLink(from, to string, f LinkFault) error
	// SetAll sets f on every directed link between distinct nodes.
	SetAll(nodes []string, f LinkFault) error
	// Heal clears every network fault.
	Heal() error
}

// Cluster is a running keel cluster the harness can break: real processes on loopback
// (ProcCluster) or containers (DockerCluster).
type Cluster interface {
	// Name says which backend this is ("process" or "docker").
	Name() string
	// Members lists the IDs of the nodes that belong to the cluster (running or not).
	Members() []string
	// Client returns an HTTP client of one node (no failover, few retries).
	Client(id string) *client.Client
	// Incarnation counts the node's restarts (0 for its first process).
	Incarnation(id string) int
	// Kill stops the node at once (kill -9), ErrNotRunning when it is not running;
	// Start restarts a stopped node on its data.
	Kill(id string) error
	Start(ctx context.Context, id string) error
	// Pause freezes the node (SIGSTOP), ErrNotRunning when it is stopped or already
	// frozen; Resume thaws it.
	Pause(id string) error
	Resume(id string) error
	// Net breaks links; nil when the backend cannot.
	Net() NetFaults
	// AddNode starts a new node that joins as a voter and returns its ID.
	AddNode(ctx context.Context) (string, error)
	// RemoveNode removes a voter from the raft configuration and stops it.
	RemoveNode(ctx context.Context, id string) error
	// DiskNode is the node whose data dir is a small tmpfs ("" when none).
	DiskNode() string
	// FillDisk fills the node's data filesystem; FreeDisk gives the space back.
	FillDisk(id string) error
	FreeDisk(id string) error
	// FailLog injects I/O errors into the node's Raft log: mode "sync" makes its
	// fdatasyncs fail (the node must step down and exit), "write" its writes (torn);
	// "slow=DUR" makes each fdatasync take DUR longer (the node must keep running).
	// heal lifts the fault, restarts the node if it stopped, and reports an injection
	// that did nothing (a sync fault the node survived, a write fault no write met) or
	// a slow disk the node did not survive.
	FailLog(ctx context.Context, id, mode string) (heal func() error, err error)
	// CorruptLog kills the node, damages its Raft log where no crash explains it, and
	// checks that it then refuses to start; heal rebuilds it from its peers (`keel
	// rebuild`), restarts it and waits until it is a voter again.
	CorruptLog(ctx context.Context, id string) (heal func() error, err error)
	// LoseState kills the node, deletes one part of its Raft state (part: "wal" or
	// "raft.db"), and checks that it then refuses to start naming that part; heal
	// rebuilds it as CorruptLog's does.
	LoseState(ctx context.Context, id, part string) (heal func() error, err error)
	// Supports says whether the backend can inject the fault kind.
	Supports(k FaultKind) bool
	// Crashed lists nodes whose process exited without the harness stopping it.
	Crashed() []string
	// HealAll undoes every fault: heals the network, frees disks, resumes paused nodes
	// and restarts stopped ones.
	HealAll(ctx context.Context) error
	// CollectLogs copies every node's log into dir.
	CollectLogs(dir string) error
	// Close stops everything and removes what the cluster created.
	Close()
}

// newNodeClient is a client for one node: few, fast retries of what is safe to retry,
// so one operation stays bounded by its context. Single-key operations and
// transactions go over the stream protocol (one connection shared by every worker, as
// the benchmarks drive keel), so faults hit many requests in flight on one
// connection; scans go over HTTP.
// token is the ACL token's secret ("" when the cluster runs without ACLs).
func newNodeClient(httpAddr, token string) *client.Client {
	c, err := client.New([]string{httpAddr}, client.Options{
		MaxRetries: 2, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		DialTimeout: time.Second, Stream: true, TLS: tlsFor(httpAddr), Token: token,
	})
	if err != nil {
		panic(fmt.Sprintf("chaos: client for %q: %v", httpAddr, err))
	}
	return c
}

// Statuses asks every member for /v1/status in parallel; unreachable nodes are absent.
func Statuses(ctx context.Context, c Cluster) map[string]*api.StatusResponse {
	members := c.Members()
	out := map[string]*api.StatusResponse{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			st, err := c.Client(id).Status(sctx)
			if err == nil {
				mu.Lock()
				out[id] = st
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// Leader returns the ID of the node that reports itself leader with the highest term.
func Leader(ctx context.Context, c Cluster) (string, error) {
	var best string
	var term uint64
	for id, st := range Statuses(ctx, c) {
		if st.State == "Leader" && st.Term >= term {
			best, term = id, st.Term
		}
	}
	if best == "" {
		return "", ErrNoLeader
	}
	return best, nil
}

// WaitLeader polls until some node leads.
func WaitLeader(ctx context.Context, c Cluster) (string, error) {
	for {
		id, err := Leader(ctx, c)
		if err == nil {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("wait for leader: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitVoters polls until the leader's configuration holds exactly want as voters and
// every one of them answers /readyz.
func WaitVoters(ctx context.Context, c Cluster, want []string) error {
	want = append([]string(nil), want...)
	sort.Strings(want)
	var last string
	for {
		sts := Statuses(ctx, c)
		for _, st := range sts {
			if st.State != "Leader" {
				continue
			}
			var voters []string
			for _, m := range st.Members {
				if m.Suffrage == "Voter" {
					voters = append(voters, m.ID)
				}
			}
			sort.Strings(voters)
			last = fmt.Sprint(voters)
			if last == fmt.Sprint(want) && allReady(ctx, c, want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for voters %v (leader sees %s): %w", want, last, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func allReady(ctx context.Context, c Cluster, ids []string) bool {
	for _, id := range ids {
		if !Ready(ctx, c.Client(id)) {
			return false
		}
	}
	return true
}

// Ready says whether the node answers /readyz with 200 (through its status: ready when
// it knows a leader and has applied what it knows is committed).
func Ready(ctx context.Context, cl *client.Client) bool {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cl.Status(sctx)
	return err == nil && st.LeaderID != "" && st.AppliedIndex >= st.CommitIndex
}
