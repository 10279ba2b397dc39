package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// keelCluster runs bin/keel: node k0 bootstraps, k1 and k2 join through it. Default
// flags only (fsync per raft log batch, default snapshot settings).
type keelCluster struct {
	bin, dir, pidFile string
	httpPorts         []int
	raftPorts         []int
	pprofPorts        []int // set when bin is keelprof (profiling runs)
	etcdPorts         []int // keel's etcd v3 door (-etcd-addr), protocol "etcd" only
	procs             []*proc
	drv               *keelDriver
	pprof             bool
	protocol          string // "stream", "http", "h2c" or "etcd": how the workloads travel
	// etcdDrv, protocol "etcd": etcd's clientv3 driver (the one the etcd runs use, same
	// connections per member) pointed at keel's etcd door, so the same client and
	// workload run against both. drv still does readiness and leader polling over HTTP.
	etcdDrv *etcdDriver
	// tls runs every port with TLS (certificates from bin's `keel tls` helpers, HTTP
	// clients verified); otherwise the nodes run -insecure.
	tls       bool
	etcdConns int
	// nodes is how many nodes Start runs (0: 3); flags go to every node.
	nodes int
	flags []string
}

// newKeelCluster: etcdConns is the gRPC connections per member of protocol "etcd".
func newKeelCluster(bin, dir, pidFile string, pprof bool, protocol string, useTLS bool, etcdConns int) *keelCluster {
	return &keelCluster{bin: bin, dir: dir, pidFile: pidFile, pprof: pprof, protocol: protocol, tls: useTLS, etcdConns: etcdConns}
}

// certDir holds the CA and the certificates of a TLS run.
func (c *keelCluster) certDir() string { return filepath.Join(c.dir, "tls") }

// security is a node's TLS flags, or -insecure.
func (c *keelCluster) security(name string) []string {
	if !c.tls {
		return []string{"-insecure"}
	}
	d := c.certDir()
	return []string{"-ca-file", filepath.Join(d, "keel-ca.pem"), "-cert-file", filepath.Join(d, name+".pem"),
		"-key-file", filepath.Join(d, name+"-key.pem"), "-verify-clients"}
}

// makeCerts creates the CA, k0..k3's node certificates and a client certificate
// with bin's helpers, and returns the client's TLS config.
func (c *keelCluster) makeCerts() (*tls.Config, error) {
	return makeCerts(c.bin, c.certDir(), "k")
}

func (c *keelCluster) PprofURL(i int) string {
	if !c.pprof {
		return ""
	}
	return fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", c.pprofPorts[i])
}

func (c *keelCluster) Name() string { return "keel" }

func (c *keelCluster) raftAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.raftPorts[i]) }
func (c *keelCluster) httpAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.httpPorts[i]) }
func (c *keelCluster) etcdAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.etcdPorts[i]) }

