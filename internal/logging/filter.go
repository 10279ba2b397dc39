package logging

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
)

// Filter wraps l so that every logger derived from it (Named, With) shapes its lines
// the same way:
//
//   - Named(name) also sets the field component to the module path below the root
//     ("raft", "raft.transport"), so JSON lines can be selected by component; the
//     root's own lines have none (the agent sets component=agent).
//   - hashicorp/raft's routine events land at the level their table row says
//     (routineEvents), and the ones a down peer repeats are logged once per peer per
//     window, the next one carrying repeated=N for those left out.
//   - An ERROR or WARN whose error is raft's "transport shutdown" (every clean stop)
//     is DEBUG.
//
// Filtering a logger Filter made returns it as it is. Safe for concurrent use, as
// hclog loggers are.
func Filter(l hclog.Logger) hclog.Logger { return filterWindow(l, 0) }

func filterWindow(l hclog.Logger, window time.Duration) hclog.Logger {
	if f, ok := l.(*filter); ok {
		return f
	}
	if window <= 0 {
		window = DefaultRepeatWindow
	}
	return &filter{Logger: l, lim: &limiter{window: window, now: time.Now, seen: map[string]*repeat{}}}
}

// routineEvent is one of hashicorp/raft's or memberlist's messages and the level it
// deserves.
type routineEvent struct {
	msg   string
	level hclog.Level
	// limited: repeated while a peer is down, so rate-limited per peer (raft names
	// it in a field) or per message kind (memberlist writes it into the text).
	limited bool
	// prefix: msg is the start of the message (memberlist's formatted lines).
	prefix bool
}

// routineEvents are hashicorp/raft's (v1.8) messages logged at ERROR for events that
// need no action:
//
//	failed to heartbeat to        a follower is down or partitioned: 10 a second
//	                              for as long as it is (287 lines in one outage);
//	                              WARN, once per peer per window
//	failed to appendEntries to    the same, when there are entries to send
//	failed to make requestVote RPC  a candidate cannot reach a down peer
//	peer has newer term, stopping replication
//	                              the leader learned a newer term: what a voluntary
//	                              leadership transfer does; INFO
//
// and memberlist's (v0.7, through StandardLogger) for a member that is down, which
// its failure detector is there to find (it logs the member's state changes at INFO):
// failed probes, gossip and push/pull to it; WARN, once per kind per window.
var routineEvents = []routineEvent{
	{msg: "failed to heartbeat to", level: hclog.Warn, limited: true},
	{msg: "failed to appendEntries to", level: hclog.Warn, limited: true},
	{msg: "failed to make requestVote RPC", level: hclog.Warn, limited: true},
	{msg: "peer has newer term, stopping replication", level: hclog.Info},
	{msg: "memberlist: Failed fallback TCP ping", level: hclog.Warn, limited: true, prefix: true},
	{msg: "memberlist: Failed to send UDP compound ping", level: hclog.Warn, limited: true, prefix: true},
	{msg: "memberlist: Failed to send indirect UDP ping", level: hclog.Warn, limited: true, prefix: true},
	{msg: "memberlist: Failed to send gossip to", level: hclog.Warn, limited: true, prefix: true},
	{msg: "memberlist: Push/Pull with", level: hclog.Warn, limited: true, prefix: true},
}

type filter struct {
	hclog.Logger
	component string
	lim       *limiter // shared by every logger derived from the root
}

func (f *filter) Error(msg string, args ...any) { f.Log(hclog.Error, msg, args...) }
func (f *filter) Warn(msg string, args ...any)  { f.Log(hclog.Warn, msg, args...) }

// Log applies the routine table to ERROR and WARN lines; other levels pass.
func (f *filter) Log(level hclog.Level, msg string, args ...any) {
	if level >= hclog.Warn {
		var ok bool
		if level, args, ok = f.route(level, msg, args); !ok {
			return
		}
	}
	f.Logger.Log(level, msg, args...)
}

// route returns the level and arguments msg is logged with, or false to drop it.
func (f *filter) route(level hclog.Level, msg string, args []any) (hclog.Level, []any, bool) {
	if isTransportShutdown(args) {
		return hclog.Debug, args, true
	}
	for _, e := range routineEvents {
		if msg != e.msg && !(e.prefix && strings.HasPrefix(msg, e.msg)) {
			continue
		}
		if !e.limited {
			return e.level, args, true
		}
		n, ok := f.lim.allow(e.msg + "\x00" + argString(args, "peer"))
		if !ok {
			return 0, nil, false
		}
		if n > 0 {
			args = append(args[:len(args):len(args)], "repeated", n)
		}
		return e.level, args, true
	}
	return level, args, true
}

// isTransportShutdown reports whether the line's error is raft's transport shutdown.
func isTransportShutdown(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		switch v := args[i+1].(type) {
		case error:
			return errors.Is(v, hraft.ErrTransportShutdown) || strings.Contains(v.Error(), hraft.ErrTransportShutdown.Error())
		case string:
			return strings.Contains(v, hraft.ErrTransportShutdown.Error())
		}
	}
	return false
}

// argString is the value of key among args, formatted; "" when absent.
func argString(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == key {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}

func (f *filter) With(args ...any) hclog.Logger {
	return &filter{Logger: f.Logger.With(args...), component: f.component, lim: f.lim}
}

func (f *filter) Named(name string) hclog.Logger {
	c := name
	if f.component != "" {
		c = f.component + "." + name
	}
	return &filter{Logger: f.Logger.Named(name).With("component", c), component: c, lim: f.lim}
}

func (f *filter) ResetNamed(name string) hclog.Logger {
	return &filter{Logger: f.Logger.ResetNamed(name).With("component", name), component: name, lim: f.lim}
}

// limiter lets a key through once per window and counts what it held back.
type limiter struct {
	window time.Duration
	now    func() time.Time // time.Now; tests move it
	mu     sync.Mutex
	seen   map[string]*repeat
}

type repeat struct {
	last    time.Time // when the key was last let through
	dropped int       // held back since
}

// allow reports whether key may be logged now and how many were held back before it.
func (l *limiter) allow(key string) (dropped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	r := l.seen[key]
	if r == nil {
		if len(l.seen) > 1024 { // peers come and go; forget them all rather than grow
			clear(l.seen)
		}
		l.seen[key] = &repeat{last: now}
		return 0, true
	}
	if now.Sub(r.last) < l.window {
		r.dropped++
		return 0, false
	}
	dropped, r.dropped, r.last = r.dropped, 0, now
	return dropped, true
}
