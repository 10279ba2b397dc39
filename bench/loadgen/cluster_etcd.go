package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdCluster runs Debian's etcd-server binary: 3 members on loopback, default fsync
// behaviour (WAL fsync per raft batch), default snapshot count. The only non-default is
// --quota-backend-bytes, raised so the 1M-key and compaction loads never hit NOSPACE.
type etcdCluster struct {
	bin, dir, pidFile string
	clientPorts       []int
	peerPorts         []int
	procs             []*proc
	drv               *etcdDriver
	connsPerNode      int
	pprof             bool // --enable-pprof: /debug/pprof on the client URL
	// keelBin, when set, runs etcd with TLS on client and peer ports and client
	// certificates required, certificates made by keel's helpers (as keel -tls runs).
	keelBin string
	tlsCfg  *tls.Config
	gateway bool // single-key Put and Get through the JSON gateway
}

func newEtcdCluster(bin, dir, pidFile string, connsPerNode int, pprof bool, tlsWith string) *etcdCluster {
	return &etcdCluster{bin: bin, dir: dir, pidFile: pidFile, connsPerNode: connsPerNode, pprof: pprof, keelBin: tlsWith}
}

func (c *etcdCluster) scheme() string {
	if c.keelBin != "" {
		return "https"
	}
	return "http"
}

// tlsArgs are member i's TLS flags (none without TLS).
func (c *etcdCluster) tlsArgs(i int) []string {
	if c.keelBin == "" {
		return nil
	}
	d := filepath.Join(c.dir, "tls")
	ca, cert, key := filepath.Join(d, "keel-ca.pem"), filepath.Join(d, fmt.Sprintf("e%d.pem", i)), filepath.Join(d, fmt.Sprintf("e%d-key.pem", i))
	return []string{"--cert-file", cert, "--key-file", key, "--trusted-ca-file", ca, "--client-cert-auth",
		"--peer-cert-file", cert, "--peer-key-file", key, "--peer-trusted-ca-file", ca, "--peer-client-cert-auth"}
}

func (c *etcdCluster) PprofURL(i int) string {
	if !c.pprof {
		return ""
	}
	return c.clientURL(i) + "/debug/pprof"
}

func (c *etcdCluster) Name() string { return "etcd" }

func (c *etcdCluster) clientURL(i int) string {
	return fmt.Sprintf("%s://127.0.0.1:%d", c.scheme(), c.clientPorts[i])
}

func (c *etcdCluster) peerURL(i int) string {
	return fmt.Sprintf("%s://127.0.0.1:%d", c.scheme(), c.peerPorts[i])
}

func (c *etcdCluster) initialCluster(n int) string {
	var parts []string
	for i := 0; i < n; i++ {
		parts = append(parts, fmt.Sprintf("e%d=%s", i, c.peerURL(i)))
	}
	return strings.Join(parts, ",")
}

func (c *etcdCluster) allocPorts(n int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		c.clientPorts = append(c.clientPorts, ports[2*i])
		c.peerPorts = append(c.peerPorts, ports[2*i+1])
	}
	return nil
}