func (c *keelCluster) startNode(i int, extra ...string) error {
	name := fmt.Sprintf("k%d", i)
	args := append([]string{"agent",
		"-node-id", name,
		"-data-dir", filepath.Join(c.dir, name),
		"-http-addr", c.httpAddr(i),
		"-raft-addr", c.raftAddr(i),
		// The load generator sends no token: serve it as a cluster without ACLs
		// (the default outside -dev is deny until `keel acl bootstrap`).
		"-acl-default", "allow",
		// The lease grant benchmark grants tens of thousands of 60 s leases.
		"-max-leases", "0",
	}, extra...)
	args = append(args, c.flags...)
	args = append(args, c.security(name)...)
	if c.pprof {
		args = append(args, "-pprof-addr", fmt.Sprintf("127.0.0.1:%d", c.pprofPorts[i]))
	}
	if c.etcdDrv != nil {
		args = append(args, "-etcd-addr", c.etcdAddr(i))
	}
	p, err := startProc(name, c.bin, args, filepath.Join(c.dir, name+".log"), c.pidFile)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

func (c *keelCluster) Start(ctx context.Context) error {
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return err
	}
	ports, err := freePorts(16)
	if err != nil {
		return err
	}
	c.httpPorts, c.raftPorts, c.pprofPorts, c.etcdPorts = ports[:4], ports[4:8], ports[8:12], ports[12:]
	c.drv = newKeelDriver(c.protocol == "h2c")
	scheme := "http://"
	if c.tls {
		cfg, err := c.makeCerts()
		if err != nil {
			return err
		}
		c.drv.tr.TLSClientConfig, c.drv.tlsCfg, scheme = cfg, cfg, "https://"
	}
	for i := 0; i < 4; i++ {
		c.drv.bases = append(c.drv.bases, scheme+c.httpAddr(i))
	}
	if c.protocol == "etcd" {
		c.etcdDrv = newEtcdDriver(c.etcdConns)
		c.etcdDrv.tls = c.drv.tlsCfg
		for i := 0; i < 4; i++ {
			c.etcdDrv.endpoints = append(c.etcdDrv.endpoints, scheme+c.etcdAddr(i))
		}
	}
	if c.protocol == "stream" {
		if err := c.drv.useStream(); err != nil {
			return err
		}
	}
	if err := c.startNode(0, "-bootstrap"); err != nil {
		return err
	}
	if err := c.waitReady(ctx, 0, 1, 60*time.Second); err != nil {
		return err
	}
	nodes := c.nodes
	if nodes == 0 {
		nodes = 3
	}
	for i := 1; i < nodes; i++ {
		if err := c.startNode(i, "-join", c.raftAddr(0)); err != nil {
			return err
		}
	}
	for i := 0; i < nodes; i++ {
		if err := c.waitReady(ctx, i, nodes, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls /readyz and /v1/status until node i is ready, knows a leader and
// sees at least members voters.
func (c *keelCluster) waitReady(ctx context.Context, i, members int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		if !c.procs[i].alive() {
			return fmt.Errorf("keel k%d exited: %v (see %s)", i, c.procs[i].err, c.procs[i].log.Name())
		}
		st, err := c.drv.status(ctx, i)
		if err == nil {
			var code int
			code, err = c.drv.getCode(ctx, i, api.PathReady)
			if err == nil && code == http.StatusOK && st.LeaderID != "" && len(st.Members) >= members {
				return nil
			}
			if err == nil {
				err = fmt.Errorf("readyz %d, leader %q, %d members", code, st.LeaderID, len(st.Members))
			}
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("keel k%d not ready after %v: %v", i, limit, last)
}

func (c *keelCluster) Leader(ctx context.Context) (int, error) {
	for i := range c.procs {
		st, err := c.drv.status(ctx, i)
		if err == nil && st.State == "Leader" {
			return i, nil
		}
	}
	return 0, fmt.Errorf("keel: no leader")
}

func (c *keelCluster) PIDs() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.pid())
	}
	return out
}

// Join starts k3 with -join listing every member's raft address.
func (c *keelCluster) Join(ctx context.Context) (int, error) {
	join := strings.Join([]string{c.raftAddr(0), c.raftAddr(1), c.raftAddr(2)}, ",")
	if err := c.startNode(3, "-join", join); err != nil {
		return 0, err
	}
	return 3, nil
}

func (c *keelCluster) LogPath(i int) string { return c.procs[i].log.Name() }

func (c *keelCluster) Driver() Driver {
	if c.etcdDrv != nil {
		return c.etcdDrv
	}
	return c.drv
}

func (c *keelCluster) Stop() {
	for _, p := range c.procs {
		p.stop(15 * time.Second)
	}
	if c.drv != nil {
		c.drv.Close()
	}
	if c.etcdDrv != nil {
		c.etcdDrv.Close()
	}
}

// keelDriver speaks keel's HTTP/1.1 JSON API with keep-alive connections (one
// connection per concurrent worker, as any HTTP client pool does), and, for single-key
// reads and writes with -keel-protocol stream (the default), the stream protocol
// through keel's Go client: one connection per member carries every worker's
// requests, as etcd's gRPC connections do.
type keelDriver struct {
	bases   []string
	hc      *http.Client
	tr      *http.Transport
	streams []*client.Client // per member, nil without the stream protocol
	tlsCfg  *tls.Config      // nil: plain text

	watchMu  sync.Mutex
	watchers map[int]*client.Client // per member, for the watch workload

	dials atomic.Int64 // HTTP connections dialled: reuse check (one per worker expected)
}

// Dials is how many HTTP connections the driver has dialled so far.
func (d *keelDriver) Dials() int64 { return d.dials.Load() }

// useStream connects the per-member stream clients (they dial on first use).
func (d *keelDriver) useStream() error {
	for _, b := range d.bases {
		c, err := client.New([]string{b}, client.Options{Stream: true, MaxRetries: -1, TLS: d.tlsCfg})
		if err != nil {
			return err
		}
		d.streams = append(d.streams, c)
	}
	return nil
}

// streamErr maps the client's errors onto the driver's (404 → errNotFound).
func streamErr(err error) error {
	if client.IsNotFound(err) {
		return errNotFound
	}
	return err
}

// newKeelDriver: h2c sends every HTTP request as HTTP/2 over cleartext TCP (prior
// knowledge), many requests multiplexed on one connection per member, as a gRPC
// client does; otherwise HTTP/1.1 with one keep-alive connection per worker.
func newKeelDriver(h2c bool) *keelDriver {
	d := &keelDriver{}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	d.hc, d.tr = &http.Client{Transport: tr, Timeout: 60 * time.Second}, tr
	return d
}

func (d *keelDriver) keyURL(node int, key string) string {
	return d.bases[node] + api.PathKV + url.PathEscape(key)
}

// do sends req and decodes a 200 JSON body into out (nil: discard). A non-200 answer
// becomes an *api.Error (404 → errNotFound).
func (d *keelDriver) do(req *http.Request, out any) error {
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body []byte
	if n := resp.ContentLength; n > 0 && n < 1<<30 {
		body = make([]byte, n) // one buffer for a large list page instead of growing copies
		_, err = io.ReadFull(resp.Body, body)
	} else {
		body, err = io.ReadAll(resp.Body)
	}
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusNotFound {
			return errNotFound
		}
		var e api.Error
		if json.Unmarshal(body, &e) == nil && e.Code != 0 {
			return &e
		}
		return fmt.Errorf("%s %s: HTTP %d: %.200s", req.Method, req.URL.Path, resp.StatusCode, body)
	}
	if out == nil {
		return nil
	}
	if lr, ok := out.(*api.ListResponse); ok && resp.Header.Get("Content-Type") == api.ContentTypeBinaryList {
		page, err := api.DecodeBinaryList(body)
		if err != nil {
			return err
		}
		*lr = *page
		return nil
	}
	return json.Unmarshal(body, out)
}

