//go:build patroni

package patroni

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dcs is a 3-node store Patroni uses as its etcd3 DCS: etcd 3.4 or keel.
type dcs struct {
	kind       string
	dir        string
	clientPort []int // the etcd v3 port (gRPC and the JSON gateway)
	procs      []*proc
	argv       func(i int, first bool) []string
	// isLeader reports whether node i leads.
	isLeader func(i int) bool
}

func (d *dcs) hosts() string {
	var h []string
	for _, p := range d.clientPort {
		h = append(h, fmt.Sprintf("127.0.0.1:%d", p))
	}
	return strings.Join(h, ",")
}

// leader is the index of the node that leads, waiting for one.
func (d *dcs) leader(t *testing.T) int {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i := range d.procs {
			if d.isLeader(i) {
				return i
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %s leader", d.kind)
	return -1
}

func (d *dcs) restart(t *testing.T, i int) {
	d.procs[i].kill()
	d.procs[i] = startProc(t, d.dir, fmt.Sprintf("%s%d", d.kind, i), d.argv(i, false)...)
	d.leader(t)
}

func (d *dcs) start(t *testing.T) {
	for i := range d.clientPort {
		d.procs = append(d.procs, startProc(t, d.dir, fmt.Sprintf("%s%d", d.kind, i), d.argv(i, true)...))
		if i == 0 && d.kind == "keel" {
			d.leader(t) // keel's first node bootstraps; the others join it
		}
	}
	d.leader(t)
}

func startEtcd(t *testing.T, bin string) *dcs {
	d := &dcs{kind: "etcd", dir: t.TempDir()}
	peer := make([]int, 3)
	var initial []string
	for i := range 3 {
		d.clientPort = append(d.clientPort, port(t))
		peer[i] = port(t)
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, peer[i]))
	}
	d.argv = func(i int, first bool) []string {
		state := "new"
		if !first {
			state = "existing"
		}
		client := fmt.Sprintf("http://127.0.0.1:%d", d.clientPort[i])
		return []string{bin, "--name", fmt.Sprintf("e%d", i), "--data-dir", filepath.Join(d.dir, fmt.Sprintf("e%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer[i]),
			"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peer[i]),
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", state,
			"--initial-cluster-token", "keel-patroni-judge"}
	}
	d.isLeader = func(i int) bool {
		var st struct {
			Header struct {
				MemberID string `json:"member_id"`
			} `json:"header"`
			Leader string `json:"leader"`
		}
		resp, err := httpClient.Post(fmt.Sprintf("http://127.0.0.1:%d/v3/maintenance/status", d.clientPort[i]), "application/json", strings.NewReader("{}"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st) == nil && st.Leader != "" && st.Leader == st.Header.MemberID
	}
	d.start(t)
	return d
}

func startKeel(t *testing.T, bin string) *dcs {
	d := &dcs{kind: "keel", dir: t.TempDir()}
	raft, httpPort := make([]int, 3), make([]int, 3)
	for i := range 3 {
		d.clientPort = append(d.clientPort, port(t))
		raft[i], httpPort[i] = port(t), port(t)
	}
	d.argv = func(i int, first bool) []string {
		argv := []string{bin, "agent", "-node-id", fmt.Sprintf("k%d", i), "-data-dir", filepath.Join(d.dir, fmt.Sprintf("k%d", i)),
			"-http-addr", fmt.Sprintf("127.0.0.1:%d", httpPort[i]), "-raft-addr", fmt.Sprintf("127.0.0.1:%d", raft[i]),
			"-etcd-addr", fmt.Sprintf("127.0.0.1:%d", d.clientPort[i]), "-insecure", "-acl-default", "allow"}
		switch {
		case first && i == 0:
			argv = append(argv, "-bootstrap")
		case first:
			argv = append(argv, "-join", fmt.Sprintf("127.0.0.1:%d", raft[0]))
		}
		return argv
	}
	d.isLeader = func(i int) bool {
		var st struct {
			State string `json:"state"`
		}
		resp, err := httpClient.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/status", httpPort[i]))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&st) == nil && st.State == "Leader"
	}
	d.start(t)
	t.Cleanup(func() {
		if t.Failed() {
			for i := range d.procs {
				b, _ := os.ReadFile(d.procs[i].log)
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("keel k%d log (tail):\n%s", i, b)
			}
		}
	})
	return d
}
