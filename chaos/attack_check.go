package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"

	"github.com/keel-kv/keel/kv/client"
)

// Flood sizes: floodWorkers goroutines send reads and lists back to back, and each
// node carries floodWatches watches of the read-only token, all of the attacker's
// single source address.
const (
	floodWorkers = 6
	floodWatches = 100
)

// flood starts the read-only token's traffic against every node.
func (a *attacker) flood(ctx context.Context, prefix string) {
	for i, id := range a.c.Members() {
		addr := a.c.HTTPAddr(id)
		cl, err := client.New([]string{addr}, client.Options{MaxRetries: -1, Stream: true, DialTimeout: time.Second,
			TLS: tlsFor(addr), Token: a.roToken})
		if err != nil {
			a.breach("flood client for %s: %v", id, err)
			continue
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer cl.Close()
			for range floodWatches {
				go func() {
					for range cl.Watch(ctx, prefix, client.WatchOptions{Buffer: 16}) {
					}
				}()
			}
			<-ctx.Done()
		}()
		for w := i; w < floodWorkers; w += len(a.c.Members()) {
			a.wg.Add(1)
			go func() { defer a.wg.Done(); a.floodReads(ctx, prefix, int64(w)) }()
		}
	}
}

// floodReads sends gets and lists to random nodes, as fast as they are answered.
func (a *attacker) floodReads(ctx context.Context, prefix string, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	clients := map[string]*client.Client{}
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for ctx.Err() == nil {
		ids := a.c.Members()
		addr := a.c.HTTPAddr(ids[rng.Intn(len(ids))])
		cl := clients[addr]
		if cl == nil {
			var err error
			if cl, err = client.New([]string{addr}, client.Options{MaxRetries: -1, DialTimeout: time.Second,
				TLS: tlsFor(addr), Token: a.roToken}); err != nil {
				return
			}
			clients[addr] = cl
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var err error
		if rng.Intn(4) == 0 {
			_, err = cl.List(rctx, prefix, client.ListOptions{Limit: 100})
		} else {
			_, err = cl.Get(rctx, fmt.Sprintf("%sk%d", prefix, rng.Intn(16)))
		}
		cancel()
		if err != nil && !client.IsNotFound(err) {
			a.floodErr.Add(1)
			if client.IsUnauthorized(err) {
				a.breach("the read-only token was refused a read: %v", err)
			}
			continue
		}
		a.floodOK.Add(1)
	}
}

// stop ends the attack (once the workload is done).
func (a *attacker) stop() {
	a.to.Store(a.h.Now())
	a.cancel()
	a.wg.Wait()
}

// check runs once the cluster is healed: what the attacker did must have changed
// nothing, and the workload must have been served while it flooded.
func (a *attacker) check(ctx context.Context) []string {
	var problems []string
	a.mu.Lock()
	for _, b := range a.breaches {
		problems = append(problems, "attacker: "+b)
	}
	a.mu.Unlock()
	if a.raftTries.Load() == 0 {
		problems = append(problems, "attacker: no raft RPC was tried")
	}
	if tokens, err := a.tokens(ctx); err != nil {
		problems = append(problems, "attacker: "+err.Error())
	} else if !slices.Equal(tokens, a.tokensBefore) {
		problems = append(problems, fmt.Sprintf("attacker: the ACL tokens changed: %v, were %v", tokens, a.tokensBefore))
	}
	if members, err := a.configuration(ctx); err != nil {
		problems = append(problems, "attacker: "+err.Error())
	} else if !slices.Equal(members, a.membersBefore) {
		problems = append(problems, fmt.Sprintf("attacker: the raft configuration changed: %v, was %v", members, a.membersBefore))
	}
	problems = append(problems, a.checkForged(ctx)...)
	problems = append(problems, a.checkEtcd(ctx)...)
	secs := float64(a.to.Load()-a.from) / 1e9
	served := 0
	for _, r := range a.h.Records() {
		if r.Outcome == OutcomeOK && r.Client != FinalClient && r.Return >= a.from && r.Return <= a.to.Load() {
			served++
		}
	}
	a.logf("attacker: %d raft RPCs refused; flood %d reads answered, %d failed (%.0f/s); workload served %d operations (%.0f/s) meanwhile",
		a.raftTries.Load(), a.floodOK.Load(), a.floodErr.Load(), float64(a.floodOK.Load())/secs, served, float64(served)/secs)
	if secs <= 0 || float64(served)/secs < minServedRate {
		problems = append(problems, fmt.Sprintf("attacker: the workload was served %d operations in %.0f s of flood, under %d/s",
			served, secs, minServedRate))
	}
	if a.floodOK.Load() == 0 {
		problems = append(problems, "attacker: the flood sent nothing that was answered: it proved nothing")
	}
	return problems
}

// checkForged: the secret of the forged token record authenticates on no node.
func (a *attacker) checkForged(ctx context.Context) []string {
	var out []string
	for _, id := range a.c.Members() {
		addr := a.c.HTTPAddr(id)
		cl, err := client.New([]string{addr}, client.Options{MaxRetries: 3, TLS: tlsFor(addr), Token: a.forged})
		if err != nil {
			return append(out, "attacker: "+err.Error())
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = cl.ACLTokenSelf(rctx)
		cancel()
		cl.Close()
		if !client.IsUnauthorized(err) {
			out = append(out, fmt.Sprintf("attacker: node %s answered the forged token with %v, want 401", id, errString(err)))
		}
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return "success"
	}
	return strings.TrimSpace(err.Error())
}
