package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/keel-kv/keel/kv/api"
)

// TestResourceInvalidUTF8: a typed object whose strings encoding/json would turn into
// U+FFFD (invalid UTF-8 bytes, lone surrogate escapes) is a 400 naming the field, like
// the same bytes in a URL, and writes nothing.
func TestResourceInvalidUTF8(t *testing.T) {
	ts := newResourceServer(t)
	rev := ts.revision()
	for i, tc := range []struct{ body, field string }{
		{"{\"spec\":{\"size\":1,\"note\":\"caf\xe9\"}}", "spec.note"},
		{`{"spec":{"size":1,"tags":["ok","\ud83d"]}}`, "spec.tags[1]"},
		{"{\"spec\":{\"size\":1,\"n\xff\":2}}", "member name in spec"},
	} {
		e := ts.expectError(http.MethodPut, "/apis/apps/v1/widgets/w", []byte(tc.body), http.StatusBadRequest, api.ReasonBadRequest)
		if !strings.Contains(e.Message, tc.field) || !strings.Contains(e.Message, "UTF-8") {
			t.Errorf("#%d: message %q does not name %s", i, e.Message, tc.field)
		}
	}
	if got := ts.revision(); got != rev {
		t.Errorf("revision moved %d → %d", rev, got)
	}
	// A valid non-ASCII string and a surrogate pair are fine.
	if code, b, _ := ts.do(http.MethodPut, "/apis/apps/v1/widgets/w", []byte(`{"spec":{"size":1,"note":"café \ud83d\ude00"}}`)); code != http.StatusCreated {
		t.Fatalf("valid object: %d %s", code, b)
	}
}
