package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// TestWatchCapPerToken: a token at its watch cap (2 here, of 3 on the node) is refused a third watch,
// on HTTP and on the stream, while another token still gets one; a watch given back
// frees its slot (kills: acquireWatch without the per-token count — the third watch
// is then served).
//
//	reader: watch 1 OK, watch 2 OK, watch 3 429 (HTTP), stream watch 429
//	root:   watch OK
//	reader: watch 1 ends, watch 3 OK
func TestWatchCapPerToken(t *testing.T) {
	as := newACLServer(t, func(c *kv.Config) { c.MaxWatchesPerToken, c.MaxWatches = 2, 3 })
	reader := as.tokenFor("app-read", "app/", api.AccessRead)

	open := func(secret string) (int, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, as.url+api.PathWatch+"app/?prefix=true", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("watch: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		}
		t.Cleanup(func() { cancel(); resp.Body.Close() })
		return resp.StatusCode, cancel
	}
	code1, stop1 := open(reader)
	code2, _ := open(reader)
	if code1 != http.StatusOK || code2 != http.StatusOK {
		t.Fatalf("first two watches = %d, %d, want 200", code1, code2)
	}
	if code, _ := open(reader); code != http.StatusTooManyRequests {
		t.Errorf("third watch of the token = %d, want 429", code)
	}
	conn, br := rawStreamWith(t, as.testServer, "Authorization: Bearer "+reader+"\r\n")
	conn.Write(api.AppendStreamRequest(nil, &api.StreamRequest{ID: 1, Op: api.StreamWatch, Key: []byte("app/"), Prefix: true}))
	if r := readResponse(t, br); r.Err == nil || r.Err.Code != http.StatusTooManyRequests {
		t.Errorf("stream watch over the token's cap = %+v (err %+v), want 429", r, r.Err)
	}
	if code, _ := open(as.root); code != http.StatusOK {
		t.Errorf("root's watch = %d while another token is at its cap, want 200", code)
	}
	stop1()
	// The server sees the first watch end a moment after the client does.
	waitUntil(t, 5*time.Second, "a watch after one ended is served", func() bool {
		code, _ := open(reader)
		return code == http.StatusOK
	})
}
