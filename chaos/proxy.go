package chaos

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// LinkFault is what the network does to one directed link (from → to): the connections
// node "from" dials to node "to", both byte directions. So "from cannot reach to" (a
// blackhole from → to) stops from's requests to "to" and their answers, while the
// connections "to" dials to "from" still work — which for Raft, whose every message is
// a request/response RPC on a connection the sender dials, is exactly "to hears from,
// from does not hear to".
type LinkFault struct {
	// Blackhole silently discards every byte; connections hang. When the blackhole is
	// lifted, the connections it broke are reset (their streams lost bytes).
	Blackhole bool
	// Delay and Jitter hold each chunk for Delay plus a uniform [0, Jitter), in order.
	Delay, Jitter time.Duration
	// DropRate is the probability that a chunk is lost. A TCP stream cannot lose bytes
	// and stay usable, so a lost chunk resets its connection: the sender sees its
	// message fail, as it would after TCP gave up retransmitting.
	DropRate float64
}

// IsZero says whether the link is healthy.
func (f LinkFault) IsZero() bool { return f == LinkFault{} }

type link struct{ from, to string }

// SourceGone is what an identify function returns when the dialing socket no longer
// exists (its process died between connect and accept): the proxy drops the connection.
const SourceGone = "\x00gone"

// Network is a set of fault-injecting TCP proxies, one in front of each node's Raft
// port (the address the node advertises), and the fault state of every directed link
// between nodes. A proxy learns which node dialed it through Identify. Safe for
// concurrent use; deterministic in what it blocks (drops are random by nature).
type Network struct {
	// identify names the node that dialed a proxied connection ("" when unknown).
	identify func(remote, local net.Addr) string

	mu struct {
		sync.Mutex
		links   map[link]LinkFault
		conns   map[*proxyConn]struct{}
		proxies map[string]*Proxy
		unknown []string // accepted connections whose source could not be identified: "remote -> local"
	}
}

// NewNetwork returns an empty network; identify maps a connection's remote and local
// address to the dialing node's ID.
func NewNetwork(identify func(remote, local net.Addr) string) *Network {
	n := &Network{identify: identify}
	n.mu.links = map[link]LinkFault{}
	n.mu.conns = map[*proxyConn]struct{}{}
	n.mu.proxies = map[string]*Proxy{}
	return n
}

// Proxy is the listener in front of one node's Raft port.
type Proxy struct {
	net    *Network
	dst    string
	target string
	ln     net.Listener
	done   chan struct{}
}

// Listen starts the proxy of node dst on listen, forwarding to target (the node's real
// Raft address). It returns the proxy's address, which the node must advertise.
func (n *Network) Listen(dst, listen, target string) (string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", fmt.Errorf("proxy for %s: %w", dst, err)
	}
	p := &Proxy{net: n, dst: dst, target: target, ln: ln, done: make(chan struct{})}
	n.mu.Lock()
	if old := n.mu.proxies[dst]; old != nil {
		old.ln.Close()
	}
	n.mu.proxies[dst] = p
	n.mu.Unlock()
	go p.serve()
	return ln.Addr().String(), nil
}

// SetLink sets the fault of the directed link from → to (LinkFault{} heals it). A
// fault on a link that cannot exist (no proxy in front of to, or from == to) is an
// error: it would do nothing.
func (n *Network) SetLink(from, to string, f LinkFault) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !f.IsZero() && (from == to || n.mu.proxies[to] == nil) {
		return fmt.Errorf("chaos: link %s -> %s: no such link, the fault would not apply", from, to)
	}
	if f.IsZero() {
		delete(n.mu.links, link{from, to})
	} else {
		n.mu.links[link{from, to}] = f
	}
	n.resetHealedLocked()
	return nil
}

// SetAll sets f on every directed link between distinct nodes.
func (n *Network) SetAll(nodes []string, f LinkFault) error {
	var errs []error
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				errs = append(errs, n.SetLink(a, b, f))
			}
		}
	}
	return errors.Join(errs...)
}