func (d *keelDriver) Put(ctx context.Context, node, worker int, key string, val []byte) error {
	if d.streams != nil {
		_, err := d.streams[node].Put(ctx, key, val)
		return streamErr(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, d.keyURL(node, key), bytes.NewReader(val))
	if err != nil {
		return err
	}
	var out api.PutResponse
	return d.do(req, &out)
}

func (d *keelDriver) Get(ctx context.Context, node, worker int, key string, serializable bool) error {
	if d.streams != nil {
		var opts []client.GetOption
		if serializable {
			opts = append(opts, client.WithSerializable())
		}
		_, err := d.streams[node].Get(ctx, key, opts...)
		return streamErr(err)
	}
	u := d.keyURL(node, key)
	if serializable {
		u += "?" + api.ParamConsistency + "=" + api.ConsistencySerializable
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	var out api.GetResponse
	return d.do(req, &out)
}

func (d *keelDriver) PutBatch(ctx context.Context, node, worker int, keys []string, val []byte) (int64, error) {
	txn := api.TxnRequest{Success: make([]api.Op, len(keys))}
	for i, k := range keys {
		txn.Success[i] = api.Op{Type: api.OpPut, Key: k, Value: val}
	}
	body, err := json.Marshal(&txn)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.bases[node]+api.PathTxn, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	var out api.TxnResponse
	if err := d.do(req, &out); err != nil {
		return 0, err
	}
	if !out.Succeeded {
		return 0, fmt.Errorf("txn did not succeed")
	}
	return out.Revision, nil
}

// Scan lists the prefix page by page with ?list=true&limit=N&continue=T; every page
// after the first is pinned to the first page's revision by the continue token. Pages
// come in keel's binary list encoding (as the Go client asks for them), the analogue of
// etcd's protobuf: every item, key, value and revision is still decoded.
func (d *keelDriver) Scan(ctx context.Context, node int, prefix string, limit int) (int, int, error) {
	keys, pages := 0, 0
	token := ""
	for {
		q := url.Values{}
		q.Set(api.ParamList, "true")
		q.Set(api.ParamLimit, strconv.Itoa(limit))
		if token != "" {
			q.Set(api.ParamContinue, token)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.keyURL(node, prefix)+"?"+q.Encode(), nil)
		if err != nil {
			return keys, pages, err
		}
		req.Header.Set("Accept", api.ContentTypeBinaryList)
		var out api.ListResponse
		if err := d.do(req, &out); err != nil {
			return keys, pages, err
		}
		keys += len(out.Items)
		pages++
		if out.Continue == "" {
			return keys, pages, nil
		}
		token = out.Continue
	}
}

func (d *keelDriver) Compact(ctx context.Context, node int, rev int64) error {
	body, _ := json.Marshal(api.CompactRequest{Revision: rev})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.bases[node]+api.PathCompact, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	var out api.CompactResponse
	return d.do(req, &out)
}

// Revision is the node's applied revision from /v1/status; on the leader it covers
// every acknowledged write.
func (d *keelDriver) Revision(ctx context.Context, node int) (int64, error) {
	st, err := d.status(ctx, node)
	if err != nil {
		return 0, err
	}
	return st.Revision, nil
}

func (d *keelDriver) status(ctx context.Context, node int) (*api.StatusResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, d.bases[node]+api.PathStatus, nil)
	if err != nil {
		return nil, err
	}
	var st api.StatusResponse
	if err := d.do(req, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (d *keelDriver) getCode(ctx context.Context, node int, path string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, d.bases[node]+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func (d *keelDriver) Close() {
	d.tr.CloseIdleConnections()
	for _, c := range d.streams {
		c.Close()
	}
	d.watchMu.Lock()
	for _, c := range d.watchers {
		c.Close()
	}
	d.watchMu.Unlock()
}