func (c *etcdCluster) startNode(i int, initialCluster, state string) error {
	name := fmt.Sprintf("e%d", i)
	args := []string{
		"--name", name,
		"--data-dir", filepath.Join(c.dir, name),
		"--listen-client-urls", c.clientURL(i),
		"--advertise-client-urls", c.clientURL(i),
		"--listen-peer-urls", c.peerURL(i),
		"--initial-advertise-peer-urls", c.peerURL(i),
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", state,
		"--initial-cluster-token", "keel-bench",
		"--quota-backend-bytes", fmt.Sprint(int64(8) << 30),
		"--logger", "zap", "--log-outputs", "stderr",
	}
	if c.pprof {
		args = append(args, "--enable-pprof")
	}
	args = append(args, c.tlsArgs(i)...)
	p, err := startProc(name, c.bin, args, filepath.Join(c.dir, name+".log"), c.pidFile)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

func (c *etcdCluster) Start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	if err := c.allocPorts(4); err != nil {
		return err
	}
	if c.keelBin != "" {
		cfg, err := makeCerts(c.keelBin, filepath.Join(c.dir, "tls"), "e")
		if err != nil {
			return err
		}
		c.tlsCfg = cfg
	}
	for i := 0; i < 3; i++ {
		if err := c.startNode(i, c.initialCluster(3), "new"); err != nil {
			return err
		}
	}
	c.drv = newEtcdDriver(c.connsPerNode)
	c.drv.tls = c.tlsCfg
	if c.gateway {
		c.drv.useGateway()
	}
	for i := 0; i < 4; i++ {
		c.drv.endpoints = append(c.drv.endpoints, c.clientURL(i))
	}
	for i := 0; i < 3; i++ {
		if err := c.waitServing(ctx, i, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitServing polls the member until it reports a leader and answers a linearizable get.
func (c *etcdCluster) waitServing(ctx context.Context, i int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if !c.procs[i].alive() {
			return fmt.Errorf("etcd e%d exited: %v (see %s)", i, c.procs[i].err, c.procs[i].log.Name())
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.drv.conn(i, 0).Status(cctx, c.clientURL(i))
		if err == nil && st.Leader != 0 {
			_, err = c.drv.conn(i, 0).Get(cctx, "bench-probe")
			if err == nil {
				cancel()
				return nil
			}
		}
		cancel()
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("etcd e%d not serving after %v: %v", i, limit, last)
}

func (c *etcdCluster) Leader(ctx context.Context) (int, error) {
	for i := range c.procs {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.drv.conn(i, 0).Status(cctx, c.clientURL(i))
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i, nil
		}
	}
	return 0, fmt.Errorf("etcd: no leader")
}

func (c *etcdCluster) PIDs() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.pid())
	}
	return out
}

// Join adds member e3 with the MemberAdd API and starts it with state "existing", as the
// etcd runtime-reconfiguration guide says.
func (c *etcdCluster) Join(ctx context.Context) (int, error) {
	lead, err := c.Leader(ctx)
	if err != nil {
		return 0, err
	}
	if _, err := c.drv.conn(lead, 0).MemberAdd(ctx, []string{c.peerURL(3)}); err != nil {
		return 0, fmt.Errorf("etcd member add: %w", err)
	}
	if err := c.startNode(3, c.initialCluster(4), "existing"); err != nil {
		return 0, err
	}
	return 3, nil
}

func (c *etcdCluster) LogPath(i int) string { return c.procs[i].log.Name() }

func (c *etcdCluster) Driver() Driver { return c.drv }

func (c *etcdCluster) Stop() {
	if c.drv != nil {
		c.drv.Close()
	}
	for _, p := range c.procs {
		p.stop(10 * time.Second)
	}
}

// etcdDriver holds connsPerNode clientv3 clients per member (each one gRPC
// connection), created on first use.
type etcdDriver struct {
	endpoints    []string
	connsPerNode int
	mu           sync.RWMutex
	pool         map[int][]*clientv3.Client
	watchers     map[int]*clientv3.Client // per member, for the watch workload
	tls          *tls.Config              // nil: plain text
	gw           *http.Client             // non-nil: Put and Get through the JSON gateway
}

// useGateway sends single-key Put and Get through etcd's JSON gateway (grpc-gateway
// on the client port: POST /v3/kv/put and /v3/kv/range, keys and values base64) over
// HTTP/1.1 keep-alive connections, one per worker, as keel's HTTP driver does. What a
// curl, Python or JavaScript user of etcd gets without a gRPC stack.
func (d *etcdDriver) useGateway() {
	d.gw = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     d.tls, // nil: plain text
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// gwPost posts body (JSON) to the gateway path on node and decodes the answer into out.
func (d *etcdDriver) gwPost(ctx context.Context, node int, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.endpoints[node]+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.gw.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd gateway %s: HTTP %d: %.200s", path, resp.StatusCode, rb)
	}
	return json.Unmarshal(rb, out)
}

func newEtcdDriver(connsPerNode int) *etcdDriver {
	return &etcdDriver{connsPerNode: connsPerNode, pool: map[int][]*clientv3.Client{}}
}

