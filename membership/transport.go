package membership

import (
	"fmt"
	"log"
	"net"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/keel-kv/keel/internal/connlimit"
)

// Bounds of the gossip port's TCP streams (push/pull, fallback probes): at most
// maxGossipStreams open at once, maxGossipStreamsPerSource from one source IP address;
// one beyond is closed at once, so a flood of connections cannot exhaust the node's
// file descriptors, and a member dialing from its own address still gets in. Each
// stream is closed by memberlist after TCPTimeout at the latest. UDP is not bounded
// (it holds no descriptor per peer).
const (
	maxGossipStreams          = 256
	maxGossipStreamsPerSource = 32
)

// limitedTransport is memberlist's own TCP/UDP transport whose accepted streams are
// counted by source (connlimit) before memberlist sees them.
type limitedTransport struct {
	*memberlist.NetTransport
	open     *connlimit.Counter
	streams  chan net.Conn
	done     chan struct{}
	stopOnce sync.Once
}

var _ memberlist.NodeAwareTransport = (*limitedTransport)(nil)

// newLimitedTransport binds mc's address as memberlist would (retrying a port-0 bind
// that races), sets mc.Transport to it and, for port 0, mc's ports to the bound one.
func newLimitedTransport(mc *memberlist.Config, logger *log.Logger) (*limitedTransport, error) {
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: logger,
		MetricLabels: mc.MetricLabels}
	tries := 1
	if mc.BindPort == 0 {
		tries = 10
	}
	var nt *memberlist.NetTransport
	var err error
	for range tries {
		if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("could not set up network transport: %w", err)
	}
	if mc.BindPort == 0 {
		mc.BindPort = nt.GetAutoBindPort()
		if mc.AdvertisePort == 0 {
			mc.AdvertisePort = mc.BindPort
		}
	}
	t := &limitedTransport{NetTransport: nt, open: connlimit.New(maxGossipStreams, maxGossipStreamsPerSource),
		streams: make(chan net.Conn), done: make(chan struct{})}
	go t.admitLoop()
	mc.Transport = t
	return t, nil
}

// admitLoop passes on the streams within the bounds and closes the others.
func (t *limitedTransport) admitLoop() {
	for {
		select {
		case conn := <-t.NetTransport.StreamCh():
			conn, ok := t.open.Admit(conn)
			if !ok {
				continue
			}
			select {
			case t.streams <- conn:
			case <-t.done:
				conn.Close()
				return
			}
		case <-t.done:
			return
		}
	}
}

// StreamCh is the admitted streams.
func (t *limitedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops the transport and its admission.
func (t *limitedTransport) Shutdown() error {
	t.stopOnce.Do(func() { close(t.done) })
	return t.NetTransport.Shutdown()
}