// Partition blackholes every link between nodes of different sides, both ways.
func (n *Network) Partition(sides ...[]string) error {
	var errs []error
	for i, sa := range sides {
		for j, sb := range sides {
			if i == j {
				continue
			}
			for _, a := range sa {
				for _, b := range sb {
					errs = append(errs, n.SetLink(a, b, LinkFault{Blackhole: true}))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Heal clears every fault and resets the connections blackholes broke.
func (n *Network) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mu.links = map[link]LinkFault{}
	n.resetHealedLocked()
	return nil
}

// Unidentified lists the proxied connections that came from an unknown source (faults
// on links cannot apply to them), each as "remote -> local" (source, then the proxy's
// address it reached).
func (n *Network) Unidentified() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.mu.unknown...)
}

// Close stops every proxy and closes every proxied connection.
func (n *Network) Close() {
	n.mu.Lock()
	proxies := n.mu.proxies
	conns := n.mu.conns
	n.mu.proxies = map[string]*Proxy{}
	n.mu.conns = map[*proxyConn]struct{}{}
	n.mu.Unlock()
	for _, p := range proxies {
		p.ln.Close()
		<-p.done
	}
	for c := range conns {
		c.close()
	}
}

// CloseNode stops the proxy of one node (it left the cluster) and its connections.
func (n *Network) CloseNode(dst string) {
	n.mu.Lock()
	p := n.mu.proxies[dst]
	delete(n.mu.proxies, dst)
	var conns []*proxyConn
	for c := range n.mu.conns {
		if c.dst == dst || c.src == dst {
			conns = append(conns, c)
		}
	}
	n.mu.Unlock()
	if p != nil {
		p.ln.Close()
		<-p.done
	}
	for _, c := range conns {
		c.close()
	}
}

func (n *Network) fault(src, dst string) LinkFault {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.links[link{src, dst}]
}

// resetHealedLocked closes connections that lost bytes to a blackhole that is gone.
func (n *Network) resetHealedLocked() {
	for c := range n.mu.conns {
		if c.poisoned() && !n.mu.links[link{c.src, c.dst}].Blackhole {
			go c.close()
		}
	}
}

func (p *Proxy) serve() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	src := ""
	if p.net.identify != nil {
		src = p.net.identify(client.RemoteAddr(), client.LocalAddr())
	}
	if src == SourceGone {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &proxyConn{net: p.net, src: src, dst: p.dst, a: client, b: server, done: make(chan struct{})}
	p.net.mu.Lock()
	if src == "" {
		p.net.mu.unknown = append(p.net.mu.unknown, client.RemoteAddr().String()+" -> "+client.LocalAddr().String())
	}
	p.net.mu.conns[c] = struct{}{}
	p.net.mu.Unlock()
	go c.pipe(client, server)
	go c.pipe(server, client)
}

// proxyConn is one proxied connection from node src to node dst.
type proxyConn struct {
	net      *Network
	src, dst string
	a, b     net.Conn
	done     chan struct{} // closed by close

	mu struct {
		sync.Mutex
		closed   bool
		poisoned bool // a blackhole discarded bytes: the stream is broken
	}
}

func (c *proxyConn) poisoned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.poisoned
}

func (c *proxyConn) close() {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.closed = true
	c.mu.Unlock()
	close(c.done)
	c.a.Close()
	c.b.Close()
	c.net.mu.Lock()
	delete(c.net.mu.conns, c)
	c.net.mu.Unlock()
}

type chunk struct {
	data []byte
	at   time.Time
}

// pipe forwards from → to through the link's current fault, keeping byte order. The
// writer half drains what the reader queued, so a clean EOF loses nothing.
func (c *proxyConn) pipe(from, to net.Conn) {
	queue := make(chan chunk, 256)
	go func() {
		defer c.close()
		for ch := range queue {
			if d := time.Until(ch.at); d > 0 {
				time.Sleep(d)
			}
			if _, err := to.Write(ch.data); err != nil {
				return
			}
		}
	}()
	defer close(queue)
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		nr, err := from.Read(buf)
		if nr > 0 {
			f := c.net.fault(c.src, c.dst)
			switch {
			case f.Blackhole:
				c.mu.Lock()
				c.mu.poisoned = true
				c.mu.Unlock()
				continue
			case f.DropRate > 0 && rand.Float64() < f.DropRate:
				c.close()
				return
			}
			at := time.Now().Add(f.Delay)
			if f.Jitter > 0 {
				at = at.Add(rand.N(f.Jitter))
			}
			if at.Before(last) {
				at = last
			}
			last = at
			select {
			case queue <- chunk{data: append([]byte(nil), buf[:nr]...), at: at}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.close()
			}
			return
		}
	}
}
