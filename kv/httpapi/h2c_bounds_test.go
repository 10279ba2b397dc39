package httpapi

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// h2cSettings connects to addr with HTTP/2's preface (h2c, prior knowledge) and
// returns the server's first SETTINGS.
func h2cSettings(t *testing.T, addr string) map[http2.SettingID]uint32 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("read the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			out := map[http2.SettingID]uint32{}
			sf.ForeachSetting(func(s http2.Setting) error { out[s.ID] = s.Val; return nil })
			return out
		}
	}
	t.Fatal("no SETTINGS from the server")
	return nil
}

// The HTTP port's h2c states the etcd door's HTTP/2 bounds: MaxStreamInFlight
// streams on one connection (1,024, as the etcd door's calls), kv.MaxHeaderListBytes
// of headers (16 KiB, plus x/net's allowance of 32 bytes for each of 10 fields), and
// 16 KiB frames (kill: x/net's defaults, the door before — 250 streams, a 1 MiB
// header list and 1 MiB frames). A request whose headers are over the bound is
// refused.
func TestH2CBoundsAreTheEtcdDoors(t *testing.T) {
	addr := serveTCP(t)
	cfg := kv.DefaultConfig()
	got := h2cSettings(t, addr)
	for id, want := range map[http2.SettingID]uint32{
		http2.SettingMaxConcurrentStreams: uint32(cfg.MaxStreamInFlight),
		http2.SettingMaxHeaderListSize:    kv.MaxHeaderListBytes + 10*32,
		http2.SettingMaxFrameSize:         kv.MaxHTTP2FrameBytes,
	} {
		if got[id] != want {
			t.Errorf("h2c %v = %d, want %d", id, got[id], want)
		}
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+api.PathHealth, nil)
	req.Header.Set("X-Pad", strings.Repeat("p", 2*kv.MaxHeaderListBytes))
	if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("h2c request with %d KiB of headers: %s, want refused", 2*kv.MaxHeaderListBytes>>10, resp.Status)
		}
	}
}

// Every h2c stream counts against its client's connections-and-streams budget
// (kv.Server.OpenStream) as an HTTP/1.1 connection does, a watch above all: with
// MaxConnsPerClient 4, one h2c connection (1) and three watches on it (3) hold the
// client's budget, and a fourth watch is refused 429 TooManyConnections; once one
// ends, another is served (kill: h2c streams uncounted, the door before — one
// connection carried 250 watches for the price of one slot).
func TestH2CStreamsCountAsConnections(t *testing.T) {
	addr := serveTCP(t, func(c *kv.Config) { c.MaxConnsPerClient = 4 })
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	h2 := &http.Client{Transport: tr}
	put, _ := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/kv/k", strings.NewReader("v"))
	if resp, err := h2.Do(put); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("h2c put: %v %v", resp, err)
	}
	watch := func() *http.Response {
		t.Helper()
		resp, err := h2.Get("http://" + addr + "/v1/watch/k?start_revision=1")
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for i := range 3 {
		if r := watch(); r.StatusCode != http.StatusOK {
			r.Body.Close()
			t.Fatalf("watch %d: %s, want 200", i+1, r.Status)
		} else {
			held = append(held, r)
		}
	}
	r := watch()
	var b []byte
	if r.StatusCode != http.StatusOK { // a served watch's body never ends
		b, _ = io.ReadAll(io.LimitReader(r.Body, 4096))
	}
	r.Body.Close()
	if r.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), api.ReasonTooManyConnections) {
		t.Fatalf("fourth watch on a client's budget of 4: %s %s, want 429 %s", r.Status, b, api.ReasonTooManyConnections)
	}
	held[0].Body.Close()
	held = held[1:]
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r := watch()
		if r.StatusCode == http.StatusOK {
			held = append(held, r)
			break
		}
		r.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a watch once another ended: %s, want 200", r.Status)
		}
	}
}