func (d *etcdDriver) conn(node, worker int) *clientv3.Client {
	d.mu.RLock()
	conns := d.pool[node]
	d.mu.RUnlock()
	if conns != nil {
		return conns[worker%len(conns)]
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	conns = d.pool[node]
	if conns == nil {
		for j := 0; j < d.connsPerNode; j++ {
			cli, err := clientv3.New(clientv3.Config{
				Endpoints:   []string{d.endpoints[node]},
				DialTimeout: 5 * time.Second,
				Logger:      zap.NewNop(),
				TLS:         d.tls,
			})
			if err != nil {
				panic(fmt.Sprintf("clientv3.New: %v", err)) // only on a bad config
			}
			conns = append(conns, cli)
		}
		d.pool[node] = conns
	}
	return conns[worker%len(conns)]
}

func (d *etcdDriver) Put(ctx context.Context, node, worker int, key string, val []byte) error {
	if d.gw != nil {
		var out struct {
			Header struct {
				Revision string `json:"revision"`
			} `json:"header"`
		}
		if err := d.gwPost(ctx, node, "/v3/kv/put", map[string][]byte{"key": []byte(key), "value": val}, &out); err != nil {
			return err
		}
		if out.Header.Revision == "" {
			return errors.New("etcd gateway put: no revision in the answer")
		}
		return nil
	}
	_, err := d.conn(node, worker).Put(ctx, key, string(val))
	return err
}

func (d *etcdDriver) Get(ctx context.Context, node, worker int, key string, serializable bool) error {
	if d.gw != nil {
		var out struct {
			Kvs []struct {
				Value []byte `json:"value"`
			} `json:"kvs"`
		}
		body := map[string]any{"key": []byte(key), "serializable": serializable}
		if err := d.gwPost(ctx, node, "/v3/kv/range", body, &out); err != nil {
			return err
		}
		if len(out.Kvs) == 0 {
			return errNotFound
		}
		return nil
	}
	var opts []clientv3.OpOption
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := d.conn(node, worker).Get(ctx, key, opts...)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return errNotFound
	}
	return nil
}

func (d *etcdDriver) PutBatch(ctx context.Context, node, worker int, keys []string, val []byte) (int64, error) {
	ops := make([]clientv3.Op, len(keys))
	v := string(val)
	for i, k := range keys {
		ops[i] = clientv3.OpPut(k, v)
	}
	resp, err := d.conn(node, worker).Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// Scan is what Kubernetes' etcd3 store does for a paged list: a ranged Get with a
// limit, then the next page from the last key + "\x00" at the first page's revision.
// etcd computes the range's total count on every page (no option to skip it in 3.4).
func (d *etcdDriver) Scan(ctx context.Context, node int, prefix string, limit int) (int, int, error) {
	cli := d.conn(node, 0)
	end := clientv3.GetPrefixRangeEnd(prefix)
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit))}
	resp, err := cli.Get(ctx, prefix, opts...)
	if err != nil {
		return 0, 0, err
	}
	rev := resp.Header.Revision
	keys, pages := 0, 0
	for {
		keys += len(resp.Kvs)
		pages++
		if !resp.More || len(resp.Kvs) == 0 {
			return keys, pages, nil
		}
		next := string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		resp, err = cli.Get(ctx, next, append(opts, clientv3.WithRev(rev))...)
		if err != nil {
			return keys, pages, err
		}
	}
}

func (d *etcdDriver) Compact(ctx context.Context, node int, rev int64) error {
	_, err := d.conn(node, 0).Compact(ctx, rev, clientv3.WithCompactPhysical())
	return err
}

func (d *etcdDriver) Revision(ctx context.Context, node int) (int64, error) {
	resp, err := d.conn(node, 0).Get(ctx, "bench-probe")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (d *etcdDriver) Close() {
	for _, conns := range d.pool {
		for _, c := range conns {
			c.Close()
		}
	}
	d.pool = map[int][]*clientv3.Client{}
	for _, c := range d.watchers {
		c.Close()
	}
	d.watchers = nil
}
